package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

// description is everything agentctl describe shows of a run, read once; printing it is a pure
// function of it (and the clock), so the golden tests print it from fixed objects.
type description struct {
	run *run
	// jobs are the run's Jobs (of an OrchestrationRun: its steps' Jobs), oldest first.
	jobs []batchv1.Job
	// events are the run's Events, oldest first.
	events []corev1.Event
	// orch is the OrchestrationRun's Orchestration, for the step tree (nil if gone).
	orch *orchv1alpha1.Orchestration
}

func newDescribeCommand(g *globalOptions) *cobra.Command {
	arch := &archivedOptions{}
	var uid string
	cmd := &cobra.Command{
		Use:   "describe run NAME",
		Short: "Show a run in detail: phase, times, conditions, steps, Jobs and events",
		Long: `Shows one run (an AgentRun or an OrchestrationRun; say agentrun/NAME or
orchestrationrun/NAME if both kinds have the name) as kubectl describe does: what it runs, its
phase, reason and message, when it was created, started and finished and how long it ran, where
it came from (retry of, resubmit of), its parameters and conditions; for an OrchestrationRun the
tree of its steps (each under the step it depends on, with its phase, duration and AgentRun);
the run's Jobs with their pods; and its events.

--archived shows a run from the run archive instead, after it has left the cluster: the newest
archived run of that name (--uid for another), with what job-gc kept when it finished: its
final object, conditions and steps, its Jobs' outcomes (exit codes, durations), its Events and
the tails of its steps' logs. It is read through watch-gateway with a live run's rights: get on
the run's resource; the Events, Jobs and logs only if you may list events, list jobs and get
pods/log in the namespace (what is left out is named).

` + runExitCodesHelp,
		Example: `  agentctl describe run hello
  agentctl -n agents describe run orchestrationrun/plan-and-implement-1
  agentctl describe run hello --archived`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: nounCompletion("run"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if arch.archived {
				if n := strings.ToLower(args[0]); n != "run" && n != "runs" {
					return withCode(ExitUsage, fmt.Errorf("agentctl describe describes a run: say describe run NAME, not %q", args[0]))
				}
				return describeArchived(cmd, g, arch, args[1], uid)
			}
			if err := archivedFlagsWithout(cmd); err != nil {
				return err
			}
			k, r, err := g.targetRun(cmd.Context(), args[0], args[1], "describe")
			if err != nil {
				return err
			}
			d, err := k.describe(cmd.Context(), r)
			if err != nil {
				return err
			}
			return d.print(cmd.OutOrStdout(), now())
		},
	}
	addArchivedFlags(cmd, arch, false)
	cmd.Flags().StringVar(&uid, "uid", "", "with --archived: the archived run with this uid (a name can have been used by several runs)")
	return cmd
}

// describe reads what describe shows besides the run.
func (k *kube) describe(ctx context.Context, r *run) (*description, error) {
	d := &description{run: r}
	ns := r.meta.Namespace
	var selector string
	if r.or != nil {
		selector = agentsv1alpha1.LabelOrchestrationRun + "=" + agentsv1alpha1.LabelValue(r.meta.Name)
		orch, err := k.runs.OrchestrationV1alpha1().Orchestrations(ns).Get(ctx, r.or.Spec.OrchestrationRef.Name, metav1.GetOptions{})
		if err == nil {
			d.orch = orch
		}
	} else {
		selector = agentsv1alpha1.LabelAgentRun + "=" + agentsv1alpha1.LabelValue(r.meta.Name)
	}
	jobs, err := k.core.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, apiError(err, "list the Jobs of "+r.ref())
	}
	d.jobs = jobs.Items
	sort.SliceStable(d.jobs, func(i, j int) bool { return d.jobs[i].CreationTimestamp.Before(&d.jobs[j].CreationTimestamp) })
	events, err := k.core.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(r.meta.UID)).String()})
	if err != nil {
		return nil, apiError(err, "list the events of "+r.ref())
	}
	d.events = events.Items
	sort.SliceStable(d.events, func(i, j int) bool { return eventTime(d.events[i]).Before(eventTime(d.events[j])) })
	return d, nil
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func timeLine(t *metav1.Time, at time.Time) string {
	if t == nil || t.IsZero() {
		return "<none>"
	}
	return t.UTC().Format(time.RFC3339) + " (" + age(*t, at) + " ago)"
}

