//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentplane/agentplane/libs/access"
	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/testenv"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// offset moves every port of the stack under test, so it runs beside a developer's `make up`.
const offset = 1000

// servicePorts mirrors the defaults in hack/local/lib.sh: gRPC and metrics port per service.
var servicePorts = map[string][2]int{
	"watch-gateway": {50051, 9101}, "status-writer": {50052, 9102}, "event-emitter": {50053, 9103},
	"job-gc": {50054, 9104}, "cancel-propagator": {50055, 9105}, "run-controller": {50056, 9106},
}

// TestLocalControlPlane drives `make up` and `make down` the way the README tells a user to, and
// checks what the README promises: a Ready kwok node, CRDs that accept and list an AgentRun, a Job
// that completes and is deleted by its TTL, every service healthy, idempotence, clear errors, and
// nothing left running afterwards.
func TestLocalControlPlane(t *testing.T) {
	root := repoRoot(t)
	kubectlBin := mustExist(t, filepath.Join(root, "bin", "envtest", "kubectl"), "tools")
	ctx := context.Background()
	dir := t.TempDir()
	env := []string{fmt.Sprintf("AGENTPLANE_PORT_OFFSET=%d", offset)}
	makeLocal := func(target, localDir string) (string, error) {
		return run(ctx, t, env, "make", "-C", root, "-s", target, "LOCAL_DIR="+localDir)
	}
	t.Cleanup(func() { _, _ = makeLocal("down", dir) })

	out, err := makeLocal("up", dir)
	if err != nil {
		t.Fatalf("make up: %v\n%s", err, out)
	}
	if !strings.Contains(out, "export KUBECONFIG="+filepath.Join(dir, "kubeconfig")) {
		t.Errorf("make up does not say how to point kubectl at the cluster:\n%s", out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kubectl := func(args ...string) (string, error) {
		return run(ctx, t, nil, kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	}

	t.Run("kwok node is Ready", func(t *testing.T) {
		out, err := kubectl("get", "nodes", "--no-headers")
		if err != nil || !strings.Contains(out, "kwok-node-0") || !strings.Contains(out, " Ready ") {
			t.Fatalf("kubectl get nodes: %v\n%s", err, out)
		}
	})

	t.Run("the examples run to their phases through run-controller", func(t *testing.T) {
		files := []string{"agent.yaml", "agentrun.yaml", "agentrun-workflow.yaml", "agentrun-fails.yaml", "orchestration.yaml", "orchestrationrun.yaml"}
		args := []string{"apply"}
		for _, f := range files {
			args = append(args, "-f", filepath.Join(root, "examples", f))
		}
		if out, err := kubectl(args...); err != nil {
			t.Fatalf("apply examples: %v\n%s", err, out)
		}
		out, err := kubectl("get", "agentrun")
		if err != nil {
			t.Fatalf("get agentrun: %v\n%s", err, out)
		}
		header := strings.Join(strings.Fields(strings.SplitN(out, "\n", 2)[0]), " ")
		if header != "NAME PHASE AGENT RUNTIME START COMPLETION AGE" || !strings.Contains(out, "hello") {
			t.Fatalf("kubectl get agentrun:\n%s", out)
		}
		want := map[string]string{
			"agentrun/hello": "Succeeded", "agentrun/hello-workflow": "Succeeded", "agentrun/fails-on-purpose": "Failed",
			"orchestrationrun/plan-and-implement-1": "Succeeded",
		}
		eventually(t, 3*time.Minute, "every example in its expected phase", func() error {
			for obj, phase := range want {
				out, err := kubectl("get", obj, "-o", "jsonpath={.status.phase} {.status.reason}")
				if err != nil || !strings.HasPrefix(out, phase+" ") {
					return errorf("%s: %q (%v), want %s", obj, out, err, phase)
				}
			}
			return nil
		})
		if out, _ := kubectl("get", "agentrun/fails-on-purpose", "-o", "jsonpath={.status.reason}"); out != "BackoffLimitExceeded" {
			t.Errorf("fails-on-purpose reason %q, want BackoffLimitExceeded", out)
		}
		// Seed 000's validation command, as written, prints all four fields for the finished run.
		out, err = kubectl("-n", "agents", "get", "agentrun", "hello", "-o",
			"jsonpath={.status.observedGeneration} {.status.updatedAt} {.status.startedAt} {.status.finishedAt}")
		if f := strings.Fields(out); err != nil || len(f) != 4 {
			t.Fatalf("seed validation command printed %q (%v), want four values", out, err)
		}
		out, err = kubectl("get", "orchestrationrun", "plan-and-implement-1", "-o", "jsonpath={range .status.stepStatuses[*]}{.name}={.phase} {end}")
		if err != nil || strings.TrimSpace(out) != "plan=Succeeded implement=Succeeded test=Succeeded review=Succeeded" {
			t.Errorf("step statuses %q (%v)", out, err)
		}
		out, err = kubectl("get", "events", "--field-selector", "reason=JobCreated,involvedObject.name=hello", "-o", "name")
		if err != nil || strings.TrimSpace(out) == "" {
			t.Errorf("no JobCreated event for hello: %v %q", err, out)
		}
		_, err = kubectl("patch", "agentrun", "hello", "--subresource=status", "--type=merge", "-p", `{"status":{"startedAt":"2020-01-01T00:00:00Z"}}`)
		if err == nil {
			t.Fatal("the API server let kubectl rewrite startedAt")
		}
		metrics, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", servicePorts["run-controller"][1]+offset))
		if err != nil || !strings.Contains(metrics, "agentplane_run_controller_jobs_created_total 8") ||
			!strings.Contains(metrics, `agentplane_run_controller_runs{phase="Succeeded"} 6`) {
			t.Errorf("run-controller metrics (%v) lack 8 Jobs created and 6 runs Succeeded:\n%s", err, grepLines(metrics, "agentplane_run_controller"))
		}
	})

	t.Run("job-gc archives a finished run in make up's PostgreSQL before a deletion by hand", func(t *testing.T) {
		// Archived when it finished, the run is let go of at once (the archive's finalizer released).
		eventually(t, time.Minute, "fails-on-purpose archived and let go", func() error {
			if out, err := kubectl("get", "agentrun", "fails-on-purpose", "-o", "jsonpath={.metadata.finalizers}"); err != nil || strings.Contains(out, "agents.proompteng.ai/archive") {
				return errorf("finalizers %q (%v)", out, err)
			}
			return nil
		})
		uid, _ := kubectl("get", "agentrun", "fails-on-purpose", "-o", "jsonpath={.metadata.uid}")
		if out, err := kubectl("delete", "agentrun", "fails-on-purpose", "--timeout", "60s"); err != nil {
			t.Fatalf("delete: %v\n%s", err, out)
		}
		bin, err := testenv.PostgresBin()
		if err != nil {
			t.Fatal(err)
		}
		out, err := run(ctx, t, nil, filepath.Join(bin, "psql"), "-X", "-A", "-t", "-h", "127.0.0.1", "-p", fmt.Sprint(15432+offset), "-U", "agentplane", "-d", "agentplane",
			"-c", "SELECT name, phase, record->'object'->'status'->>'reason', jsonb_array_length(record->'jobs') FROM runs WHERE uid = '"+uid+"'")
		if err != nil || strings.TrimSpace(out) != "fails-on-purpose|Failed|BackoffLimitExceeded|1" {
			t.Fatalf("the archived row: %q (%v), want fails-on-purpose|Failed|BackoffLimitExceeded|1", out, err)
		}
		metrics, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", servicePorts["job-gc"][1]+offset))
		if err != nil || !strings.Contains(metrics, `agentplane_job_gc_archive_writes_total{result="ok"}`) {
			t.Errorf("job-gc's archive metrics (%v):\n%s", err, grepLines(metrics, "agentplane_job_gc_archive"))
		}
		// Gone from the cluster, the run is read back through watch-gateway, as the banner says.
		agentctl := binPath(t, "agentctl")
		gw := fmt.Sprintf("127.0.0.1:%d", 50051+offset)
		out, err = run(ctx, t, nil, agentctl, "-n", "agents", "get", "runs", "--archived", "--gateway", gw, "--phase", "Failed", "-o", "wide")
		if err != nil || !strings.Contains(out, "agentrun/fails-on-purpose") || !strings.Contains(out, uid) {
			t.Fatalf("agentctl get runs --archived: %v\n%s", err, out)
		}
		out, err = run(ctx, t, nil, agentctl, "-n", "agents", "describe", "run", "fails-on-purpose", "--archived", "--gateway", gw)
		if err != nil || !strings.Contains(out, uid) || !strings.Contains(out, "BackoffLimitExceeded") || !strings.Contains(out, "Jobs:") {
			t.Fatalf("agentctl describe run --archived: %v\n%s", err, out)
		}
	})

	t.Run("a run annotated simulate-duration stays Running", func(t *testing.T) {
		manifest := `{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"long","annotations":{"agentplane.dev/simulate-duration":"600s"}},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`
		if out, err := kubectlStdin(ctx, t, kubectlBin, kubeconfig, manifest); err != nil {
			t.Fatalf("apply: %v %s", err, out)
		}
		eventually(t, time.Minute, "long is Running", func() error {
			out, err := kubectl("get", "agentrun", "long", "-o", "jsonpath={.status.phase}")
			if err != nil || out != "Running" {
				return errorf("phase %q %v", out, err)
			}
			return nil
		})
		time.Sleep(10 * time.Second)
		if out, _ := kubectl("get", "agentrun", "long", "-o", "jsonpath={.status.phase}"); out != "Running" {
			t.Errorf("a 600s run is %q after 10s", out)
		}
	})

	t.Run("the seed's cancel commands stop a running OrchestrationRun", func(t *testing.T) {
		manifest := `{"apiVersion":"orchestration.proompteng.ai/v1alpha1","kind":"OrchestrationRun","metadata":{"name":"cancel-me","annotations":{"agentplane.dev/simulate-duration":"600s"}},"spec":{"orchestrationRef":{"name":"plan-and-implement"}}}`
		if out, err := kubectlStdin(ctx, t, kubectlBin, kubeconfig, manifest); err != nil {
			t.Fatalf("apply: %v %s", err, out)
		}
		eventually(t, time.Minute, "its first step Running", func() error {
			out, err := kubectl("get", "agentrun", "cancel-me-plan", "-o", "jsonpath={.status.phase}")
			if err != nil || out != "Running" {
				return errorf("phase %q %v", out, err)
			}
			return nil
		})
		// As the seed writes them.
		if out, err := kubectl("-n", "agents", "patch", "orchestrationrun", "cancel-me", "--type=merge", "-p", `{"spec":{"cancel":true}}`); err != nil {
			t.Fatalf("patch: %v %s", err, out)
		}
		eventually(t, 2*time.Minute, "phase Cancelled and the Cancelled condition", func() error {
			out, err := kubectl("-n", "agents", "get", "orchestrationrun", "cancel-me", "-o", "yaml")
			if err != nil || !strings.Contains(out, "phase: Cancelled") || !strings.Contains(out, "type: Cancelled") {
				return errorf("%v\n%s", err, grepLines(out, "Cancel"))
			}
			return nil
		})
		eventually(t, 2*time.Minute, "its Jobs and pods gone", func() error {
			out, err := kubectl("get", "jobs,pods", "-l", "orchestration.proompteng.ai/run=cancel-me", "-o", "name")
			if err != nil || strings.TrimSpace(out) != "" {
				return errorf("left: %q %v", out, err)
			}
			return nil
		})
		if out, err := kubectl("-n", "agents", "patch", "orchestrationrun", "cancel-me", "--type=merge", "-p", `{"spec":{"cancel":false}}`); err == nil || !strings.Contains(out, "cannot be undone") {
			t.Errorf("a cancel was undone: %v %s", err, out)
		}
		if out, _ := kubectl("get", "agentrun", "cancel-me-implement"); !strings.Contains(out, "NotFound") {
			t.Errorf("a step started after the cancel: %s", out)
		}
	})

	t.Run("agentctl cancel --wait stops a run and says what it stopped", func(t *testing.T) {
		agentctl := binPath(t, "agentctl")
		// Its pod takes a moment to stop: a wait this short times out, with a non-zero exit.
		out, err := run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "-n", "agents", "cancel", "agentrun", "long", "--wait", "--timeout", "1ms")
		if err == nil || !strings.Contains(out, "agentrun/long is not finished after 1ms") {
			t.Errorf("a wait that times out: %v\n%s", err, out)
		}
		out, err = run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "-n", "agents", "cancel", "agentrun", "long", "--wait", "--timeout", "2m")
		if err != nil || !strings.Contains(out, "agentrun/long Cancelled: cancelled; stopped 1 Job(s)") {
			t.Fatalf("agentctl cancel --wait: %v\n%s", err, out)
		}
		out, err = run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "-n", "agents", "cancel", "agentrun", "hello", "--wait", "--timeout", "1m")
		if err != nil || !strings.Contains(out, "agentrun/hello Succeeded: the run had already Succeeded; cancel changes nothing") {
			t.Errorf("cancelling a finished run: %v\n%s", err, out)
		}
		if out, err := kubectl("get", "agentrun", "hello", "-o", "jsonpath={.status.phase}"); err != nil || out != "Succeeded" {
			t.Errorf("hello is %q after a cancel", out)
		}
		if out, err := run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "-n", "agents", "cancel", "agentrun", "nope"); exitCode(err) != 5 || !strings.Contains(out, "no AgentRun named nope in namespace agents") {
			t.Errorf("cancelling a run that does not exist: exit %d (want 5) %s", exitCode(err), out)
		}
	})

	t.Run("agentctl drives runs as a user: submit, logs -f, wait, cancel, retry, describe", func(t *testing.T) { agentctlRunVerbs(ctx, t, kubeconfig, kubectl) })

	// make up turns service-to-service authentication on: event-emitter and status-writer take
	// calls from the controllers' ServiceAccounts only, with the tokens make up minted for them.
	asController := func(service string) *grpc.ClientConn {
		t.Helper()
		dial, err := access.ClientAuth{TokenFile: filepath.Join(dir, "tokens", "run-controller")}.DialOptions()
		if err != nil {
			t.Fatalf("the token make up minted for run-controller: %v", err)
		}
		conn, err := grpcx.Dial(fmt.Sprintf("127.0.0.1:%d", servicePorts[service][0]+offset), dial)
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}

	t.Run("status-writer and event-emitter refuse callers that are not the controllers", func(t *testing.T) {
		conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", servicePorts["event-emitter"][0]+offset), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = pb.NewEventEmitterClient(conn).Emit(ctx, &pb.EmitRequest{
			Object: &pb.EventObject{ApiVersion: "agents.proompteng.ai/v1alpha1", Kind: "AgentRun", Namespace: "agents", Name: "hello"},
			Type:   "Warning", Reason: "Forged", Note: "not from a controller",
		})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("event-emitter without a token: %v, want Unauthenticated", err)
		}
		sconn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", servicePorts["status-writer"][0]+offset), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer sconn.Close()
		// A pod in the namespace with the default ServiceAccount, holding a token for the right
		// audience: known to the API server, not allowed to write.
		other, err := kubectl("create", "token", "default", "--audience", "agentplane")
		if err != nil {
			t.Fatalf("token of the default ServiceAccount: %v %s", err, other)
		}
		other = strings.TrimSpace(other)
		md := metadata.Pairs("authorization", "Bearer "+other)
		_, err = pb.NewStatusWriterClient(sconn).WriteStatus(metadata.NewOutgoingContext(ctx, md), &pb.WriteStatusRequest{
			Object: &pb.ObjectRef{Kind: "AgentRun", Namespace: "agents", Name: "hello"},
			Phase:  "Failed", Reason: "Forged",
		})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "system:serviceaccount:agents:default may not call") {
			t.Errorf("status-writer with a token of another identity: %v, want PermissionDenied naming it", err)
		}
		if strings.Contains(fmt.Sprint(err), other) {
			t.Error("the refusal carries the token")
		}
		if out, _ := kubectl("get", "agentrun", "hello", "-o", "jsonpath={.status.reason}"); out == "Forged" {
			t.Error("a refused caller wrote status")
		}
	})

	t.Run("event-emitter records a Warning that kubectl describe shows", func(t *testing.T) {
		uid, err := kubectl("get", "agentrun", "hello", "-o", "jsonpath={.metadata.uid}")
		if err != nil {
			t.Fatalf("uid: %v %s", err, uid)
		}
		conn := asController("event-emitter")
		defer conn.Close()
		resp, err := pb.NewEventEmitterClient(conn).Emit(ctx, &pb.EmitRequest{
			Object: &pb.EventObject{ApiVersion: "agents.proompteng.ai/v1alpha1", Kind: "AgentRun", Namespace: "agents", Name: "hello", Uid: uid},
			Type:   "Warning", Reason: "MissingSecret", Note: `secret "github-token" not found (token=abc123secret)`, Action: "CreateJob",
		})
		if err != nil || resp.GetOutcome() != pb.EmitOutcome_EMIT_OUTCOME_EMITTED || resp.GetDegraded() {
			t.Fatalf("emit: %v %v", resp, err)
		}
		eventually(t, 30*time.Second, "warning in kubectl describe", func() error {
			out, err := kubectl("describe", "agentrun", "hello")
			if err != nil || !strings.Contains(out, "MissingSecret") || !strings.Contains(out, "Warning") {
				return errorf("describe: %v\n%s", err, out)
			}
			if strings.Contains(out, "abc123secret") {
				t.Fatalf("a secret reached the event:\n%s", out)
			}
			return nil
		})
	})

	t.Run("event-emitter reports Redis going away and coming back", func(t *testing.T) {
		conn := asController("event-emitter")
		defer conn.Close()
		health := healthpb.NewHealthClient(conn)
		redisHealth := func() healthpb.HealthCheckResponse_ServingStatus {
			r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "agentplane.v1.EventEmitter/redis"})
			if err != nil {
				return healthpb.HealthCheckResponse_UNKNOWN
			}
			return r.Status
		}
		emit := func() (*pb.EmitResponse, error) {
			return pb.NewEventEmitterClient(conn).Emit(ctx, &pb.EmitRequest{
				Object: &pb.EventObject{ApiVersion: "agents.proompteng.ai/v1alpha1", Kind: "AgentRun", Namespace: "agents", Name: "hello"},
				Type:   "Warning", Reason: "ReconcileError", Note: "api server timeout", Transient: true,
			})
		}
		if got := redisHealth(); got != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("redis health before = %v", got)
		}
		pid := readPids(t, filepath.Join(dir, "run"))["redis"]
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		eventually(t, 15*time.Second, "event-emitter degraded without Redis", func() error {
			resp, err := emit()
			if err != nil {
				return err
			}
			if !resp.GetDegraded() || redisHealth() != healthpb.HealthCheckResponse_NOT_SERVING {
				return errorf("degraded=%v health=%v", resp.GetDegraded(), redisHealth())
			}
			return nil
		})
		if out, err := makeLocal("up", dir); err != nil { // brings back only what is missing
			t.Fatalf("make up to restart redis: %v\n%s", err, out)
		}
		eventually(t, 15*time.Second, "event-emitter back on Redis", func() error {
			resp, err := emit()
			if err != nil {
				return err
			}
			if resp.GetDegraded() || redisHealth() != healthpb.HealthCheckResponse_SERVING {
				return errorf("degraded=%v health=%v", resp.GetDegraded(), redisHealth())
			}
			return nil
		})
	})

	t.Run("a Job completes and its TTL deletes it", func(t *testing.T) {
		if out, err := kubectl("apply", "-f", filepath.Join(root, "hack", "local", "sample-job.yaml")); err != nil {
			t.Fatalf("apply job: %v\n%s", err, out)
		}
		start := time.Now()
		eventually(t, 2*time.Minute, "job sample Complete", func() error {
			out, err := kubectl("get", "job", "sample", "-o", `jsonpath={.status.conditions[?(@.type=="Complete")].status}`)
			if err != nil || strings.TrimSpace(out) != "True" {
				return errorf("complete=%q err=%v", out, err)
			}
			return nil
		})
		t.Logf("job completed after %s", time.Since(start).Round(time.Second))
		eventually(t, 2*time.Minute, "job sample deleted by its TTL", func() error {
			out, err := kubectl("get", "job", "sample")
			if err == nil || !strings.Contains(out, "NotFound") {
				return errorf("still there: %s", out)
			}
			return nil
		})
		t.Logf("job deleted by TTL after %s", time.Since(start).Round(time.Second))
	})

	t.Run("every service is healthy", func(t *testing.T) {
		for name, p := range servicePorts {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", p[1]+offset))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("%s /readyz: %v %v", name, resp, err)
				continue
			}
			resp.Body.Close()
			conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", p[0]+offset), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			hr, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
			cancel()
			conn.Close()
			if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("%s grpc health: %v %v", name, hr, err)
			}
		}
	})

	// make up starts Jaeger when `make tools-jaeger` built it (make test-e2e does), and every
	// service and kube-apiserver send it their spans; as the admin kubeconfig is in
	// system:masters, the API server's spans join the callers' traces.
	t.Run("make up sends every service's spans and the API server's to Jaeger", func(t *testing.T) {
		if !strings.Contains(out, fmt.Sprintf("Jaeger at http://127.0.0.1:%d", 16686+offset)) {
			t.Errorf("make up does not print Jaeger's address:\n%s", out)
		}
		jaeger := fmt.Sprintf("http://127.0.0.1:%d", 16686+offset)
		eventually(t, time.Minute, "every service in Jaeger", func() error {
			body, err := httpGet(jaeger + "/api/services")
			if err != nil {
				return err
			}
			for _, svc := range append([]string{"apiserver"}, services...) {
				if !strings.Contains(body, `"`+svc+`"`) {
					return errorf("%s missing: %s", svc, body)
				}
			}
			return nil
		})
		body, err := httpGet(jaeger + "/api/traces?service=run-controller&operation=Reconcile%20AgentRun&limit=100&lookback=1h")
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Data []struct {
				Spans []struct {
					OperationName string `json:"operationName"`
					ProcessID     string `json:"processID"`
				} `json:"spans"`
				Processes map[string]struct {
					ServiceName string `json:"serviceName"`
				} `json:"processes"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &res); err != nil {
			t.Fatal(err)
		}
		for _, tr := range res.Data {
			seen := map[string]bool{}
			for _, sp := range tr.Spans {
				verb, _, _ := strings.Cut(sp.OperationName, " ")
				seen[tr.Processes[sp.ProcessID].ServiceName+" "+verb] = true
			}
			if seen["run-controller Reconcile"] && seen["status-writer WriteStatus"] && seen["event-emitter Emit"] && seen["apiserver PUT"] {
				return
			}
		}
		t.Errorf("no reconcile trace holds run-controller, status-writer, event-emitter and the API server's status PUT (%d traces)", len(res.Data))
	})

	t.Run("watch-gateway streams every component's health", func(t *testing.T) {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(sctx, http.MethodGet,
			fmt.Sprintf("http://127.0.0.1:%d/api/agents/control-plane/status/stream?format=ndjson&heartbeat=1s", 18101+offset), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		state := map[string]string{}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		want := []string{"namespace", "kube-apiserver", "crds", "database", "runtime:job", "status-writer", "event-emitter", "job-gc", "cancel-propagator", "run-controller", "watch-gateway"}
		for sc.Scan() {
			var ev struct {
				Type    string `json:"type"`
				Items   []struct{ Component, Status string }
				Changes []struct{ Component, Status string }
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("not one JSON object per line: %q", sc.Text())
			}
			for _, it := range append(ev.Items, ev.Changes...) {
				state[it.Component] = it.Status
			}
			healthy := 0
			for _, c := range want {
				if state[c] == "healthy" {
					healthy++
				}
			}
			if healthy == len(want) {
				return
			}
		}
		t.Fatalf("stream ended before every component was healthy: %v", state)
	})

	t.Run("curl -N reads the SSE stream", func(t *testing.T) {
		// curl exits 28 when --max-time ends the stream; what it printed until then is what counts.
		out, _ := exec.CommandContext(ctx, "curl", "-sN", "--max-time", "3",
			fmt.Sprintf("http://127.0.0.1:%d/api/agents/control-plane/status/stream?heartbeat=1s", 18101+offset)).Output()
		for _, want := range []string{"retry: 1000\n", "event: snapshot\nid: ", "event: heartbeat\nid: ", `data: {"type":"snapshot"`} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("curl -N output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("agentctl shows the same health in grpc and kube mode", func(t *testing.T) {
		agentctl := binPath(t, "agentctl")
		out, err := run(ctx, t, nil, agentctl, "status", "--gateway", fmt.Sprintf("127.0.0.1:%d", 50051+offset))
		if err != nil || !strings.HasPrefix(out, "COMPONENT                NAMESPACE  STATUS     MESSAGE\n") {
			t.Fatalf("agentctl status (grpc): %v\n%s", err, out)
		}
		for _, want := range []string{"status-writer            agents     healthy", "database                 agents     healthy", "crds                     agents     healthy"} {
			if !strings.Contains(out, want) {
				t.Errorf("grpc status lacks %q:\n%s", want, out)
			}
		}
		out, err = run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "status", "-o", "ndjson")
		if err != nil || !strings.Contains(out, `"type":"snapshot"`) || !strings.Contains(out, `"component":"crds","namespace":"agents","status":"healthy"`) {
			t.Fatalf("agentctl status (kube): %v\n%s", err, out)
		}
		// Redis and gRPC run; kube mode does not observe them and says so (#32 item 9), rather
		// than "redis not configured" or "gRPC not enabled".
		for _, c := range []string{"database", "grpc"} {
			if !strings.Contains(out, `"component":"`+c+`","namespace":"agents","status":"unknown","message":"not observed by agentctl's kube mode`) {
				t.Errorf("agentctl status (kube) on %s:\n%s", c, out)
			}
		}
		out, err = run(ctx, t, nil, agentctl, "status", "watch", "--gateway", fmt.Sprintf("127.0.0.1:%d", 50051+offset), "--heartbeat", "1s", "--timeout", "3s")
		if err != nil || !strings.Contains(out, "---\nHEARTBEAT ") {
			t.Fatalf("agentctl status watch: %v\n%s", err, out)
		}
	})

	// From a laptop nothing in the cluster is reachable by its DNS name: agentctl reaches
	// services and the gateway by port-forwards through the API server. kwok plays the kubelet
	// and forwards a pod's port P to 127.0.0.1:P, so pods that declare the local services' ports
	// stand for them (make up configures it).
	t.Run("agentctl works from a laptop through port-forwards", func(t *testing.T) {
		deploy := func(name string, port int) string {
			return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, labels: {app.kubernetes.io/name: %[1]s, app.kubernetes.io/part-of: agentplane}}
spec:
  selector: {matchLabels: {app.kubernetes.io/name: %[1]s}}
  template:
    metadata: {labels: {app.kubernetes.io/name: %[1]s, app.kubernetes.io/part-of: agentplane}}
    spec:
      containers: [{name: main, image: agentplane/%[1]s, ports: [{name: grpc, containerPort: %[2]d}]}]
---
`, name, port)
		}
		manifest := deploy("watch-gateway", 50051+offset) + deploy("status-writer", 50052+offset) +
			deploy("event-emitter", 59999) + // a port nothing listens on: its health cannot be read
			`apiVersion: v1
kind: Service
metadata: {name: watch-gateway, labels: {app.kubernetes.io/name: watch-gateway, app.kubernetes.io/part-of: agentplane}}
spec:
  selector: {app.kubernetes.io/name: watch-gateway}
  ports: [{name: grpc, port: 50051, targetPort: grpc}]
`
		file := filepath.Join(t.TempDir(), "laptop.yaml")
		if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := kubectl("apply", "-f", file); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		defer func() { _, _ = kubectl("delete", "-f", file, "--wait=false") }()
		if out, err := kubectl("rollout", "status", "deploy/watch-gateway", "deploy/status-writer", "deploy/event-emitter", "--timeout", "90s"); err != nil {
			t.Fatalf("rollout: %v %s", err, out)
		}
		agentctl := binPath(t, "agentctl")
		// kube mode: each service's health through a port-forward to its pod.
		eventually(t, 60*time.Second, "kube mode reads the services' health through port-forwards", func() error {
			out, _ := run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "status", "-o", "ndjson", "--exit-code=false")
			if !strings.Contains(out, `"component":"status-writer","namespace":"agents","status":"healthy"`) ||
				!strings.Contains(out, `"component":"event-emitter","namespace":"agents","status":"degraded","message":"health stream unreachable"`) {
				return errorf("%s", out)
			}
			// The gateway's gRPC as its health says (#32 item 9); Redis unseen, event-emitter
			// being unreachable.
			gateway := strings.Contains(out, `"component":"watch-gateway","namespace":"agents","status":"healthy"`)
			if grpc := strings.Contains(out, `"component":"grpc","namespace":"agents","status":"healthy"`); grpc != gateway ||
				!strings.Contains(out, `"component":"database","namespace":"agents","status":"unknown","message":"not observed by agentctl's kube mode`) {
				return errorf("grpc healthy %v, watch-gateway healthy %v, or database not unknown:\n%s", grpc, gateway, out)
			}
			return nil
		})
		// grpc mode without --gateway: the gateway found through its Service and port-forwarded to.
		out, err := run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "status", "--transport", "grpc", "-o", "ndjson", "--exit-code=false")
		if err != nil || !strings.Contains(out, `"component":"crds","namespace":"agents","status":"healthy"`) {
			t.Fatalf("grpc mode through a port-forward: %v\n%s", err, out)
		}
		out, err = run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "status", "watch", "--transport", "grpc", "--heartbeat", "1s", "--timeout", "3s")
		if err != nil || !strings.Contains(out, "---\nHEARTBEAT ") {
			t.Fatalf("grpc watch through a port-forward: %v\n%s", err, out)
		}
		if out, err := run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "-n", "default", "status", "--transport", "grpc"); err == nil || !strings.Contains(out, "no Service watch-gateway in namespace default") {
			t.Fatalf("no gateway in the namespace: %v\n%s", err, out)
		}
	})

	// Every series an alert of the charts reads is one the running service exports, from its
	// first scrape (vectors are initialised at start, so rate() and increase() see the first
	// event).
	t.Run("the charts' alerts read series the services export", func(t *testing.T) {
		h := newHelmEnv(t)
		for _, sc := range serviceCharts {
			_, series := alertMetrics(t, h, sc.name)
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", servicePorts[sc.name][1]+offset))
			if err != nil {
				t.Fatalf("%s /metrics: %v", sc.name, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, m := range series {
				if !strings.Contains(string(b), "\n# TYPE "+m+" ") {
					t.Errorf("%s's alerts read %s, which its /metrics does not export", sc.name, m)
				}
			}
		}
	})

	t.Run("a value a chart's schema accepts starts its binary", func(t *testing.T) { checkSchemaBounds(t, root, kubeconfig) })

	// #13 item 9: each chart installs alone into this cluster and goes cleanly. kwok plays the
	// pods (they turn Ready without running), so this checks what the API server decides: the
	// manifests are accepted (server-side validation, the CRDs' schemas, RBAC escalation rules),
	// the Deployment becomes available for --wait, and uninstall leaves nothing of the release.
	t.Run("each chart installs alone with helm install --wait and uninstalls cleanly, and the one-release chart", func(t *testing.T) {
		h := newHelmEnv(t)
		helmK := func(args ...string) (string, string, error) {
			return h.run(append([]string{"--kubeconfig", kubeconfig}, args...)...)
		}
		const ns = "helm-releases"
		if out, err := kubectl("create", "namespace", ns); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		for _, sc := range serviceCharts {
			args := append([]string{"install", sc.name, filepath.Join(root, "charts", sc.name), "-n", ns, "--wait", "--timeout", "2m"}, withChoices(sc.name)...)
			if sc.name == "event-emitter" || sc.name == "watch-gateway" {
				args = append(args, "--set", "redis.url=redis://redis:6379/0")
			}
			if stdout, stderr, err := helmK(args...); err != nil {
				t.Errorf("helm install %s: %v\n%s%s", sc.name, err, stdout, stderr)
				continue
			}
			out, err := kubectl("-n", ns, "get", "deployment", sc.name, "-o", "jsonpath={.status.availableReplicas}")
			if err != nil || out != "1" {
				t.Errorf("%s: %q available replicas after --wait (%v)", sc.name, out, err)
			}
			if stdout, stderr, err := helmK("uninstall", sc.name, "-n", ns, "--wait", "--timeout", "2m"); err != nil {
				t.Errorf("helm uninstall %s: %v\n%s%s", sc.name, err, stdout, stderr)
			}
			// Nothing of the release is left, namespaced or cluster-wide, once the garbage collector
			// has removed the pods (their ReplicaSet's dependents, not the release's objects).
			eventually(t, time.Minute, sc.name+" uninstalled without a trace", func() error {
				out, err := kubectl("get", "all,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings,networkpolicies,poddisruptionbudgets",
					"-A", "-l", "app.kubernetes.io/instance="+sc.name, "-o", "name")
				if err != nil || strings.TrimSpace(out) != "" {
					return errorf("left behind (%v): %s", err, out)
				}
				return nil
			})
		}
		// The one-release chart too: the six services wired to one another under its name.
		const rel = "agentplane"
		// make up applied the CRDs and the CRDs chart's admission policies itself (kubectl apply,
		// no Helm owner), and Helm does not adopt objects another tool made: the release installs
		// the services here, the CRDs and policies it would install are those already in force.
		if stdout, stderr, err := helmK("install", rel, filepath.Join(root, "charts", "agentplane"), "-n", ns, "--wait", "--timeout", "3m",
			"--set", "global.redis.url=redis://redis:6379/0", "--set", "crds.enabled=false"); err != nil {
			t.Fatalf("helm install charts/agentplane: %v\n%s%s", err, stdout, stderr)
		}
		out, err := kubectl("-n", ns, "get", "deployments", "-l", "app.kubernetes.io/instance="+rel,
			"-o", `jsonpath={range .items[*]}{.metadata.name}={.status.availableReplicas} {end}`)
		want := "agentplane-cancel-propagator=1 agentplane-event-emitter=1 agentplane-job-gc=1 agentplane-run-controller=1 agentplane-status-writer=1 agentplane-watch-gateway=1 "
		if err != nil || out != want {
			t.Errorf("charts/agentplane's Deployments: %q (%v), want %q", out, err, want)
		}
		if stdout, stderr, err := helmK("uninstall", rel, "-n", ns, "--wait", "--timeout", "2m"); err != nil {
			t.Errorf("helm uninstall %s: %v\n%s%s", rel, err, stdout, stderr)
		}
		eventually(t, time.Minute, "charts/agentplane uninstalled without a trace", func() error {
			out, err := kubectl("get", "all,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings,networkpolicies,poddisruptionbudgets",
				"-A", "-l", "app.kubernetes.io/instance="+rel, "-o", "name")
			if err != nil || strings.TrimSpace(out) != "" {
				return errorf("left behind (%v): %s", err, out)
			}
			return nil
		})
	})

	// The node controller marks a node's Pods NotReady when the node's lease runs out (kube-apiserver
	// away for longer than --node-monitor-grace-period), and a restarted kwok, as TestWholeSystem's
	// kube-apiserver-restart fault has, plays only the stage a Pod matches now: a Running Pod that
	// is NotReady must still end, or its run never does.
	t.Run("a Job's Pod marked NotReady still ends after kwok restarts", func(t *testing.T) {
		manifest := `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"not-ready"},"spec":{"backoffLimit":0,"template":{"metadata":{"annotations":{"agentplane.dev/simulate-duration":"20s"}},"spec":{"restartPolicy":"Never","containers":[{"name":"main","image":"busybox:1.36"}]}}}}`
		if out, err := kubectlStdin(ctx, t, kubectlBin, kubeconfig, manifest); err != nil {
			t.Fatalf("apply: %v %s", err, out)
		}
		var pod string
		eventually(t, time.Minute, "the Job's Pod is Running", func() error {
			out, err := kubectl("get", "pods", "-l", "job-name=not-ready", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.phase}{"\n"}{end}`)
			if f := strings.Fields(out); err != nil || len(f) != 2 || f[1] != "Running" {
				return errorf("%q %v", out, err)
			}
			pod = strings.Fields(out)[0]
			return nil
		})
		// What the node controller writes (MarkPodsNotReady), then kwok goes away and comes back.
		if out, err := kubectl("patch", "pod", pod, "--subresource", "status", "--type", "strategic",
			"-p", `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"NodeNotReady"}]}}`); err != nil {
			t.Fatalf("mark %s NotReady: %v %s", pod, err, out)
		}
		pid := readPids(t, filepath.Join(dir, "run"))["kwok"]
		if pid == 0 {
			t.Fatal("no kwok pid file")
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		eventually(t, 30*time.Second, "kwok stopped", func() error {
			if testenv.ProcessRunning(pid) {
				return errorf("pid %d alive", pid)
			}
			return nil
		})
		if out, err := makeLocal("up", dir); err != nil {
			t.Fatalf("make up (restart kwok): %v\n%s", err, out)
		}
		// The new kwok waits for the old one's node lease (40 s) before it plays stages.
		eventually(t, 2*time.Minute, "the NotReady Pod ends Succeeded", func() error {
			out, err := kubectl("get", "pod", pod, "-o", `jsonpath={.status.phase} {.status.conditions[?(@.type=="Ready")].status}`)
			if err != nil || !strings.HasPrefix(out, "Succeeded ") {
				return errorf("%q %v", out, err)
			}
			return nil
		})
	})

	t.Run("make up again is harmless", func(t *testing.T) {
		out, err := makeLocal("up", dir)
		if err != nil || !strings.Contains(out, "etcd already running") {
			t.Fatalf("second make up: %v\n%s", err, out)
		}
	})

	t.Run("a taken port is named with the fix", func(t *testing.T) {
		out, err := makeLocal("up", t.TempDir())
		if err == nil || !strings.Contains(out, "is taken by another process") || !strings.Contains(out, "AGENTPLANE_PORT_OFFSET") {
			t.Fatalf("make up on taken ports: %v\n%s", err, out)
		}
	})

	t.Run("a missing tool is named with the fix", func(t *testing.T) {
		out, err := run(ctx, t, []string{"LOCAL_DIR=" + t.TempDir(), "KUBE_DIR=/nonexistent", "ETCD=/nonexistent/etcd",
			"KWOK=/nonexistent/kwok", "KWOK_STAGES=/nonexistent", "SERVICES_BIN=/nonexistent"}, filepath.Join(root, "hack", "local", "up.sh"))
		if err == nil || !strings.Contains(out, "/nonexistent/etcd is missing: run 'make tools'") {
			t.Fatalf("up.sh without tools: %v\n%s", err, out)
		}
	})

	t.Run("make down leaves no process behind", func(t *testing.T) {
		pids := readPids(t, filepath.Join(dir, "run"))
		if len(pids) < 12 {
			t.Fatalf("only %d pid files before down", len(pids))
		}
		t.Logf("stack memory (RSS) before down: %d MB over %d processes", rssMB(pids), len(pids))
		if out, err := makeLocal("down", dir); err != nil {
			t.Fatalf("make down: %v\n%s", err, out)
		}
		for name, pid := range pids {
			if testenv.ProcessRunning(pid) {
				t.Errorf("%s (pid %d) still running after make down", name, pid)
			}
		}
	})
}

func readPids(t *testing.T, runDir string) map[string]int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(runDir, "*.pid"))
	pids := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		pids[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
	}
	return pids
}

// rssMB sums the resident memory of pids from /proc.
func rssMB(pids map[string]int) int {
	total := 0
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				kb, _ := strconv.Atoi(strings.Fields(line)[1])
				total += kb
			}
		}
	}
	return total / 1024
}

// agentctlRunVerbs is what a user of make up does with agentctl's run verbs (issue 35): an
// AgentRun submitted and waited for, one that fails, their logs (kwok's simulated ones); the
// diamond Orchestration submitted while logs -f follows it, cancelled half-way, waited for,
// retried (only the steps that did not succeed run again) and described; a resubmit; the logs of
// a run whose Job is gone. Each exit code is the documented one.
func agentctlRunVerbs(ctx context.Context, t *testing.T, kubeconfig string, kubectl func(...string) (string, error)) {
	bin := binPath(t, "agentctl")
	ac := func(args ...string) (string, int) {
		out, err := run(ctx, t, nil, bin, append([]string{"--kubeconfig", kubeconfig, "-n", "agents"}, args...)...)
		return out, exitCode(err)
	}
	expect := func(what string, out string, code, want int, has ...string) {
		t.Helper()
		if code != want {
			t.Errorf("%s: exit %d, want %d\n%s", what, code, want, out)
			return
		}
		for _, h := range has {
			if !strings.Contains(out, h) {
				t.Errorf("%s: no %q in\n%s", what, h, out)
			}
		}
	}

	out, code := ac("submit", "agent/codex", "--name", "ux-hello", "-p", "issue=7", "--wait", "--timeout", "3m")
	expect("submit --wait", out, code, 0, "agentrun/ux-hello created", "agentrun/ux-hello Succeeded")
	out, code = ac("submit", "agent/codex", "--name", "ux-fails", "--annotation", "agentplane.dev/simulate-exit-code=3", "--wait", "--timeout", "3m")
	expect("submit --wait of a run that fails", out, code, 7, "agentrun/ux-fails ended Failed")
	out, code = ac("wait", "run", "ux-fails", "--for", "phase=Succeeded", "--timeout", "1m")
	expect("wait --for phase=Succeeded of a Failed run", out, code, 7, "agentrun/ux-fails ended Failed")
	out, code = ac("wait", "run", "ux-hello", "--for", "phase=Failed", "--timeout", "1m")
	expect("wait --for phase=Failed of a Succeeded run", out, code, 10, "without reaching phase=Failed")
	out, code = ac("wait", "run", "nope")
	expect("wait for a run that does not exist", out, code, 5, "no AgentRun or OrchestrationRun named nope")
	out, code = ac("logs", "run", "ux-hello")
	expect("logs of a lone run", out, code, 0, "agentplane example agent: starting", "agentplane example agent: done")
	out, code = ac("get", "run", "ux-hello", "-o", "jsonpath={.spec.parameters.issue} {.status.phase}")
	expect("get -o jsonpath", out, code, 0, "7 Succeeded")

	// The diamond: plan, then implement and test, then review, each step 8 s.
	out, code = ac("submit", "orchestration/plan-and-implement", "--name", "ux-diamond", "-p", "issue=8", "--annotation", "agentplane.dev/simulate-duration=8s")
	expect("submit an OrchestrationRun", out, code, 0, "orchestrationrun/ux-diamond created")
	var follow bytes.Buffer
	logsF := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig, "-n", "agents", "logs", "run", "ux-diamond", "-f")
	logsF.Stdout, logsF.Stderr = &follow, &follow
	if err := logsF.Start(); err != nil {
		t.Fatal(err)
	}
	followed := make(chan error, 1)
	go func() { followed <- logsF.Wait() }()
	eventually(t, 3*time.Minute, "plan Succeeded and implement Running", func() error {
		out, err := kubectl("-n", "agents", "get", "orchestrationrun", "ux-diamond", "-o", `jsonpath={range .status.stepStatuses[*]}{.name}={.phase} {end}`)
		if err != nil || !strings.Contains(out, "plan=Succeeded") || !strings.Contains(out, "implement=Running") {
			return errorf("%q %v", out, err)
		}
		return nil
	})
	out, code = ac("cancel", "run", "ux-diamond", "--wait", "--timeout", "2m")
	expect("cancel run --wait", out, code, 0, "orchestrationrun/ux-diamond cancel requested", "orchestrationrun/ux-diamond Cancelled")
	select {
	case err := <-followed:
		if err != nil || !strings.Contains(follow.String(), "[plan] agentplane example agent: starting") {
			t.Errorf("logs -f: %v\n%s", err, follow.String())
		}
	case <-time.After(time.Minute):
		_ = logsF.Process.Kill()
		t.Errorf("logs -f did not return within a minute of the run's end:\n%s", follow.String())
	}
	out, code = ac("wait", "run", "ux-diamond")
	expect("wait for a Cancelled run", out, code, 8, "orchestrationrun/ux-diamond ended Cancelled")

	out, code = ac("retry", "run", "ux-diamond", "--name", "ux-diamond-2", "--watch", "--timeout", "5m")
	expect("retry --watch", out, code, 0, "orchestrationrun/ux-diamond-2 created (retry of ux-diamond)", "step review Succeeded", "orchestrationrun/ux-diamond-2 Succeeded")
	if out, err := kubectl("-n", "agents", "get", "agentrun", "ux-diamond-2-plan"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("the retry ran plan again, which had succeeded: %v %s", err, out)
	}
	if out, err := kubectl("-n", "agents", "get", "agentrun", "ux-diamond-2-implement", "-o", "jsonpath={.status.phase}"); err != nil || out != "Succeeded" {
		t.Errorf("the retry's implement: %q %v", out, err)
	}
	out, code = ac("describe", "run", "ux-diamond-2")
	expect("describe the retry", out, code, 0, "Retry of:", "ux-diamond", "succeeded in OrchestrationRun ux-diamond: not run again by this retry", "ux-diamond-2-review")
	out, code = ac("logs", "run", "ux-diamond-2")
	expect("logs of the retry", out, code, 0, "[plan] succeeded in orchestrationrun/ux-diamond and did not run again here", "[review] agentplane example agent: starting")
	out, code = ac("get", "runs", "-o", "wide")
	expect("get runs -o wide", out, code, 0, "NAME", "ux-diamond-2", "orchestration/plan-and-implement")
	out, code = ac("retry", "run", "ux-hello")
	expect("retry of a Succeeded run", out, code, 5, "there is nothing to retry")

	out, code = ac("resubmit", "run", "ux-hello", "--name", "ux-hello-2", "-o", "name")
	expect("resubmit -o name", out, code, 0, "agentrun.agents.proompteng.ai/ux-hello-2")
	if out, err := kubectl("-n", "agents", "get", "agentrun", "ux-hello-2", "-o", `jsonpath={.metadata.annotations.agents\.proompteng\.ai/resubmit-of}`); err != nil || out != "ux-hello" {
		t.Errorf("resubmit-of: %q %v", out, err)
	}

	// Once the Job is gone (its TTL, job-gc's retention, or here a delete) its logs are too. The
	// delete is in the foreground, as the TTL controller's is: it returns once the Job's pods are
	// gone (in the background the garbage collector deletes them a moment later, and until then
	// their logs can still be read).
	job, err := kubectl("-n", "agents", "get", "agentrun", "ux-hello", "-o", "jsonpath={.status.jobRef.name}")
	if err != nil || job == "" {
		t.Fatalf("ux-hello's Job: %q %v", job, err)
	}
	if out, err := kubectl("-n", "agents", "delete", "job", job, "--cascade=foreground", "--timeout", "2m"); err != nil {
		t.Fatalf("delete job %s: %v\n%s", job, err, out)
	}
	out, code = ac("logs", "run", "ux-hello")
	expect("logs once the Job is gone", out, code, 5, "logs gone: Job "+job, "ttlSecondsAfterFinished")
}
