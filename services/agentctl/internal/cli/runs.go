package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
)

// The two kinds of run, by the names kubectl users type (the CRDs' plural, singular and short
// names), and "run"/"runs" for both.
const (
	kindAgentRun         = "AgentRun"
	kindOrchestrationRun = "OrchestrationRun"
)

var runKindNames = map[string][]string{
	"run": {kindAgentRun, kindOrchestrationRun}, "runs": {kindAgentRun, kindOrchestrationRun},
	"agentrun": {kindAgentRun}, "agentruns": {kindAgentRun}, "ar": {kindAgentRun}, "agr": {kindAgentRun},
	"orchestrationrun": {kindOrchestrationRun}, "orchestrationruns": {kindOrchestrationRun}, "or": {kindOrchestrationRun}, "orchrun": {kindOrchestrationRun},
}

// run is what the run verbs show of an AgentRun or an OrchestrationRun: the object itself (with
// its apiVersion and kind set, for the printers) and the fields every verb reads.
type run struct {
	kind string
	obj  runtime.Object
	meta *metav1.ObjectMeta

	source                   string // agent/NAME or orchestration/NAME
	phase, reason, message   string
	started, finished        *metav1.Time
	conditions               []metav1.Condition
	retryOf, resubmitOf      string
	parameters               map[string]string
	ar                       *agentsv1alpha1.AgentRun
	or                       *orchv1alpha1.OrchestrationRun
	cancel                   bool
	stepOf, stepName         string // an AgentRun that is a step of an OrchestrationRun
	orchestration, runtimeTy string
}

func fromAgentRun(ar *agentsv1alpha1.AgentRun) *run {
	ar.TypeMeta = metav1.TypeMeta{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: kindAgentRun}
	r := &run{kind: kindAgentRun, obj: ar, meta: &ar.ObjectMeta, ar: ar, source: "agent/" + ar.Spec.AgentRef.Name,
		phase: ar.Status.Phase, reason: ar.Status.Reason, message: ar.Status.Message, started: ar.Status.StartedAt,
		finished: ar.Status.FinishedAt, conditions: ar.Status.Conditions, retryOf: ar.Spec.RetryOf,
		resubmitOf: ar.Annotations[agentsv1alpha1.AnnotationResubmitOf], parameters: ar.Spec.Parameters, cancel: ar.Spec.Cancel,
		runtimeTy: ar.Spec.Runtime.Type}
	if owner := metav1.GetControllerOf(ar); owner != nil && owner.Kind == kindOrchestrationRun {
		r.stepOf, r.stepName = owner.Name, ar.Labels[agentsv1alpha1.LabelOrchestrationStep]
	}
	return r
}

func fromOrchestrationRun(or *orchv1alpha1.OrchestrationRun) *run {
	or.TypeMeta = metav1.TypeMeta{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: kindOrchestrationRun}
	return &run{kind: kindOrchestrationRun, obj: or, meta: &or.ObjectMeta, or: or, source: "orchestration/" + or.Spec.OrchestrationRef.Name,
		phase: or.Status.Phase, reason: or.Status.Reason, message: or.Status.Message, started: or.Status.StartedAt,
		finished: or.Status.FinishedAt, conditions: or.Status.Conditions, retryOf: or.Spec.RetryOf,
		resubmitOf: or.Annotations[agentsv1alpha1.AnnotationResubmitOf], parameters: or.Spec.Parameters, cancel: or.Spec.Cancel,
		orchestration: or.Spec.OrchestrationRef.Name}
}

// ref is how agentctl names the run to a user: agentrun/NAME or orchestrationrun/NAME.
func (r *run) ref() string { return strings.ToLower(r.kind) + "/" + r.meta.Name }

// phaseOrPending is the run's phase, Pending before its first status.
func (r *run) phaseOrPending() string {
	if r.phase == "" {
		return agentsv1alpha1.PhasePending
	}
	return r.phase
}

// finishedRun reports whether the run has ended (Succeeded, Failed or Cancelled).
func (r *run) finishedRun() bool {
	switch r.phase {
	case agentsv1alpha1.PhaseSucceeded, agentsv1alpha1.PhaseFailed, agentsv1alpha1.PhaseCancelled:
		return true
	}
	return false
}

// duration is how long the run ran (until now while it runs); ok is false before it started.
func (r *run) duration(now time.Time) (time.Duration, bool) {
	if r.started == nil {
		return 0, false
	}
	end := now
	if r.finished != nil {
		end = r.finished.Time
	}
	return end.Sub(r.started.Time), true
}

// kube is what the run verbs talk to: the API server of the kubeconfig, in its namespace.
type kube struct {
	cfg       *rest.Config
	core      kubernetes.Interface
	runs      versioned.Interface
	namespace string // -n, else the context's
}

// kubeClients resolves the kubeconfig like kubectl and builds the clients.
func (g *globalOptions) kubeClients() (*kube, error) {
	cc := g.clientConfig()
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("load kubeconfig: %w (use --kubeconfig or --context)", err))
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("namespace: %w (use -n)", err))
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, withCode(ExitUsage, err)
	}
	runs, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, withCode(ExitUsage, err)
	}
	return &kube{cfg: cfg, core: core, runs: runs, namespace: ns}, nil
}

