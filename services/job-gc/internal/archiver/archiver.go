// Package archiver is job-gc's run archive writer (#37). While archiving is on, every unfinished
// AgentRun and OrchestrationRun carries the agents.proompteng.ai/archive finalizer (the API
// server's admission policy agentplane-archive-hold adds it at creation where job-gc's chart
// switched it on; the archiver adds it to a run without it); when a run
// finishes, what will soon be gone is captured — its Events (the API server keeps them an hour),
// its Jobs' outcomes and the tails of its containers' logs (redacted) — and written with the
// run's final object to the archive (libs/archive), before job-gc lets its Jobs go (the
// job-result hold waits for it) and before retention deletes it. A deletion by hand waits too:
// the finalizer is released only once the run is archived, and then at once, so that a finished
// run's retention is one request. A run that finished unheld (before job-gc saw it) is archived
// without a hold, and held only if the write fails. Writes are idempotent (one row per run UID),
// so a write retried after a crash stores one row.
//
// With archiving off (an Archiver without a Store), the archiver releases the finalizer from every
// run that still has it.
package archiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/archive"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/jobresult"
	"github.com/agentplane/agentplane/libs/redact"
)

// Finalizer is the archive's hold on a run.
const Finalizer = agentsv1alpha1.FinalizerArchive

// Store is where runs are archived (an *archive.Store).
type Store interface {
	Put(ctx context.Context, r archive.Record) error
	Has(ctx context.Context, uid string) (bool, error)
}

// Archiver writes finished runs to Store. Its fields are set once, before the controller runs.
type Archiver struct {
	// Store is the archive; nil: archiving is off (only Client is used, to release the finalizer).
	Store Store
	// Kube reads Events, pods and logs; Client patches runs' finalizers.
	Kube   kubernetes.Interface
	Client versioned.Interface
	// Jobs are the informers of run-controller's Jobs by namespace, indexed by ByRun.
	Jobs  map[string]cache.SharedIndexInformer
	ByRun string
	// Events are, by namespace, the informers of the Events about runs (EventInformers), indexed
	// by ByInvolved; nil: a run's Events are listed when it is captured.
	Events map[string][]cache.SharedIndexInformer
	// LogLines is how many lines of each container's log are kept (0: none are read).
	LogLines int64
	// Now is the clock.
	Now func() time.Time
	// Archived is called after a run is written (job-gc looks at its Jobs again: their holds
	// waited for it).
	Archived func(kind, namespace, name string)

	Writes  *prometheus.CounterVec // by result: ok, error
	Seconds prometheus.Histogram   // one run's capture and write

	mu      sync.Mutex
	done    map[types.UID]bool      // written by this process
	pending map[types.UID]time.Time // finished, not yet written: since when
	seen    map[types.UID]bool      // seen held by this process
}

// logBytes bounds what is read of one container's log.
const logBytes = 64 << 10

func (a *Archiver) init() {
	if a.done == nil {
		a.done, a.pending, a.seen = map[types.UID]bool{}, map[types.UID]time.Time{}, map[types.UID]bool{}
	}
}

// IsArchived reports whether this process has written the run with uid.
func (a *Archiver) IsArchived(uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.done[uid]
}

// Behind is how many finished runs wait to be archived, and how long the oldest has waited.
func (a *Archiver) Behind() (int, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var oldest time.Duration
	now := a.Now()
	for _, since := range a.pending {
		oldest = max(oldest, now.Sub(since))
	}
	return len(a.pending), oldest
}

// Forget drops what the archiver remembers of a run that is gone.
func (a *Archiver) Forget(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.done, uid)
	delete(a.pending, uid)
	delete(a.seen, uid)
}

// sawHeld records whether the run with uid is held now, and reports whether this process saw it
// held before.
func (a *Archiver) sawHeld(uid types.UID, held bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.init()
	before := a.seen[uid]
	if held {
		a.seen[uid] = true
	}
	return before
}

// AgentRun does the archive's part of reconciling ar: it holds a live run with the finalizer,
// archives a finished run (or one being deleted) and then lets a deleted one go. stop says the
// rest of the reconcile has nothing to do (the run is being deleted); an error (the archive
// unreachable) means the run waits, retention included.
func (a *Archiver) AgentRun(ctx context.Context, ar *agentsv1alpha1.AgentRun) (stop bool, err error) {
	return a.reconcile(ctx, "AgentRun", ar, ar.Status.FinishedAt != nil,
		func(ctx context.Context) (archive.Record, error) { return a.captureAgentRun(ctx, ar) })
}

