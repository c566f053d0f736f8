package agentrun

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

func TestJobNamesAreDeterministicShortAndDistinct(t *testing.T) {
	run := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a-very-long-run-name", 10), UID: "u-1"}}
	n := JobName(run, "step", 1)
	if n != JobName(run, "step", 1) || len(n) > 63 {
		t.Fatalf("%q (%d chars) is not deterministic or too long", n, len(n))
	}
	other := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: run.Name, UID: "u-2"}}
	if n == JobName(other, "step", 1) || n == JobName(run, "step", 2) || n == JobName(run, "other", 1) {
		t.Fatal("different runs, steps or attempts share a Job name")
	}
	if v := core.LabelValue(strings.Repeat("x", 80)); len(v) > 63 {
		t.Fatalf("label value %q too long", v)
	}
}

// A run may use a Secret or ServiceAccount its Agent lists, or one the API server recorded its
// creator may get (use) at admission; a claim only the latter; nothing unrecorded beyond the
// Agent's lists unless UNRECORDED_RUNS=allow. The Agent's allowedImages pin the image.
func TestReferencesNeedTheAgentOrTheCreatorsRecordedPermission(t *testing.T) {
	run := func(ann map[string]string, secrets []string, sa string, vols ...agentsv1alpha1.WorkloadVolume) *agentsv1alpha1.AgentRun {
		ar := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Annotations: ann}, Spec: agentsv1alpha1.AgentRunSpec{
			AgentRef: agentsv1alpha1.LocalRef{Name: "a"}, Secrets: secrets, Workflow: &agentsv1alpha1.WorkflowSpec{Steps: []agentsv1alpha1.WorkflowStep{
				{Name: "s", Workload: &agentsv1alpha1.WorkloadSpec{Volumes: vols}}}}}}
		if sa != "" {
			ar.Spec.Runtime.Config = map[string]apiextensionsv1.JSON{"serviceAccountName": {Raw: []byte(`"` + sa + `"`)}}
		}
		return ar
	}
	rec := func(secrets, claims, accounts string) map[string]string {
		return map[string]string{agentsv1alpha1.AnnotationCreatedBy: "alice", agentsv1alpha1.AnnotationCreatorMayGetSecrets: secrets,
			agentsv1alpha1.AnnotationCreatorMayGetClaims: claims, agentsv1alpha1.AnnotationCreatorMayUseServiceAcc: accounts}
	}
	agent := func(sec *agentsv1alpha1.AgentSecurity) *agentsv1alpha1.Agent {
		return &agentsv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: agentsv1alpha1.AgentSpec{Security: sec}}
	}
	pvc := agentsv1alpha1.WorkloadVolume{Type: "pvc", Name: "v", MountPath: "/v", ClaimName: "data"}
	secretVol := agentsv1alpha1.WorkloadVolume{Type: "secret", Name: "s", MountPath: "/s", SecretName: "vol-secret"}
	refuse, allow := core.Policy{UnrecordedRuns: core.UnrecordedRefuse}, core.Policy{UnrecordedRuns: core.UnrecordedAllow}
	for _, c := range []struct {
		name    string
		p       core.Policy
		run     *agentsv1alpha1.AgentRun
		agent   *agentsv1alpha1.Agent
		wantErr string // "" means allowed
	}{
		{"the Agent lists the Secret", refuse, run(rec("", "", ""), []string{"gh"}, ""), agent(&agentsv1alpha1.AgentSecurity{AllowedSecrets: []string{"gh"}}), ""},
		{"the creator may get it", refuse, run(rec("gh", "", ""), []string{"gh"}, ""), agent(nil), ""},
		{"neither", refuse, run(rec("other", "", ""), []string{"gh"}, ""), agent(nil), "Secret gh: Agent a does not list it in spec.security.allowedSecrets and its creator (alice) may not get it"},
		{"a step's secret volume, neither", refuse, run(rec("", "", ""), nil, "", secretVol), agent(nil), "Secret vol-secret"},
		{"an Agent list restricts even the creator's", refuse, run(rec("gh,x", "", ""), []string{"x"}, ""), agent(&agentsv1alpha1.AgentSecurity{AllowedSecrets: []string{"gh"}}), "Secret x is not in Agent a's spec.security.allowedSecrets (gh)"},
		{"a forged list is not a record", refuse, run(map[string]string{agentsv1alpha1.AnnotationCreatorMayGetSecrets: "gh"}, []string{"gh"}, ""), agent(nil), "carries no admission record"},
		{"unrecorded, allowed by the operator", allow, run(nil, []string{"gh"}, "", pvc), agent(nil), ""},
		{"unrecorded, only what the Agent lists", refuse, run(nil, []string{"gh"}, "bot"), agent(&agentsv1alpha1.AgentSecurity{AllowedSecrets: []string{"gh"}, AllowedServiceAccounts: []string{"bot"}}), ""},
		{"ServiceAccount the Agent lists", refuse, run(rec("", "", ""), nil, "bot"), agent(&agentsv1alpha1.AgentSecurity{AllowedServiceAccounts: []string{"bot"}}), ""},
		{"ServiceAccount the creator may use", refuse, run(rec("", "", "bot"), nil, "bot"), agent(nil), ""},
		{"ServiceAccount neither", refuse, run(rec("", "", "other"), nil, "bot"), agent(nil), "ServiceAccount bot: Agent a does not list it"},
		{"claim the creator may get", refuse, run(rec("", "data", ""), nil, "", pvc), agent(nil), ""},
		{"claim the creator may not get", refuse, run(rec("", "", ""), nil, "", pvc), agent(nil), "PersistentVolumeClaim data: its creator (alice) may not get it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkReferences(c.p, c.run, c.agent)
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("error %v, want one containing %q", err, c.wantErr)
			}
		})
	}
	pinned := agent(&agentsv1alpha1.AgentSecurity{AllowedImages: []string{"registry.example.com/agents/*", "busybox:1.36"}})
	for img, ok := range map[string]bool{"registry.example.com/agents/codex:1": true, "busybox:1.36": true, "busybox:1.37": false, "evil.example.com/agents/x": false} {
		if err := checkAgentImage(img, pinned); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "registry.example.com/agents/*, busybox:1.36")) {
			t.Errorf("image %s: %v", img, err)
		}
	}
	if checkAgentImage("anything", agent(nil)) != nil {
		t.Error("an Agent without allowedImages pins nothing")
	}
}

