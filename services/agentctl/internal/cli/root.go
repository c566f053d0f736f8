// Package cli implements agentctl's commands. Flags follow kubectl's habits (--kubeconfig,
// --context, -n) so an operator's muscle memory carries over.
package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentplane/agentplane/libs/app"
)

// globalOptions are the flags every command shares.
type globalOptions struct {
	kubeconfig string
	context    string
	namespace  string
}

// clientConfig resolves the kubeconfig the way kubectl does: --kubeconfig, then $KUBECONFIG,
// then ~/.kube/config, with --context and -n applied on top.
func (g *globalOptions) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if g.kubeconfig != "" {
		rules.ExplicitPath = g.kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: g.context}
	if g.namespace != "" {
		overrides.Context.Namespace = g.namespace
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:           "agentctl",
		Short:         "Operate the agentplane control plane",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       app.Version,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	root.PersistentFlags().StringVar(&g.context, "context", "", "kubeconfig context to use")
	root.PersistentFlags().StringVarP(&g.namespace, "namespace", "n", "", "namespace of the control plane (default: the context's namespace)")
	root.AddCommand(newVersionCommand(g), newStatusCommand(g), newDiagnoseCommand(g), newJobsCommand(g), newCancelCommand(g))
	return root
}

// Execute runs agentctl with args and returns the process exit code.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	return 0
}
