//go:build integration

package wiring

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/jobresult"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/libs/testenv"
	"github.com/agentplane/agentplane/services/run-controller/internal/agentrun"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// TestARunWhosePodRunsPromptlyGoesFromStartingToRunningInOneWrite: the start claim writes the
// run's first status (Pending, Starting, Accepted), and a run whose pod runs within the jobRef
// delay goes from there to Running, jobRef and all, with no status write between (no Pending
// JobCreated). Every version of the run is watched, so a write between would be seen.
func TestARunWhosePodRunsPromptlyGoesFromStartingToRunningInOneWrite(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	// A delay no slow machine outlasts between the Job's creation and fakePodRunning.
	startController(t, ns, func(c *core.Config) { c.JobRefDelay = time.Minute })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runs := watchAll(ctx, t, ns, agentsv1alpha1.GroupVersion, "agentruns")
	create(t, "agentruns", ns, jobRun(ns, "prompt", "codex"))
	j := waitJob(t, ns, agentrun.JobName(getRun(t, ns, "prompt"), "", 1))
	fakePodRunning(t, j)

	var seen []string
	var running *agentsv1alpha1.AgentRunStatus
	for running == nil {
		select {
		case ev, ok := <-runs:
			st := watched[*agentsv1alpha1.AgentRun](t, ev, ok, seen).Status
			if len(seen) > 0 && seen[len(seen)-1] == st.Phase+"/"+st.Reason {
				continue // a write that left phase and reason as they were
			}
			seen = append(seen, st.Phase+"/"+st.Reason)
			switch st.Phase {
			case agentsv1alpha1.PhasePending:
				c := meta.FindStatusCondition(st.Conditions, agentrun.CondAccepted)
				if st.Reason != reasons.Starting || st.JobRef != nil || c == nil || c.Status != metav1.ConditionTrue || c.Reason != reasons.Starting {
					t.Fatalf("a Pending status other than the claim's Starting: %+v (statuses so far %v)", st, seen)
				}
			case agentsv1alpha1.PhaseRunning:
				running = &st
			}
		case <-ctx.Done():
			t.Fatalf("no Running within a minute; statuses seen: %v", seen)
		}
	}
	if want := []string{"/", "Pending/Starting", "Running/Running"}; strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Errorf("statuses %v, want %v", seen, want)
	}
	if running.JobRef == nil || running.JobRef.Name != j.Name || running.JobRef.UID != string(j.UID) {
		t.Errorf("Running records jobRef %+v, want Job %s uid %s", running.JobRef, j.Name, j.UID)
	}
}

