//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

var orchestrationRunsGVR = schema.GroupVersionResource{Group: "orchestration.proompteng.ai", Version: "v1alpha1", Resource: "orchestrationruns"}

// TestWholeSystem runs every service in a container against the local control plane and drives
// it the way an operator would: the seeds' scenarios, the traces in Jaeger, then faults while
// 200 runs are in flight, with `agentctl status watch` following the gateway throughout.
func TestWholeSystem(t *testing.T) {
	s := startSystem(t)
	if out, err := s.kubectl("apply", "-f", filepath.Join(s.root, "examples", "agent.yaml")); err != nil {
		t.Fatalf("apply the Agent: %v %s", err, out)
	}
	if out, err := s.kubectlIn(chainOrchestration, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the chain Orchestration: %v %s", err, out)
	}
	jobs := recordJobs(t, s.kube, sysNamespace)
	w := s.watchStatus(t)

	s.run(t, "Seed000StatusFieldsOnALiveRun", func(t *testing.T) { s.seed000(t) })
	s.run(t, "Seed001WarningEventWithStableReasonAndBoundedVolume", func(t *testing.T) { s.seed001(t) })
	s.run(t, "Seed002NoResultLostWithJobTTLZeroAndWorkflowJobMissing", func(t *testing.T) { s.seed002(t, jobs) })
	s.run(t, "Seed003CancelPropagationAndTerminalNoOp", func(t *testing.T) { s.seed003(t) })
	s.run(t, "ArchiveKeepsADeletedRunAndTheGatewayServesIt", func(t *testing.T) { s.archived(t) })
	s.run(t, "TracesInJaeger", func(t *testing.T) { s.traces(t) })
	s.run(t, "HelmTestPodOfEveryChartPasses", func(t *testing.T) {
		for _, name := range sysStartOrder {
			if code, out := s.helmTest(name); code != 0 || !strings.Contains(out, ": SERVING") {
				t.Errorf("%s's helm test pod exited %d: %s", name, code, out)
			}
		}
	})
	s.run(t, "Faults", func(t *testing.T) { s.faults(t, jobs, w) })
	s.run(t, "Seed004StatusWatchThroughTheGateway", func(t *testing.T) { s.seed004(t, w) })
	s.run(t, "DashboardsAndAlertsReadLiveSeries", func(t *testing.T) { s.liveSeries(t) })
}

// archived (#37): with the archive on (job-gc and watch-gateway on the system's PostgreSQL), a
// finished run is archived and let go of (the archive's finalizer released), deleted by hand, and
// then read back through the gateway by a user of the chart's console-viewer Role: listed, and
// described with its Jobs, its logs left out (the Role has no pods/log).
func (s *system) archived(t *testing.T) {
	const name = "sys-archived"
	if out, err := s.kubectlIn(agentRun(name, nil), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v %s", err, out)
	}
	s.waitPhase(t, agentRunsGVR, name, "Succeeded", 3*time.Minute)
	// Archived when it finished, the run is let go of at once: its deletion waits for nothing.
	eventually(t, time.Minute, "the finished run archived and let go", func() error {
		m := s.metrics("job-gc")
		if out, err := s.kubectl("get", "agentrun", name, "-o", "jsonpath={.metadata.finalizers}"); err != nil || strings.Contains(out, "agents.proompteng.ai/archive") ||
			!strings.Contains(m, `agentplane_job_gc_archive_writes_total{result="ok"}`) {
			return fmt.Errorf("finalizers %q (%v); job-gc's archive writes: %s", out, err, grepLines(m, "agentplane_job_gc_archive_writes"))
		}
		return nil
	})
	uid, _ := s.kubectl("get", "agentrun", name, "-o", "jsonpath={.metadata.uid}")
	if out, err := s.kubectl("delete", "agentrun", name, "--timeout", "90s"); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	const reader = "sys-archive-reader"
	if out, err := s.kubectl("create", "serviceaccount", reader); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if out, err := s.kubectl("create", "rolebinding", reader, "--role", "watch-gateway-console-viewer", "--serviceaccount", sysNamespace+":"+reader); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(s.token(reader, "agentplane-gateway")), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := s.endpoint(s.svc["watch-gateway"], "grpc")
	out, err := exec.Command(binPath(t, "agentctl"), "-n", sysNamespace, "get", "runs", "--archived", "--gateway", gw, "--gateway-token-file", tokenFile, "-o", "wide").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "agentrun/"+name) || !strings.Contains(string(out), uid) {
		t.Fatalf("agentctl get runs --archived: %v\n%s", err, out)
	}
	out, err = exec.Command(binPath(t, "agentctl"), "-n", sysNamespace, "describe", "run", name, "--archived", "--gateway", gw, "--gateway-token-file", tokenFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Jobs:") || !strings.Contains(string(out), "Succeeded") || !strings.Contains(string(out), "may not get pods/log") {
		t.Fatalf("agentctl describe run --archived: %v\n%s", err, out)
	}
	if m := s.metrics("job-gc"); !strings.Contains(m, `agentplane_job_gc_archive_writes_total{result="ok"}`) {
		t.Errorf("job-gc's archive writes:\n%s", grepLines(m, "agentplane_job_gc_archive"))
	}
}