// OrchestrationRun is AgentRun for an OrchestrationRun (its record holds its step tree; its step
// AgentRuns are archived as runs of their own).
func (a *Archiver) OrchestrationRun(ctx context.Context, or *orchv1alpha1.OrchestrationRun) (stop bool, err error) {
	return a.reconcile(ctx, "OrchestrationRun", or, or.Status.FinishedAt != nil,
		func(ctx context.Context) (archive.Record, error) { return a.captureOrchestrationRun(ctx, or) })
}

func (a *Archiver) reconcile(ctx context.Context, kind string, o metav1.Object, done bool, capture func(context.Context) (archive.Record, error)) (bool, error) {
	held := slices.Contains(o.GetFinalizers(), Finalizer)
	deleting := o.GetDeletionTimestamp() != nil
	if a.Store == nil { // archiving is off: nothing may wait on it
		if held {
			return deleting, a.release(ctx, kind, o.GetNamespace(), o.GetName(), o.GetFinalizers())
		}
		return deleting, nil
	}
	wasHeld := a.sawHeld(o.GetUID(), held)
	switch {
	case deleting && !held:
		return true, nil
	case deleting:
		if err := a.ensure(ctx, kind, o.GetNamespace(), o.GetName(), o.GetUID(), capture); err != nil {
			return true, err
		}
		return true, a.release(ctx, kind, o.GetNamespace(), o.GetName(), o.GetFinalizers())
	case done:
		// A finished run is archived at once, and then nothing needs to wait for it: the hold
		// is released in the same pass, so that its retention, or a deletion by hand, is a
		// single request. One never held (finished before job-gc saw it) is held only when the
		// write fails, so that a deletion by hand waits for the archive's return.
		if err := a.ensure(ctx, kind, o.GetNamespace(), o.GetName(), o.GetUID(), capture); err != nil {
			if !held {
				if herr := a.hold(ctx, kind, o.GetNamespace(), o.GetName(), o.GetResourceVersion(), o.GetFinalizers()); herr != nil {
					return false, errors.Join(err, herr)
				}
			}
			return false, err
		}
		if held {
			return false, a.release(ctx, kind, o.GetNamespace(), o.GetName(), o.GetFinalizers())
		}
		return false, nil
	case !held && wasHeld:
		// Released by someone else while it runs: job-gc's uninstall hook (job-gc release-holds,
		// which runs while job-gc still does), or a person with the verb archive. The release
		// stands; the run is still archived when it finishes, unheld.
		return false, nil
	case !held:
		return false, a.hold(ctx, kind, o.GetNamespace(), o.GetName(), o.GetResourceVersion(), o.GetFinalizers())
	}
	return false, nil
}

// ensure archives the run with uid unless it already is (in this process, or in the archive: a
// restarted job-gc asks before it captures again).
func (a *Archiver) ensure(ctx context.Context, kind, ns, name string, uid types.UID, capture func(context.Context) (archive.Record, error)) error {
	a.mu.Lock()
	a.init()
	if a.done[uid] {
		a.mu.Unlock()
		return nil
	}
	if _, ok := a.pending[uid]; !ok {
		a.pending[uid] = a.Now()
	}
	a.mu.Unlock()
	start := time.Now()
	err := a.write(ctx, uid, capture)
	a.Seconds.Observe(time.Since(start).Seconds())
	if err != nil {
		a.Writes.WithLabelValues("error").Inc()
		return err // logged and retried with backoff; the run waits
	}
	a.Writes.WithLabelValues("ok").Inc()
	a.mu.Lock()
	a.done[uid] = true
	delete(a.pending, uid)
	a.mu.Unlock()
	if a.Archived != nil {
		a.Archived(kind, ns, name)
	}
	return nil
}

func (a *Archiver) write(ctx context.Context, uid types.UID, capture func(context.Context) (archive.Record, error)) error {
	if ok, err := a.Store.Has(ctx, string(uid)); err != nil {
		return fmt.Errorf("the run archive: %w", err)
	} else if ok {
		return nil
	}
	r, err := capture(ctx)
	if err != nil {
		return err
	}
	if err := a.Store.Put(ctx, r); err != nil {
		return fmt.Errorf("the run archive: %w", err)
	}
	return nil
}