// TestAJobDeletedBeforeItsRunRecordedItIsNotReplaced: a Job deleted while its run still says
// Starting (no jobRef: the pod has not run, the jobRef delay has not passed) is recorded in the
// run's jobRef, not answered with a second Job once it is gone: at once while the job-result
// finalizer holds it (then released by hand, as agentctl jobs release-holds does), and from the
// deletion's event without the finalizer. The jobRef delay is a minute, so only that records it.
func TestAJobDeletedBeforeItsRunRecordedItIsNotReplaced(t *testing.T) {
	for _, finalizer := range []bool{true, false} {
		t.Run(fmt.Sprintf("job-result finalizer %v", finalizer), func(t *testing.T) {
			ns := namespace(t)
			createAgent(t, ns, "codex", nil)
			startController(t, ns, func(c *core.Config) { c.JobRefDelay, c.JobFinalizer = time.Minute, finalizer })
			ctx := context.Background()
			create(t, "agentruns", ns, jobRun(ns, "deleted", "codex"))
			j := waitJob(t, ns, agentrun.JobName(getRun(t, ns, "deleted"), "", 1))
			bg := metav1.DeletePropagationBackground
			if err := kc.BatchV1().Jobs(ns).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
				t.Fatal(err)
			}
			recorded := func() error {
				st := getRun(t, ns, "deleted").Status
				if st.JobRef == nil || st.JobRef.UID != string(j.UID) {
					return fmt.Errorf("jobRef %+v, want the deleted Job's (uid %s); status %s/%s", st.JobRef, j.UID, st.Phase, st.Reason)
				}
				return nil
			}
			if finalizer {
				testenv.Eventually(t, 20*time.Second, "the held Job being deleted recorded in jobRef", recorded)
				patch, err := jobresult.ReleasePatch(j) // as agentctl jobs release-holds and job-gc release it
				if err != nil {
					t.Fatal(err)
				}
				if _, err := kc.BatchV1().Jobs(ns).Patch(ctx, j.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			testenv.Eventually(t, 20*time.Second, "the deleted Job gone and recorded in jobRef", func() error {
				if live, err := kc.BatchV1().Jobs(ns).Get(ctx, j.Name, metav1.GetOptions{}); err == nil {
					return fmt.Errorf("Job %s there (uid %s, the deleted one %s)", live.Name, live.UID, j.UID)
				}
				return recorded()
			})
			// Once the jobRef is recorded the run never creates a Job again; one created before it
			// would have the same name and a new UID.
			if jobs := jobsIn(t, ns); len(jobs) != 0 {
				t.Errorf("a second Job for the run: %s (uid %s)", jobs[0].Name, jobs[0].UID)
			}
			if ar := getRun(t, ns, "deleted"); ar.Status.Phase != agentsv1alpha1.PhasePending {
				t.Errorf("status %s/%s %q; want Pending with the jobRef (job-gc reports the Job missing)", ar.Status.Phase, ar.Status.Reason, ar.Status.Message)
			}
		})
	}
}

func TestJobRunBecomesOneOwnedJobAndReachesSucceeded(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", func(a *agentsv1alpha1.Agent) {
		a.Spec.Env = []agentsv1alpha1.AgentEnvVar{{Name: "MODEL", Value: "gpt"}}
	})
	_, err := kc.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gh-token"}, StringData: map[string]string{"token": "s3cr3t"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	startController(t, ns, func(c *core.Config) { c.JobTTLSeconds = 42 })
	ar := jobRun(ns, "hello", "codex")
	ar.Annotations = map[string]string{"agentplane.dev/simulate-duration": "30s", "other": "x"}
	ar.Spec.Workload = &agentsv1alpha1.WorkloadSpec{Image: "registry.example.com/agents/codex:2.0",
		Resources: &agentsv1alpha1.WorkloadResources{Requests: map[string]string{"cpu": "100m"}, Limits: map[string]string{"memory": "1Gi"}}}
	ar.Spec.Parameters = map[string]string{"issue": "42"}
	ar.Spec.Secrets = []string{"gh-token"}
	ar.Spec.Runtime.Config = map[string]apiextensionsv1.JSON{"timeoutSeconds": {Raw: []byte("120")}}
	create(t, "agentruns", ns, ar)

	pending := waitPhase(t, ns, "hello", agentsv1alpha1.PhasePending, 20*time.Second)
	testenv.Eventually(t, 20*time.Second, "jobRef recorded", func() error {
		pending = getRun(t, ns, "hello")
		if pending.Status.JobRef == nil {
			return fmt.Errorf("no jobRef: %+v", pending.Status)
		}
		return nil
	})
	if pending.Status.StartedAt != nil {
		t.Errorf("startedAt set before the pod ran: %v", pending.Status.StartedAt)
	}
	want := agentrun.JobName(pending, "", 1)
	if pending.Status.JobRef.Name != want || pending.Status.Reason != reasons.JobCreated {
		t.Fatalf("status %+v, want jobRef %s reason JobCreated", pending.Status, want)
	}
	if string(pending.Status.RuntimeRef["kind"].Raw) != `"Job"` {
		t.Errorf("runtimeRef %v", pending.Status.RuntimeRef)
	}
	j := waitJob(t, ns, want)
	if string(j.UID) != pending.Status.JobRef.UID {
		t.Errorf("jobRef uid %s, Job uid %s", pending.Status.JobRef.UID, j.UID)
	}
	ref := core.ControllerOf(j.OwnerReferences, "AgentRun")
	if ref == nil || ref.UID != pending.UID || !*ref.BlockOwnerDeletion {
		t.Errorf("owner references %+v", j.OwnerReferences)
	}
	if j.Labels[agentsv1alpha1.LabelAgentRun] != "hello" || j.Labels[agentsv1alpha1.LabelAgent] != "codex" ||
		j.Spec.Template.Labels[agentsv1alpha1.LabelAgentRun] != "hello" {
		t.Errorf("labels %v / %v", j.Labels, j.Spec.Template.Labels)
	}
	if len(j.Finalizers) != 1 || j.Finalizers[0] != agentsv1alpha1.FinalizerJobResult {
		t.Errorf("finalizers %v", j.Finalizers)
	}
	if *j.Spec.TTLSecondsAfterFinished != 42 || *j.Spec.BackoffLimit != 2 || *j.Spec.ActiveDeadlineSeconds != 120 {
		t.Errorf("ttl %d backoffLimit %d deadline %d", *j.Spec.TTLSecondsAfterFinished, *j.Spec.BackoffLimit, *j.Spec.ActiveDeadlineSeconds)
	}
	pt := j.Spec.Template
	if pt.Annotations["agentplane.dev/simulate-duration"] != "30s" || pt.Annotations["other"] != "" {
		t.Errorf("pod annotations %v: want only the simulate-* ones", pt.Annotations)
	}
	ctr := pt.Spec.Containers[0]
	if ctr.Image != "registry.example.com/agents/codex:2.0" || ctr.Resources.Requests.Cpu().String() != "100m" || ctr.Resources.Limits.Memory().String() != "1Gi" {
		t.Errorf("container %+v", ctr)
	}
	envs := map[string]string{}
	for _, e := range ctr.Env {
		envs[e.Name] = e.Value
	}
	if envs["PARAM_ISSUE"] != "42" || envs["AGENT_PARAMETERS"] != `{"issue":"42"}` || envs["MODEL"] != "gpt" || envs["AGENTRUN_NAME"] != "hello" {
		t.Errorf("env %v", envs)
	}
	if len(ctr.EnvFrom) != 1 || ctr.EnvFrom[0].SecretRef.Name != "gh-token" {
		t.Errorf("envFrom %+v", ctr.EnvFrom)
	}
	if !*pt.Spec.SecurityContext.RunAsNonRoot || *ctr.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("security context %+v %+v", pt.Spec.SecurityContext, ctr.SecurityContext)
	}
	waitEvent(t, ns, "hello", "Normal", reasons.JobCreated)

	fakePodRunning(t, j)
	running := waitPhase(t, ns, "hello", agentsv1alpha1.PhaseRunning, 20*time.Second)
	if running.Status.StartedAt == nil || running.Status.FinishedAt != nil {
		t.Errorf("running: startedAt %v finishedAt %v", running.Status.StartedAt, running.Status.FinishedAt)
	}
	finishJob(t, ns, want, true)
	done := waitPhase(t, ns, "hello", agentsv1alpha1.PhaseSucceeded, 20*time.Second)
	s := done.Status
	if s.FinishedAt == nil || s.UpdatedAt == nil || !s.StartedAt.Equal(running.Status.StartedAt) || s.ObservedGeneration != done.Generation {
		t.Errorf("seed 000 fields: %+v", s)
	}
	if c := condition(s.Conditions, reasons.CondSucceeded); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Succeeded condition %+v", c)
	}
	if n := len(jobsIn(t, ns)); n != 1 {
		t.Errorf("%d Jobs for one run", n)
	}
}