// liveSeries (#13 item 7): after the scenarios and the faults have exercised every service, each
// series a chart's Grafana panels or alerts read is in that service's /metrics.
func (s *system) liveSeries(t *testing.T) {
	h := newHelmEnv(t)
	for _, name := range sysStartOrder {
		_, alerts := alertMetrics(t, h, name)
		scrape := s.metrics(name)
		for _, m := range append(panelSeries(t, h, name), alerts...) {
			if !strings.Contains(scrape, "\n# TYPE "+m+" ") {
				t.Errorf("%s's dashboard or alerts read %s, which its /metrics does not export after the whole run", name, m)
			}
		}
	}
}

// run is t.Run with the harness's helpers failing the subtest (they report through s.t).
func (s *system) run(t *testing.T, name string, fn func(t *testing.T)) bool {
	return t.Run(name, func(t *testing.T) {
		prev := s.t
		s.t = t
		defer func() { s.t = prev }()
		fn(t)
	})
}

const chainOrchestration = `apiVersion: orchestration.proompteng.ai/v1alpha1
kind: Orchestration
metadata:
  name: chain
spec:
  entrypoint: a
  steps:
    - {name: a, kind: AgentRun, agentRef: {name: codex}}
    - {name: b, kind: AgentRun, agentRef: {name: codex}, dependsOn: [a]}
    - {name: c, kind: AgentRun, agentRef: {name: codex}, dependsOn: [b]}
`

func agentRun(name string, annotations map[string]string) string {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "agents.proompteng.ai/v1alpha1", "kind": "AgentRun",
		"metadata": map[string]any{"name": name, "annotations": annotations},
		"spec":     map[string]any{"agentRef": map[string]any{"name": "codex"}, "runtime": map[string]any{"type": "job"}},
	})
	return string(b)
}

func orchestrationRun(name string, annotations map[string]string) string {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "orchestration.proompteng.ai/v1alpha1", "kind": "OrchestrationRun",
		"metadata": map[string]any{"name": name, "annotations": annotations},
		"spec":     map[string]any{"orchestrationRef": map[string]any{"name": "chain"}},
	})
	return string(b)
}

func (s *system) get(t *testing.T, gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := s.dyn.Resource(gvr).Namespace(sysNamespace).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s %s: %v", gvr.Resource, name, err)
	}
	return u
}

