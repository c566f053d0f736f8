package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

// followFlags are how submit, retry and resubmit follow the run they create.
type followFlags struct {
	watch, wait bool
	timeout     time.Duration
	dryRun      string
	name        string
	out         *outputFlags
}

func (f *followFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.watch, "watch", false, "print the run's progress (its phase, and each step's) until it ends; the exit code says how it ended")
	cmd.Flags().BoolVar(&f.wait, "wait", false, "wait until the run ends; the exit code says how it ended")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 30*time.Minute, "how long --wait and --watch wait (0: no limit)")
	cmd.Flags().StringVar(&f.dryRun, "dry-run", "none", `"client" prints the run without sending it; "server" has the API server check it (admission included) without creating it`)
	cmd.Flags().StringVar(&f.name, "name", "", "the new run's name (default: generated from what it runs)")
	f.out = newOutputFlags(cmd)
}

// created prints the new run (kubectl's "agentrun/x created", or the -o format), then follows it
// as --watch or --wait ask.
func (f *followFlags) created(ctx context.Context, k *kube, r *run, note string, stdout, stderr io.Writer) error {
	suffix := ""
	if f.dryRun != "none" {
		suffix = " (dry run: " + f.dryRun + ")"
	}
	if f.out.format() == "" {
		fmt.Fprintf(stdout, "%s created%s%s\n", r.ref(), note, suffix)
	} else {
		p, err := f.out.printer(false)
		if err != nil {
			return err
		}
		if err := p.print(stdout, []*run{r}, false); err != nil {
			return err
		}
	}
	if f.dryRun != "none" || (!f.watch && !f.wait) {
		return nil
	}
	var progress func(*run)
	if f.watch {
		var prev *run
		// Progress goes to stdout for people; with -o the object went there, so it goes to stderr.
		w := stdout
		if f.out.format() != "" {
			w = stderr
		}
		progress = func(cur *run) {
			for _, l := range progressLines(prev, cur, now()) {
				fmt.Fprintln(w, l)
			}
			prev = cur
		}
	}
	last, err := k.waitRun(ctx, r, waitFor{}, f.timeout, progress)
	if err == nil && !f.watch && f.out.human() {
		fmt.Fprintf(stdout, "%s %s\n", last.ref(), last.phase)
	}
	return err
}

func (f *followFlags) validate() error {
	switch f.dryRun {
	case "none", "client", "server":
	default:
		return withCode(ExitUsage, fmt.Errorf("--dry-run=%s: want none, client or server", f.dryRun))
	}
	if f.dryRun != "none" && (f.watch || f.wait) {
		return withCode(ExitUsage, fmt.Errorf("--dry-run creates nothing to --watch or --wait for"))
	}
	if f.watch && f.wait {
		return withCode(ExitUsage, fmt.Errorf("--watch already waits: give one of --watch and --wait"))
	}
	_, err := f.out.printer(false)
	return err
}

// progressLines are what --watch prints when a run goes from prev (nil: as first read) to cur: its
// phase when it changes, and each step's.
func progressLines(prev, cur *run, at time.Time) []string {
	stamp := at.Format("15:04:05")
	var lines []string
	if prev == nil || prev.phaseOrPending() != cur.phaseOrPending() || prev.message != cur.message && cur.finishedRun() {
		l := fmt.Sprintf("%s %s %s", stamp, cur.ref(), cur.phaseOrPending())
		if d, ok := cur.duration(at); ok && cur.finishedRun() {
			l += " after " + durationText(d)
		}
		if cur.message != "" {
			l += ": " + oneLine(cur.message)
		}
		lines = append(lines, l)
	}
	if cur.or == nil {
		return lines
	}
	before := map[string]string{}
	if prev != nil && prev.or != nil {
		for _, s := range prev.or.Status.StepStatuses {
			before[s.Name] = s.Phase
		}
	}
	for _, s := range cur.or.Status.StepStatuses {
		if s.Phase == "" || before[s.Name] == s.Phase || (prev == nil && s.Phase == agentsv1alpha1.PhasePending) {
			continue
		}
		l := fmt.Sprintf("%s   step %s %s", stamp, s.Name, s.Phase)
		if s.StartedAt != nil && s.FinishedAt != nil {
			l += " after " + durationText(s.FinishedAt.Sub(s.StartedAt.Time))
		}
		if s.Message != "" && s.Phase != agentsv1alpha1.PhaseRunning {
			l += ": " + oneLine(s.Message)
		}
		lines = append(lines, l)
	}
	// The run's own line last once it ended, after its steps'.
	if len(lines) > 1 && cur.finishedRun() && strings.Contains(lines[0], " "+cur.ref()+" ") {
		lines = append(lines[1:], lines[0])
	}
	return lines
}

