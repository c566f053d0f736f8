package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

// waitFor is what agentctl waits for: a phase, a condition (type, and status, True by default),
// or, when both are empty, the run's end.
type waitFor struct {
	phase              string
	condType, condStat string
}

var phases = []string{agentsv1alpha1.PhasePending, agentsv1alpha1.PhaseRunning, agentsv1alpha1.PhaseSucceeded, agentsv1alpha1.PhaseFailed, agentsv1alpha1.PhaseCancelled}

// parseFor reads --for: phase=PHASE or condition=TYPE[=STATUS] (kubectl's form); "" is the end.
func parseFor(s string) (waitFor, error) {
	if s == "" {
		return waitFor{}, nil
	}
	key, val, _ := strings.Cut(s, "=")
	switch strings.ToLower(key) {
	case "phase":
		for _, p := range phases {
			if strings.EqualFold(p, val) {
				return waitFor{phase: p}, nil
			}
		}
		return waitFor{}, withCode(ExitUsage, fmt.Errorf("--for %s: a run's phase is one of %s", s, strings.Join(phases, ", ")))
	case "condition":
		typ, status, hasStatus := strings.Cut(val, "=")
		if typ == "" {
			return waitFor{}, withCode(ExitUsage, fmt.Errorf("--for %s: name the condition, e.g. --for condition=Ready or condition=Ready=False", s))
		}
		if !hasStatus {
			status = string(metav1.ConditionTrue)
		}
		return waitFor{condType: typ, condStat: status}, nil
	}
	return waitFor{}, withCode(ExitUsage, fmt.Errorf("--for %q: want phase=PHASE or condition=TYPE[=STATUS] (e.g. --for phase=Succeeded)", s))
}

func (w waitFor) String() string {
	switch {
	case w.phase != "":
		return "phase=" + w.phase
	case w.condType != "":
		return "condition=" + w.condType + "=" + w.condStat
	}
	return "its end"
}

// outcome decides a wait from the run as it is now: done, and the exit code it ends with (0
// reached; 7 Failed, 8 Cancelled, 10 Succeeded without reaching it).
func (w waitFor) outcome(r *run) (done bool, code int) {
	switch {
	case w.phase != "":
		if r.phaseOrPending() == w.phase {
			return true, ExitOK
		}
	case w.condType != "":
		for _, c := range r.conditions {
			if strings.EqualFold(c.Type, w.condType) && strings.EqualFold(string(c.Status), w.condStat) {
				return true, ExitOK
			}
		}
	default:
		if r.phase == agentsv1alpha1.PhaseSucceeded {
			return true, ExitOK
		}
	}
	switch r.phase {
	case agentsv1alpha1.PhaseFailed:
		return true, ExitRunFailed
	case agentsv1alpha1.PhaseCancelled:
		return true, ExitRunCancelled
	case agentsv1alpha1.PhaseSucceeded:
		return true, ExitUnreachable
	}
	return false, 0
}

// endError is the error a finished wait ends with (nil when it reached what it waited for).
func endError(r *run, w waitFor, code int) error {
	msg := ""
	if r.message != "" {
		msg = ": " + r.message
	}
	switch code {
	case ExitOK:
		return nil
	case ExitUnreachable:
		return withCode(code, fmt.Errorf("%s ended %s without reaching %s%s", r.ref(), r.phase, w, msg))
	}
	return withCode(code, fmt.Errorf("%s ended %s%s (agentctl describe run %s; agentctl logs run %s)", r.ref(), r.phase, msg, r.meta.Name, r.meta.Name))
}

// waitRun follows the run until w decides it or timeout passes (0: no limit), calling progress
// (if not nil) with the run as first read and on every change. It returns the run as last seen
// and the exit error.
func (k *kube) waitRun(ctx context.Context, r *run, w waitFor, timeout time.Duration, progress func(*run)) (*run, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if progress != nil {
		progress(r)
	}
	for {
		if done, code := w.outcome(r); done {
			return r, endError(r, w, code)
		}
		next, err := k.watchOne(ctx, r, func(cur *run) bool {
			if progress != nil {
				progress(cur)
			}
			done, _ := w.outcome(cur)
			return done
		})
		switch {
		case ctx.Err() != nil:
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return r, withCode(ExitTimedOut, fmt.Errorf("%s is %s after %s, not yet %s (wait longer with --timeout)", r.ref(), r.phaseOrPending(), timeout, w))
			}
			return r, ctx.Err()
		case err != nil:
			return r, err
		}
		if next != nil {
			r = next
		}
	}
}