func field(u *unstructured.Unstructured, path ...string) string {
	if u == nil {
		return ""
	}
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// waitPhase waits for a run to reach phase and returns it.
func (s *system) waitPhase(t *testing.T, gvr schema.GroupVersionResource, name, phase string, timeout time.Duration) *unstructured.Unstructured {
	t.Helper()
	var u *unstructured.Unstructured
	eventually(t, timeout, name+" "+phase, func() error {
		var err error
		if u, err = s.dyn.Resource(gvr).Namespace(sysNamespace).Get(s.ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if got := field(u, "status", "phase"); got != phase {
			return errorf("phase %q", got)
		}
		return nil
	})
	return u
}

// timesErr says what is wrong with a finished run's timestamps (seed 000): both set, and
// created <= startedAt <= finishedAt <= now.
func timesErr(u *unstructured.Unstructured) error {
	created := u.GetCreationTimestamp().Truncate(time.Second)
	started, err1 := time.Parse(time.RFC3339, field(u, "status", "startedAt"))
	finished, err2 := time.Parse(time.RFC3339, field(u, "status", "finishedAt"))
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%s: startedAt %q finishedAt %q", u.GetName(), field(u, "status", "startedAt"), field(u, "status", "finishedAt"))
	}
	if started.Before(created) || finished.Before(started) || finished.After(time.Now().Add(time.Second)) {
		return fmt.Errorf("%s: created %s, startedAt %s, finishedAt %s: not in order", u.GetName(), created, started, finished)
	}
	return nil
}

func checkTimes(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	if err := timesErr(u); err != nil {
		t.Error(err)
	}
}

func (s *system) seed000(t *testing.T) {
	const name = "live"
	if out, err := s.kubectlIn(agentRun(name, map[string]string{"agentplane.dev/simulate-duration": "15s"}), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	u := s.waitPhase(t, agentRunsGVR, name, "Running", 90*time.Second)
	if field(u, "status", "startedAt") == "" || field(u, "status", "updatedAt") == "" || field(u, "status", "finishedAt") != "" {
		t.Errorf("a Running run: startedAt %q updatedAt %q finishedAt %q (want the first two set, no finishedAt)",
			field(u, "status", "startedAt"), field(u, "status", "updatedAt"), field(u, "status", "finishedAt"))
	}
	if og := field(u, "status", "observedGeneration"); og != strconv.FormatInt(u.GetGeneration(), 10) {
		t.Errorf("observedGeneration %s, generation %d", og, u.GetGeneration())
	}
	u = s.waitPhase(t, agentRunsGVR, name, "Succeeded", 90*time.Second)
	checkTimes(t, u)
	// The seed's validation command, as an operator types it.
	out, err := s.kubectl("get", "agentrun", name, "-o", "jsonpath={.status.observedGeneration} {.status.updatedAt} {.status.startedAt} {.status.finishedAt}")
	if f := strings.Fields(out); err != nil || len(f) != 4 {
		t.Errorf("seed 000's command printed %q (%v), want four values", out, err)
	}
}

// eventsOf sums the occurrences the API server holds for one object by reason (events.k8s.io
// series count, or 1 for a single event).
func (s *system) eventsOf(t *testing.T, name string) (map[string]int, []eventsv1.Event) {
	t.Helper()
	list, err := s.kube.EventsV1().Events(sysNamespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events of %s: %v", name, err)
	}
	out := map[string]int{}
	var mine []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name != name {
			continue
		}
		mine = append(mine, e)
		n := 1
		if e.Series != nil && e.Series.Count > 1 {
			n = int(e.Series.Count)
		} else if e.DeprecatedCount > 1 {
			n = int(e.DeprecatedCount)
		}
		out[e.Reason] += n
	}
	return out, mine
}

// eventBound is what the limiter lets through for one object in elapsed: its burst plus its rate.
func (s *system) eventBound(elapsed time.Duration) int {
	return s.eventBurst + int(math.Ceil(float64(s.eventRate)*elapsed.Minutes()))
}

func (s *system) seed001(t *testing.T) {
	const name = "bad-spec"
	start := time.Now()
	// A run that names a Secret that does not exist: MissingSecret, retried, never a Job.
	run := `{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"` + name + `"},
"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"},"secrets":["no-such-secret"]}}`
	if out, err := s.kubectlIn(run, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	// Each change is a reconcile that fails again: 40 attempts, far more than the bound allows
	// (run-controller reports a problem once per change of condition, event-emitter limits what
	// gets through; either keeps the volume bounded).
	for i := 0; i < 40; i++ {
		if out, err := s.kubectl("annotate", "--overwrite", "agentrun", name, "poke="+strconv.Itoa(i)); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	eventually(t, 60*time.Second, "a MissingSecret Warning for "+name, func() error {
		if by, _ := s.eventsOf(t, name); by["MissingSecret"] == 0 {
			return errorf("none yet: %v", by)
		}
		return nil
	})
	time.Sleep(5 * time.Second) // let the queued attempts drain before counting
	by, items := s.eventsOf(t, name)
	for _, e := range items {
		if e.Type != "Warning" || e.Reason != "MissingSecret" {
			t.Errorf("event %s %s: %s (want only Warning MissingSecret)", e.Type, e.Reason, e.Note)
		}
		if strings.Contains(e.Note, "poke") {
			t.Errorf("the note changes with the object: %q", e.Note)
		}
	}
	bound := s.eventBound(time.Since(start))
	if by["MissingSecret"] > bound {
		t.Errorf("%d MissingSecret occurrences for one object in %s, above the limiter's bound %d (burst %d + %d/min)",
			by["MissingSecret"], time.Since(start).Round(time.Second), bound, s.eventBurst, s.eventRate)
	}
	u := s.get(t, agentRunsGVR, name)
	if p := field(u, "status", "phase"); p == "Running" || p == "Succeeded" {
		t.Errorf("a run whose Secret is missing is %s", p)
	}
	t.Logf("seed 001: %d MissingSecret occurrences in %s (bound %d)", by["MissingSecret"], time.Since(start).Round(time.Second), bound)
}

// jobRecorder keeps every Job the API server reported, by the UID of the run that owns it; an
// informer re-lists after an API server restart, so none is missed.
type jobRecorder struct {
	mu    sync.Mutex
	byRun map[string]map[string]bool // owner UID -> Job names
}

func (j *jobRecorder) count(uid string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.byRun[uid])
}

// recordJobs starts recording the Jobs of namespace ns until the test ends.
func recordJobs(t *testing.T, kube kubernetes.Interface, ns string) *jobRecorder {
	j := &jobRecorder{byRun: map[string]map[string]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	inf := f.Batch().V1().Jobs().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		job, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, o := range job.OwnerReferences {
			if o.Kind == "AgentRun" {
				if j.byRun[string(o.UID)] == nil {
					j.byRun[string(o.UID)] = map[string]bool{}
				}
				j.byRun[string(o.UID)][job.Name] = true
			}
		}
	}})
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() { close(stop); f.Shutdown() })
	f.WaitForCacheSync(stop)
	return j
}

