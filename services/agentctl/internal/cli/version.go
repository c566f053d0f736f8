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
orchestration.proompteng.ai/v1alpha1) are served there.

Exit codes: 0 done; 2 bad usage or kubeconfig; 4 the API server refused the credentials or the
access; 5 it rejected the request; 1 anything else (it cannot be reached, say).`,
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
				return withCode(ExitUsage, fmt.Errorf("load kubeconfig: %w (use --kubeconfig, or --client for the client version only)", err))
			}
			dc, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				return withCode(ExitUsage, err)
			}
			sv, err := dc.ServerVersion()
			if err != nil {
				return apiError(err, "reach the API server at "+cfg.Host)
			}
			fmt.Fprintf(out, "Server Version: %s\n", sv.GitVersion)
			for _, gv := range []string{agentsv1alpha1.GroupVersion.String(), orchestrationv1alpha1.GroupVersion.String()} {
				state := "served"
				if _, err := dc.ServerResourcesForGroupVersion(gv); err != nil {
					if !apierrors.IsNotFound(err) {
						return apiError(err, "discover "+gv)
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
