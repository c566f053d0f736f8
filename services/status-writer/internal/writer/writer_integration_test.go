//go:build integration

package writer

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchestrationv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/libs/testenv"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

var (
	env     *testenv.Kube
	kc      client.Client
	dyn     dynamic.Interface
	sw      *statusclient.Client
	metrics *Metrics
	reg     *prometheus.Registry
)

func TestMain(m *testing.M) {
	os.Exit(testenv.NoLeaks(func() int {
		var err error
		if env, err = testenv.StartKube(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer env.Stop()
		if kc, err = client.New(env.Config, client.Options{Scheme: kubeclient.Scheme}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cfg := *env.Config
		cfg.QPS, cfg.Burst = 500, 1000
		dyn = dynamic.NewForConfigOrDie(&cfg)
		reg = prometheus.NewRegistry()
		metrics = NewMetrics(reg)
		srv := grpcx.NewServer(prometheus.NewRegistry())
		pb.RegisterStatusWriterServer(srv, NewServer(New(dyn, Options{Metrics: metrics})))
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() { _ = srv.Serve(l) }()
		defer srv.Stop()
		if sw, err = statusclient.New(l.Addr().String(), "test", statusclient.Options{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer sw.Close()
		return m.Run()
	}()))
}

func newNamespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sw-"}}
	if err := kc.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func newRun(t testing.TB, ns, name string) *agentsv1alpha1.AgentRun {
	t.Helper()
	run := &agentsv1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: agentsv1alpha1.AgentRunSpec{
			AgentRef: agentsv1alpha1.LocalRef{Name: "codex"},
			Runtime:  agentsv1alpha1.RuntimeSpec{Type: agentsv1alpha1.RuntimeJob},
		},
	}
	if err := kc.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	return run
}

func write(t testing.TB, req *pb.WriteStatusRequest) (agentsv1alpha1.AgentRunStatus, error) {
	t.Helper()
	return writeWith(t, sw.Write, req)
}

// writeWith writes through w (the gRPC client, or a Server called directly) and decodes the
// AgentRun status it returns.
func writeWith(t testing.TB, w func(context.Context, *pb.WriteStatusRequest) (*pb.WriteStatusResponse, error),
	req *pb.WriteStatusRequest) (agentsv1alpha1.AgentRunStatus, error) {
	t.Helper()
	resp, err := w(context.Background(), req)
	if err != nil {
		return agentsv1alpha1.AgentRunStatus{}, err
	}
	var st agentsv1alpha1.AgentRunStatus
	if err := json.Unmarshal(resp.GetStatusJson(), &st); err != nil {
		t.Fatal(err)
	}
	return st, nil
}

func runRef(run *agentsv1alpha1.AgentRun) *pb.ObjectRef {
	return &pb.ObjectRef{Kind: "AgentRun", Namespace: run.Namespace, Name: run.Name, Uid: string(run.UID)}
}

func TestRunLifecycleKeepsTimestamps(t *testing.T) {
	ns := newNamespace(t)
	run := newRun(t, ns, "life")
	ref := runRef(run)
	// Time is the subject: the writer's clock is a fake one, moved on between the phases by more
	// than the timestamps' one-second precision.
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	srv := NewServer(New(dyn, Options{Now: clk.Now}))
	write := func(t testing.TB, req *pb.WriteStatusRequest) (agentsv1alpha1.AgentRunStatus, error) {
		t.Helper()
		req.FieldManager = "agentplane-test" // what the gRPC client names this caller
		return writeWith(t, srv.WriteStatus, req)
	}

	pending, err := write(t, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 1, Phase: "Pending", Reason: "Accepted"})
	if err != nil {
		t.Fatal(err)
	}
	if pending.StartedAt != nil || pending.FinishedAt != nil || pending.UpdatedAt == nil || pending.ObservedGeneration != 1 {
		t.Fatalf("pending status = %+v", pending)
	}
	clk.Step(2 * time.Second)
	running, err := write(t, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 1, Phase: "Running", Reason: "JobRunning",
		KindFields: &pb.WriteStatusRequest_AgentRun{AgentRun: &pb.AgentRunFields{JobRef: &pb.JobRef{Name: "life-job", Namespace: ns, Uid: "u-1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if running.StartedAt == nil || running.FinishedAt != nil || running.JobRef == nil || running.JobRef.Name != "life-job" {
		t.Fatalf("running status = %+v", running)
	}
	if !running.UpdatedAt.After(pending.UpdatedAt.Time) {
		t.Fatalf("updatedAt did not move: %s then %s", pending.UpdatedAt, running.UpdatedAt)
	}
	clk.Step(2 * time.Second)
	again, err := write(t, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 1, Phase: "Running", Reason: "JobRunning"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.UpdatedAt.After(running.UpdatedAt.Time) || !again.StartedAt.Equal(running.StartedAt) {
		t.Fatalf("an unchanged write must move updatedAt and keep startedAt: %+v then %+v", running, again)
	}
	if again.JobRef == nil {
		t.Fatal("a write that does not name jobRef cleared it")
	}
	clk.Step(2 * time.Second)
	done, err := write(t, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 1, Phase: "Succeeded", Reason: "Completed",
		Conditions: []*pb.Condition{{Type: "Succeeded", Status: "True", Reason: "Completed"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !done.StartedAt.Equal(running.StartedAt) || done.FinishedAt == nil || !done.FinishedAt.After(done.StartedAt.Time) {
		t.Fatalf("succeeded status = startedAt %v finishedAt %v", done.StartedAt, done.FinishedAt)
	}
	if len(done.Conditions) != 1 || done.Conditions[0].ObservedGeneration != 1 || done.Conditions[0].LastTransitionTime.IsZero() {
		t.Fatalf("conditions = %+v", done.Conditions)
	}

	_, err = write(t, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 1, Phase: "Running"})
	if grpcstatus.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "terminal") {
		t.Fatalf("terminal regression: %v, want FailedPrecondition", err)
	}
	var live agentsv1alpha1.AgentRun
	if err := kc.Get(context.Background(), client.ObjectKeyFromObject(run), &live); err != nil {
		t.Fatal(err)
	}
	if live.Status.Phase != "Succeeded" || !live.Status.FinishedAt.Equal(done.FinishedAt) {
		t.Fatalf("a refused write changed the object: %+v", live.Status)
	}
	owned := false
	for _, mf := range live.ManagedFields {
		if mf.Manager == "agentplane-test" && mf.Subresource == "status" {
			owned = true
		}
	}
	if !owned {
		t.Fatalf("status fields are not owned by the caller's field manager through /status: %+v", live.ManagedFields)
	}

	// The seed's validation command prints all five values on the live run.
	out, errOut, err := env.RunKubectl(context.Background(), "-n", ns, "get", "agentrun", "life", "-o",
		"jsonpath={.metadata.generation} {.status.observedGeneration} {.status.startedAt} {.status.finishedAt} {.status.updatedAt}")
	if err != nil {
		t.Fatalf("kubectl: %v %s", err, errOut)
	}
	// Each value is the one the writes recorded: generation 1, observedGeneration 1, startedAt
	// from the Running write, finishedAt from the Succeeded write, updatedAt from the last write.
	want := []string{"1", "1", running.StartedAt.UTC().Format(time.RFC3339), done.FinishedAt.UTC().Format(time.RFC3339),
		done.UpdatedAt.UTC().Format("2006-01-02T15:04:05.000000Z07:00")}
	if f := strings.Fields(out); len(f) != 5 || strings.Join(f, " ") != strings.Join(want, " ") {
		t.Fatalf("validation command printed %q, want %q", out, strings.Join(want, " "))
	}
	if !running.StartedAt.Before(done.FinishedAt) {
		t.Fatalf("startedAt %v is not before finishedAt %v", running.StartedAt, done.FinishedAt)
	}
}

func TestSpecEditRaisesObservedGenerationOnTheNextWrite(t *testing.T) {
	ns := newNamespace(t)
	run := newRun(t, ns, "gen")
	ref := runRef(run)
	if _, err := write(t, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 1, Phase: "Running"}); err != nil {
		t.Fatal(err)
	}
	if _, err := write(t, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 2, Phase: "Running"}); grpcstatus.Code(err) != codes.FailedPrecondition {
		t.Fatalf("generation from the future: %v, want FailedPrecondition", err)
	}
	if err := kc.Get(context.Background(), client.ObjectKeyFromObject(run), run); err != nil {
		t.Fatal(err)
	}
	// The one spec field that may change once a run exists (the CRD freezes the rest).
	run.Spec.Cancel = true
	if err := kc.Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if run.Generation != 2 {
		t.Fatalf("generation after spec edit = %d", run.Generation)
	}
	st, err := write(t, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 2, Phase: "Running"})
	if err != nil {
		t.Fatal(err)
	}
	if st.ObservedGeneration != 2 {
		t.Fatalf("observedGeneration = %d, want 2", st.ObservedGeneration)
	}
	if _, err := write(t, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 1, Phase: "Running"}); grpcstatus.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale generation: %v, want FailedPrecondition", err)
	}
}

func TestErrorsMapToCodes(t *testing.T) {
	ns := newNamespace(t)
	run := newRun(t, ns, "errs")
	cases := []struct {
		name string
		req  *pb.WriteStatusRequest
		code codes.Code
		has  string
	}{
		{"unknown kind", &pb.WriteStatusRequest{Object: &pb.ObjectRef{Kind: "Pod", Namespace: ns, Name: "x"}, ObservedGeneration: 1}, codes.InvalidArgument, "AgentRun"},
		// The previous release's untyped fields are still decoded strictly.
		{"bad field", &pb.WriteStatusRequest{Object: runRef(run), ObservedGeneration: 1, Fields: mustStruct(t, map[string]any{"jobRef": map[string]any{"nmae": "x"}})}, codes.InvalidArgument, "nmae"},       //nolint:staticcheck // SA1019: on purpose
		{"field of another kind", &pb.WriteStatusRequest{Object: runRef(run), ObservedGeneration: 1, Fields: mustStruct(t, map[string]any{"stepStatuses": []any{}})}, codes.InvalidArgument, "stepStatuses"}, //nolint:staticcheck // SA1019: on purpose
		{"bad phase", &pb.WriteStatusRequest{Object: runRef(run), ObservedGeneration: 1, Phase: "Done"}, codes.InvalidArgument, "Done"},
		{"missing object", &pb.WriteStatusRequest{Object: &pb.ObjectRef{Kind: "AgentRun", Namespace: ns, Name: "nope"}, ObservedGeneration: 1}, codes.NotFound, "nope"},
		{"uid mismatch", &pb.WriteStatusRequest{Object: &pb.ObjectRef{Kind: "AgentRun", Namespace: ns, Name: "errs", Uid: "0000"}, ObservedGeneration: 1}, codes.FailedPrecondition, "UID"},
		{"phase on Agent", &pb.WriteStatusRequest{Object: &pb.ObjectRef{Kind: "Agent", Namespace: ns, Name: "a"}, ObservedGeneration: 1, Phase: "Running"}, codes.InvalidArgument, "no phase"},
		{"typed fields of another kind", &pb.WriteStatusRequest{Object: runRef(run), ObservedGeneration: 1,
			KindFields: &pb.WriteStatusRequest_OrchestrationRun{OrchestrationRun: &pb.OrchestrationRunFields{RunId: "r"}}}, codes.InvalidArgument, "orchestration_run fields on a AgentRun"},
		{"typed and untyped fields at once", &pb.WriteStatusRequest{Object: runRef(run), ObservedGeneration: 1,
			Fields:     mustStruct(t, map[string]any{"jobRef": map[string]any{"name": "x"}}), //nolint:staticcheck // SA1019: both forms at once, on purpose
			KindFields: &pb.WriteStatusRequest_AgentRun{AgentRun: &pb.AgentRunFields{JobRef: &pb.JobRef{Name: "x"}}}}, codes.InvalidArgument, "send only the typed ones"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := write(t, tc.req)
			if grpcstatus.Code(err) != tc.code || !strings.Contains(err.Error(), tc.has) {
				t.Fatalf("err = %v, want %s mentioning %q", err, tc.code, tc.has)
			}
		})
	}
	var live agentsv1alpha1.AgentRun
	if err := kc.Get(context.Background(), client.ObjectKeyFromObject(run), &live); err != nil {
		t.Fatal(err)
	}
	if live.Status.UpdatedAt != nil {
		t.Fatalf("a refused request wrote status: %+v", live.Status)
	}
}

// TestTypedFieldsAndThePreviousReleasesUntypedFieldsWriteTheSameStatus: during a rolling upgrade
// a pod of the previous release sends kind fields as an untyped Struct, a new pod sends the
// typed messages; status-writer writes both, to the same status.
func TestTypedFieldsAndThePreviousReleasesUntypedFieldsWriteTheSameStatus(t *testing.T) {
	ns := newNamespace(t)
	start := metav1.NewTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	wf := &agentsv1alpha1.WorkflowStatus{Phase: "Running", LastTransitionTime: &start, Steps: []agentsv1alpha1.WorkflowStepStatus{
		{Name: "plan", Phase: "Succeeded", Attempt: 2, StartedAt: &start, JobRef: &agentsv1alpha1.JobRef{Name: "plan-1", Namespace: ns, UID: "u-2"}},
		{Name: "apply", Phase: "Pending", Message: "waiting"},
	}}
	job := &agentsv1alpha1.JobRef{Name: "plan-1", Namespace: ns, UID: "u-2"}
	typed, err := statusclient.AgentRunFields(job, wf)
	if err != nil {
		t.Fatal(err)
	}
	newPod := newRun(t, ns, "typed")
	got, err := write(t, statusclient.WithFields(statusclient.Request("AgentRun", newPod, 1, "Running", "Running", "steps run"), typed))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(map[string]any{"jobRef": job, "workflow": wf,
		"runtimeRef": map[string]string{"apiVersion": "batch/v1", "kind": "Job", "name": job.Name, "namespace": ns, "uid": job.UID}})
	var untyped map[string]any
	if err := json.Unmarshal(raw, &untyped); err != nil {
		t.Fatal(err)
	}
	oldPod := newRun(t, ns, "untyped")
	req := statusclient.Request("AgentRun", oldPod, 1, "Running", "Running", "steps run")
	req.Fields = mustStruct(t, untyped) //nolint:staticcheck // SA1019: the previous release's form, on purpose
	want, err := write(t, req)
	if err != nil {
		t.Fatal(err)
	}
	if got.JobRef == nil || *got.JobRef != *job || got.RuntimeRef["name"].Raw == nil || got.Workflow == nil || len(got.Workflow.Steps) != 2 ||
		got.Workflow.Steps[0].Attempt != 2 || !got.Workflow.Steps[0].StartedAt.Equal(&start) || got.Workflow.Steps[1].Message != "waiting" {
		t.Fatalf("typed write: status %+v", got)
	}
	g, _ := json.Marshal(map[string]any{"jobRef": got.JobRef, "runtimeRef": got.RuntimeRef, "workflow": got.Workflow})
	w, _ := json.Marshal(map[string]any{"jobRef": want.JobRef, "runtimeRef": want.RuntimeRef, "workflow": want.Workflow})
	if string(g) != string(w) {
		t.Fatalf("typed and untyped writes differ:\ntyped   %s\nuntyped %s", g, w)
	}

	// The OrchestrationRun's fields, typed.
	orun := &orchestrationv1alpha1.OrchestrationRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "typed-or"},
		Spec: orchestrationv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchestrationv1alpha1.NameRef{Name: "o"}}}
	if err := kc.Create(context.Background(), orun); err != nil {
		t.Fatal(err)
	}
	of, err := statusclient.OrchestrationRunFields("r-9", []orchestrationv1alpha1.StepStatus{{Name: "plan", Kind: "AgentRun", Phase: "Running",
		ResourceRef: &orchestrationv1alpha1.ResourceRef{APIVersion: "agents.proompteng.ai/v1alpha1", Kind: "AgentRun", Name: "typed-or-plan"}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sw.Write(context.Background(), statusclient.WithFields(statusclient.Request("OrchestrationRun", orun, 1, "Running", "", ""), of))
	if err != nil {
		t.Fatal(err)
	}
	var ost orchestrationv1alpha1.OrchestrationRunStatus
	if err := json.Unmarshal(resp.GetStatusJson(), &ost); err != nil {
		t.Fatal(err)
	}
	if ost.RunID != "r-9" || len(ost.StepStatuses) != 1 || ost.StepStatuses[0].ResourceRef == nil || ost.StepStatuses[0].ResourceRef.Name != "typed-or-plan" {
		t.Fatalf("orchestrationrun status = %+v", ost)
	}
}

func TestOrchestrationRunAndAgentStatus(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	orun := &orchestrationv1alpha1.OrchestrationRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "or"},
		Spec:       orchestrationv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchestrationv1alpha1.NameRef{Name: "o"}},
	}
	agent := &agentsv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}, Spec: agentsv1alpha1.AgentSpec{ProviderRef: agentsv1alpha1.LocalRef{Name: "p"}}}
	if err := kc.Create(ctx, orun); err != nil {
		t.Fatal(err)
	}
	if err := kc.Create(ctx, agent); err != nil {
		t.Fatal(err)
	}
	resp, err := sw.Write(ctx, &pb.WriteStatusRequest{Object: &pb.ObjectRef{Kind: "OrchestrationRun", Namespace: ns, Name: "or"}, ObservedGeneration: 1, Phase: "Running",
		KindFields: &pb.WriteStatusRequest_OrchestrationRun{OrchestrationRun: &pb.OrchestrationRunFields{RunId: "r-1",
			StepStatuses: []*pb.StepStatus{{Name: "plan", Kind: "AgentRun", Phase: "Running"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var ost orchestrationv1alpha1.OrchestrationRunStatus
	if err := json.Unmarshal(resp.GetStatusJson(), &ost); err != nil {
		t.Fatal(err)
	}
	if ost.RunID != "r-1" || len(ost.StepStatuses) != 1 || ost.StepStatuses[0].Phase != "Running" || ost.StartedAt == nil {
		t.Fatalf("orchestrationrun status = %+v", ost)
	}
	resp, err = sw.Write(ctx, &pb.WriteStatusRequest{Object: &pb.ObjectRef{Kind: "Agent", Namespace: ns, Name: "a"}, ObservedGeneration: 1,
		Conditions: []*pb.Condition{{Type: "Ready", Status: "True", Reason: "ProviderFound"}}})
	if err != nil {
		t.Fatal(err)
	}
	var ast agentsv1alpha1.AgentStatus
	if err := json.Unmarshal(resp.GetStatusJson(), &ast); err != nil {
		t.Fatal(err)
	}
	if len(ast.Conditions) != 1 || ast.UpdatedAt == nil || ast.ObservedGeneration != 1 {
		t.Fatalf("agent status = %+v", ast)
	}
}

// TestConcurrentWritersAreCoalescedWithoutLosingTheLatest has 8 writers hammer one object; each
// owns a condition and writes its iteration number. Every request must succeed, the final status
// must hold every writer's last iteration, and the API must have seen fewer writes than requests.
func TestConcurrentWritersAreCoalescedWithoutLosingTheLatest(t *testing.T) {
	ns := newNamespace(t)
	run := newRun(t, ns, "hot")
	ref := runRef(run)
	const writers, rounds = 8, 15
	before := testutil.ToFloat64(metrics.apiWrites.WithLabelValues("AgentRun"))
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= rounds; i++ {
				_, err := sw.Write(context.Background(), &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 1, Phase: "Running",
					Conditions: []*pb.Condition{{Type: fmt.Sprintf("Writer%d", w), Status: "True", Reason: "Iteration", Message: fmt.Sprint(i)}}})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent write failed: %v", err)
	}
	var live agentsv1alpha1.AgentRun
	if err := kc.Get(context.Background(), client.ObjectKeyFromObject(run), &live); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range live.Status.Conditions {
		got[c.Type] = c.Message
	}
	for w := 0; w < writers; w++ {
		if got[fmt.Sprintf("Writer%d", w)] != fmt.Sprint(rounds) {
			t.Errorf("Writer%d's last request lost: condition message %q", w, got[fmt.Sprintf("Writer%d", w)])
		}
	}
	apiWrites := testutil.ToFloat64(metrics.apiWrites.WithLabelValues("AgentRun")) - before
	perRequest := apiWrites / (writers * rounds)
	t.Logf("%d requests took %.0f API writes (%.2f per request)", writers*rounds, apiWrites, perRequest)
	if perRequest >= 1 {
		t.Fatalf("no coalescing: %.2f API writes per request", perRequest)
	}
}

func mustStruct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestWriteSurvivesAStatusWriterRestart stops the gRPC server while a caller writes and starts a
// new one on the same address: the write is delayed, not lost.
func TestWriteSurvivesAStatusWriterRestart(t *testing.T) {
	ns := newNamespace(t)
	run := newRun(t, ns, "restart")
	addr := fmt.Sprintf("127.0.0.1:%d", mustFreePort(t))
	start := func() *grpcx.Server {
		srv := grpcx.NewServer(prometheus.NewRegistry())
		pb.RegisterStatusWriterServer(srv, NewServer(New(dyn, Options{})))
		var l net.Listener
		var err error
		for i := 0; i < 50; i++ {
			if l, err = net.Listen("tcp", addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(l) }()
		return srv
	}
	srv := start()
	watch, failed := testenv.FailedCalls()
	c, err := statusclient.New(addr, "restart-test", statusclient.Options{AttemptTimeout: 500 * time.Millisecond,
		Dial: grpcx.ClientOptions{Extra: []grpc.DialOption{watch}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(context.Background(), &pb.WriteStatusRequest{Object: runRef(run), ObservedGeneration: 1, Phase: "Pending"}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(context.Background(), &pb.WriteStatusRequest{Object: runRef(run), ObservedGeneration: 1, Phase: "Running"})
		done <- err
	}()
	for i := 1; i <= 2; i++ { // the write fails twice against the stopped server, then it returns
		select {
		case err := <-failed:
			t.Logf("attempt %d failed as it should: %v", i, err)
		case err := <-done:
			t.Fatalf("the write returned while status-writer was down: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatalf("no failed attempt %d within 30s", i)
		}
	}
	srv = start()
	defer srv.Stop()
	if err := <-done; err != nil {
		t.Fatalf("write across the restart: %v", err)
	}
	var live agentsv1alpha1.AgentRun
	if err := kc.Get(context.Background(), client.ObjectKeyFromObject(run), &live); err != nil {
		t.Fatal(err)
	}
	if live.Status.Phase != "Running" || live.Status.StartedAt == nil {
		t.Fatalf("status after restart = %+v", live.Status)
	}
}

// TestWriteSpanJoinsTheCallersTrace checks that status-writer's span for a write belongs to the
// trace of the caller that asked for it.
func TestWriteSpanJoinsTheCallersTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	defer otel.SetTracerProvider(noop.NewTracerProvider())

	ns := newNamespace(t)
	run := newRun(t, ns, "traced")
	ctx, parent := tp.Tracer("caller").Start(context.Background(), "reconcile AgentRun")
	_, err := sw.Write(ctx, &pb.WriteStatusRequest{Object: runRef(run), ObservedGeneration: 1, Phase: "Pending"})
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, s := range rec.Ended() {
		if s.Name() == "WriteStatus AgentRun" {
			found = true
			if s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
				t.Fatalf("write span in trace %s, caller in %s", s.SpanContext().TraceID(), parent.SpanContext().TraceID())
			}
		}
	}
	if !found {
		t.Fatal("no WriteStatus span recorded")
	}
}

func mustFreePort(t testing.TB) int {
	p, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A claim keeps the status as it is (bar updatedAt), and is refused once spec.cancel is set,
// even when status-writer's own copy of the object predates the cancel.
func TestAClaimIsRefusedOnceTheRunIsCancelled(t *testing.T) {
	ns := newNamespace(t)
	run := newRun(t, ns, "claimed")
	ref := runRef(run)
	before, err := write(t, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 1, Phase: "Running", Reason: "Running", Message: "step a runs",
		Conditions: []*pb.Condition{{Type: "Accepted", Status: "True", Reason: "JobCreated", Message: "ok"}}})
	if err != nil {
		t.Fatal(err)
	}
	after, err := write(t, &pb.WriteStatusRequest{Object: ref, Claim: true, ObservedGeneration: 1})
	if err != nil {
		t.Fatalf("claim on a run not cancelled: %v", err)
	}
	if after.Phase != "Running" || after.Reason != "Running" || after.Message != "step a runs" || len(after.Conditions) != 1 ||
		after.ObservedGeneration != 1 || !after.UpdatedAt.After(before.UpdatedAt.Time) {
		t.Errorf("a claim changed the status: %+v -> %+v", before, after)
	}
	// status-writer's cached copy is now older than the cancel.
	if err := kc.Get(context.Background(), client.ObjectKeyFromObject(run), run); err != nil {
		t.Fatal(err)
	}
	run.Spec.Cancel = true
	if err := kc.Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	_, err = write(t, &pb.WriteStatusRequest{Object: ref, Claim: true, ObservedGeneration: 1})
	if grpcstatus.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("claim on a cancelled run: %v, want FailedPrecondition naming the cancel", err)
	}
	// An ordinary write (cancel-propagator's) still goes through.
	if _, err := write(t, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 2, Phase: "Cancelled", Reason: "Cancelled", Message: "cancelled"}); err != nil {
		t.Fatal(err)
	}
}

// A claim with a phase writes the status it carries in the same write (run-controller's first
// status of a run and its start claim are one write), and is refused once spec.cancel is set,
// writing nothing of it.
func TestAClaimWithAStatusWritesItUnlessTheRunIsCancelled(t *testing.T) {
	ns := newNamespace(t)
	run := newRun(t, ns, "starting")
	ref := runRef(run)
	starting := &pb.WriteStatusRequest{Object: ref, Claim: true, ObservedGeneration: 1, Phase: "Pending", Reason: "Starting",
		Message: "starting Job starting-1", Conditions: []*pb.Condition{{Type: "Accepted", Status: "True", Reason: "Starting", Message: "starting Job starting-1"}}}
	got, err := write(t, starting)
	if err != nil {
		t.Fatalf("claim with a status on a run not cancelled: %v", err)
	}
	if got.Phase != "Pending" || got.Reason != "Starting" || got.Message != "starting Job starting-1" || got.ObservedGeneration != 1 ||
		len(got.Conditions) != 1 || got.Conditions[0].Reason != "Starting" {
		t.Fatalf("the claim's status was not written: %+v", got)
	}

	other := newRun(t, ns, "cancelled-first")
	if err := kc.Get(context.Background(), client.ObjectKeyFromObject(other), other); err != nil {
		t.Fatal(err)
	}
	other.Spec.Cancel = true
	if err := kc.Update(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	_, err = write(t, &pb.WriteStatusRequest{Object: runRef(other), Claim: true, ObservedGeneration: 2, Phase: "Pending", Reason: "Starting",
		Message: "starting Job cancelled-first-1", Conditions: starting.Conditions})
	if grpcstatus.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("claim with a status on a cancelled run: %v, want FailedPrecondition naming the cancel", err)
	}
	if err := kc.Get(context.Background(), client.ObjectKeyFromObject(other), other); err != nil {
		t.Fatal(err)
	}
	if other.Status.Phase != "" || other.Status.Reason != "" || len(other.Status.Conditions) != 0 {
		t.Errorf("a refused claim wrote its status: %+v", other.Status)
	}
}

// TestWritesInAWatchedNamespaceReadFromTheInformer: a run's writes in a watched namespace start
// from the informer's copy or from the writer's own last write, so they GET nothing from the
// API server, even after someone else changed the run; in a namespace not watched the first
// write of each run reads it. A claim after a cancel is refused whether or not the informer has
// seen the cancel yet.
func TestWritesInAWatchedNamespaceReadFromTheInformer(t *testing.T) {
	watched, other := newNamespace(t), newNamespace(t)
	cfg, gets := testenv.CountObjectGets(env.Config, "agentruns", watched, other)
	m := NewMetrics(nil)
	w := New(dynamic.NewForConfigOrDie(cfg), Options{Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Watch(ctx, []string{watched}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	store := func() cache.Store {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.stores[storeKey{kinds["AgentRun"].resource, watched}]
	}
	const runs = 10
	var inWatched []*agentsv1alpha1.AgentRun
	for i := range runs {
		inWatched = append(inWatched, newRun(t, watched, fmt.Sprintf("run-%d", i)))
		newRun(t, other, fmt.Sprintf("run-%d", i))
	}
	testenv.Eventually(t, 30*time.Second, "the informer holds every run", func() error {
		if st := store(); st == nil || len(st.ListKeys()) < runs {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	srv := NewServer(w)
	for _, ns := range []string{watched, other} {
		for i := range runs {
			ref := &pb.ObjectRef{Kind: "AgentRun", Namespace: ns, Name: fmt.Sprintf("run-%d", i)}
			if _, err := writeWith(t, srv.WriteStatus, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 1, Phase: "Running", Reason: "JobCreated", Message: "started"}); err != nil {
				t.Fatal(err)
			}
			if ns == watched {
				// Someone else changes the run; the next write waits until the informer has it,
				// so that it is the informer's copy (not a conflict) that spares the read.
				run := inWatched[i]
				patch := []byte(`{"metadata":{"labels":{"touched":"yes"}}}`)
				if err := kc.Patch(context.Background(), run, client.RawPatch(types.MergePatchType, patch)); err != nil {
					t.Fatal(err)
				}
				testenv.Eventually(t, 10*time.Second, "the informer saw the label", func() error {
					item, ok, _ := store().GetByKey(ns + "/" + run.Name)
					if !ok || item.(*unstructured.Unstructured).GetResourceVersion() != run.ResourceVersion {
						return fmt.Errorf("not yet")
					}
					return nil
				})
			}
			st, err := writeWith(t, srv.WriteStatus, &pb.WriteStatusRequest{Object: ref, ObservedGeneration: 1, Phase: "Succeeded", Reason: "Completed", Message: "done"})
			if err != nil {
				t.Fatal(err)
			}
			if st.Phase != "Succeeded" || st.StartedAt == nil || st.FinishedAt == nil {
				t.Errorf("%s/%s: status %+v, want Succeeded with both timestamps", ns, ref.Name, st)
			}
		}
	}
	if n := gets[watched].Load(); n != 0 {
		t.Errorf("writes in the watched namespace read %d AgentRuns from the API server, want none", n)
	}
	if n := gets[other].Load(); n < runs {
		t.Errorf("writes in a namespace not watched read %d AgentRuns, want at least one per run (%d): is the test counting?", n, runs)
	}
	if n := testutil.ToFloat64(m.reads.WithLabelValues("AgentRun", "informer")); n < runs {
		t.Errorf("reads from the informer: %v, want at least %d", n, runs)
	}
	if n := testutil.ToFloat64(m.conflicts.WithLabelValues("AgentRun")); n != 0 {
		t.Errorf("%v conflicts: a write started from a stale copy", n)
	}

	// A cancel, then a claim at once: refused whether the claim started from a stale copy (a
	// conflict, then the live object) or from the informer's.
	run := inWatched[0]
	if err := kc.Get(context.Background(), client.ObjectKeyFromObject(run), run); err != nil {
		t.Fatal(err)
	}
	run.Spec.Cancel = true
	if err := kc.Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	ref := runRef(run)
	ref.Uid = ""
	_, err := writeWith(t, srv.WriteStatus, &pb.WriteStatusRequest{Object: ref, Claim: true, ObservedGeneration: 1})
	if grpcstatus.Code(err) != codes.FailedPrecondition {
		t.Errorf("claim right after a cancel: %v, want FailedPrecondition", err)
	}
}

// TestSecretShapesStayOutOfStatus (#31 item 9): what a status message quotes (a run's, a
// condition's, a workflow step's) reaches the object with bearer tokens, passwords and key shapes
// removed, whichever controller wrote it.
func TestSecretShapesStayOutOfStatus(t *testing.T) {
	ns := newNamespace(t)
	secrets := []string{"hunter22hunter", "ghp_0123456789abcdefghijABCDEFGHIJklmnop", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig"}
	step := "Authorization: Bearer " + secrets[2]
	// The same write in both forms status-writer accepts: typed, and the previous release's untyped.
	typed := &pb.WriteStatusRequest{KindFields: &pb.WriteStatusRequest_AgentRun{AgentRun: &pb.AgentRunFields{
		Workflow: &pb.WorkflowStatus{Steps: []*pb.WorkflowStepStatus{{Name: "a", Phase: "Failed", Message: step}}}}}}
	untyped := &pb.WriteStatusRequest{Fields: mustStruct(t, map[string]any{"workflow": map[string]any{"steps": []any{ //nolint:staticcheck // SA1019: the previous release's form, on purpose
		map[string]any{"name": "a", "phase": "Failed", "message": step}}}})}
	for name, req := range map[string]*pb.WriteStatusRequest{"leaky-typed": typed, "leaky-untyped": untyped} {
		run := newRun(t, ns, name)
		req.Object, req.ObservedGeneration, req.Phase, req.Reason = runRef(run), 1, "Failed", "StepFailed"
		req.Message = "push failed: password=" + secrets[0]
		req.Conditions = []*pb.Condition{{Type: "Ready", Status: "False", Reason: "StepFailed", Message: "clone with " + secrets[1] + " refused"}}
		st, err := write(t, req)
		if err != nil {
			t.Fatal(err)
		}
		got := &agentsv1alpha1.AgentRun{}
		if err := kc.Get(context.Background(), client.ObjectKeyFromObject(run), got); err != nil {
			t.Fatal(err)
		}
		stored, _ := json.Marshal(got.Status)
		answered, _ := json.Marshal(st)
		for _, s := range secrets {
			if strings.Contains(string(stored), s) || strings.Contains(string(answered), s) {
				t.Errorf("%s: %q reached the status: %s", name, s, stored)
			}
		}
		if strings.Count(string(stored), "[REDACTED]") < 3 {
			t.Errorf("%s: the three messages were not all redacted: %s", name, stored)
		}
	}
}