func run(name string, created time.Time, agent string) *agentsv1alpha1.AgentRun {
	return &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(created)},
		Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: agent}}}
}

func TestAdmissionStartsInCreationOrderAndLimitsTheRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r1, r2, r3 := run("r1", t0, "a"), run("r2", t0.Add(time.Second), "a"), run("r3", t0.Add(2*time.Second), "b")
	waiting := []*agentsv1alpha1.AgentRun{r1, r2, r3}
	a := newAdmission(core.Limits{ConcurrencyNamespace: 1}, func() []*agentsv1alpha1.AgentRun { return waiting })
	// r3 is looked at first but r1 and r2 are older: it waits.
	if d := a.admit(r3, t0); d.start || d.reason != ReasonQueued {
		t.Fatalf("r3: %+v", d)
	}
	if d := a.admit(r1, t0); !d.start {
		t.Fatalf("r1: %+v", d)
	}
	waiting = []*agentsv1alpha1.AgentRun{r2, r3}
	if d := a.admit(r2, t0); d.start {
		t.Fatalf("r2 started past the limit: %+v", d)
	}
	a.release("ns/r1")
	if d := a.admit(r3, t0); d.start {
		t.Fatal("r3 overtook r2")
	}
	if d := a.admit(r2, t0); !d.start {
		t.Fatalf("r2: %+v", d)
	}

	rate := newAdmission(core.Limits{RateNamespace: 2, RateWindow: time.Minute}, func() []*agentsv1alpha1.AgentRun { return nil })
	for i, want := range []bool{true, true, false} {
		d := rate.admit(run(string(rune('a'+i)), t0, "x"), t0)
		if d.start != want {
			t.Fatalf("start %d: %+v", i, d)
		}
		if !want && (d.retryAfter != time.Minute || !strings.Contains(d.message, "JANGAR_AGENTS_CONTROLLER_RATE_NAMESPACE=2")) {
			t.Errorf("rate wait %+v", d)
		}
	}
	if d := rate.admit(run("later", t0, "x"), t0.Add(61*time.Second)); !d.start {
		t.Fatalf("after the window: %+v", d)
	}
}

// Runs that will get a free slot are not waiting: they do not fill the queue, whatever order
// the workers look at the runs in.
func TestQueueCountsOnlyRunsThatMustWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var all []*agentsv1alpha1.AgentRun
	for i := range 6 {
		all = append(all, run(fmt.Sprintf("q%d", i+1), t0.Add(time.Duration(i)*time.Second), "a"))
	}
	a := newAdmission(core.Limits{ConcurrencyNamespace: 2, QueueNamespace: 3}, func() []*agentsv1alpha1.AgentRun { return all })
	for _, i := range []int{3, 4} { // q4 and q5, before q1 and q2 have started
		if d := a.admit(all[i], t0); d.start || d.refuse {
			t.Fatalf("%s: %+v, want it queued", all[i].Name, d)
		}
	}
	if d := a.admit(all[5], t0); !d.refuse || d.reason != ReasonQueueFull {
		t.Fatalf("q6: %+v, want QueueFull", d)
	}
}