// print writes the description at the time at.
func (d *description) print(out io.Writer, at time.Time) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	r := d.run
	field := func(name, value string) { fmt.Fprintf(w, "%s:\t%s\n", name, value) }
	field("Name", r.meta.Name)
	field("Namespace", r.meta.Namespace)
	field("Kind", r.kind)
	if r.or != nil {
		field("Orchestration", r.or.Spec.OrchestrationRef.Name)
	} else {
		field("Agent", r.ar.Spec.AgentRef.Name)
		field("Runtime", r.runtimeTy)
		if r.stepOf != "" {
			field("Step of", "orchestrationrun/"+r.stepOf+" (step "+r.stepName+")")
		}
	}
	field("Phase", r.phaseOrPending())
	field("Reason", none(r.reason))
	field("Message", none(oneLine(r.message)))
	field("Created", timeLine(&r.meta.CreationTimestamp, at))
	field("Started", timeLine(r.started, at))
	field("Finished", timeLine(r.finished, at))
	if dur, ok := r.duration(at); ok {
		field("Duration", durationText(dur))
	} else {
		field("Duration", "<none>")
	}
	field("Retry of", none(r.retryOf))
	field("Resubmit of", none(r.resubmitOf))
	if r.cancel {
		field("Cancel", "requested")
	}
	if len(r.parameters) == 0 {
		field("Parameters", "<none>")
	} else {
		fmt.Fprintln(w, "Parameters:")
		for _, k := range slices.Sorted(maps.Keys(r.parameters)) {
			fmt.Fprintf(w, "  %s:\t%s\n", k, r.parameters[k])
		}
	}
	d.printConditions(w, at)
	if r.or != nil {
		d.printSteps(w, at)
	}
	d.printJobs(w, at)
	d.printEvents(w, at)
	return w.Flush()
}

func (d *description) printConditions(w io.Writer, at time.Time) {
	if len(d.run.conditions) == 0 {
		fmt.Fprintln(w, "Conditions:\t<none>")
		return
	}
	fmt.Fprintln(w, "Conditions:")
	fmt.Fprintln(w, "  TYPE\tSTATUS\tREASON\tAGE\tMESSAGE")
	for _, c := range d.run.conditions {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, none(c.Reason), age(c.LastTransitionTime, at), none(oneLine(c.Message)))
	}
}

// stepTree is an OrchestrationRun's steps as printSteps draws them: each under the first step it
// depends on (also: the others), in the Orchestration's order.
type stepTree struct {
	roots    []string
	children map[string][]string
	also     map[string][]string
	status   map[string]orchv1alpha1.StepStatus
}

// newStepTree is the tree of the Orchestration's graph, or (if it is gone) the steps the status
// lists, flat.
func newStepTree(orch *orchv1alpha1.Orchestration, statuses []orchv1alpha1.StepStatus) *stepTree {
	t := &stepTree{children: map[string][]string{}, also: map[string][]string{}, status: map[string]orchv1alpha1.StepStatus{}}
	for _, s := range statuses {
		t.status[s.Name] = s
	}
	var order []string
	parent := map[string]string{}
	if orch != nil {
		for _, s := range orch.Spec.Steps {
			order = append(order, s.Name)
			if len(s.DependsOn) > 0 {
				parent[s.Name] = s.DependsOn[0]
				t.also[s.Name] = s.DependsOn[1:]
			}
		}
	} else {
		for _, s := range statuses {
			order = append(order, s.Name)
		}
	}
	for _, n := range order {
		if p, ok := parent[n]; ok {
			t.children[p] = append(t.children[p], n)
		} else {
			t.roots = append(t.roots, n)
		}
	}
	return t
}