// watchOne watches one run from the version read, calling stop with each change until it says
// stop; it returns the run last seen (nil if none came) once stop said so or the watch ended (the
// caller reads it again and carries on).
func (k *kube) watchOne(ctx context.Context, r *run, stop func(*run) bool) (*run, error) {
	opts := metav1.ListOptions{FieldSelector: "metadata.name=" + r.meta.Name, ResourceVersion: r.meta.ResourceVersion}
	var wi watch.Interface
	var err error
	if r.kind == kindOrchestrationRun {
		wi, err = k.runs.OrchestrationV1alpha1().OrchestrationRuns(r.meta.Namespace).Watch(ctx, opts)
	} else {
		wi, err = k.runs.AgentsV1alpha1().AgentRuns(r.meta.Namespace).Watch(ctx, opts)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return k.reread(ctx, r)
		}
		return nil, apiError(err, "watch "+r.ref())
	}
	defer wi.Stop()
	var last *run
	for {
		select {
		case <-ctx.Done():
			return last, nil
		case ev, ok := <-wi.ResultChan():
			if !ok {
				if last == nil {
					return k.reread(ctx, r)
				}
				return last, nil
			}
			switch o := ev.Object.(type) {
			case *agentsv1alpha1.AgentRun:
				last = fromAgentRun(o)
			case *orchv1alpha1.OrchestrationRun:
				last = fromOrchestrationRun(o)
			case *metav1.Status:
				if apierrors.IsResourceExpired(apierrors.FromObject(o)) || apierrors.IsGone(apierrors.FromObject(o)) {
					return k.reread(ctx, r)
				}
				return last, apiError(apierrors.FromObject(o), "watch "+r.ref())
			default:
				continue
			}
			if ev.Type == watch.Deleted {
				return nil, withCode(ExitRejected, fmt.Errorf("%s was deleted while agentctl waited for it", r.ref()))
			}
			if stop(last) {
				return last, nil
			}
		}
	}
}

// reread reads the run again (its watch had to start over).
func (k *kube) reread(ctx context.Context, r *run) (*run, error) {
	cur, err := k.getKind(ctx, r.meta.Namespace, r.kind, r.meta.Name)
	switch {
	case ctx.Err() != nil:
		return nil, nil
	case apierrors.IsNotFound(err):
		return nil, withCode(ExitRejected, fmt.Errorf("%s was deleted while agentctl waited for it", r.ref()))
	case err != nil:
		return nil, apiError(err, "get "+r.ref())
	}
	return cur, nil
}

func newWaitCommand(g *globalOptions) *cobra.Command {
	var forFlag string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait run NAME [--for phase=PHASE|condition=TYPE[=STATUS]]",
		Short: "Wait until a run reaches a phase or a condition, or ends",
		Long: `Waits until the run (an AgentRun or an OrchestrationRun; say agentrun/NAME or
orchestrationrun/NAME if both kinds have the name) reaches what --for names: phase=PHASE
(Pending, Running, Succeeded, Failed, Cancelled) or condition=TYPE[=STATUS] (STATUS True by
default). Without --for it waits for the run's end and succeeds only if the run Succeeded.

Each way a wait can end has its own exit code, for scripts and CI gates:
  0   reached (for no --for: the run Succeeded)
  7   the run ended Failed first
  8   the run ended Cancelled first
  9   --timeout passed first
  10  the run ended Succeeded without reaching it (e.g. --for phase=Failed)
and, as every command: 2 bad usage, 4 access refused, 5 the run does not exist (or was deleted
while waiting), 1 anything else.`,
		Example: `  agentctl wait run hello
  agentctl wait run plan-and-implement-1 --for phase=Succeeded --timeout 30m
  agentctl wait run agentrun/hello --for condition=Ready=False`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: nounCompletion("run"),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := parseFor(forFlag)
			if err != nil {
				return err
			}
			k, r, err := g.targetRun(cmd.Context(), args[0], args[1], "wait")
			if err != nil {
				return err
			}
			r, err = k.waitRun(cmd.Context(), r, w, timeout, nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", r.ref(), reachedLine(r, w))
			return nil
		},
	}
	cmd.Flags().StringVar(&forFlag, "for", "", "what to wait for: phase=PHASE or condition=TYPE[=STATUS] (default: the run's end, succeeding only if it Succeeded)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long to wait (0: no limit)")
	return cmd
}

func reachedLine(r *run, w waitFor) string {
	if w.phase == "" && w.condType == "" {
		return r.phase
	}
	return w.String() + " reached (" + r.phaseOrPending() + ")"
}

// nounCompletion completes a verb's first argument, its noun (run, runs, ...), and nothing after.
func nounCompletion(nouns ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nouns, cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

// targetRun reads the run a verb names (agentctl VERB NOUN NAME, runTarget) from the kubeconfig's
// API server, with the clients the verb goes on with.
func (g *globalOptions) targetRun(ctx context.Context, noun, arg, verb string) (*kube, *run, error) {
	kinds, name, err := runTarget(noun, arg, verb)
	if err != nil {
		return nil, nil, err
	}
	k, err := g.kubeClients()
	if err != nil {
		return nil, nil, err
	}
	r, err := k.getRun(ctx, k.namespace, kinds, name)
	if err != nil {
		return nil, nil, err
	}
	return k, r, nil
}

// runTarget reads the noun and name of a run verb (agentctl VERB run NAME, VERB agentrun NAME,
// VERB run orchestrationrun/NAME): the kinds the run may be, and its name.
func runTarget(noun, arg, verb string) ([]string, string, error) {
	nk, ok := runKindNames[strings.ToLower(noun)]
	if !ok {
		return nil, "", withCode(ExitUsage, fmt.Errorf("agentctl %s works on runs: agentctl %s run NAME (NAME, agentrun/NAME or orchestrationrun/NAME)", verb, verb))
	}
	ak, name, err := runArg(arg)
	if err != nil {
		return nil, "", err
	}
	kinds := intersect(nk, ak)
	if len(kinds) == 0 {
		return nil, "", withCode(ExitUsage, fmt.Errorf("%s is not a %s", arg, noun))
	}
	return kinds, name, nil
}