// A run's pods get what a real node's agent needs: the simulate-* annotations through the
// downward API, and the Agent's node selector, tolerations and grace period; an image from the run, else the
// Agent, else run-controller's default (JANGAR_AGENT_IMAGE).
func TestJobsCarryWhatARealNodeNeeds(t *testing.T) {
	agent := &agentsv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "codex"}, Spec: agentsv1alpha1.AgentSpec{
		ProviderRef: agentsv1alpha1.LocalRef{Name: "p"},
		Defaults: &agentsv1alpha1.AgentRunDefaults{
			NodeSelector:                  map[string]string{"type": "kwok"},
			Tolerations:                   []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}}
	run := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "agents", UID: "u1", Annotations: map[string]string{
		agentsv1alpha1.AnnotationSimulateDuration: "30s", agentsv1alpha1.AnnotationSimulateExitCode: "3", "other": "x",
	}}, Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "codex"}}}
	c := &Reconciler{Core: &core.Core{Cfg: core.Config{AgentImage: "reg.local/agentplane/agent:v1"}}}
	w, p := c.baseWork(run, agent)
	if p != nil || w.image != "reg.local/agentplane/agent:v1" {
		t.Fatalf("image %q, problem %+v: want run-controller's default", w.image, p)
	}
	job, err := c.buildJob(w)
	if err != nil {
		t.Fatal(err)
	}
	pod := job.Spec.Template
	if pod.Annotations[agentsv1alpha1.AnnotationSimulateDuration] != "30s" || pod.Annotations["other"] != "" {
		t.Errorf("pod annotations %v", pod.Annotations)
	}
	refs := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			refs[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	for name, path := range map[string]string{
		"AGENTPLANE_SIMULATE_DURATION":  "metadata.annotations['agentplane.dev/simulate-duration']",
		"AGENTPLANE_SIMULATE_EXIT_CODE": "metadata.annotations['agentplane.dev/simulate-exit-code']",
	} {
		if refs[name] != path {
			t.Errorf("%s from %q, want the downward API's %s", name, refs[name], path)
		}
	}
	if pod.Spec.NodeSelector["type"] != "kwok" || len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Key != "kwok.x-k8s.io/node" {
		t.Errorf("node selector %v, tolerations %v: want the Agent's", pod.Spec.NodeSelector, pod.Spec.Tolerations)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g != 0 {
		t.Errorf("terminationGracePeriodSeconds %v: want the Agent's 0", g)
	}

	agent.Spec.Defaults.Image = "reg.local/agents/codex:2"
	if w, _ := c.baseWork(run, agent); w.image != "reg.local/agents/codex:2" {
		t.Errorf("image %q: the Agent's default wins over run-controller's", w.image)
	}
	run.Spec.Workload = &agentsv1alpha1.WorkloadSpec{Image: "reg.local/agents/codex:3"}
	if w, _ := c.baseWork(run, agent); w.image != "reg.local/agents/codex:3" {
		t.Errorf("image %q: the run's own wins", w.image)
	}
	run.Spec.Workload, agent.Spec.Defaults.Image, c.Cfg.AgentImage = nil, "", ""
	if w, _ := c.baseWork(run, agent); c.checkImage(w.image, agent) == nil {
		t.Error("a run with no image anywhere is accepted")
	}
	// Without the annotations, no such variables.
	run.Annotations = nil
	w, _ = c.baseWork(run, agent)
	job, _ = c.buildJob(w)
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if strings.HasPrefix(e.Name, "AGENTPLANE_SIMULATE_") {
			t.Errorf("%s set for a run without simulate-* annotations", e.Name)
		}
	}
}

// TestOnlyTheJobRefOfAYoungJobWaits: the Pending JobCreated write that only adds the jobRef waits
// until the Job is delay old, for a run of its own and for an OrchestrationRun's step (whose start
// the OrchestrationRun's status records); every other status, and the jobRef of a Job being
// deleted, is written at once.
func TestOnlyTheJobRefOfAYoungJobWaits(t *testing.T) {
	now := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	delay := 5 * time.Second
	job := func(age time.Duration) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: "uid-j", CreationTimestamp: metav1.NewTime(now.Add(-age))}}
	}
	run := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", Generation: 1}}
	step := run.DeepCopy()
	step.OwnerReferences = []metav1.OwnerReference{{Kind: "OrchestrationRun", Name: "o", UID: "uid-o", Controller: ptr.To(true)}}
	recorded := run.DeepCopy()
	recorded.Status.JobRef = &agentsv1alpha1.JobRef{Name: "j", Namespace: "ns", UID: "uid-j"}
	pending := jobRunStatus(job(0), func(*batchv1.Job) bool { return false })
	running := jobRunStatus(job(0), func(*batchv1.Job) bool { return true })
	for _, tc := range []struct {
		name string
		ar   *agentsv1alpha1.AgentRun
		st   runStatus
		age  time.Duration
		want time.Duration
	}{
		{"a new Job's jobRef waits for the rest of the delay", run, pending, 2 * time.Second, 3 * time.Second},
		{"a Job created this instant waits the whole delay", run, pending, 0, delay},
		{"a clock behind the API server's waits no more than the delay", run, pending, -time.Minute, delay},
		{"a Job older than the delay is recorded", run, pending, 6 * time.Second, 0},
		{"Running is written at once", run, running, 0, 0},
		{"a recorded jobRef is not held back", recorded, pending, 0, 0},
		{"a step's run (its start recorded by its OrchestrationRun) waits likewise", step, pending, 2 * time.Second, 3 * time.Second},
		{"a step's Running is written at once", step, running, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := jobRefWait(tc.ar, job(tc.age), tc.st, delay, now); got != tc.want {
				t.Fatalf("wait %v, want %v", got, tc.want)
			}
		})
	}
	for _, ar := range []*agentsv1alpha1.AgentRun{run, step} {
		deleting := job(2 * time.Second)
		deleting.DeletionTimestamp = &metav1.Time{Time: now}
		if got := jobRefWait(ar, deleting, pending, delay, now); got != 0 {
			t.Errorf("the jobRef of a young Job being deleted waits %v (run owned by %v); want it written at once", got, ar.OwnerReferences)
		}
	}
}