// hold adds the finalizer, testing that the list is still what was read (a concurrent change to
// it is never overwritten: the patch fails and the reconcile is retried).
func (a *Archiver) hold(ctx context.Context, kind, ns, name, rv string, have []string) error {
	var patch []byte
	var pt types.PatchType
	if len(have) == 0 {
		pt = types.MergePatchType
		patch, _ = json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": []string{Finalizer}, "resourceVersion": rv}})
	} else {
		pt = types.JSONPatchType
		patch, _ = json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/finalizers", "value": have},
			{"op": "add", "path": "/metadata/finalizers/-", "value": Finalizer},
		})
	}
	return a.patch(ctx, kind, ns, name, pt, patch, "hold")
}

func (a *Archiver) release(ctx context.Context, kind, ns, name string, have []string) error {
	patch, err := jobresult.RemovalPatch(have, Finalizer)
	if err != nil {
		return nil // not held
	}
	return a.patch(ctx, kind, ns, name, types.JSONPatchType, patch, "release")
}

func (a *Archiver) patch(ctx context.Context, kind, ns, name string, pt types.PatchType, patch []byte, what string) error {
	opts := metav1.PatchOptions{FieldManager: "agentplane-job-gc"}
	var err error
	switch kind {
	case "AgentRun":
		_, err = a.Client.AgentsV1alpha1().AgentRuns(ns).Patch(ctx, name, pt, patch, opts)
	default:
		_, err = a.Client.OrchestrationV1alpha1().OrchestrationRuns(ns).Patch(ctx, name, pt, patch, opts)
	}
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err), apierrors.IsInvalid(err):
		// The object changed since the cache saw it (a failed test is reported as invalid): the
		// retry reads it again.
		return controller.Waiting(fmt.Errorf("%s the archive finalizer of %s %s/%s: it changed meanwhile: %w", what, kind, ns, name, err))
	default:
		return fmt.Errorf("%s the archive finalizer of %s %s/%s: %w", what, kind, ns, name, err)
	}
}

// finished is when a run finished, or, for one deleted before it finished, when its deletion was
// asked for.
func finished(at *metav1.Time, deleted *metav1.Time, now time.Time) time.Time {
	switch {
	case at != nil:
		return at.Time
	case deleted != nil:
		return deleted.Time
	}
	return now
}

func phaseOr(p string) string {
	if p == "" {
		return agentsv1alpha1.PhasePending
	}
	return p
}

func (a *Archiver) captureAgentRun(ctx context.Context, ar *agentsv1alpha1.AgentRun) (archive.Record, error) {
	r := archive.Record{Summary: archive.Summary{UID: string(ar.UID), Kind: "AgentRun", Namespace: ar.Namespace, Name: ar.Name,
		Agent: ar.Spec.AgentRef.Name, Phase: phaseOr(ar.Status.Phase), CreatedAt: ar.CreationTimestamp.Time,
		FinishedAt: finished(ar.Status.FinishedAt, ar.DeletionTimestamp, a.Now())}}
	// The informers drop managed fields (kubeclient.DropManagedFields): the object is as shown.
	var err error
	withKind := ar.DeepCopy()
	withKind.APIVersion, withKind.Kind = agentsv1alpha1.GroupVersion.String(), "AgentRun"
	if r.Object, err = json.Marshal(withKind); err != nil {
		return r, fmt.Errorf("AgentRun %s/%s: %w", ar.Namespace, ar.Name, err)
	}
	if r.Events, err = a.events(ctx, ar.Namespace, ar.UID); err != nil {
		return r, err
	}
	var jobs []*batchv1.Job
	if inf := a.Jobs[ar.Namespace]; inf != nil {
		for _, j := range controller.ByIndex[*batchv1.Job](inf, a.ByRun, ar.Namespace+"/"+ar.Name) {
			if ref := controller.ControllerOf(j.OwnerReferences, "AgentRun"); ref != nil && ref.UID == ar.UID {
				jobs = append(jobs, j)
			}
		}
	}
	r.Jobs, r.Logs, err = a.jobs(ctx, ar.Namespace, jobs)
	return r, err
}