func TestJobRunFailsWithTheJobsReason(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	startController(t, ns, nil)
	create(t, "agentruns", ns, jobRun(ns, "boom", "codex"))
	var name string
	testenv.Eventually(t, 20*time.Second, "Job created", func() error {
		ar := getRun(t, ns, "boom")
		if ar.Status.JobRef == nil {
			return fmt.Errorf("no jobRef")
		}
		name = ar.Status.JobRef.Name
		return nil
	})
	finishJob(t, ns, name, false)
	ar := waitPhase(t, ns, "boom", agentsv1alpha1.PhaseFailed, 20*time.Second)
	if ar.Status.Reason != "BackoffLimitExceeded" || !strings.Contains(ar.Status.Message, "backoff limit") || ar.Status.FinishedAt == nil {
		t.Errorf("status %+v", ar.Status)
	}
	if ar.Status.StartedAt != nil {
		t.Errorf("a run that never ran has startedAt %v", ar.Status.StartedAt)
	}
}

// Two controllers on one namespace (no leader election: the worst case of a stale cache and a
// second replica) never make a second Job for a run.
func TestJobCreationIsIdempotentAcrossReplicas(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	const runs = 30
	for i := range runs {
		create(t, "agentruns", ns, jobRun(ns, fmt.Sprintf("r%02d", i), "codex"))
	}
	var wg sync.WaitGroup
	replicas := make([]*Controller, 2)
	for i := range replicas {
		wg.Go(func() { replicas[i] = startController(t, ns, func(c *core.Config) { c.Workers = 8 }) })
	}
	wg.Wait()
	testenv.Eventually(t, 60*time.Second, "every run has its Job recorded", func() error {
		for i := range runs {
			if ar := getRun(t, ns, fmt.Sprintf("r%02d", i)); ar.Status.JobRef == nil {
				return fmt.Errorf("%s: %+v", ar.Name, ar.Status)
			}
		}
		return nil
	})
	// Each replica reconciles every run once more, with every jobRef recorded: none may make a
	// second Job, and any reconcile still in flight has ended by then.
	for _, c := range replicas {
		for i := range runs {
			settle(t, c, "AgentRun", ns, fmt.Sprintf("r%02d", i))
		}
	}
	jobs := jobsIn(t, ns)
	perRun := map[string]int{}
	for _, j := range jobs {
		perRun[j.Labels[agentsv1alpha1.LabelAgentRun]]++
	}
	if len(jobs) != runs || len(perRun) != runs {
		t.Fatalf("%d Jobs for %d runs: %v", len(jobs), runs, perRun)
	}
}

