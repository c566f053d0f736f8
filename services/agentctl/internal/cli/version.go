package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchestrationv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/app"
)

func newVersionCommand(g *globalOptions) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print agentctl's version and the API server's, and whether the agentplane APIs are served",
		Long: `Prints agentctl's version, then (unless --client) the API server's version from the
kubeconfig's cluster and whether the agentplane APIs (agents.proompteng.ai/v1alpha1,
orchestration.proompteng.ai/v1alpha1) are served there.`,
		Example: `  agentctl version
  agentctl version --client
  agentctl version --context prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Client Version: %s\n", app.Version)
			if clientOnly {
				return nil
			}
			cfg, err := g.clientConfig().ClientConfig()
			if err != nil {
				return fmt.Errorf("load kubeconfig: %w (use --kubeconfig, or --client for the client version only)", err)
			}
			dc, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				return err
			}
			sv, err := dc.ServerVersion()
			if err != nil {
				return fmt.Errorf("reach the API server at %s: %w", cfg.Host, err)
			}
			fmt.Fprintf(out, "Server Version: %s\n", sv.GitVersion)
			for _, gv := range []string{agentsv1alpha1.GroupVersion.String(), orchestrationv1alpha1.GroupVersion.String()} {
				state := "served"
				if _, err := dc.ServerResourcesForGroupVersion(gv); err != nil {
					if !apierrors.IsNotFound(err) {
						return fmt.Errorf("discover %s: %w", gv, err)
					}
					state = "not installed (helm install agentplane-crds charts/agentplane-crds)"
				}
				fmt.Fprintf(out, "API %s: %s\n", gv, state)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the client version only")
	return cmd
}