func (a *Archiver) captureOrchestrationRun(ctx context.Context, or *orchv1alpha1.OrchestrationRun) (archive.Record, error) {
	r := archive.Record{Summary: archive.Summary{UID: string(or.UID), Kind: "OrchestrationRun", Namespace: or.Namespace, Name: or.Name,
		Agent: or.Spec.OrchestrationRef.Name, Phase: phaseOr(or.Status.Phase), CreatedAt: or.CreationTimestamp.Time,
		FinishedAt: finished(or.Status.FinishedAt, or.DeletionTimestamp, a.Now())}}
	var err error
	withKind := or.DeepCopy()
	withKind.APIVersion, withKind.Kind = orchv1alpha1.GroupVersion.String(), "OrchestrationRun"
	if r.Object, err = json.Marshal(withKind); err != nil {
		return r, fmt.Errorf("OrchestrationRun %s/%s: %w", or.Namespace, or.Name, err)
	}
	r.Events, err = a.events(ctx, or.Namespace, or.UID)
	return r, err
}

// events are the Events about the object with uid, oldest first, their messages redacted: from
// the Events informers when there are, else listed (a LIST of Events is a read of etcd: the API
// server keeps no watch cache of Events, and the field selector is applied to every Event of the
// namespace, a cost per run that grows with the namespace's runs).
func (a *Archiver) events(ctx context.Context, ns string, uid types.UID) ([]archive.Event, error) {
	var items []corev1.Event
	if infs, ok := a.Events[ns]; ok {
		for _, inf := range infs {
			for _, e := range controller.ByIndex[*corev1.Event](inf, ByInvolved, string(uid)) {
				items = append(items, *e)
			}
		}
	} else {
		list, err := a.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid)})
		if err != nil {
			return nil, fmt.Errorf("list the Events of %s in %s: %w", uid, ns, err)
		}
		items = list.Items
	}
	out := make([]archive.Event, 0, len(items))
	for _, e := range items {
		first, last := e.FirstTimestamp.Time, e.LastTimestamp.Time
		if first.IsZero() {
			first = e.EventTime.Time
		}
		if last.IsZero() {
			last = first
		}
		source := e.Source.Component
		if source == "" {
			source = e.ReportingController
		}
		out = append(out, archive.Event{Type: e.Type, Reason: e.Reason, Message: redact.String(e.Message), Count: e.Count,
			First: first, Last: last, Source: source, Involved: e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name})
	}
	slices.SortStableFunc(out, func(x, y archive.Event) int { return x.First.Compare(y.First) })
	return out, nil
}

// jobs are the outcomes of a run's Jobs and the tails of their pods' logs.
func (a *Archiver) jobs(ctx context.Context, ns string, jobs []*batchv1.Job) ([]archive.JobOutcome, []archive.StepLog, error) {
	if len(jobs) == 0 {
		return nil, nil, nil
	}
	names := make([]string, 0, len(jobs))
	for _, j := range jobs {
		names = append(names, j.Name)
	}
	slices.Sort(names)
	pods, err := a.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + " in (" + strings.Join(names, ",") + ")"})
	if err != nil {
		return nil, nil, fmt.Errorf("list the pods of Jobs %v in %s: %w", names, ns, err)
	}
	byJob := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		byJob[p.Labels[batchv1.JobNameLabel]] = append(byJob[p.Labels[batchv1.JobNameLabel]], p)
	}
	var outcomes []archive.JobOutcome
	var logs []archive.StepLog
	for _, j := range jobs {
		o := archive.JobOutcome{Name: j.Name, Step: j.Labels[agentsv1alpha1.LabelWorkflowStep], Succeeded: j.Status.Succeeded > 0}
		if j.Status.StartTime != nil {
			o.Started = j.Status.StartTime.Time
		}
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				o.Finished, o.Reason, o.Message = c.LastTransitionTime.Time, c.Reason, redact.String(c.Message)
			}
		}
		for _, p := range byJob[j.Name] {
			for _, cs := range p.Status.ContainerStatuses {
				if t := cs.State.Terminated; t != nil {
					code := t.ExitCode
					o.ExitCode = &code
				}
			}
			logs = append(logs, a.logTails(ctx, &p)...)
		}
		outcomes = append(outcomes, o)
	}
	return outcomes, logs, nil
}

// logTails reads the last LogLines lines of each of a pod's containers; a log that cannot be
// read says why instead (a node gone, a simulated pod).
func (a *Archiver) logTails(ctx context.Context, p *corev1.Pod) []archive.StepLog {
	if a.LogLines <= 0 {
		return nil
	}
	var out []archive.StepLog
	for _, c := range p.Spec.Containers {
		lines, limit := a.LogLines, int64(logBytes)
		b, err := a.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &lines, LimitBytes: &limit}).DoRaw(ctx)
		l := archive.StepLog{Pod: p.Name, Container: c.Name}
		var status apierrors.APIStatus
		switch {
		case err == nil:
			l.Tail, l.Truncated = redact.String(string(b)), len(b) >= logBytes
		case errors.As(err, &status):
			l.Error = redact.String(status.Status().Message)
		default:
			l.Error = redact.String(err.Error())
		}
		out = append(out, l)
	}
	return out
}