func (s *system) seed002(t *testing.T, jobs *jobRecorder) {
	// Job TTL 0 (run-controller's chart value): a finished Job may go at once, yet its result
	// must reach the run (job-gc holds it until then).
	const n = 30
	var docs []string
	for i := 0; i < n; i++ {
		docs = append(docs, agentRun(fmt.Sprintf("ttl0-%d", i), nil))
	}
	if out, err := s.kubectlIn(strings.Join(docs, "\n---\n"), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	for i := 0; i < n; i++ {
		u := s.waitPhase(t, agentRunsGVR, fmt.Sprintf("ttl0-%d", i), "Succeeded", 3*time.Minute)
		checkTimes(t, u)
		if c := jobs.count(string(u.GetUID())); c != 1 {
			t.Errorf("%s had %d Jobs, want 1", u.GetName(), c)
		}
	}
	eventually(t, 2*time.Minute, "the TTL controller deleted every finished Job", func() error {
		out, err := s.kubectl("get", "jobs", "-l", "agents.proompteng.ai/agent-run", "-o", "name")
		if err != nil {
			return err
		}
		if left := grepLines(out, "job.batch/ttl0-"); left != "" {
			return errorf("left: %s", left)
		}
		return nil
	})

	// A Job deleted by hand mid-run: WorkflowJobMissing, visible as a Warning and the run's reason.
	const name = "deleted-by-hand"
	if out, err := s.kubectlIn(agentRun(name, map[string]string{"agentplane.dev/simulate-duration": "300s"}), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	s.waitPhase(t, agentRunsGVR, name, "Running", 90*time.Second)
	if out, err := s.kubectl("delete", "jobs", "-l", "agents.proompteng.ai/agent-run="+name, "--wait=false"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	u := s.waitPhase(t, agentRunsGVR, name, "Failed", time.Duration(s.missingJobGraceSeconds+90)*time.Second)
	if r := field(u, "status", "reason"); r != "WorkflowJobMissing" {
		t.Errorf("reason %q, want WorkflowJobMissing", r)
	}
	if by, _ := s.eventsOf(t, name); by["WorkflowJobMissing"] == 0 {
		t.Errorf("no WorkflowJobMissing event: %v", by)
	}
}

func (s *system) seed003(t *testing.T) {
	// Cancel an OrchestrationRun whose first step runs for minutes: it and its AgentRun end
	// Cancelled and the Job goes.
	const name = "to-cancel"
	if out, err := s.kubectlIn(orchestrationRun(name, map[string]string{"agentplane.dev/simulate-duration": "600s"}), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	s.waitPhase(t, agentRunsGVR, name+"-a", "Running", 2*time.Minute)
	if out, err := s.kubectl("patch", "orchestrationrun", name, "--type=merge", "-p", `{"spec":{"cancel":true}}`); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	or := s.waitPhase(t, orchestrationRunsGVR, name, "Cancelled", 2*time.Minute)
	checkTimes(t, or)
	s.waitPhase(t, agentRunsGVR, name+"-a", "Cancelled", time.Minute)
	eventually(t, time.Minute, "the cancelled run's Job is gone", func() error {
		out, err := s.kubectl("get", "jobs", "-l", "agents.proompteng.ai/agent-run="+name+"-a", "-o", "name")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "" {
			return errorf("still there: %s", out)
		}
		return nil
	})
	// The terminal no-op: cancelling a Succeeded run changes nothing but says so.
	if out, err := s.kubectl("patch", "agentrun", "live", "--type=merge", "-p", `{"spec":{"cancel":true}}`); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	eventually(t, time.Minute, "live's Cancelled condition says CancelIgnoredTerminal", func() error {
		u := s.get(t, agentRunsGVR, "live")
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Cancelled" {
				if m["status"] == "False" && m["reason"] == "CancelIgnoredTerminal" {
					return nil
				}
				return errorf("Cancelled condition %v", m)
			}
		}
		return errorf("no Cancelled condition yet")
	})
	if u := s.get(t, agentRunsGVR, "live"); field(u, "status", "phase") != "Succeeded" {
		t.Errorf("cancelling a Succeeded run made it %s", field(u, "status", "phase"))
	}
}

// --- traces ---

type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		ProcessID     string `json:"processID"`
		References    []struct {
			RefType string `json:"refType"`
			TraceID string `json:"traceID"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		Tags []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
		Tags        []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
	} `json:"processes"`
}

func (s *system) jaegerTraces(t *testing.T, service, operation string) []jaegerTrace {
	t.Helper()
	ep, err := s.jaeger.c.PortEndpoint(s.ctx, "16686/tcp", "http")
	if err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf("%s/api/traces?service=%s&lookback=2h&limit=500", ep, service)
	if operation != "" {
		q += "&operation=" + strings.ReplaceAll(operation, " ", "%20")
	}
	body, err := httpGet(q)
	if err != nil {
		t.Fatalf("jaeger query %s: %v", q, err)
	}
	var out struct {
		Data []jaegerTrace `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("jaeger answer: %v", err)
	}
	return out.Data
}

// path reports whether trace tr has a span of service `from` with a descendant span of service
// `to` (through any spans between), whose name contains op.
func (tr jaegerTrace) path(from, to string, op ...string) bool {
	parent := map[string]string{}
	svc := map[string]string{}
	for _, sp := range tr.Spans {
		if sv := tr.Processes[sp.ProcessID].ServiceName; sv != to || len(op) == 0 || strings.Contains(sp.OperationName, op[0]) {
			svc[sp.SpanID] = sv
		} else {
			svc[sp.SpanID] = sv + " (other)"
		}
		for _, r := range sp.References {
			if r.RefType == "CHILD_OF" {
				parent[sp.SpanID] = r.SpanID
			}
		}
	}
	for id, sv := range svc {
		if sv != to {
			continue
		}
		for p := parent[id]; p != ""; p = parent[p] {
			if svc[p] == from {
				return true
			}
		}
	}
	return false
}

func (s *system) traces(t *testing.T) {
	// One AgentRun's reconcile: run-controller -> status-writer -> the API server, and
	// run-controller -> event-emitter, in one trace. status-writer's client span of the status
	// PUT is in that trace; kube-apiserver (tracing with --tracing-config-file) starts its own
	// trace for a caller outside system:masters and links it to that client span, so its span is
	// found by the link.
	var found *jaegerTrace
	var apiserverSpan string
	eventually(t, 90*time.Second, "a reconcile trace through status-writer, the API server and event-emitter", func() error {
		linked := map[string]string{} // "traceID/spanID" of a linked parent -> the API server's operation
		for _, tr := range s.jaegerTraces(t, "apiserver", "PUT /apis/agents.proompteng.ai/v1alpha1/namespaces/{:namespace}/agentruns/{:name}/status") {
			for _, sp := range tr.Spans {
				for _, r := range sp.References {
					if r.RefType == "FOLLOWS_FROM" || r.TraceID != tr.TraceID {
						linked[r.TraceID+"/"+r.SpanID] = sp.OperationName
					}
				}
			}
		}
		for _, tr := range s.jaegerTraces(t, "run-controller", "Reconcile AgentRun") {
			if !tr.path("run-controller", "status-writer", "/status") || !tr.path("run-controller", "event-emitter") {
				continue
			}
			for _, sp := range tr.Spans {
				if tr.Processes[sp.ProcessID].ServiceName == "status-writer" && strings.HasPrefix(sp.OperationName, "k8s PUT") {
					if op, ok := linked[tr.TraceID+"/"+sp.SpanID]; ok {
						found, apiserverSpan = &tr, op
						return nil
					}
				}
			}
		}
		return errorf("none yet (%d API server status writes linked to a caller)", len(linked))
	})
	t.Logf("the API server's span %q is linked to status-writer's client span of trace %s", apiserverSpan, found.TraceID)
	services := map[string]bool{}
	for _, p := range found.Processes {
		services[p.ServiceName] = true
		if p.ServiceName == "apiserver" {
			continue
		}
		tags := map[string]string{}
		for _, tg := range p.Tags {
			tags[tg.Key] = fmt.Sprint(tg.Value)
		}
		if tags["k8s.namespace.name"] != sysNamespace || !strings.HasPrefix(tags["k8s.pod.name"], p.ServiceName+"-") || tags["service.instance.id"] == "" {
			t.Errorf("%s's resource lacks the pod: %v", p.ServiceName, tags)
		}
	}
	t.Logf("reconcile trace %s spans %d spans across %v", found.TraceID, len(found.Spans), services)

	// A cancel: cancel-propagator -> status-writer.
	eventually(t, 60*time.Second, "a cancel trace through status-writer", func() error {
		for _, tr := range s.jaegerTraces(t, "cancel-propagator", "") {
			if tr.path("cancel-propagator", "status-writer") {
				return nil
			}
		}
		return errorf("none yet")
	})

	// Span names stay few: no run's name in any of them.
	for _, svc := range []string{"run-controller", "status-writer", "event-emitter", "cancel-propagator", "job-gc"} {
		ep, _ := s.jaeger.c.PortEndpoint(s.ctx, "16686/tcp", "http")
		body, err := httpGet(ep + "/api/services/" + svc + "/operations")
		if err != nil {
			t.Fatalf("operations of %s: %v", svc, err)
		}
		var ops struct {
			Data []string `json:"data"`
		}
		_ = json.Unmarshal([]byte(body), &ops)
		for _, op := range ops.Data {
			for _, run := range []string{"live", "ttl0-", "to-cancel", "bad-spec", "deleted-by-hand"} {
				if strings.Contains(op, run) {
					t.Errorf("%s span name %q holds an object name", svc, op)
				}
			}
		}
		if len(ops.Data) > 40 {
			t.Errorf("%s has %d span names: %v", svc, len(ops.Data), ops.Data)
		}
	}
}

// --- the watch stream ---

type watchLine struct {
	at    time.Time
	event struct {
		Type    string      `json:"type"`
		Items   []watchItem `json:"items"`   // a snapshot
		Changes []watchItem `json:"changes"` // a delta
	}
}

type watchItem struct {
	Component string `json:"component"`
	Status    string `json:"status"`
	Message   string `json:"message"`
}

// items are a line's component statuses, whether a snapshot or a delta.
func (l watchLine) items() []watchItem { return append(l.event.Items, l.event.Changes...) }

// statusWatch is `agentctl status watch -o ndjson` through the gateway's gRPC port, kept running
// for the whole test, its lines recorded with the time they arrived.
type statusWatch struct {
	mu     sync.Mutex
	lines  []watchLine
	stderr []string
}

func (w *statusWatch) snapshot() ([]watchLine, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]watchLine(nil), w.lines...), append([]string(nil), w.stderr...)
}