// row is a step's cells: phase, duration, AgentRun and message.
func (t *stepTree) row(name string, at time.Time) (phase, dur, ref, msg string) {
	phase, dur, ref, msg = agentsv1alpha1.PhasePending, "-", "<none>", "<none>"
	s, ok := t.status[name]
	if !ok {
		return phase, dur, ref, msg
	}
	if s.Phase != "" {
		phase = s.Phase
	}
	if s.StartedAt != nil {
		end := at
		if s.FinishedAt != nil {
			end = s.FinishedAt.Time
		}
		dur = durationText(end.Sub(s.StartedAt.Time))
	}
	if s.ResourceRef != nil && s.ResourceRef.Name != "" {
		ref = s.ResourceRef.Name
	}
	return phase, dur, ref, none(oneLine(s.Message))
}

// printSteps writes an OrchestrationRun's steps as a tree (stepTree).
func (d *description) printSteps(w io.Writer, at time.Time) {
	statuses := d.run.or.Status.StepStatuses
	if len(statuses) == 0 && d.orch == nil {
		fmt.Fprintln(w, "Steps:\t<none>")
		return
	}
	t := newStepTree(d.orch, statuses)
	fmt.Fprintln(w, "Steps:")
	fmt.Fprintln(w, "  STEP\tPHASE\tDURATION\tAGENTRUN\tMESSAGE")
	seen := map[string]bool{}
	var walk func(name, prefix string, last, root bool)
	walk = func(name, prefix string, last, root bool) {
		if seen[name] {
			return
		}
		seen[name] = true
		branch, next := "", ""
		switch {
		case root:
		case last:
			branch, next = "└─ ", "   "
		default:
			branch, next = "├─ ", "│  "
		}
		label := name
		if extra := t.also[name]; len(extra) > 0 {
			label += " (also after " + strings.Join(extra, ", ") + ")"
		}
		phase, dur, ref, msg := t.row(name, at)
		fmt.Fprintf(w, "  %s%s%s\t%s\t%s\t%s\t%s\n", prefix, branch, label, phase, dur, ref, msg)
		kids := t.children[name]
		for i, c := range kids {
			walk(c, prefix+next, i == len(kids)-1, false)
		}
	}
	for _, n := range t.roots {
		walk(n, "", true, true)
	}
}

func (d *description) printJobs(w io.Writer, at time.Time) {
	if len(d.jobs) == 0 {
		fmt.Fprintln(w, "Jobs:\t<none>")
		return
	}
	fmt.Fprintln(w, "Jobs:")
	fmt.Fprintln(w, "  NAME\tSTEP\tSTATUS\tPODS (ACTIVE/SUCCEEDED/FAILED)\tAGE")
	for _, j := range d.jobs {
		step := j.Labels[agentsv1alpha1.LabelOrchestrationStep]
		if ws := j.Labels[agentsv1alpha1.LabelWorkflowStep]; ws != "" {
			step = strings.TrimPrefix(step+"/"+ws, "/")
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%d/%d/%d\t%s\n", j.Name, none(step), jobStatus(&j), j.Status.Active, j.Status.Succeeded, j.Status.Failed, age(j.CreationTimestamp, at))
	}
}

// jobStatus is a Job's state as kubectl get jobs says it.
func jobStatus(j *batchv1.Job) string {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return "Complete"
		case batchv1.JobFailed:
			return "Failed"
		case batchv1.JobSuspended:
			return "Suspended"
		case batchv1.JobFailureTarget:
			return "FailureTarget"
		}
	}
	if j.DeletionTimestamp != nil {
		return "Terminating"
	}
	return "Running"
}

func (d *description) printEvents(w io.Writer, at time.Time) {
	if len(d.events) == 0 {
		fmt.Fprintln(w, "Events:\t<none>")
		return
	}
	fmt.Fprintln(w, "Events:")
	fmt.Fprintln(w, "  TYPE\tREASON\tAGE\tFROM\tMESSAGE")
	for _, e := range d.events {
		from := e.ReportingController
		if from == "" {
			from = e.Source.Component
		}
		a := age(metav1.NewTime(eventTime(e)), at)
		if e.Count > 1 {
			a += fmt.Sprintf(" (x%d)", e.Count)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", e.Type, e.Reason, a, none(from), oneLine(e.Message))
	}
}

// durationText is a duration as a person reads it: 42s, 3m12s, 2h5m.
func durationText(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%ds", int(d.Seconds()))
	}
	if d < time.Hour {
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
