package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/agentplane/agentplane/libs/reasons"
)

// cancelKinds are the kinds agentctl cancel accepts, by the names kubectl users type.
var cancelKinds = map[string]schema.GroupVersionResource{
	"orchestrationrun":  {Group: "orchestration.proompteng.ai", Version: "v1alpha1", Resource: "orchestrationruns"},
	"orchestrationruns": {Group: "orchestration.proompteng.ai", Version: "v1alpha1", Resource: "orchestrationruns"},
	"or":                {Group: "orchestration.proompteng.ai", Version: "v1alpha1", Resource: "orchestrationruns"},
	"agentrun":          {Group: "agents.proompteng.ai", Version: "v1alpha1", Resource: "agentruns"},
	"agentruns":         {Group: "agents.proompteng.ai", Version: "v1alpha1", Resource: "agentruns"},
	"ar":                {Group: "agents.proompteng.ai", Version: "v1alpha1", Resource: "agentruns"},
}

func newCancelCommand(g *globalOptions) *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "cancel (orchestrationrun|agentrun) NAME",
		Short: "Cancel a run: everything it started is stopped and it ends Cancelled",
		Long: `Sets spec.cancel on an OrchestrationRun or AgentRun (the same merge patch as
kubectl -n NS patch orchestrationrun NAME --type=merge -p '{"spec":{"cancel":true}}').
cancel-propagator then stops the run's AgentRuns, Jobs (pods deleted with their grace period) and
Argo Workflows, and writes the run Cancelled. A run that already Succeeded or Failed keeps its
phase. A cancel cannot be undone.

With --wait, agentctl returns once the run is finished and prints what was stopped. Exit codes:
0 the run is finished (Cancelled, or already Succeeded/Failed); 1 an error, or --timeout passed
before the run finished.`,
		Example: `  agentctl -n agents cancel orchestrationrun plan-and-implement-1 --wait
  agentctl -n agents cancel agentrun hello`,
		Args: cobra.ExactArgs(2),
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return []string{"orchestrationrun", "agentrun"}, cobra.ShellCompDirectiveNoFileComp
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			gvr, ok := cancelKinds[strings.ToLower(args[0])]
			if !ok {
				return fmt.Errorf("cannot cancel %q: name an orchestrationrun or an agentrun", args[0])
			}
			cc := g.clientConfig()
			cfg, err := cc.ClientConfig()
			if err != nil {
				return fmt.Errorf("load kubeconfig: %w (use --kubeconfig or --context)", err)
			}
			ns, _, err := cc.Namespace()
			if err != nil {
				return fmt.Errorf("namespace: %w (use -n)", err)
			}
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			runs := dyn.Resource(gvr).Namespace(ns)
			kind := strings.TrimSuffix(gvr.Resource, "s")
			_, err = runs.Patch(ctx, args[1], types.MergePatchType, []byte(`{"spec":{"cancel":true}}`), metav1.PatchOptions{FieldManager: "agentctl"})
			switch {
			case apierrors.IsNotFound(err):
				return fmt.Errorf("%s %s not found in namespace %s (use -n)", kind, args[1], ns)
			case err != nil:
				return fmt.Errorf("cancel %s %s: %w", kind, args[1], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s/%s cancel requested\n", kind, args[1])
			if !wait {
				return nil
			}
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			for {
				u, err := runs.Get(wctx, args[1], metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					fmt.Fprintf(cmd.OutOrStdout(), "%s/%s is gone\n", kind, args[1])
					return nil
				}
				if err == nil {
					if line, done := cancelOutcome(u); done {
						fmt.Fprintf(cmd.OutOrStdout(), "%s/%s %s\n", kind, args[1], line)
						return nil
					}
				}
				select {
				case <-wctx.Done():
					return fmt.Errorf("%s/%s is not finished after %s: see kubectl -n %s get %s %s -o yaml", kind, args[1], timeout, ns, kind, args[1])
				case <-time.After(500 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the run is finished and print what was stopped")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long --wait waits")
	return cmd
}

// cancelOutcome says how a run ended, once it has.
func cancelOutcome(u *unstructured.Unstructured) (string, bool) {
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	message, _, _ := unstructured.NestedString(u.Object, "status", "message")
	switch phase {
	case "Cancelled":
		return "Cancelled: " + message, true
	case "Succeeded", "Failed":
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == reasons.CondCancelled && m["reason"] == reasons.CancelIgnoredTerminal {
				return fmt.Sprintf("%s: %v", phase, m["message"]), true
			}
		}
	}
	return "", false
}