func (s *system) watchStatus(t *testing.T) *statusWatch {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(s.viewerToken), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	cmd := exec.CommandContext(ctx, binPath(t, "agentctl"), "status", "watch", "-n", sysNamespace,
		"--gateway", s.endpoint(s.svc["watch-gateway"], "grpc"), "--gateway-token-file", tokenFile, "--heartbeat", "2s", "-o", "ndjson")
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &statusWatch{}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l watchLine
			l.at = time.Now()
			if json.Unmarshal(sc.Bytes(), &l.event) == nil {
				w.mu.Lock()
				w.lines = append(w.lines, l)
				w.mu.Unlock()
			}
		}
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			w.mu.Lock()
			w.stderr = append(w.stderr, time.Now().Format(time.RFC3339)+" "+sc.Text())
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); _ = cmd.Wait(); wg.Wait() })
	eventually(t, 60*time.Second, "agentctl status watch shows a snapshot", func() error {
		if lines, _ := w.snapshot(); len(lines) == 0 {
			return errorf("no line yet")
		}
		return nil
	})
	return w
}

// statusAt is each component's last reported status at or before t, from the recorded lines.
func (w *statusWatch) statusAt(at time.Time) map[string]string {
	lines, _ := w.snapshot()
	out := map[string]string{}
	for _, l := range lines {
		if l.at.After(at) {
			break
		}
		if l.event.Type == "snapshot" {
			out = map[string]string{}
		}
		for _, it := range l.items() {
			out[it.Component] = it.Status
		}
	}
	return out
}

