package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

// logSource is one AgentRun whose pods' logs are shown: a lone run, or a step of an
// OrchestrationRun (step its name). taken is set for a step a retry took from the run it
// retries: it did not run here.
type logSource struct {
	step  string
	ar    *agentsv1alpha1.AgentRun
	taken *orchv1alpha1.StepStatus
	// never is why a step has no AgentRun (not started yet, or never will).
	never string
}

type logsOptions struct {
	follow, allSteps, timestamps bool
	step                         string
	// grace is how long, once the run has ended, logs -f waits for the streams still open to end
	// (a real container's ends with it; kwok's simulated ones never do).
	grace time.Duration
	// poll is how often logs -f looks for new steps and pods.
	poll time.Duration
}

func newLogsCommand(g *globalOptions) *cobra.Command {
	o := &logsOptions{grace: 5 * time.Second, poll: time.Second}
	cmd := &cobra.Command{
		Use:   "logs run NAME [-f] [--step STEP | --all-steps]",
		Short: "Print the logs of a run's pods, each line prefixed by its step",
		Long: `Prints the container logs of the pods of a run's Jobs, as argo logs and tkn pr logs do. For an
OrchestrationRun every step's (--all-steps, the default) or one step's (--step STEP), each line
prefixed by [STEP]; for a workflow AgentRun by [WORKFLOW-STEP]; with the container's name too
when a pod has several. With -f it follows them: the pods of steps that start later are picked
up as they start, and it returns once the run has ended and its logs are read.

Logs live with the pods: once a Job's ttlSecondsAfterFinished (or job-gc's retention) has
removed the Job and its pods, agentctl says the logs are gone, which Job held them and when the
run finished; store logs elsewhere to keep them longer. On make up, kwok plays the pods and
serves the same simulated log for every container (hack/local/kwok-pod.log).

Exit codes: 0 logs printed (or there were none yet); 5 every selected step's logs are gone, or
the run or the step does not exist; 2 bad usage; 4 access refused; 1 anything else.`,
		Example: `  agentctl logs run hello
  agentctl logs run plan-and-implement-1 -f
  agentctl logs run plan-and-implement-1 --step implement`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: nounCompletion("run"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.step != "" && o.allSteps {
				return withCode(ExitUsage, errors.New("give one of --step and --all-steps"))
			}
			k, r, err := g.targetRun(cmd.Context(), args[0], args[1], "logs")
			if err != nil {
				return err
			}
			return k.logs(cmd.Context(), r, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "follow the logs, and the steps that start later, until the run has ended")
	cmd.Flags().StringVar(&o.step, "step", "", "only this step's logs (an OrchestrationRun's step, or a workflow AgentRun's)")
	cmd.Flags().BoolVar(&o.allSteps, "all-steps", false, "every step's logs (the default without --step)")
	cmd.Flags().BoolVar(&o.timestamps, "timestamps", false, "begin each line with the time the container wrote it")
	return cmd
}

// sources are the AgentRuns of r whose logs are shown, in the order of the steps.
func (k *kube) sources(ctx context.Context, r *run, step string) ([]logSource, error) {
	if r.ar != nil {
		return []logSource{{ar: r.ar}}, nil
	}
	steps, err := k.stepRuns(ctx, r.or)
	if err != nil {
		return nil, err
	}
	var out []logSource
	known := map[string]bool{}
	for i := range r.or.Status.StepStatuses {
		s := r.or.Status.StepStatuses[i]
		known[s.Name] = true
		if step != "" && s.Name != step {
			continue
		}
		src := logSource{step: s.Name, ar: stepRun(steps, s.Name)}
		if src.ar == nil {
			if s.ResourceRef != nil && s.Phase == agentsv1alpha1.PhaseSucceeded {
				src.taken = &s
			} else {
				src.never = oneLine(s.Message)
			}
		}
		out = append(out, src)
	}
	if step != "" && !known[step] {
		if len(r.or.Status.StepStatuses) == 0 && !r.finishedRun() {
			return nil, nil // no status yet: -f waits for it
		}
		var names []string
		for n := range known {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, withCode(ExitRejected, fmt.Errorf("%s has no step %s (its steps: %s)", r.ref(), step, strings.Join(names, ", ")))
	}
	return out, nil
}

// lineWriter writes whole lines, each with its prefix, from many streams at once.
type lineWriter struct {
	mu      sync.Mutex
	w       io.Writer
	printed bool
}

func (l *lineWriter) copy(ctx context.Context, prefix string, rc io.ReadCloser) error {
	defer func() { _ = rc.Close() }()
	go func() { <-ctx.Done(); _ = rc.Close() }()
	br := bufio.NewReaderSize(rc, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if !strings.HasSuffix(line, "\n") {
				line += "\n"
			}
			l.mu.Lock()
			_, werr := io.WriteString(l.w, prefix+line)
			l.printed = true
			l.mu.Unlock()
			if werr != nil {
				return werr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// prefix is what begins each line of a container's log: [STEP], [STEP/WORKFLOW-STEP] and the
// container's name when its pod has several; nothing for a lone run of one container.
func prefix(step string, pod *corev1.Pod, container string) string {
	var parts []string
	if step != "" {
		parts = append(parts, step)
	}
	if ws := pod.Labels[agentsv1alpha1.LabelWorkflowStep]; ws != "" {
		parts = append(parts, ws)
	}
	if len(pod.Spec.Containers) > 1 {
		parts = append(parts, container)
	}
	if len(parts) == 0 {
		return ""
	}
	return "[" + strings.Join(parts, "/") + "] "
}

// containerState says whether a container has logs to read yet, and whether it has ended.
func containerState(pod *corev1.Pod, container string) (started, ended bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != container {
			continue
		}
		switch {
		case cs.State.Terminated != nil:
			return true, true
		case cs.State.Running != nil:
			return true, false
		case cs.LastTerminationState.Terminated != nil:
			return true, false
		}
		return false, false
	}
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// podsOf are the pods of r's AgentRuns (run-controller labels them with their AgentRun, and
// with the OrchestrationRun a step belongs to), narrowed to a workflow step when step names one,
// by AgentRun (its label value), oldest first: one list for the whole run.
func (k *kube) podsOf(ctx context.Context, r *run, workflowStep string) (map[string][]corev1.Pod, error) {
	sel := agentsv1alpha1.LabelAgentRun + "=" + agentsv1alpha1.LabelValue(r.meta.Name)
	if r.or != nil {
		sel = agentsv1alpha1.LabelOrchestrationRun + "=" + agentsv1alpha1.LabelValue(r.meta.Name)
	}
	if workflowStep != "" {
		sel += "," + agentsv1alpha1.LabelWorkflowStep + "=" + agentsv1alpha1.LabelValue(workflowStep)
	}
	list, err := k.core.CoreV1().Pods(r.meta.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, apiError(err, "list the pods of "+r.ref())
	}
	pods := list.Items
	sort.SliceStable(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
	out := map[string][]corev1.Pod{}
	for _, p := range pods {
		ar := p.Labels[agentsv1alpha1.LabelAgentRun]
		out[ar] = append(out[ar], p)
	}
	return out, nil
}

// logFollower reads the logs of a run's pods: each pass looks at every step once and starts a
// stream for each container that has started and has none yet.
type logFollower struct {
	k                    *kube
	o                    *logsOptions
	lw                   *lineWriter
	stderr               io.Writer
	orStep, workflowStep string
	started              map[string]bool   // pod/container streams begun
	notes                map[string]string // what was said on stderr, by what it was said of
	streams              context.Context
	wg                   sync.WaitGroup
}

// note says msg on stderr, once for each thing it is said of, until it changes.
func (f *logFollower) note(key, msg string) {
	if f.notes[key] != msg {
		f.notes[key] = msg
		fmt.Fprintln(f.stderr, msg)
	}
}

// pass looks at every step of r once (one list of its pods for all); gone is how many steps'
// logs are gone.
func (f *logFollower) pass(ctx context.Context, r *run) (gone int, err error) {
	srcs, err := f.k.sources(ctx, r, f.orStep)
	if err != nil {
		return 0, err
	}
	pods, err := f.k.podsOf(ctx, r, f.workflowStep)
	if err != nil {
		return 0, err
	}
	for _, src := range srcs {
		var mine []corev1.Pod
		if src.ar != nil {
			mine = pods[agentsv1alpha1.LabelValue(src.ar.Name)]
		}
		isGone, err := f.source(ctx, r, src, mine)
		if err != nil {
			return 0, err
		}
		if isGone {
			gone++
		}
	}
	return gone, nil
}

// source starts the streams of one step's pods, or says why it has none.
func (f *logFollower) source(ctx context.Context, r *run, src logSource, pods []corev1.Pod) (gone bool, err error) {
	label := r.ref()
	if src.step != "" {
		label = "[" + src.step + "]"
	}
	switch {
	case src.taken != nil:
		f.note(src.step, fmt.Sprintf("%s succeeded in orchestrationrun/%s and did not run again here (its AgentRun: %s): agentctl logs run %s --step %s",
			label, r.retryOf, src.taken.ResourceRef.Name, r.retryOf, src.step))
		return false, nil
	case src.ar == nil:
		if r.finishedRun() {
			f.note(src.step, fmt.Sprintf("%s never ran: %s", label, none(src.never)))
		}
		return false, nil
	}
	if len(pods) == 0 {
		msg, isGone, err := f.k.noPods(ctx, src.ar, label)
		if err != nil {
			return false, err
		}
		if isGone || !f.o.follow {
			f.note(src.step, msg)
		}
		return isGone, nil
	}
	for i := range pods {
		f.pod(label, src.step, &pods[i])
	}
	return false, nil
}

// pod starts a stream for each of the pod's containers that has started (and has none yet):
// read at once without -f, in the background with it.
func (f *logFollower) pod(label, step string, pod *corev1.Pod) {
	for _, c := range pod.Spec.Containers {
		key := pod.Name + "/" + c.Name
		if f.started[key] {
			continue
		}
		ok, ended := containerState(pod, c.Name)
		if !ok {
			if !f.o.follow {
				f.note(key, fmt.Sprintf("%s pod %s: container %s has not started (%s)", label, pod.Name, c.Name, pod.Status.Phase))
			}
			continue
		}
		f.started[key] = true
		opts := &corev1.PodLogOptions{Container: c.Name, Follow: f.o.follow && !ended, Timestamps: f.o.timestamps}
		what := fmt.Sprintf("%s pod %s container %s", label, pod.Name, c.Name)
		read := func() { f.read(key, what, pod, opts, prefix(step, pod, c.Name)) }
		if !f.o.follow {
			read()
			continue
		}
		f.wg.Add(1)
		go func() { defer f.wg.Done(); read() }()
	}
}

// read copies one container's log, each line prefixed.
func (f *logFollower) read(key, what string, pod *corev1.Pod, opts *corev1.PodLogOptions, p string) {
	rc, err := f.k.core.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, opts).Stream(f.streams)
	if err != nil {
		if f.streams.Err() == nil {
			f.note(key, fmt.Sprintf("%s: %v", what, err))
		}
		return
	}
	if err := f.lw.copy(f.streams, p, rc); err != nil && f.streams.Err() == nil {
		f.note(key, fmt.Sprintf("%s: the log stream broke: %v", what, err))
	}
}

// finish waits (up to the grace period) for the open streams to end, then ends them.
func (f *logFollower) finish(ctx context.Context, cancel context.CancelFunc) {
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(f.o.grace):
	case <-ctx.Done():
	}
	cancel()
	f.wg.Wait()
}

// logs prints (and with -f follows) the logs of r's pods.
func (k *kube) logs(ctx context.Context, r *run, o *logsOptions, stdout, stderr io.Writer) error {
	f := &logFollower{k: k, o: o, lw: &lineWriter{w: stdout}, stderr: stderr, orStep: o.step, started: map[string]bool{}, notes: map[string]string{}}
	if r.ar != nil && o.step != "" {
		if r.ar.Spec.Workflow == nil {
			return withCode(ExitUsage, fmt.Errorf("--step names a step: %s is an AgentRun of the %s runtime, which has none", r.ref(), r.runtimeTy))
		}
		f.orStep, f.workflowStep = "", o.step
	}
	streams, cancelStreams := context.WithCancel(ctx)
	defer cancelStreams()
	f.streams = streams
	var gone int
	for {
		var err error
		if gone, err = f.pass(ctx, r); err != nil {
			return err
		}
		if !o.follow {
			break
		}
		if r.finishedRun() { // this last pass after the end caught the last pods
			f.finish(ctx, cancelStreams)
			break
		}
		select {
		case <-ctx.Done():
			cancelStreams()
			f.wg.Wait()
			return nil
		case <-time.After(o.poll):
		}
		cur, err := k.reread(ctx, r)
		if err != nil {
			return err
		}
		if cur != nil { // nil: ctx ended
			r = cur
		}
	}
	if gone > 0 && !f.lw.printed {
		return withCode(ExitRejected, fmt.Errorf("the logs of %s are gone (see above)", r.ref()))
	}
	return nil
}

// noPods says why a run has no pods: not started yet, or its logs are gone with its Job.
func (k *kube) noPods(ctx context.Context, ar *agentsv1alpha1.AgentRun, label string) (msg string, gone bool, err error) {
	finished := ""
	if ar.Status.FinishedAt != nil {
		finished = fmt.Sprintf(" The run finished at %s (%s ago).", ar.Status.FinishedAt.UTC().Format(time.RFC3339), age(*ar.Status.FinishedAt, now()))
	}
	if ar.Status.JobRef == nil || ar.Status.JobRef.Name == "" {
		phase := ar.Status.Phase
		if phase == "" {
			phase = agentsv1alpha1.PhasePending
		}
		if ar.Status.FinishedAt != nil {
			return fmt.Sprintf("%s has no logs: it ended %s without a Job (%s).", label, phase, none(oneLine(ar.Status.Message))), true, nil
		}
		return fmt.Sprintf("%s has no pod yet (%s: %s).", label, phase, none(oneLine(ar.Status.Message))), false, nil
	}
	name := ar.Status.JobRef.Name
	job, err := k.core.BatchV1().Jobs(ar.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("%s logs gone: Job %s, whose pods held them, no longer exists. Kubernetes deletes a finished Job and its pods "+
			"ttlSecondsAfterFinished after it finishes (run-controller's JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS, its chart's "+
			"controller.jobTtlSecondsAfterFinished), and job-gc deletes a run's Jobs when the run's retention ends.%s", label, name, finished), true, nil
	case err != nil:
		return "", false, apiError(err, "get job "+name)
	}
	if end := jobEnd(job); end != nil {
		ttl := ""
		if job.Spec.TTLSecondsAfterFinished != nil {
			ttl = fmt.Sprintf(" Kubernetes deletes the Job itself %ds after it finished (%s).", *job.Spec.TTLSecondsAfterFinished, end.UTC().Format(time.RFC3339))
		}
		return fmt.Sprintf("%s logs gone: Job %s has no pods left (deleted after it finished, e.g. by pod garbage collection).%s%s", label, name, ttl, finished), true, nil
	}
	return fmt.Sprintf("%s: Job %s has no pod yet.", label, name), false, nil
}

// jobEnd is when a Job finished, nil while it runs.
func jobEnd(j *batchv1.Job) *metav1.Time {
	if j.Status.CompletionTime != nil {
		return j.Status.CompletionTime
	}
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			t := c.LastTransitionTime
			return &t
		}
	}
	return nil
}
