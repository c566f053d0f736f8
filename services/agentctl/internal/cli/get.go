package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

func newGetCommand(g *globalOptions) *cobra.Command {
	var selector string
	var allNamespaces, watchFlag bool
	var out *outputFlags
	arch := &archivedOptions{}
	cmd := &cobra.Command{
		Use:   "get (runs|agentruns|orchestrationruns) [NAME...]",
		Short: "List runs: AgentRuns and OrchestrationRuns, with their phase, steps and duration",
		Long: `Lists runs as kubectl get does: "runs" (or "run") lists AgentRuns and OrchestrationRuns
together; agentruns (ar) and orchestrationruns (or) list one kind. Names narrow the list to those
runs. The table shows each run's phase, what it runs (agent/NAME or orchestration/NAME), its
steps (succeeded of all, for OrchestrationRuns and workflow AgentRuns), how long it ran and its
age; -o wide adds the reason, where it came from (retry of, resubmit of) and the message.

-o json|yaml|name|jsonpath=...|go-template=...|custom-columns=... print the objects as kubectl
does (a List when a kind was listed). --watch prints each change after the list, until
interrupted.

--archived lists finished runs from the run archive instead (PostgreSQL, written by job-gc before
a run is deleted, by retention or by hand), newest finished first, read through watch-gateway as
agentctl status history reads it; your rights are a live run's (list agentruns or
orchestrationruns in the namespace). --phase, --agent, --since and --until filter it, --limit and
--continue page through it.

` + runExitCodesHelp,
		Example: `  agentctl get runs
  agentctl get runs -A -o wide
  agentctl get agentruns -l agents.proompteng.ai/agent=codex
  agentctl get orchestrationruns plan-and-implement-1 -o yaml
  agentctl get runs -o custom-columns=NAME:.metadata.name,PHASE:.status.phase --no-headers
  agentctl get runs --watch
  agentctl get runs --archived --phase Failed --since 168h`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: nounCompletion("runs", "agentruns", "orchestrationruns"),
		RunE: func(cmd *cobra.Command, args []string) error {
			kinds, ok := runKindNames[strings.ToLower(args[0])]
			if !ok {
				return withCode(ExitUsage, fmt.Errorf("agentctl get lists runs: %q is not runs, agentruns or orchestrationruns (kubectl get lists anything else)", args[0]))
			}
			if arch.archived {
				if err := archivedOnly(cmd, "selector", "all-namespaces", "watch", "no-headers", "show-labels", "template"); err != nil {
					return err
				}
				return getArchived(cmd, g, arch, kinds, args[1:], *out.print.OutputFormat)
			}
			if err := archivedFlagsWithout(cmd); err != nil {
				return err
			}
			p, err := out.printer(allNamespaces)
			if err != nil {
				return err
			}
			k, err := g.kubeClients()
			if err != nil {
				return err
			}
			ns := k.namespace
			if allNamespaces {
				ns = metav1.NamespaceAll
			}
			ctx := cmd.Context()
			runs, rv, err := k.selectRuns(ctx, ns, kinds, args[1:], selector)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if len(runs) == 0 && out.human() && !watchFlag {
				where := "namespace " + ns
				if allNamespaces {
					where = "any namespace"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "No runs found in %s.\n", where)
				return nil
			}
			if err := p.print(w, runs, len(args) == 1 || len(args) > 2); err != nil {
				return err
			}
			if !watchFlag {
				return nil
			}
			var named []*run
			if len(args) > 1 {
				named = runs
			}
			return k.watchRuns(ctx, ns, kinds, named, rv, selector, func(r *run) error { return p.print(w, []*run{r}, false) })
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector (e.g. agents.proompteng.ai/agent=codex)")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "list runs in every namespace")
	cmd.Flags().BoolVarP(&watchFlag, "watch", "w", false, "after the list, print each change until interrupted")
	out = newOutputFlags(cmd)
	addArchivedFlags(cmd, arch, true)
	return cmd
}

// selectRuns lists the runs of kinds, or reads the named ones; rv is where a watch of each kind
// picks up after them.
func (k *kube) selectRuns(ctx context.Context, ns string, kinds, names []string, selector string) (runs []*run, rv map[string]string, err error) {
	if len(names) == 0 {
		return k.listRuns(ctx, ns, kinds, metav1.ListOptions{LabelSelector: selector})
	}
	if ns == metav1.NamespaceAll {
		return nil, nil, withCode(ExitUsage, fmt.Errorf("names a run in one namespace: use -n, not -A, with names"))
	}
	for _, n := range names {
		nk, name, err := runArg(n)
		if err != nil {
			return nil, nil, err
		}
		r, err := k.getRun(ctx, ns, intersect(kinds, nk), name)
		if err != nil {
			return nil, nil, err
		}
		runs = append(runs, r)
	}
	return runs, nil, nil
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
			}
		}
	}
	return out
}

// watchRuns calls emit with each change to a run of kinds after rv (the list's), or, for named
// runs, to those runs after what was read, until ctx ends or a watch does.
func (k *kube) watchRuns(ctx context.Context, ns string, kinds []string, named []*run, rv map[string]string, selector string, emit func(*run) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type target struct {
		kind string
		opts metav1.ListOptions
	}
	var targets []target
	if named == nil {
		for _, kind := range kinds {
			targets = append(targets, target{kind, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv[kind]}})
		}
	}
	for _, r := range named {
		targets = append(targets, target{r.kind, metav1.ListOptions{FieldSelector: "metadata.name=" + r.meta.Name, ResourceVersion: r.meta.ResourceVersion}})
	}
	events := make(chan *run)
	errs := make(chan error, len(targets))
	for _, t := range targets {
		var w watch.Interface
		var err error
		if t.kind == kindOrchestrationRun {
			w, err = k.runs.OrchestrationV1alpha1().OrchestrationRuns(ns).Watch(ctx, t.opts)
		} else {
			w, err = k.runs.AgentsV1alpha1().AgentRuns(ns).Watch(ctx, t.opts)
		}
		if err != nil {
			return apiError(err, "watch "+strings.ToLower(t.kind)+"s")
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				var r *run
				switch o := ev.Object.(type) {
				case *agentsv1alpha1.AgentRun:
					r = fromAgentRun(o)
				case *orchv1alpha1.OrchestrationRun:
					r = fromOrchestrationRun(o)
				default:
					continue
				}
				select {
				case events <- r:
				case <-ctx.Done():
					return
				}
			}
			errs <- fmt.Errorf("the API server ended the watch of %ss: run agentctl get again", strings.ToLower(t.kind))
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if ctx.Err() != nil {
				return nil
			}
			return withCode(ExitUnavailable, err)
		case r := <-events:
			if err := emit(r); err != nil {
				return err
			}
		}
	}
}