func TestUnsupportedRuntimeIsRefusedNotIgnored(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	startController(t, ns, nil)
	ar := jobRun(ns, "temporal-run", "codex")
	ar.Spec.Runtime.Type = agentsv1alpha1.RuntimeTemporal
	create(t, "agentruns", ns, ar)
	got := waitPhase(t, ns, "temporal-run", agentsv1alpha1.PhaseFailed, 20*time.Second)
	c := condition(got.Status.Conditions, reasons.CondAccepted)
	if got.Status.Reason != reasons.InvalidSpec || c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "temporal") {
		t.Errorf("status %+v", got.Status)
	}
	waitEvent(t, ns, "temporal-run", "Warning", reasons.InvalidSpec)
	if n := len(jobsIn(t, ns)); n != 0 {
		t.Errorf("%d Jobs for a refused run", n)
	}
}

// Bad specs are reported with a condition and a Warning event, and the run fails or waits.
func TestBadSpecsAreReportedAndRunsFailOrWait(t *testing.T) {
	ns := namespace(t)
	startController(t, ns, func(c *core.Config) {
		c.Policy = core.Policy{ImagesDenied: []string{"docker.io/*"}, BlockedSecrets: []string{"root-creds"}, LabelsDenied: []string{"forbidden"}}
	})
	// No Agent yet: waits, then runs when the Agent appears.
	create(t, "agentruns", ns, jobRun(ns, "no-agent", "later"))
	testenv.Eventually(t, 20*time.Second, "missing Agent reported", func() error {
		ar := getRun(t, ns, "no-agent")
		if ar.Status.Phase != agentsv1alpha1.PhasePending || ar.Status.Reason != reasons.InvalidSpec || !strings.Contains(ar.Status.Message, "Agent later not found") {
			return fmt.Errorf("%+v", ar.Status)
		}
		return nil
	})
	waitEvent(t, ns, "no-agent", "Warning", reasons.InvalidSpec)
	createAgent(t, ns, "later", nil)
	createAgent(t, ns, "codex", nil)
	testenv.Eventually(t, 20*time.Second, "runs once the Agent exists", func() error {
		if ar := getRun(t, ns, "no-agent"); ar.Status.JobRef == nil {
			return fmt.Errorf("%+v", ar.Status)
		}
		return nil
	})

	// A missing Secret: waits with MissingSecret, then runs when it exists.
	ms := jobRun(ns, "no-secret", "codex")
	ms.Spec.Secrets = []string{"api-key"}
	create(t, "agentruns", ns, ms)
	testenv.Eventually(t, 20*time.Second, "missing Secret reported", func() error {
		ar := getRun(t, ns, "no-secret")
		if ar.Status.Phase != agentsv1alpha1.PhasePending || ar.Status.Reason != reasons.MissingSecret {
			return fmt.Errorf("%+v", ar.Status)
		}
		return nil
	})
	waitEvent(t, ns, "no-secret", "Warning", reasons.MissingSecret)
	if _, err := kc.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api-key"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "runs once the Secret exists", func() error {
		if ar := getRun(t, ns, "no-secret"); ar.Status.JobRef == nil {
			return fmt.Errorf("%+v", ar.Status)
		}
		return nil
	})

	// Refused by the admission policy: fails with Forbidden.
	denied := jobRun(ns, "denied-image", "codex")
	denied.Spec.Workload = &agentsv1alpha1.WorkloadSpec{Image: "docker.io/evil:latest"}
	blocked := jobRun(ns, "blocked-secret", "codex")
	blocked.Spec.Secrets = []string{"root-creds"}
	labelled := jobRun(ns, "denied-label", "codex")
	labelled.Labels = map[string]string{"forbidden": "yes"}
	badQty := jobRun(ns, "bad-quantity", "codex")
	badQty.Spec.Workload = &agentsv1alpha1.WorkloadSpec{Resources: &agentsv1alpha1.WorkloadResources{Requests: map[string]string{"cpu": "lots"}}}
	for _, ar := range []*agentsv1alpha1.AgentRun{denied, blocked, labelled, badQty} {
		create(t, "agentruns", ns, ar)
	}
	for name, want := range map[string]struct{ reason, says string }{
		"denied-image":   {reasons.Forbidden, "IMAGES_DENIED"},
		"blocked-secret": {reasons.Forbidden, "BLOCKED_SECRETS"},
		"denied-label":   {reasons.Forbidden, "LABELS_DENIED"},
		"bad-quantity":   {reasons.InvalidSpec, "not a Kubernetes quantity"},
	} {
		ar := waitPhase(t, ns, name, agentsv1alpha1.PhaseFailed, 20*time.Second)
		if ar.Status.Reason != want.reason || !strings.Contains(ar.Status.Message, want.says) {
			t.Errorf("%s: status %+v, want %s saying %q", name, ar.Status, want.reason, want.says)
		}
		waitEvent(t, ns, name, "Warning", want.reason)
	}
	for _, j := range jobsIn(t, ns) {
		switch j.Labels[agentsv1alpha1.LabelAgentRun] {
		case "denied-image", "blocked-secret", "denied-label", "bad-quantity":
			t.Errorf("refused run got Job %s", j.Name)
		}
	}
}

