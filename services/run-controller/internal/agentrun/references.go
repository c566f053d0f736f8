package agentrun

import (
	"fmt"
	"slices"
	"strings"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// refs are what a run names that it may only use with someone's permission.
type refs struct {
	secrets, claims []string
	serviceAccount  string
}

// refsOf lists a run's Secrets (spec.secrets and secret volumes, its workflow steps' too), its
// PersistentVolumeClaims and its ServiceAccount (spec.runtime.config.serviceAccountName).
func refsOf(ar *agentsv1alpha1.AgentRun) refs {
	r := refs{secrets: secretsOf(ar), serviceAccount: runtimeString(ar, "serviceAccountName")}
	add := func(ws *agentsv1alpha1.WorkloadSpec) {
		if ws == nil {
			return
		}
		for _, v := range ws.Volumes {
			if v.Type == "pvc" && v.ClaimName != "" && !slices.Contains(r.claims, v.ClaimName) {
				r.claims = append(r.claims, v.ClaimName)
			}
		}
	}
	add(ar.Spec.Workload)
	if ar.Spec.Workflow != nil {
		for i := range ar.Spec.Workflow.Steps {
			add(ar.Spec.Workflow.Steps[i].Workload)
		}
	}
	return r
}

// admissionRecord is the API server's record of what the run's creator was allowed when it admitted the
// run (the agentplane-run-creator admission policy); ok is false for a run it did not record.
type admissionRecord struct {
	creator                   string
	secrets, claims, accounts []string
	ok                        bool
}

func recordOf(ar *agentsv1alpha1.AgentRun) admissionRecord {
	creator, ok := ar.Annotations[agentsv1alpha1.AnnotationCreatedBy]
	split := func(k string) []string {
		var out []string
		for _, s := range strings.Split(ar.Annotations[k], ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return admissionRecord{creator: creator, ok: ok,
		secrets:  split(agentsv1alpha1.AnnotationCreatorMayGetSecrets),
		claims:   split(agentsv1alpha1.AnnotationCreatorMayGetClaims),
		accounts: split(agentsv1alpha1.AnnotationCreatorMayUseServiceAcc)}
}

// checkReferences decides, with what the API server recorded at admission (never with anything
// the run's creator could have written), whether the run may use what it names: a Secret or
// ServiceAccount its Agent lists (spec.security), or one its creator may get (use); a claim only
// if its creator may get it. When the Agent's allowedSecrets is not empty the run may use only
// those. A run the API server did not record (its admission policies are not installed, or it
// predates them) may name nothing the Agent does not list, unless UnrecordedRuns is "allow".
func checkReferences(p core.Policy, ar *agentsv1alpha1.AgentRun, agent *agentsv1alpha1.Agent) error {
	r := refsOf(ar)
	rec := recordOf(ar)
	sec := agent.Spec.Security
	if sec == nil {
		sec = &agentsv1alpha1.AgentSecurity{}
	}
	who := "its creator (" + rec.creator + ")"
	var unlisted []string // named, not listed by the Agent, and the creator's permission unknown
	for _, s := range r.secrets {
		switch {
		case slices.Contains(sec.AllowedSecrets, s):
		case len(sec.AllowedSecrets) > 0:
			return fmt.Errorf("Secret %s is not in Agent %s's spec.security.allowedSecrets (%s), which lists every Secret its runs may use",
				s, agent.Name, strings.Join(sec.AllowedSecrets, ", "))
		case !rec.ok:
			unlisted = append(unlisted, "Secret "+s)
		case !slices.Contains(rec.secrets, s):
			return fmt.Errorf("Secret %s: Agent %s does not list it in spec.security.allowedSecrets and %s may not get it: a run may use a Secret only if its creator may get it or its Agent lists it",
				s, agent.Name, who)
		}
	}
	if sa := r.serviceAccount; sa != "" && !slices.Contains(sec.AllowedServiceAccounts, sa) {
		switch {
		case !rec.ok:
			unlisted = append(unlisted, "ServiceAccount "+sa)
		case !slices.Contains(rec.accounts, sa):
			return fmt.Errorf("ServiceAccount %s: Agent %s does not list it in spec.security.allowedServiceAccounts and %s may not use it (the verb use, ClusterRole agentplane-serviceaccount-user)",
				sa, agent.Name, who)
		}
	}
	for _, c := range r.claims {
		switch {
		case !rec.ok:
			unlisted = append(unlisted, "PersistentVolumeClaim "+c)
		case !slices.Contains(rec.claims, c):
			return fmt.Errorf("PersistentVolumeClaim %s: %s may not get it: a run may mount a claim only if its creator may get it", c, who)
		}
	}
	if len(unlisted) > 0 && p.UnrecordedRuns != core.UnrecordedAllow {
		return fmt.Errorf("AgentRun %s names %s, which Agent %s does not list, and it carries no admission record (%s): run-controller cannot tell whether its creator may use them. "+
			"Install agentplane-crds' admission policies (make up and the charts do), or set %s=allow while runs created before them finish",
			ar.Name, strings.Join(unlisted, ", "), agent.Name, agentsv1alpha1.AnnotationCreatedBy, core.EnvUnrecordedRuns)
	}
	return nil
}

// checkAgentImage applies the Agent's spec.security.allowedImages: an image name, or a prefix
// ending in *.
func checkAgentImage(image string, agent *agentsv1alpha1.Agent) error {
	if agent.Spec.Security == nil || len(agent.Spec.Security.AllowedImages) == 0 {
		return nil
	}
	if imageAllowed(image, agent.Spec.Security.AllowedImages) {
		return nil
	}
	return fmt.Errorf("image %s matches none of Agent %s's spec.security.allowedImages (%s)", image, agent.Name,
		strings.Join(agent.Spec.Security.AllowedImages, ", "))
}

func imageAllowed(image string, patterns []string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(image, prefix) {
				return true
			}
		} else if image == p {
			return true
		}
	}
	return false
}
