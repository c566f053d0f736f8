package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/jobresult"
)

func newJobsCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Work with run-controller's Jobs",
		Long: `Commands for the Jobs run-controller creates for AgentRuns. Each carries the
agents.proompteng.ai/job-result finalizer until job-gc has seen its outcome recorded.`,
		Example: `  agentctl jobs release-holds -n agents`,
	}
	var all bool
	release := &cobra.Command{
		Use:   "release-holds",
		Short: "Release the job-result hold on every run-controller Job (after uninstalling job-gc)",
		Long: `Removes the agents.proompteng.ai/job-result finalizer from every Job that run-controller
created, in the namespace (-n, default the context's) or in all namespaces (-A). Kubernetes
then deletes the Jobs already marked for deletion. job-gc normally releases each hold once the
run's status has recorded the Job's outcome; run this only when job-gc is gone for good, since
a Job released before its result is recorded may be deleted before it is.`,
		Example: `  agentctl jobs release-holds -n agents
  agentctl jobs release-holds -A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cc := g.clientConfig()
			cfg, err := cc.ClientConfig()
			if err != nil {
				return fmt.Errorf("load kubeconfig: %w (use --kubeconfig or --context)", err)
			}
			ns := metav1.NamespaceAll
			if !all {
				if ns, _, err = cc.Namespace(); err != nil {
					return fmt.Errorf("namespace: %w (use -n or -A)", err)
				}
			}
			kc, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			released, err := jobresult.ReleaseAll(cmd.Context(), kc, ns, "agentctl", func(j *batchv1.Job) {
				fmt.Fprintf(cmd.OutOrStdout(), "released job/%s -n %s\n", j.Name, j.Namespace)
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d job-result hold(s) released\n", released)
			return nil
		},
	}
	release.Flags().BoolVarP(&all, "all-namespaces", "A", false, "release holds in every namespace")
	cmd.AddCommand(release)
	return cmd
}
