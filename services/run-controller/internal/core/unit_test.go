package core

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/logging"
)

func TestPolicy(t *testing.T) {
	p := Policy{ImagesAllowed: []string{"registry.example.com/agents/*"}, ImagesDenied: []string{"registry.example.com/agents/bad*"},
		LabelsRequired: []string{"team"}, LabelsAllowed: []string{"env"}, LabelsDenied: []string{"forbidden"}, BlockedSecrets: []string{"root"}}
	for img, ok := range map[string]bool{"registry.example.com/agents/codex:1": true, "registry.example.com/agents/bad:1": false, "docker.io/x": false} {
		if err := p.CheckImage(img); (err == nil) != ok {
			t.Errorf("image %s: %v", img, err)
		}
	}
	for _, c := range []struct {
		labels map[string]string
		ok     bool
	}{
		{map[string]string{"team": "a"}, true},
		{map[string]string{"team": "a", "env": "p", "app.kubernetes.io/name": "x"}, true},
		{map[string]string{"env": "p"}, false},
		{map[string]string{"team": "a", "other": "x"}, false},
		{map[string]string{"team": "a", "forbidden": "x"}, false},
	} {
		if err := p.CheckLabels(c.labels); (err == nil) != c.ok {
			t.Errorf("labels %v: %v", c.labels, err)
		}
	}
	if p.CheckSecrets([]string{"gh"}) != nil || p.CheckSecrets([]string{"root"}) == nil {
		t.Error("BLOCKED_SECRETS")
	}
}

func TestLoadConfigNamesEveryBadVariable(t *testing.T) {
	svc := config.Service{PodNamespace: "agents"}
	_, err := LoadConfig(config.FromMap(map[string]string{
		"JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS": "-1", "JANGAR_AGENTS_CONTROLLER_CONCURRENCY_NAMESPACE": "x",
		"JANGAR_AGENTS_CONTROLLER_IMAGES_DENIED": "[bad", "JANGAR_AGENTS_CONTROLLER_WORKERS": "0",
	}), svc)
	for _, name := range []string{"JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS", "JANGAR_AGENTS_CONTROLLER_CONCURRENCY_NAMESPACE", "JANGAR_AGENTS_CONTROLLER_IMAGES_DENIED", "JANGAR_AGENTS_CONTROLLER_WORKERS"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
	c, err := LoadConfig(config.FromMap(map[string]string{"JANGAR_AGENTS_CONTROLLER_IMAGES_ALLOWED": ""}), svc)
	if err != nil || c.JobTTLSeconds != 600 || !c.JobFinalizer || c.Namespaces[0] != "agents" || len(c.Policy.ImagesAllowed) != 0 {
		t.Errorf("defaults %+v %v", c, err)
	}
}

// A run that fails or waits is logged once by the controller, with its reason, and its message
// redacted as status-writer redacts the status's.
func TestAProblemIsLoggedWithItsReasonAndNoSecret(t *testing.T) {
	var buf bytes.Buffer
	ctx := logging.IntoContext(context.Background(), slog.New(slog.NewJSONHandler(&buf, nil)))
	LogProblem(ctx, "AgentRun", "ns/r", agentsv1alpha1.PhaseFailed, "InvalidSpec", "image pull with ghp_0123456789abcdefghijABCDEFGHIJklmnop refused")
	line := buf.String()
	for _, want := range []string{`"msg":"AgentRun failed"`, `"object":"ns/r"`, `"reason":"InvalidSpec"`, "image pull with"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %s lacks %s", line, want)
		}
	}
	if strings.Contains(line, "ghp_0123456789") {
		t.Errorf("a secret shape reached the log: %s", line)
	}
	buf.Reset()
	LogProblem(ctx, "OrchestrationRun", "ns/o", agentsv1alpha1.PhasePending, "Forbidden", "refused")
	if !strings.Contains(buf.String(), `"msg":"OrchestrationRun waits"`) {
		t.Errorf("a wait logged as %s", buf.String())
	}
}

// A created AgentRun stands in for the cache's until the informer shows it or CreatedTTL
// passes; the cache's own copy always wins.
func TestACreatedRunStandsInUntilTheCacheShowsItOrItsTimeIsUp(t *testing.T) {
	c := New(Config{}, nil, nil, nil, nil, nil, nil)
	now := time.Unix(1_000_000, 0)
	c.Now = func() time.Time { return now }
	c.Runs["ns"] = cache.NewSharedIndexInformer(&cache.ListWatch{}, &agentsv1alpha1.AgentRun{}, 0, cache.Indexers{})
	run := func(name, phase string) *agentsv1alpha1.AgentRun {
		ar := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		ar.Status.Phase = phase
		return ar
	}
	if _, ok := c.RunOrCreated("ns", "a"); ok {
		t.Fatal("a run nobody created is found")
	}
	c.Created(run("a", ""))
	c.Created(run("b", ""))
	if ar, ok := c.RunOrCreated("ns", "a"); !ok || ar.Name != "a" {
		t.Fatalf("the created run a is not found: %v %v", ar, ok)
	}
	// The cache shows a, newer: its copy wins, and the record goes.
	if err := c.Runs["ns"].GetStore().Add(run("a", agentsv1alpha1.PhaseRunning)); err != nil {
		t.Fatal(err)
	}
	if ar, ok := c.RunOrCreated("ns", "a"); !ok || ar.Status.Phase != agentsv1alpha1.PhaseRunning {
		t.Fatalf("with a in the cache, found %v %v, want the cache's Running copy", ar, ok)
	}
	if err := c.Runs["ns"].GetStore().Delete(run("a", "")); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.RunOrCreated("ns", "a"); ok {
		t.Error("a, deleted from the cache after it showed there, is still found")
	}
	// Seen (the informer's event) drops b's record.
	c.Seen("ns", "b")
	if _, ok := c.RunOrCreated("ns", "b"); ok {
		t.Error("b is found after the informer's event for it")
	}
	// A run the informer never shows stands in for CreatedTTL, no longer.
	c.Created(run("c", ""))
	now = now.Add(CreatedTTL - time.Second)
	if _, ok := c.RunOrCreated("ns", "c"); !ok {
		t.Error("c is not found before CreatedTTL has passed")
	}
	now = now.Add(time.Second)
	if _, ok := c.RunOrCreated("ns", "c"); ok {
		t.Error("c is still found once CreatedTTL has passed")
	}
	// Records past their time go when the next run is created.
	c.Created(run("d", ""))
	now = now.Add(CreatedTTL)
	c.Created(run("e", ""))
	if c.created.Len() != 1 {
		t.Errorf("%d records after d's time passed, want 1 (e)", c.created.Len())
	}
}