// A deleted Job is remembered only where its run would otherwise create a second: the run's
// job-runtime Job, the run not finished and without a jobRef; and only for GoneJobTTL.
func TestADeletedJobIsRememberedOnlyWhereItsRunHasNotRecordedIt(t *testing.T) {
	c := New(core.New(core.Config{}, nil, nil, nil, nil, nil, nil), func(string) {})
	now := time.Unix(1_000_000, 0)
	c.Now = func() time.Time { return now }
	c.Runs["ns"] = cache.NewSharedIndexInformer(&cache.ListWatch{}, &agentsv1alpha1.AgentRun{}, 0, cache.Indexers{})
	run := func(name string, edit func(*agentsv1alpha1.AgentRun)) *agentsv1alpha1.AgentRun {
		ar := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec: agentsv1alpha1.AgentRunSpec{Runtime: agentsv1alpha1.RuntimeSpec{Type: agentsv1alpha1.RuntimeJob}}}
		ar.Status.Phase, ar.Status.Reason = agentsv1alpha1.PhasePending, "Starting"
		if edit != nil {
			edit(ar)
		}
		if err := c.Runs["ns"].GetStore().Add(ar); err != nil {
			t.Fatal(err)
		}
		return ar
	}
	jobOf := func(ar *agentsv1alpha1.AgentRun, step string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: JobName(ar, step, 1), UID: types.UID("job-" + ar.Name),
			OwnerReferences: []metav1.OwnerReference{{Kind: "AgentRun", Name: ar.Name, UID: ar.UID, Controller: ptr.To(true)}}}}
	}
	starting := run("starting", nil)
	recorded := run("recorded", func(ar *agentsv1alpha1.AgentRun) { ar.Status.JobRef = &agentsv1alpha1.JobRef{Name: "x"} })
	finished := run("finished", func(ar *agentsv1alpha1.AgentRun) { ar.Status.Phase = agentsv1alpha1.PhaseSucceeded })
	workflow := run("workflow", func(ar *agentsv1alpha1.AgentRun) { ar.Spec.Runtime.Type = agentsv1alpha1.RuntimeWorkflow })
	replaced := run("replaced", nil)
	for _, j := range []*batchv1.Job{jobOf(starting, ""), jobOf(recorded, ""), jobOf(finished, ""), jobOf(workflow, "s1"), jobOf(starting, "s1")} {
		c.JobDeleted(j)
	}
	old := jobOf(replaced, "")
	old.OwnerReferences[0].UID = "uid-an-earlier-run-of-that-name"
	c.JobDeleted(old)
	if j, ok := c.goneJob("ns", JobName(starting, "", 1)); !ok || j.UID != "job-starting" {
		t.Fatalf("the Job of a run without a jobRef is not remembered: %v %v", j, ok)
	}
	for _, ar := range []*agentsv1alpha1.AgentRun{recorded, finished, replaced} {
		if _, ok := c.goneJob("ns", JobName(ar, "", 1)); ok {
			t.Errorf("the deleted Job of run %s is remembered", ar.Name)
		}
	}
	for _, ar := range []*agentsv1alpha1.AgentRun{workflow, starting} {
		if _, ok := c.goneJob("ns", JobName(ar, "s1", 1)); ok {
			t.Errorf("the deleted step Job of run %s is remembered", ar.Name)
		}
	}
	now = now.Add(GoneJobTTL)
	if _, ok := c.goneJob("ns", JobName(starting, "", 1)); ok {
		t.Error("a deleted Job is remembered past GoneJobTTL")
	}
}
