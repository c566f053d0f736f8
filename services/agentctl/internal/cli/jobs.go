package cli

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/jobresult"
)

func newJobsCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Work with run-controller's Jobs",
		Long: `Commands for the Jobs run-controller creates for AgentRuns. Each carries the
agents.proompteng.ai/job-result finalizer until job-gc has seen its outcome recorded.`,
		Example: `  agentctl jobs release-holds -n agents --dry-run=client`,
	}
	var all, yes bool
	var dryRun string
	release := &cobra.Command{
		Use:   "release-holds",
		Short: "Release the job-result hold on every run-controller Job (after uninstalling job-gc)",
		Long: `Removes the agents.proompteng.ai/job-result finalizer from every Job that run-controller
created, in the namespace (-n, default the context's) or in all namespaces (-A). Kubernetes
then deletes the Jobs already marked for deletion. job-gc normally releases each hold once the
run's status has recorded the Job's outcome; run this only when job-gc is gone for good, since
a Job released before its result is recorded may be deleted before it is.

It first lists the Jobs it would release (their run, and whether each is already being deleted)
and asks before releasing them, reading the answer from standard input (y releases; anything
else, or no answer, releases nothing); --yes releases without asking (scripts, CI).
--dry-run=client only lists them; --dry-run=server also has the API server check each release
without making it.

Exit codes: 0 released (or nothing to release, or a dry run); 2 bad usage; 4 access refused; 5
rejected; 1 anything else, including not answering y.`,
		Example: `  agentctl jobs release-holds -n agents --dry-run=client
  agentctl jobs release-holds -n agents
  agentctl jobs release-holds -A --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch dryRun {
			case "none", "client", "server":
			default:
				return withCode(ExitUsage, fmt.Errorf("--dry-run=%s: want none, client or server", dryRun))
			}
			k, err := g.kubeClients()
			if err != nil {
				return err
			}
			ns := k.namespace
			if all {
				ns = metav1.NamespaceAll
			}
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			held, err := jobresult.Held(ctx, k.core, ns)
			if err != nil {
				return apiError(err, "list the held Jobs")
			}
			where := "namespace " + ns
			if all {
				where = "any namespace"
			}
			if len(held) == 0 {
				fmt.Fprintf(out, "no Job holds a job-result hold in %s\n", where)
				return nil
			}
			printHeld(out, held, all)
			if dryRun == "client" {
				fmt.Fprintf(out, "%d job-result hold(s) would be released (dry run: client)\n", len(held))
				return nil
			}
			if dryRun == "none" && !yes {
				if !confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), fmt.Sprintf("Release the job-result hold on these %d Job(s)?", len(held))) {
					return fmt.Errorf("nothing released (answer y to release, or give --yes)")
				}
			}
			verb := "released"
			if dryRun == "server" {
				verb = "would release (dry run: server)"
			}
			released, err := jobresult.ReleaseAll(ctx, k.core, ns, "agentctl", dryRun == "server", func(j *batchv1.Job) {
				fmt.Fprintf(out, "%s job/%s -n %s\n", verb, j.Name, j.Namespace)
			})
			if err != nil {
				return apiError(err, "release the holds")
			}
			if dryRun == "server" {
				fmt.Fprintf(out, "%d job-result hold(s) would be released (dry run: server)\n", released)
				return nil
			}
			fmt.Fprintf(out, "%d job-result hold(s) released\n", released)
			return nil
		},
	}
	release.Flags().BoolVarP(&all, "all-namespaces", "A", false, "release holds in every namespace")
	release.Flags().BoolVarP(&yes, "yes", "y", false, "release without asking")
	release.Flags().StringVar(&dryRun, "dry-run", "none", `"client" lists what would be released; "server" also has the API server check each release without making it`)
	cmd.AddCommand(release)
	return cmd
}

// printHeld lists the held Jobs: what would be released.
func printHeld(out io.Writer, held []batchv1.Job, all bool) {
	w := printers.GetNewTabWriter(out)
	if all {
		fmt.Fprint(w, "NAMESPACE\t")
	}
	fmt.Fprintln(w, "JOB\tAGENTRUN\tSTATUS\tDELETING")
	for i := range held {
		j := &held[i]
		if all {
			fmt.Fprintf(w, "%s\t", j.Namespace)
		}
		deleting := "no"
		if j.DeletionTimestamp != nil {
			deleting = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", j.Name, none(j.Labels[agentsv1alpha1.LabelAgentRun]), jobStatus(j), deleting)
	}
	_ = w.Flush()
}

// confirm asks on stderr and reads the answer from in: y or yes releases; anything else, or
// nothing (a closed input, as a script's), does not.
func confirm(in io.Reader, errOut io.Writer, question string) bool {
	fmt.Fprintf(errOut, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(answer))
	if answer == "" {
		fmt.Fprintln(errOut, "(no answer)")
	}
	return a == "y" || a == "yes"
}
