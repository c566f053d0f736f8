package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/reasons"
)

// cancelPatch is what agentctl cancel sends: the merge patch kubectl patch would.
var cancelPatch = []byte(`{"spec":{"cancel":true}}`)

func newCancelCommand(g *globalOptions) *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "cancel (run|orchestrationrun|agentrun) NAME",
		Short: "Cancel a run: everything it started is stopped and it ends Cancelled",
		Long: `Sets spec.cancel on an OrchestrationRun or AgentRun (the same merge patch as
kubectl -n NS patch orchestrationrun NAME --type=merge -p '{"spec":{"cancel":true}}').
cancel-propagator then stops the run's AgentRuns, Jobs (pods deleted with their grace period) and
Argo Workflows, and writes the run Cancelled. A run that already Succeeded or Failed keeps its
phase. A cancel cannot be undone. "run NAME" finds the run of either kind (say
orchestrationrun NAME or agentrun NAME if both kinds have the name).

With --wait, agentctl returns once the run is finished and prints how it ended. Exit codes:
0 cancel requested (with --wait: the run is finished, Cancelled or already Succeeded/Failed);
2 bad usage, or a name both kinds have; 4 the API server refused the credentials or the access;
5 no such run; 9 --timeout passed before the run finished; 1 anything else.`,
		Example: `  agentctl -n agents cancel orchestrationrun plan-and-implement-1 --wait
  agentctl -n agents cancel run hello`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: nounCompletion("run", "orchestrationrun", "agentrun"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			k, r, err := g.targetRun(ctx, args[0], args[1], "cancel")
			if err != nil {
				return err
			}
			if err := k.cancel(ctx, r); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s cancel requested\n", r.ref())
			if !wait {
				return nil
			}
			line, err := k.waitCancelled(ctx, r, timeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", r.ref(), line)
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the run is finished and print how it ended")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long --wait waits")
	return cmd
}

// cancel patches spec.cancel onto the run.
func (k *kube) cancel(ctx context.Context, r *run) error {
	var err error
	opts := metav1.PatchOptions{FieldManager: "agentctl"}
	if r.kind == kindOrchestrationRun {
		_, err = k.runs.OrchestrationV1alpha1().OrchestrationRuns(r.meta.Namespace).Patch(ctx, r.meta.Name, types.MergePatchType, cancelPatch, opts)
	} else {
		_, err = k.runs.AgentsV1alpha1().AgentRuns(r.meta.Namespace).Patch(ctx, r.meta.Name, types.MergePatchType, cancelPatch, opts)
	}
	if apierrors.IsNotFound(err) {
		return withCode(ExitRejected, fmt.Errorf("%s was deleted before it could be cancelled", r.ref()))
	}
	return apiError(err, "cancel "+r.ref())
}

// waitCancelled polls the run until it is finished (or gone), saying how it ended; ExitTimedOut
// once timeout passed.
func (k *kube) waitCancelled(ctx context.Context, r *run, timeout time.Duration) (string, error) {
	wctx, stop := context.WithTimeout(ctx, timeout)
	defer stop()
	for {
		cur, err := k.getKind(wctx, r.meta.Namespace, r.kind, r.meta.Name)
		switch {
		case apierrors.IsNotFound(err):
			return "is gone", nil
		case err == nil:
			if line, done := cancelOutcome(cur); done {
				return line, nil
			}
		case wctx.Err() == nil:
			if perm, ok := permanent(err, "the API server"); ok {
				return "", apiError(perm, "read "+r.ref())
			}
		}
		select {
		case <-wctx.Done():
			if errors.Is(wctx.Err(), context.DeadlineExceeded) {
				return "", withCode(ExitTimedOut, fmt.Errorf("%s is not finished after %s: see agentctl describe run %s", r.ref(), timeout, r.ref()))
			}
			return "", wctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// cancelOutcome says how a run ended, once it has.
func cancelOutcome(r *run) (string, bool) {
	switch r.phase {
	case agentsv1alpha1.PhaseCancelled:
		return "Cancelled: " + r.message, true
	case agentsv1alpha1.PhaseSucceeded, agentsv1alpha1.PhaseFailed:
		for _, c := range r.conditions {
			if c.Type == reasons.CondCancelled && c.Reason == reasons.CancelIgnoredTerminal {
				return fmt.Sprintf("%s: %s", r.phase, c.Message), true
			}
		}
	}
	return "", false
}
