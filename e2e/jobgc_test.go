//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentplane/agentplane/libs/testenv"
)

// gcOffset moves this test's stack off the other suites' ports.
const gcOffset = 3000

var agentRunsGVR = schema.GroupVersionResource{Group: "agents.proompteng.ai", Version: "v1alpha1", Resource: "agentruns"}

// TestJobResultsSurviveTTLZero runs seed 002 on the local control plane, where
// kube-controller-manager's real TTL and garbage collectors delete Jobs: with every Job's TTL at
// 0, 200 runs finish with no result lost (job-gc killed and restarted half-way), every Job is
// deleted afterwards; a Job deleted by hand mid-run shows as a WorkflowJobMissing Warning and a
// failed run; with job-gc gone, `agentctl jobs release-holds` frees every held Job. Then the same
// 200 runs without the finalizer show what the plain TTL controller loses.
func TestJobResultsSurviveTTLZero(t *testing.T) {
	const runs = 200
	root := repoRoot(t)
	kubectlBin := mustExist(t, filepath.Join(root, "bin", "envtest", "kubectl"), "tools")
	ctx := context.Background()
	dir := t.TempDir()
	env := []string{fmt.Sprintf("AGENTPLANE_PORT_OFFSET=%d", gcOffset), "JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS=0",
		"JANGAR_JOB_GC_MISSING_JOB_GRACE_SECONDS=5"}
	makeUp := func(extra ...string) {
		t.Helper()
		if out, err := run(ctx, t, append(env, extra...), "make", "-C", root, "-s", "up", "LOCAL_DIR="+dir); err != nil {
			t.Fatalf("make up: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() { _, _ = run(ctx, t, env, "make", "-C", root, "-s", "down", "LOCAL_DIR="+dir) })
	makeUp()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kubectl := func(args ...string) (string, error) {
		return run(ctx, t, nil, kubectlBin, append([]string{"--kubeconfig", kubeconfig, "-n", "agents"}, args...)...)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	kc := kubernetes.NewForConfigOrDie(cfg)
	runsAPI := dynamic.NewForConfigOrDie(cfg).Resource(agentRunsGVR).Namespace("agents")
	if out, err := kubectl("apply", "-f", filepath.Join(root, "examples", "agent.yaml")); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	kill := func(svc string, sig syscall.Signal) {
		t.Helper()
		pid, ok := readPids(t, filepath.Join(dir, "run"))[svc]
		if !ok {
			t.Fatalf("no pid for %s", svc)
		}
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
	}
	create := func(prefix string, n int, ann map[string]string) {
		t.Helper()
		testenv.Parallel(t, n, 16, func(i int) error {
			md := map[string]any{"name": fmt.Sprintf("%s-%03d", prefix, i), "labels": map[string]any{"batch": prefix}}
			if ann != nil {
				a := map[string]any{}
				for k, v := range ann {
					a[k] = v
				}
				md["annotations"] = a
			}
			_, err := runsAPI.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "agents.proompteng.ai/v1alpha1", "kind": "AgentRun", "metadata": md,
				"spec": map[string]any{"agentRef": map[string]any{"name": "codex"}, "runtime": map[string]any{"type": "job"}},
			}}, metav1.CreateOptions{})
			return err
		})
	}
	// outcome counts the batch's runs by phase/reason.
	outcome := func(prefix string) map[string]int {
		t.Helper()
		l, err := runsAPI.List(ctx, metav1.ListOptions{LabelSelector: "batch=" + prefix})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, it := range l.Items {
			phase, _, _ := unstructured.NestedString(it.Object, "status", "phase")
			reason, _, _ := unstructured.NestedString(it.Object, "status", "reason")
			switch phase {
			case "Succeeded", "Failed", "Cancelled":
				out["terminal"]++
				out[phase+"/"+reason]++
			}
		}
		return out
	}
	// started counts the batch's runs whose Job is recorded.
	started := func(prefix string) int {
		t.Helper()
		l, err := runsAPI.List(ctx, metav1.ListOptions{LabelSelector: "batch=" + prefix})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, it := range l.Items {
			if name, _, _ := unstructured.NestedString(it.Object, "status", "jobRef", "name"); name != "" {
				n++
			}
		}
		return n
	}
	jobsOf := func(selector string) int {
		t.Helper()
		l, err := kc.BatchV1().Jobs("agents").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	runLabel := "agents.proompteng.ai/agent-run"

	var kept map[string]int
	t.Run("with the finalizer, TTL 0 loses no result, even with job-gc killed half-way", func(t *testing.T) {
		create("kept", runs, map[string]string{"agentplane.dev/simulate-duration": "2s"})
		eventually(t, 3*time.Minute, "half the Jobs created", func() error {
			if n := started("kept"); n < runs/2 {
				return errorf("%d Jobs", n)
			}
			return nil
		})
		// An outage of both controllers: Jobs finish and their TTL passes with nobody to record
		// or release them.
		kill("job-gc", syscall.SIGKILL)
		kill("run-controller", syscall.SIGKILL)
		time.Sleep(15 * time.Second)
		l, err := kc.BatchV1().Jobs("agents").List(ctx, metav1.ListOptions{LabelSelector: runLabel})
		if err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, j := range l.Items {
			if j.DeletionTimestamp != nil {
				held++
			}
		}
		t.Logf("%d Jobs finished and were deleted by their TTL during the outage; the finalizer keeps them", held)
		if held == 0 {
			t.Fatal("no Job was deleted during the outage: the test shows nothing")
		}
		makeUp()
		eventually(t, 5*time.Minute, "every run finished", func() error {
			if o := outcome("kept"); o["terminal"] < runs {
				return errorf("%v", o)
			}
			return nil
		})
		kept = outcome("kept")
		if kept["Succeeded/Completed"] != runs {
			t.Errorf("with the finalizer, runs ended %v; want all %d Succeeded (none WorkflowJobMissing)", kept, runs)
		}
		eventually(t, 3*time.Minute, "every Job deleted once its result was recorded", func() error {
			if n := jobsOf(runLabel); n > 0 {
				return errorf("%d Jobs left", n)
			}
			return nil
		})
	})

	t.Run("a Job deleted by hand mid-run fails its run with WorkflowJobMissing", func(t *testing.T) {
		create("byhand", 1, map[string]string{"agentplane.dev/simulate-duration": "10m"})
		var job string
		eventually(t, time.Minute, "the run Running", func() error {
			out, err := kubectl("get", "agentrun", "byhand-000", "-o", "jsonpath={.status.phase}/{.status.jobRef.name}")
			if err != nil || !strings.HasPrefix(out, "Running/") {
				return errorf("%q %v", out, err)
			}
			job = strings.TrimPrefix(out, "Running/")
			return nil
		})
		if out, err := kubectl("delete", "job", job, "--wait=false"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		eventually(t, time.Minute, "the run Failed with WorkflowJobMissing", func() error {
			out, err := kubectl("get", "agentrun", "byhand-000", "-o", `jsonpath={.status.phase}/{.status.reason}/{.status.conditions[?(@.type=="JobMissing")].status}`)
			if err != nil || out != "Failed/WorkflowJobMissing/True" {
				return errorf("%q %v", out, err)
			}
			return nil
		})
		out, err := kubectl("get", "events", "--field-selector", "involvedObject.name=byhand-000", "-o", "jsonpath={range .items[*]}{.type}/{.reason} {end}")
		if err != nil || !strings.Contains(out, "Warning/WorkflowJobMissing") {
			t.Errorf("no WorkflowJobMissing Warning: %q %v", out, err)
		}
		eventually(t, time.Minute, "the Job gone once the failure is recorded", func() error {
			if out, err := kubectl("get", "job", job); err == nil || !strings.Contains(out, "NotFound") {
				return errorf("still there: %s", out)
			}
			return nil
		})
	})

	t.Run("without job-gc, agentctl jobs release-holds lists, asks, and frees every held Job", func(t *testing.T) {
		kill("job-gc", syscall.SIGTERM)
		create("orphaned", 3, map[string]string{"agentplane.dev/simulate-duration": "10m"})
		eventually(t, time.Minute, "three Jobs", func() error {
			if n := jobsOf(runLabel); n < 3 {
				return errorf("%d Jobs", n)
			}
			return nil
		})
		if out, err := kubectl("delete", "jobs", "-l", runLabel, "--wait=false"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		time.Sleep(2 * time.Second)
		if n := jobsOf(runLabel); n != 3 {
			t.Fatalf("%d Jobs after delete; the finalizer should keep all 3", n)
		}
		agentctl := binPath(t, "agentctl")
		// A dry run lists the three and releases nothing; so does a run not answered y.
		out, err := run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "jobs", "release-holds", "-A", "--dry-run=client")
		if err != nil || !strings.Contains(out, "3 job-result hold(s) would be released (dry run: client)") || strings.Count(out, "orphaned") < 3 {
			t.Fatalf("agentctl jobs release-holds --dry-run=client: %v\n%s", err, out)
		}
		out, err = run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "jobs", "release-holds", "-A", "--dry-run=server")
		if err != nil || !strings.Contains(out, "3 job-result hold(s) would be released (dry run: server)") {
			t.Fatalf("agentctl jobs release-holds --dry-run=server: %v\n%s", err, out)
		}
		out, err = run(ctx, t, nil, "sh", "-c", `echo n | "$0" --kubeconfig "$1" jobs release-holds -A`, agentctl, kubeconfig)
		if err == nil || !strings.Contains(out, "nothing released") {
			t.Fatalf("agentctl jobs release-holds answered n: %v\n%s", err, out)
		}
		time.Sleep(2 * time.Second)
		if n := jobsOf(runLabel); n != 3 {
			t.Fatalf("%d Jobs after the dry runs and the refusal; all 3 should still be held", n)
		}
		out, err = run(ctx, t, nil, agentctl, "--kubeconfig", kubeconfig, "jobs", "release-holds", "-A", "--yes")
		if err != nil || !strings.Contains(out, "3 job-result hold(s) released") {
			t.Fatalf("agentctl jobs release-holds --yes: %v\n%s", err, out)
		}
		eventually(t, time.Minute, "the released Jobs deleted", func() error {
			if n := jobsOf(runLabel); n > 0 {
				return errorf("%d Jobs left", n)
			}
			return nil
		})
		makeUp() // job-gc back for the next part
	})

	t.Run("without the finalizer, the plain TTL controller loses results", func(t *testing.T) {
		kill("run-controller", syscall.SIGTERM)
		eventually(t, 30*time.Second, "run-controller stopped", func() error {
			if pid, ok := readPids(t, filepath.Join(dir, "run"))["run-controller"]; ok && testenv.ProcessRunning(pid) {
				return errorf("pid %d alive", pid)
			}
			return nil
		})
		noFinalizer := "JANGAR_AGENT_RUNNER_JOB_FINALIZER_ENABLED=false"
		makeUp(noFinalizer)
		create("plain", runs, map[string]string{"agentplane.dev/simulate-duration": "2s"})
		eventually(t, 3*time.Minute, "half the Jobs created", func() error {
			if n := started("plain"); n < runs/2 {
				return errorf("%d Jobs", n)
			}
			return nil
		})
		kill("run-controller", syscall.SIGKILL) // the same outage as above
		time.Sleep(15 * time.Second)
		makeUp(noFinalizer)
		eventually(t, 5*time.Minute, "every run finished", func() error {
			if o := outcome("plain"); o["terminal"] < runs {
				return errorf("%v", o)
			}
			return nil
		})
		plain := outcome("plain")
		lost := plain["Failed/WorkflowJobMissing"]
		t.Logf("seed 002, %d runs with Job TTL 0 and a 15s run-controller outage half-way: %d results lost with the job-result finalizer (%v), %d lost without it (%v)",
			runs, runs-kept["Succeeded/Completed"], kept, lost, plain)
		if lost+plain["Succeeded/Completed"] != runs {
			t.Errorf("runs ended neither Succeeded nor WorkflowJobMissing: %v", plain)
		}
		if lost == 0 {
			t.Errorf("without the finalizer no result was lost (%v): the outage should let Job TTL 0 delete Jobs before run-controller read them", plain)
		}
	})
}