// sawTransition reports whether, after since, component was shown not healthy and then healthy.
func (w *statusWatch) sawTransition(component string, since time.Time) (bad, recovered bool, bads string) {
	lines, _ := w.snapshot()
	for _, l := range lines {
		if l.at.Before(since) {
			continue
		}
		for _, it := range l.items() {
			if it.Component != component {
				continue
			}
			if it.Status != "healthy" && !bad {
				msg := it.Message
				if len(msg) > 60 {
					msg = msg[:60] + "..."
				}
				bad, bads = true, it.Status+" ("+msg+")"
			} else if it.Status == "healthy" && bad {
				recovered = true
			}
		}
	}
	return bad, recovered, bads
}

// since renders the lines after at other than heartbeats, for failure messages.
func (w *statusWatch) since(at time.Time) string {
	lines, stderr := w.snapshot()
	var out []string
	for _, l := range lines {
		if l.at.Before(at) || l.event.Type == "heartbeat" {
			continue
		}
		var items []string
		for _, it := range l.items() {
			items = append(items, it.Component+"="+it.Status)
		}
		out = append(out, fmt.Sprintf("%s %s %s", l.at.Format("15:04:05.000"), l.event.Type, strings.Join(items, " ")))
	}
	return strings.Join(append(out, stderr...), "\n")
}

func (s *system) seed004(t *testing.T, w *statusWatch) {
	lines, stderr := w.snapshot()
	kinds := map[string]int{}
	for _, l := range lines {
		kinds[l.event.Type]++
	}
	if lines[0].event.Type != "snapshot" || kinds["delta"] == 0 || kinds["heartbeat"] < 5 {
		t.Errorf("the watch showed %v (first %q): want a snapshot first, deltas and heartbeats", kinds, lines[0].event.Type)
	}
	// Every component the gateway follows was in the first snapshot.
	first := map[string]bool{}
	for _, it := range lines[0].items() {
		first[it.Component] = true
	}
	for _, c := range append([]string{"kube-apiserver", "database", "crds", "grpc"}, services...) {
		if c == "watch-gateway" {
			continue // the gateway reports itself as "grpc"
		}
		if !first[c] {
			t.Errorf("the first snapshot lacks %s: %v", c, first)
		}
	}
	if final := w.statusAt(time.Now()); final["run-controller"] != "healthy" || final["event-emitter"] != "healthy" {
		t.Errorf("after the faults the watch shows %v", final)
	}
	t.Logf("agentctl status watch: %v over %s; stderr notices: %d", kinds, lines[len(lines)-1].at.Sub(lines[0].at).Round(time.Second), len(stderr))
}

// --- faults ---

type fault struct {
	name       string
	components []string // what the watch must show going bad, then healthy
	also       []string // what it may show going bad too (reported)
	inject     func()
	recover    func()
	allowance  int           // events per object the limiter may let through beyond its bound (fallback buckets)
	hold       time.Duration // how long the fault lasts (10 s unless set)
}