// runArg splits a run argument: NAME, or KIND/NAME with a run kind's name (agentrun/x, or/x).
func runArg(arg string) (kinds []string, name string, err error) {
	k, n, qualified := strings.Cut(arg, "/")
	if !qualified {
		return runKindNames["runs"], arg, nil
	}
	kinds, ok := runKindNames[strings.ToLower(k)]
	if !ok || n == "" {
		return nil, "", withCode(ExitUsage, fmt.Errorf("%q is not a run: name it NAME, agentrun/NAME or orchestrationrun/NAME", arg))
	}
	return kinds, n, nil
}

// getRun reads one run. An unqualified NAME is looked up as both kinds; if both exist the
// user must say which.
func (k *kube) getRun(ctx context.Context, ns string, kinds []string, name string) (*run, error) {
	var found []*run
	for _, kind := range kinds {
		r, err := k.getKind(ctx, ns, kind, name)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, apiError(err, "get "+strings.ToLower(kind)+" "+name)
		}
		found = append(found, r)
	}
	switch len(found) {
	case 0:
		what := "no AgentRun or OrchestrationRun"
		if len(kinds) == 1 {
			what = "no " + kinds[0]
		}
		return nil, withCode(ExitRejected, fmt.Errorf("%s named %s in namespace %s (use -n, or agentctl get runs to list them)", what, name, ns))
	case 1:
		return found[0], nil
	}
	return nil, withCode(ExitUsage, fmt.Errorf("both an AgentRun and an OrchestrationRun are named %s in namespace %s: say agentrun/%s or orchestrationrun/%s", name, ns, name, name))
}

func (k *kube) getKind(ctx context.Context, ns, kind, name string) (*run, error) {
	if kind == kindOrchestrationRun {
		or, err := k.runs.OrchestrationV1alpha1().OrchestrationRuns(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return fromOrchestrationRun(or), nil
	}
	ar, err := k.runs.AgentsV1alpha1().AgentRuns(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return fromAgentRun(ar), nil
}

// listRuns lists the runs of kinds in ns ("" for every namespace), sorted by namespace and name
// as kubectl does; rv is each list's resourceVersion, where a watch picks up.
func (k *kube) listRuns(ctx context.Context, ns string, kinds []string, opts metav1.ListOptions) ([]*run, map[string]string, error) {
	var out []*run
	rv := map[string]string{}
	for _, kind := range kinds {
		if kind == kindOrchestrationRun {
			list, err := k.runs.OrchestrationV1alpha1().OrchestrationRuns(ns).List(ctx, opts)
			if err != nil {
				return nil, nil, apiError(err, "list orchestrationruns")
			}
			for i := range list.Items {
				out = append(out, fromOrchestrationRun(&list.Items[i]))
			}
			rv[kind] = list.ResourceVersion
			continue
		}
		list, err := k.runs.AgentsV1alpha1().AgentRuns(ns).List(ctx, opts)
		if err != nil {
			return nil, nil, apiError(err, "list agentruns")
		}
		for i := range list.Items {
			out = append(out, fromAgentRun(&list.Items[i]))
		}
		rv[kind] = list.ResourceVersion
	}
	sortRuns(out)
	return out, rv, nil
}

func sortRuns(runs []*run) {
	sort.SliceStable(runs, func(i, j int) bool {
		a, b := runs[i].meta, runs[j].meta
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return runs[i].kind < runs[j].kind
	})
}

// apiError gives an API error its exit code (permanent: access refused 4, rejected 5) and says
// what was being done.
func apiError(err error, doing string) error {
	if err == nil {
		return nil
	}
	if perm, ok := permanent(err, "the API server"); ok {
		var e *exitError
		if errors.As(perm, &e) {
			return withCode(e.code, fmt.Errorf("%s: %w", doing, e.err))
		}
		return fmt.Errorf("%s: %w", doing, perm)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// stepRuns are an OrchestrationRun's step AgentRuns (those it controls), by their step label
// (the step's name as agentsv1alpha1.LabelValue writes it: look them up with stepRun).
func (k *kube) stepRuns(ctx context.Context, or *orchv1alpha1.OrchestrationRun) (map[string]*agentsv1alpha1.AgentRun, error) {
	list, err := k.runs.AgentsV1alpha1().AgentRuns(or.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: agentsv1alpha1.LabelOrchestrationRun + "=" + agentsv1alpha1.LabelValue(or.Name)})
	if err != nil {
		return nil, apiError(err, "list the steps of orchestrationrun "+or.Name)
	}
	out := map[string]*agentsv1alpha1.AgentRun{}
	for i := range list.Items {
		ar := &list.Items[i]
		if owner := metav1.GetControllerOf(ar); owner == nil || owner.UID != or.UID {
			continue
		}
		out[ar.Labels[agentsv1alpha1.LabelOrchestrationStep]] = ar
	}
	return out, nil
}

// stepRun is the AgentRun of step in what stepRuns returned.
func stepRun(steps map[string]*agentsv1alpha1.AgentRun, step string) *agentsv1alpha1.AgentRun {
	return steps[agentsv1alpha1.LabelValue(step)]
}
