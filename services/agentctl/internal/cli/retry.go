package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

// again is a new run made from r: a retry (spec.retryOf; for an OrchestrationRun run-controller
// then runs only the steps that did not succeed) or a resubmit (the whole run again, recorded in
// the agents.proompteng.ai/resubmit-of annotation). Its spec is r's, without the cancel; its
// labels and annotations are r's own (not what run-controller or the API server recorded).
func again(r *run, retry bool, name string) *run {
	meta := metav1.ObjectMeta{Name: name, Namespace: r.meta.Namespace, Labels: copyLabels(r.meta.Labels), Annotations: copyAnnotations(r.meta.Annotations)}
	if name == "" {
		meta.GenerateName = r.meta.GenerateName
		if meta.GenerateName == "" {
			meta.GenerateName = r.meta.Name + "-"
		}
	}
	if !retry {
		meta.Annotations[agentsv1alpha1.AnnotationResubmitOf] = r.meta.Name
	}
	if r.ar != nil {
		spec := *r.ar.Spec.DeepCopy()
		spec.Cancel, spec.RetryOf = false, ""
		if retry {
			spec.RetryOf = r.meta.Name
		}
		return fromAgentRun(&agentsv1alpha1.AgentRun{ObjectMeta: meta, Spec: spec})
	}
	spec := *r.or.Spec.DeepCopy()
	spec.Cancel, spec.RetryOf = false, ""
	if retry {
		spec.RetryOf = r.meta.Name
	}
	return fromOrchestrationRun(&orchv1alpha1.OrchestrationRun{ObjectMeta: meta, Spec: spec})
}

// mayRetry says why r cannot be retried (or resubmitted), if it cannot.
func mayRetry(r *run, retry bool) error {
	if r.stepOf != "" {
		verb := "retry"
		if !retry {
			verb = "resubmit"
		}
		return withCode(ExitRejected, fmt.Errorf("%s is step %s of orchestrationrun/%s, which runs it: agentctl %s run orchestrationrun/%s",
			r.ref(), r.stepName, r.stepOf, verb, r.stepOf))
	}
	if !retry {
		return nil
	}
	switch {
	case !r.finishedRun():
		return withCode(ExitRejected, fmt.Errorf("%s is %s: a retry runs again what did not succeed once the run has ended (agentctl wait run %s, or agentctl cancel)",
			r.ref(), r.phaseOrPending(), r.meta.Name))
	case r.phase == agentsv1alpha1.PhaseSucceeded:
		return withCode(ExitRejected, fmt.Errorf("%s Succeeded: there is nothing to retry; agentctl resubmit run %s runs it all again", r.ref(), r.meta.Name))
	}
	return nil
}

func newRetryCommand(g *globalOptions, retry bool) *cobra.Command {
	f := &followFlags{}
	use, short, long, example := "retry run NAME", "Run again what did not succeed in a finished run",
		`Creates a new run from a run that ended Failed or Cancelled, as argo retry does, recording
where it came from in its spec.retryOf. For an OrchestrationRun only the steps that did not succeed
run again: run-controller records the steps that succeeded there as Succeeded in the new run,
pointing at their AgentRuns, and starts the failed, cancelled and never-run ones as their
dependencies allow. An AgentRun runs again whole. The new run has the same spec (parameters
included, without the cancel), labels and annotations; the API server records its creator anew.
A run that is still going, or Succeeded, is refused (resubmit runs a run again whole); so is a
step of an OrchestrationRun (retry the OrchestrationRun).

--watch, --wait, --timeout, --name, --dry-run and -o work as for submit.

`, `  agentctl retry run plan-and-implement-1 --watch
  agentctl retry run agentrun/hello --wait`
	if !retry {
		use, short, long, example = "resubmit run NAME", "Run a run again from the start, whatever it did",
			`Creates a new run with the same spec as the run (parameters included, without the cancel),
labels and annotations, as argo resubmit does: every step runs again. The new run records where
it came from in its agents.proompteng.ai/resubmit-of annotation. Any run can be resubmitted, in
any phase, except a step of an OrchestrationRun (resubmit the OrchestrationRun).

--watch, --wait, --timeout, --name, --dry-run and -o work as for submit.

`, `  agentctl resubmit run hello --watch
  agentctl resubmit run orchestrationrun/plan-and-implement-1 --name plan-and-implement-2`
	}
	verb := map[bool]string{true: "retry", false: "resubmit"}[retry]
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long + runExitCodesHelp, Example: example,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: nounCompletion("run"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(); err != nil {
				return err
			}
			_, r, err := g.targetRun(cmd.Context(), args[0], args[1], verb)
			if err != nil {
				return err
			}
			if err := mayRetry(r, retry); err != nil {
				return err
			}
			return submitRun(cmd, g, f, again(r, retry, f.name), "", fmt.Sprintf(" (%s of %s)", verb, r.meta.Name))
		},
	}
	f.add(cmd)
	return cmd
}