func (s *system) faults(t *testing.T, jobs *jobRecorder, w *statusWatch) {
	n := 200
	if v, err := strconv.Atoi(os.Getenv("AGENTPLANE_E2E_FAULT_RUNS")); err == nil && v > 0 {
		n = v
	}
	var list []fault
	// Redis: the gateway's own check shows "database" degraded; event-emitter goes degraded only
	// if it was asked to emit while Redis was away (reported, not required).
	list = append(list, fault{name: "redis-restart", components: []string{"database"}, also: []string{"event-emitter"},
		inject:  func() { stop := 10 * time.Second; _ = s.redis.c.Stop(s.ctx, &stop) },
		recover: func() { s.restart(s.redis) }, allowance: s.eventBurst})
	for _, name := range sysStartOrder {
		sc := s.svc[name]
		f := fault{name: "sigkill-" + name, components: []string{name}, inject: func() { s.kill(sc) }, recover: func() { s.restart(sc); s.waitReady(sc.name) }}
		if name == "watch-gateway" {
			f.components = nil // the stream itself breaks; checked by the reconnect below
		}
		list = append(list, f)
	}
	list = append(list,
		// A silent partition (no RST): the gateway's health stream notices through gRPC keepalive
		// (a ping after 30 s without traffic, 10 s to answer), so the cut lasts longer than that.
		fault{name: "event-emitter-cut-off", components: []string{"event-emitter"}, hold: 50 * time.Second,
			inject: func() { s.disconnect(s.svc["event-emitter"]) }, recover: func() { s.reconnect(s.svc["event-emitter"]) }},
		fault{name: "kube-apiserver-restart", components: []string{"kube-apiserver"},
			inject: func() { s.restartAPIServer() }, recover: func() {}})

	if only := os.Getenv("AGENTPLANE_E2E_FAULTS"); only != "" { // a comma-separated subset, for iterating
		var keep []fault
		for _, f := range list {
			if strings.Contains(","+only+",", ","+f.name+",") {
				keep = append(keep, f)
			}
		}
		list = keep
	}
	var report []string
	for i, f := range list {
		ok := s.run(t, f.name, func(t *testing.T) {
			prefix := fmt.Sprintf("f%d", i)
			start := time.Now()
			names, ors := s.applyRound(t, prefix, n)
			time.Sleep(3 * time.Second) // runs are in flight: created, Jobs starting, pods running
			faultAt := time.Now()
			f.inject()
			if f.name == "sigkill-status-writer" {
				// helm test tells a dead service: the same probe pod now fails.
				if code, out := s.helmTest("status-writer"); code != 1 {
					t.Errorf("status-writer's helm test pod exited %d with status-writer killed, want 1: %s", code, out)
				}
			}
			hold := f.hold
			if hold == 0 {
				hold = 10 * time.Second
			}
			time.Sleep(hold)
			f.recover()
			for _, c := range f.components {
				eventually(t, 2*time.Minute, "the watch shows "+c+" going bad and recovering", func() error {
					bad, rec, _ := w.sawTransition(c, faultAt)
					if !bad || !rec {
						return errorf("bad %v, recovered %v; the watch since the fault:\n%s", bad, rec, w.since(faultAt))
					}
					return nil
				})
			}
			if f.name == "sigkill-watch-gateway" {
				// The restarted gateway is another process: the cursor agentctl resumes with is not
				// its own, so it answers with a fresh snapshot (seed 004's resume rule).
				eventually(t, 2*time.Minute, "agentctl reconnected to the restarted gateway and got a snapshot", func() error {
					lines, stderr := w.snapshot()
					if !strings.Contains(strings.Join(stderr, "\n"), "reconnecting") {
						return errorf("no reconnect notice: %v", stderr)
					}
					for _, l := range lines {
						if l.at.After(faultAt) && l.event.Type == "snapshot" {
							return nil
						}
					}
					return errorf("no snapshot since the restart")
				})
			}
			phases, badTimes, twoJobs, worst := s.checkRound(t, jobs, names, ors, start, f.allowance)
			drained := time.Since(start).Round(time.Second)
			var how []string
			for _, c := range append(append([]string(nil), f.components...), f.also...) {
				if bad, rec, st := w.sawTransition(c, faultAt); bad {
					how = append(how, fmt.Sprintf("%s %s, healthy again: %v", c, st, rec))
				}
			}
			if f.name == "sigkill-watch-gateway" {
				how = append(how, "the stream broke; agentctl reconnected and got a fresh snapshot from the new process")
			}
			report = append(report, fmt.Sprintf("| %s | %d AgentRuns + %d OrchestrationRuns (%d step runs) | %s | %s | %d | %d | %d / %d | %s |",
				f.name, len(names), len(ors), 3*len(ors), phases, drained, badTimes, twoJobs, worst, s.eventBound(time.Since(start))+f.allowance, strings.Join(how, "; ")))
		})
		if !ok {
			break // a broken system makes the next faults meaningless
		}
	}
	t.Logf("fault report (docs/reliability.md):\n| fault | runs | phases | drained in | bad timestamps | runs with two Jobs | most events on one object / bound | watch showed |\n|---|---|---|---|---|---|---|---|\n%s", strings.Join(report, "\n"))
}

// applyRound creates n runs at once: n-n/10 AgentRuns (every tenth fails on purpose) and n/10
// OrchestrationRuns of three steps, each pod running 5-15 s.
func (s *system) applyRound(t *testing.T, prefix string, n int) (agentRuns, orchRuns []string) {
	var docs []string
	nor := n / 10
	for i := 0; i < n-nor; i++ {
		ann := map[string]string{"agentplane.dev/simulate-duration": fmt.Sprintf("%ds", 5+i%11)}
		if i%10 == 9 {
			ann["agentplane.dev/simulate-exit-code"] = "1"
		}
		name := fmt.Sprintf("%s-%d", prefix, i)
		agentRuns = append(agentRuns, name)
		docs = append(docs, agentRun(name, ann))
	}
	for i := 0; i < nor; i++ {
		name := fmt.Sprintf("%s-or-%d", prefix, i)
		orchRuns = append(orchRuns, name)
		docs = append(docs, orchestrationRun(name, map[string]string{"agentplane.dev/simulate-duration": "3s"}))
	}
	if out, err := s.kubectlIn(strings.Join(docs, "\n---\n"), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply %d runs: %v %s", n, err, out)
	}
	return agentRuns, orchRuns
}

