package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
			ctx := cmd.Context()
			list, err := kc.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: jobresult.Selector})
			if err != nil {
				return fmt.Errorf("list Jobs: %w", err)
			}
			released := 0
			for i := range list.Items {
				j := &list.Items[i]
				for attempt := 0; jobresult.Index(j) >= 0; attempt++ {
					patch, _ := jobresult.ReleasePatch(j)
					_, err = kc.BatchV1().Jobs(j.Namespace).Patch(ctx, j.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "agentctl"})
					if err == nil {
						released++
						fmt.Fprintf(cmd.OutOrStdout(), "released job/%s -n %s\n", j.Name, j.Namespace)
						break
					}
					if apierrors.IsNotFound(err) {
						break
					}
					if !apierrors.IsInvalid(err) || attempt >= 3 {
						return fmt.Errorf("release Job %s/%s: %w (%d released so far)", j.Namespace, j.Name, err, released)
					}
					// The finalizer list changed since the list: read it again.
					if j, err = kc.BatchV1().Jobs(j.Namespace).Get(ctx, j.Name, metav1.GetOptions{}); err != nil {
						if apierrors.IsNotFound(err) {
							break
						}
						return fmt.Errorf("read Job %s/%s: %w", list.Items[i].Namespace, list.Items[i].Name, err)
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d job-result hold(s) released\n", released)
			return nil
		},
	}
	release.Flags().BoolVarP(&all, "all-namespaces", "A", false, "release holds in every namespace")
	cmd.AddCommand(release)
	return cmd
}