// keyValues reads repeated k=v flags.
func keyValues(flag string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range vals {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, withCode(ExitUsage, fmt.Errorf("--%s %q: want KEY=VALUE", flag, kv))
		}
		out[k] = v
	}
	return out, nil
}

func newSubmitCommand(g *globalOptions) *cobra.Command {
	var params, labels, annotations, secrets []string
	var runtimeType, image string
	f := &followFlags{}
	cmd := &cobra.Command{
		Use:   "submit (agent/NAME|orchestration/NAME)",
		Short: "Start a run of an Agent or an Orchestration",
		Long: `Creates an AgentRun of the Agent (agent/NAME) or an OrchestrationRun of the Orchestration
(orchestration/NAME) in the namespace (-n, default the context's), as argo submit does. Its name
is generated from what it runs (NAME-xxxxx) unless --name gives one. --param KEY=VALUE sets its
parameters; --label and --annotation its labels and annotations (agentplane.dev/simulate-*
annotations shape what kwok plays on make up); for an AgentRun, --runtime (default job), --image
and --secret too.

--watch prints its progress (the run's phase, and each step's for an OrchestrationRun) until it
ends; --wait only waits. With either, the exit code says how it ended (0 Succeeded, 7 Failed, 8
Cancelled, 9 --timeout passed). -o name|json|yaml|... prints the created run instead of the
"created" line. --dry-run=client prints it without sending it, --dry-run=server has the API
server check it without creating it.

` + runExitCodesHelp,
		Example: `  agentctl submit agent/codex --param issue=42 --watch
  agentctl submit orchestration/plan-and-implement --param issue=42 --wait --timeout 1h
  agentctl submit agent/codex --name hello-2 -o name
  agentctl submit agent/codex --dry-run=client -o yaml`,
		Args: cobra.ExactArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return []string{"agent/", "orchestration/"}, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(); err != nil {
				return err
			}
			kind, def, ok := strings.Cut(args[0], "/")
			kind = strings.ToLower(kind)
			if !ok || def == "" || (kind != "agent" && kind != "agents" && kind != "orchestration" && kind != "orchestrations") {
				return withCode(ExitUsage, fmt.Errorf("%q: name what to run as agent/NAME or orchestration/NAME", args[0]))
			}
			p, err := keyValues("param", params)
			if err != nil {
				return err
			}
			l, err := keyValues("label", labels)
			if err != nil {
				return err
			}
			a, err := keyValues("annotation", annotations)
			if err != nil {
				return err
			}
			meta := metav1.ObjectMeta{Name: f.name, Labels: l, Annotations: a}
			if f.name == "" {
				meta.GenerateName = def + "-"
			}
			var r *run
			if strings.HasPrefix(kind, "agent") {
				ar := &agentsv1alpha1.AgentRun{ObjectMeta: meta, Spec: agentsv1alpha1.AgentRunSpec{
					AgentRef: agentsv1alpha1.LocalRef{Name: def}, Runtime: agentsv1alpha1.RuntimeSpec{Type: runtimeType}, Parameters: p, Secrets: secrets}}
				if image != "" {
					ar.Spec.Workload = &agentsv1alpha1.WorkloadSpec{Image: image}
				}
				r = fromAgentRun(ar)
			} else {
				if runtimeType != agentsv1alpha1.RuntimeJob || image != "" || len(secrets) > 0 {
					return withCode(ExitUsage, fmt.Errorf("--runtime, --image and --secret are an AgentRun's: an Orchestration's steps say theirs"))
				}
				r = fromOrchestrationRun(&orchv1alpha1.OrchestrationRun{ObjectMeta: meta, Spec: orchv1alpha1.OrchestrationRunSpec{
					OrchestrationRef: orchv1alpha1.NameRef{Name: def}, Parameters: p}})
			}
			return submitRun(cmd, g, f, r, def, "")
		},
	}
	cmd.Flags().StringArrayVarP(&params, "param", "p", nil, "a parameter of the run, KEY=VALUE (repeat it)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "a label of the run, KEY=VALUE (repeat it)")
	cmd.Flags().StringArrayVar(&annotations, "annotation", nil, "an annotation of the run, KEY=VALUE (repeat it)")
	cmd.Flags().StringArrayVar(&secrets, "secret", nil, "a Secret of the namespace the AgentRun may read (repeat it)")
	cmd.Flags().StringVar(&runtimeType, "runtime", agentsv1alpha1.RuntimeJob, "the AgentRun's runtime")
	cmd.Flags().StringVar(&image, "image", "", "the AgentRun's image (default: its Agent's, else run-controller's)")
	f.add(cmd)
	return cmd
}