// checkRound waits for every run of a round to finish and checks it: its phase, its timestamps,
// one Job per AgentRun, events within the limiter's bound.
func (s *system) checkRound(t *testing.T, jobs *jobRecorder, agentRuns, orchRuns []string, start time.Time, allowance int) (phases string, badTimes, twoJobs, worstEvents int) {
	t.Helper()
	want := map[string]string{}
	for i, name := range agentRuns {
		want["ar/"+name] = "Succeeded"
		if i%10 == 9 {
			want["ar/"+name] = "Failed"
		}
	}
	for _, name := range orchRuns {
		want["or/"+name] = "Succeeded"
		for _, step := range []string{"a", "b", "c"} {
			want["ar/"+name+"-"+step] = "Succeeded"
		}
	}
	got := map[string]*unstructured.Unstructured{}
	var unfinished []string
	finished := func() error {
		for _, gvr := range []schema.GroupVersionResource{agentRunsGVR, orchestrationRunsGVR} {
			list, err := s.dyn.Resource(gvr).Namespace(sysNamespace).List(s.ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			kind := "ar/"
			if gvr == orchestrationRunsGVR {
				kind = "or/"
			}
			for i := range list.Items {
				if _, ok := want[kind+list.Items[i].GetName()]; ok {
					got[kind+list.Items[i].GetName()] = &list.Items[i]
				}
			}
		}
		unfinished = unfinished[:0]
		for k := range want {
			switch field(got[k], "status", "phase") {
			case "Succeeded", "Failed", "Cancelled":
			default:
				unfinished = append(unfinished, k)
			}
		}
		if len(unfinished) > 0 {
			return errorf("%d of %d still running", len(unfinished), len(want))
		}
		return nil
	}
	if err := poll(6*time.Minute, finished); err != nil {
		t.Fatalf("%d runs finished: not true after 6m0s: %v; the first of them: %s", len(want), err, s.explainUnfinished(got, unfinished))
	}
	count := map[string]int{}
	for k, phase := range want {
		u := got[k]
		p := field(u, "status", "phase")
		count[p]++
		if p != phase {
			t.Errorf("%s is %s (%s), want %s", k, p, field(u, "status", "reason"), phase)
		}
		if err := timesErr(u); err != nil {
			badTimes++
			t.Error(err)
		}
		if strings.HasPrefix(k, "ar/") {
			if c := jobs.count(string(u.GetUID())); c != 1 {
				twoJobs++
				t.Errorf("%s had %d Jobs, want 1", k, c)
			}
		}
	}
	// Events: the most any one object of the round got, against the limiter's bound.
	bound := s.eventBound(time.Since(start)) + allowance
	list, err := s.kube.EventsV1().Events(sysNamespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, e := range list.Items {
		if _, ok := want["ar/"+e.Regarding.Name]; !ok {
			if _, ok := want["or/"+e.Regarding.Name]; !ok {
				continue
			}
		}
		n := 1
		if e.Series != nil && e.Series.Count > 1 {
			n = int(e.Series.Count)
		}
		per[e.Regarding.Kind+"/"+e.Regarding.Name] += n
	}
	for obj, c := range per {
		if c > worstEvents {
			worstEvents = c
		}
		if c > bound {
			t.Errorf("%s got %d events, above the limiter's bound %d", obj, c, bound)
		}
	}
	var ps []string
	for p, c := range count {
		ps = append(ps, fmt.Sprintf("%d %s", c, p))
	}
	sort.Strings(ps)
	return strings.Join(ps, ", "), badTimes, twoJobs, worstEvents
}

// explainUnfinished says, on one line, where each of the first unfinished runs stands: its
// phase and reason, its Job, and that Job's Pods (phase, Ready) as the API server has them, so a
// failed round names the part that stopped (agentplane, the Job controller, or the fake node).
func (s *system) explainUnfinished(got map[string]*unstructured.Unstructured, keys []string) string {
	sort.Strings(keys)
	if len(keys) > 8 {
		keys = keys[:8]
	}
	pods, err := s.kube.CoreV1().Pods(sysNamespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("%v (Pods: %v)", keys, err)
	}
	byJob := map[string][]string{}
	for _, p := range pods.Items {
		ready := "-"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				ready = string(c.Status) + "/" + c.Reason
			}
		}
		byJob[p.Labels["job-name"]] = append(byJob[p.Labels["job-name"]], fmt.Sprintf("%s %s Ready=%s", p.Name, p.Status.Phase, ready))
	}
	var out []string
	for _, k := range keys {
		u := got[k]
		if u == nil {
			// A step run an OrchestrationRun has not created: where its owner stands says why.
			owner := "or/" + strings.TrimPrefix(k[:max(strings.LastIndex(k, "-"), 3)], "ar/")
			if o := got[owner]; o != nil {
				out = append(out, fmt.Sprintf("%s not created; %s is %s/%s: %s", k, owner, field(o, "status", "phase"), field(o, "status", "reason"), field(o, "status", "message")))
			} else {
				out = append(out, k+" (not listed)")
			}
			continue
		}
		job := field(u, "status", "jobRef", "name")
		out = append(out, fmt.Sprintf("%s %s/%s job=%q pods=%v", k, field(u, "status", "phase"), field(u, "status", "reason"), job, byJob[job]))
	}
	return strings.Join(out, "; ")
}