func TestConcurrencyLimitQueuesInCreationOrderAndAFullQueueRefuses(t *testing.T) {
	ns := namespace(t)
	createAgent(t, ns, "codex", nil)
	for i := 1; i <= 6; i++ {
		create(t, "agentruns", ns, jobRun(ns, fmt.Sprintf("q%d", i), "codex"))
	}
	c := startController(t, ns, func(c *core.Config) { c.Limits = core.Limits{ConcurrencyNamespace: 2, QueueNamespace: 3} })
	started := func() map[string]bool {
		out := map[string]bool{}
		for _, j := range jobsIn(t, ns) {
			out[j.Labels[agentsv1alpha1.LabelAgentRun]] = true
		}
		return out
	}
	testenv.Eventually(t, 20*time.Second, "two run, three queue, one refused", func() error {
		for i := 3; i <= 5; i++ {
			ar := getRun(t, ns, fmt.Sprintf("q%d", i))
			if ar.Status.Reason != reasons.Queued || ar.Status.Phase != agentsv1alpha1.PhasePending {
				return fmt.Errorf("q%d: %+v", i, ar.Status)
			}
		}
		if ar := getRun(t, ns, "q6"); ar.Status.Phase != agentsv1alpha1.PhaseFailed || ar.Status.Reason != reasons.QueueFull {
			return fmt.Errorf("q6: %+v", ar.Status)
		}
		return nil
	})
	if s := started(); len(s) != 2 || !s["q1"] || !s["q2"] {
		t.Fatalf("started %v, want q1 and q2", s)
	}
	if ar := getRun(t, ns, "q3"); !strings.Contains(ar.Status.Message, "JANGAR_AGENTS_CONTROLLER_CONCURRENCY_NAMESPACE=2") {
		t.Errorf("queued message %q does not name the limit", ar.Status.Message)
	}
	if ar := getRun(t, ns, "q6"); !strings.Contains(ar.Status.Message, "JANGAR_AGENTS_CONTROLLER_QUEUE_NAMESPACE=3") {
		t.Errorf("refusal %q does not name the limit", ar.Status.Message)
	}
	waitEvent(t, ns, "q6", "Warning", reasons.QueueFull)
	// A slot frees: the oldest waiting run, and only it, starts.
	finishJob(t, ns, agentrun.JobName(getRun(t, ns, "q1"), "", 1), true)
	testenv.Eventually(t, 20*time.Second, "q3 starts", func() error {
		if s := started(); !s["q3"] {
			return fmt.Errorf("started %v", s)
		}
		return nil
	})
	settle(t, c, "AgentRun", ns, "q4", "q5") // reconciled afresh with q1 done: still no slot
	if s := started(); len(s) != 3 || s["q4"] || s["q5"] {
		t.Fatalf("started %v, want q1-q3", s)
	}
	finishJob(t, ns, agentrun.JobName(getRun(t, ns, "q2"), "", 1), false)
	testenv.Eventually(t, 20*time.Second, "q4 starts after q2 fails", func() error {
		if s := started(); !s["q4"] || s["q5"] {
			return fmt.Errorf("started %v", s)
		}
		return nil
	})
}