// ReleaseAll removes the archive finalizer from every AgentRun and OrchestrationRun in namespace,
// calling released for each run it released: what `job-gc release-holds` does when job-gc is
// uninstalled (nothing would release them after). A run whose finalizers changed since it was
// listed is read again (up to three times); one gone is skipped.
func ReleaseAll(ctx context.Context, client versioned.Interface, namespace string, released func(kind, name string)) (int, error) {
	a := &Archiver{Client: client}
	n := 0
	type held struct {
		kind, name string
		have       []string
	}
	var runs []held
	ars, err := client.AgentsV1alpha1().AgentRuns(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list AgentRuns: %w", err)
	}
	for _, ar := range ars.Items {
		if slices.Contains(ar.Finalizers, Finalizer) {
			runs = append(runs, held{"AgentRun", ar.Name, ar.Finalizers})
		}
	}
	ors, err := client.OrchestrationV1alpha1().OrchestrationRuns(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list OrchestrationRuns: %w", err)
	}
	for _, or := range ors.Items {
		if slices.Contains(or.Finalizers, Finalizer) {
			runs = append(runs, held{"OrchestrationRun", or.Name, or.Finalizers})
		}
	}
	for _, r := range runs {
		have := r.have
		for attempt := 0; ; attempt++ {
			err := a.release(ctx, r.kind, namespace, r.name, have)
			if err == nil {
				n++
				released(r.kind, r.name)
				break
			}
			if !controller.IsWaiting(err) || attempt >= 3 {
				return n, fmt.Errorf("%w (%d released so far)", err, n)
			}
			// The finalizers changed since the list: read them again.
			var meta metav1.Object
			var gerr error
			if r.kind == "AgentRun" {
				meta, gerr = client.AgentsV1alpha1().AgentRuns(namespace).Get(ctx, r.name, metav1.GetOptions{})
			} else {
				meta, gerr = client.OrchestrationV1alpha1().OrchestrationRuns(namespace).Get(ctx, r.name, metav1.GetOptions{})
			}
			if apierrors.IsNotFound(gerr) {
				break
			}
			if gerr != nil {
				return n, fmt.Errorf("read %s %s/%s again: %w (%d released so far)", r.kind, namespace, r.name, gerr, n)
			}
			if have = meta.GetFinalizers(); !slices.Contains(have, Finalizer) {
				break
			}
		}
	}
	return n, nil
}

// ByInvolved is the name of the Events informers' index by the UID of the object an Event is
// about.
const ByInvolved = "involved"

// EventInformers are the informers of the Events about AgentRuns and about OrchestrationRuns in
// namespace (one each: a field selector matches one kind), indexed by ByInvolved, each Event kept
// with only what the archive records.
func EventInformers(kube kubernetes.Interface, namespace string) []cache.SharedIndexInformer {
	var out []cache.SharedIndexInformer
	for _, kind := range []string{"AgentRun", "OrchestrationRun"} {
		inf := cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = "involvedObject.kind=" + kind
				return kube.CoreV1().Events(namespace).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = "involvedObject.kind=" + kind
				return kube.CoreV1().Events(namespace).Watch(ctx, o)
			},
		}, &corev1.Event{}, 0, cache.Indexers{ByInvolved: func(obj any) ([]string, error) {
			if e, ok := obj.(*corev1.Event); ok {
				return []string{string(e.InvolvedObject.UID)}, nil
			}
			return nil, nil
		}})
		utilruntime.Must(inf.SetTransform(slimEvent))
		out = append(out, inf)
	}
	return out
}

// slimEvent keeps of an Event what the archive records, and what a cache needs to key it.
func slimEvent(obj any) (any, error) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return obj, nil
	}
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace, UID: e.UID, ResourceVersion: e.ResourceVersion},
		InvolvedObject: corev1.ObjectReference{Kind: e.InvolvedObject.Kind, Name: e.InvolvedObject.Name, UID: e.InvolvedObject.UID},
		Type:           e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count,
		FirstTimestamp: e.FirstTimestamp, LastTimestamp: e.LastTimestamp, EventTime: e.EventTime,
		Source: corev1.EventSource{Component: e.Source.Component}, ReportingController: e.ReportingController,
	}, nil
}