// submitRun creates r (checking first that what it runs exists, so a typo is said at once and not
// as a run waiting for it) and follows it.
func submitRun(cmd *cobra.Command, g *globalOptions, f *followFlags, r *run, def, note string) error {
	ctx := cmd.Context()
	if f.dryRun == "client" && f.out.format() != "" { // printed without asking the API server anything
		if r.meta.Namespace == "" {
			r.meta.Namespace = g.namespaceFlag()
			if ns, _, err := g.clientConfig().Namespace(); err == nil {
				r.meta.Namespace = ns
			}
		}
		return f.created(ctx, nil, r, note, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	k, err := g.kubeClients()
	if err != nil {
		return err
	}
	r.meta.Namespace = k.namespace
	if def != "" {
		if err := k.definitionExists(ctx, r, def); err != nil {
			return err
		}
	}
	if f.dryRun == "client" {
		return f.created(ctx, k, r, note, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	opts := metav1.CreateOptions{FieldManager: "agentctl"}
	if f.dryRun == "server" {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var made *run
	if r.ar != nil {
		ar, err := k.runs.AgentsV1alpha1().AgentRuns(k.namespace).Create(ctx, r.ar, opts)
		if err != nil {
			return apiError(err, "create the AgentRun")
		}
		made = fromAgentRun(ar)
	} else {
		or, err := k.runs.OrchestrationV1alpha1().OrchestrationRuns(k.namespace).Create(ctx, r.or, opts)
		if err != nil {
			return apiError(err, "create the OrchestrationRun")
		}
		made = fromOrchestrationRun(or)
	}
	return f.created(ctx, k, made, note, cmd.OutOrStdout(), cmd.ErrOrStderr())
}

// definitionExists checks the Agent or Orchestration a new run names. A user who may not read
// it is not stopped here: the API server and run-controller decide.
func (k *kube) definitionExists(ctx context.Context, r *run, def string) error {
	var err error
	what := "Agent"
	if r.ar != nil {
		_, err = k.runs.AgentsV1alpha1().Agents(k.namespace).Get(ctx, def, metav1.GetOptions{})
	} else {
		what = "Orchestration"
		_, err = k.runs.OrchestrationV1alpha1().Orchestrations(k.namespace).Get(ctx, def, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		return withCode(ExitRejected, fmt.Errorf("no %s named %s in namespace %s (kubectl -n %s get %ss lists them)", what, def, k.namespace, k.namespace, strings.ToLower(what)))
	case err != nil && !apierrors.IsForbidden(err):
		return apiError(err, "get "+strings.ToLower(what)+" "+def)
	}
	return nil
}

// copyLabels are a run's labels a copy keeps: not those run-controller sets on step runs.
func copyLabels(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		switch k {
		case agentsv1alpha1.LabelOrchestrationRun, agentsv1alpha1.LabelOrchestrationStep, agentsv1alpha1.LabelManagedBy:
			continue
		}
		out[k] = v
	}
	return out
}

// copyAnnotations are a run's annotations a copy keeps: not the API server's records of who
// created it (agents.proompteng.ai/*, recorded anew for the copy's creator), nor kubectl's.
func copyAnnotations(in map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		if strings.HasPrefix(k, "agents.proompteng.ai/") || strings.HasPrefix(k, "orchestration.proompteng.ai/") || strings.HasPrefix(k, "kubectl.kubernetes.io/") {
			continue
		}
		out[k] = in[k]
	}
	return out
}
