//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentplane/agentplane/libs/eventclient"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/testenv"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// TestEventEmitterChartRBACIsEnoughAndNoMore installs the event-emitter chart's RBAC on a real API
// server and runs the binary as its ServiceAccount (impersonated), with the chart's caller
// authentication and a real Redis: for a controller's token it records an Event about a run in
// the namespace it is given, with the value of a Secret the run names redacted (reading the run
// and the Secret with the chart's grant), and raises the Event's series count when it repeats
// (a patch); it may read no Event back, write none outside its namespaces, read no Secret there,
// and nothing else.
func TestEventEmitterChartRBACIsEnoughAndNoMore(t *testing.T) {
	k8s, kubectl := chartOnAPIServer(t, "event-emitter", "granted", []string{"granted", "elsewhere"}, "--set", "controller.namespaces={granted}")
	ctx := context.Background()
	const value = "tok-9f8e7d6c5b4a3921"
	if _, err := k8s.Client.CoreV1().Secrets("granted").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api-key"},
		StringData: map[string]string{"token": value}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := `{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"keyed","namespace":"granted"},` +
		`"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"},"secrets":["api-key"]}}`
	if out, err := kubectlStdin(ctx, t, mustExist(t, filepath.Join(repoRoot(t), "bin", "envtest", "kubectl"), "tools"), k8s.Kubeconfig, run); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	uid, _ := kubectl("-n", "granted", "get", "agentrun", "keyed", "-o", "jsonpath={.metadata.uid}")

	redis, err := testenv.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = redis.Close() }()
	const sa = "system:serviceaccount:granted:event-emitter"
	ee, err := testenv.StartService(binPath(t, "event-emitter"), t.TempDir(), "KUBECONFIG="+impersonating(t, k8s.Kubeconfig, sa),
		"POD_NAMESPACE=granted", "JANGAR_AGENTS_CONTROLLER_NAMESPACES=granted", "JANGAR_REDIS_URL=redis://"+redis.Addr+"/0",
		"JANGAR_GRPC_AUTH_MODE="+envOfChart(t, "event-emitter", "JANGAR_GRPC_AUTH_MODE"),
		"JANGAR_GRPC_AUTH_ALLOWED_CALLERS="+envOfChart(t, "event-emitter", "JANGAR_GRPC_AUTH_ALLOWED_CALLERS"))
	if err != nil {
		t.Fatal(err)
	}
	defer ee.Stop()

	events, err := eventclient.New(ee.GRPCAddr, "run-controller", "rbac-test", eventclient.Options{RetryFor: 20 * time.Second,
		Dial: callerDial(t, k8s, "granted", "run-controller")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = events.Close() }()
	emit := func(ns string) error {
		_, err := events.Emit(ctx, &pb.EmitRequest{Object: &pb.EventObject{ApiVersion: "agents.proompteng.ai/v1alpha1", Kind: "AgentRun",
			Namespace: ns, Name: "keyed", Uid: strings.TrimSpace(uid)}, Type: "Warning", Reason: reasons.ReconcileError, Action: "Reconcile",
			Note: "the agent printed its key " + value + " and stopped"})
		return err
	}
	if err := emit("granted"); err != nil {
		t.Fatalf("emit in the granted namespace: %v", err)
	}
	eventually(t, 30*time.Second, "the Event, its Secret's value redacted", func() error {
		list, err := k8s.Client.EventsV1().Events("granted").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return errorf("events: %v %d\n%s", err, len(list.Items), ee.Log())
		}
		if note := list.Items[0].Note; strings.Contains(note, value) || !strings.Contains(note, "[REDACTED]") {
			t.Fatalf("the Secret's value was not redacted: %q", note)
		}
		return nil
	})
	// The same Event again: its series count is raised (a patch of the Event).
	eventually(t, 30*time.Second, "the Event's series count raised", func() error {
		if err := emit("granted"); err != nil {
			return err
		}
		list, err := k8s.Client.EventsV1().Events("granted").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 || list.Items[0].Series == nil || list.Items[0].Series.Count < 2 {
			return errorf("events: %v %+v\n%s", err, list, ee.Log())
		}
		return nil
	})
	if strings.Contains(ee.Log(), "forbidden") {
		t.Errorf("event-emitter hit a permission it lacks:\n%s", ee.Log())
	}
	// Outside its namespaces the write is the API server's to refuse: no Event there.
	if err := emit("elsewhere"); err != nil {
		t.Fatalf("emit is answered before the write: %v", err)
	}
	eventually(t, 30*time.Second, "the write outside the granted namespace refused", func() error {
		if !strings.Contains(ee.Log(), "forbidden") {
			return errorf("no refusal logged yet\n%s", ee.Log())
		}
		return nil
	})
	if list, err := k8s.Client.EventsV1().Events("elsewhere").List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("events elsewhere: %v %d", err, len(list.Items))
	}
	for _, probe := range [][]string{
		{"get", "events.events.k8s.io", "-n", "granted"}, {"list", "events.events.k8s.io", "-n", "granted"}, {"list", "events", "-n", "granted"},
		{"create", "events.events.k8s.io", "-n", "elsewhere"}, {"get", "secrets", "-n", "elsewhere"}, {"list", "secrets", "-n", "granted"},
		{"delete", "events.events.k8s.io", "-n", "granted"}, {"patch", "agentruns.agents.proompteng.ai", "-n", "granted"},
		{"update", "agentruns.agents.proompteng.ai/status", "-n", "granted"},
	} {
		out, _ := kubectl(append([]string{"auth", "can-i", "--as", sa}, probe...)...)
		if strings.TrimSpace(out) != "no" {
			t.Errorf("the ServiceAccount may %v: %q", probe, out)
		}
	}
	for _, probe := range [][]string{{"create", "events.events.k8s.io", "-n", "granted"}, {"patch", "events.events.k8s.io", "-n", "granted"}, {"get", "secrets", "-n", "granted"}} {
		if out, _ := kubectl(append([]string{"auth", "can-i", "--as", sa}, probe...)...); strings.TrimSpace(out) != "yes" {
			t.Errorf("the ServiceAccount may not %v: %q", probe, out)
		}
	}
}
