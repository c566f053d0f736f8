package agentrun

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// work is one Job to run: a job-runtime run, or one attempt of a workflow step.
type work struct {
	run     *agentsv1alpha1.AgentRun
	agent   *agentsv1alpha1.Agent
	step    string // workflow step name, or ""
	attempt int32  // from 1
	image   string
	params  map[string]string
	impl    string // inline implementation text
	implRef string // implementationSpecRef name
	res     *agentsv1alpha1.WorkloadResources
	volumes []agentsv1alpha1.WorkloadVolume
	timeout int32 // seconds; 0: none
	retries int32 // the Job's backoffLimit
	sa      string
}

// JobName is the run's Job name for a step and attempt: deterministic (the run's UID, step and
// attempt), so that a restart, a stale cache or a second replica finds the Job rather than
// making another. It fits the 63 characters of the job-name label.
func JobName(run *agentsv1alpha1.AgentRun, step string, attempt int32) string {
	base := run.Name
	if step != "" {
		base += "-" + step
	}
	return core.Shorten(base, 54) + "-" + core.Hash8(fmt.Sprintf("%s/%s/%d", run.UID, step, attempt))
}

// runLabels are the labels of a run's Jobs and pods.
func runLabels(w work) map[string]string {
	l := map[string]string{
		agentsv1alpha1.LabelManagedBy: agentsv1alpha1.ManagedByRunController,
		agentsv1alpha1.LabelAgentRun:  core.LabelValue(w.run.Name),
		agentsv1alpha1.LabelAgent:     core.LabelValue(w.run.Spec.AgentRef.Name),
	}
	for _, k := range []string{agentsv1alpha1.LabelOrchestrationRun, agentsv1alpha1.LabelOrchestrationStep} {
		if v := w.run.Labels[k]; v != "" {
			l[k] = v
		}
	}
	if w.step != "" {
		l[agentsv1alpha1.LabelWorkflowStep] = core.LabelValue(w.step)
		l[agentsv1alpha1.LabelAttempt] = strconv.Itoa(int(w.attempt))
	}
	return l
}

var notEnvChar = regexp.MustCompile(`[^A-Z0-9_]+`)

// buildJob renders the Job for w. An error is a problem with the spec (InvalidSpec).
func (c *Reconciler) buildJob(w work) (*batchv1.Job, error) {
	labels := runLabels(w)
	ann := map[string]string{}
	for k, v := range w.run.Annotations {
		if strings.HasPrefix(k, agentsv1alpha1.AnnotationSimulatePrefix) {
			ann[k] = v
		}
	}
	env := jobEnv(w, ann)
	var envFrom []corev1.EnvFromSource
	for _, s := range w.run.Spec.Secrets {
		envFrom = append(envFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: s}}})
	}
	res, err := jobResources(w.res)
	if err != nil {
		return nil, err
	}
	vols, mounts, err := jobVolumes(w.volumes)
	if err != nil {
		return nil, err
	}
	var finalizers []string
	if c.Cfg.JobFinalizer {
		finalizers = []string{agentsv1alpha1.FinalizerJobResult}
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: JobName(w.run, w.step, w.attempt), Namespace: w.run.Namespace, Labels: labels, Finalizers: finalizers,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun", Name: w.run.Name, UID: w.run.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To(w.retries),
			TTLSecondsAfterFinished: ptr.To(c.Cfg.JobTTLSeconds),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					ServiceAccountName:           w.sa,
					AutomountServiceAccountToken: ptr.To(w.sa != ""),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Volumes: vols,
					Containers: []corev1.Container{{
						Name: "agent", Image: w.image, Env: env, EnvFrom: envFrom, Resources: res, VolumeMounts: mounts,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
	if w.timeout > 0 {
		job.Spec.ActiveDeadlineSeconds = ptr.To(int64(w.timeout))
	}
	if d := w.agent.Spec.Defaults; d != nil {
		job.Spec.Template.Spec.NodeSelector = d.NodeSelector
		job.Spec.Template.Spec.Tolerations = d.Tolerations
		job.Spec.Template.Spec.TerminationGracePeriodSeconds = d.TerminationGracePeriodSeconds
	}
	return job, nil
}

func quantities(what string, m map[string]string) (corev1.ResourceList, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := corev1.ResourceList{}
	for k, v := range m {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("spec.workload.resources.%s.%s: %q is not a Kubernetes quantity (e.g. 500m, 1Gi)", what, k, v)
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}

// secretsOf lists every Secret a run uses: spec.secrets and secret volumes.
func secretsOf(ar *agentsv1alpha1.AgentRun) []string {
	out := slices.Clone(ar.Spec.Secrets)
	add := func(ws *agentsv1alpha1.WorkloadSpec) {
		if ws == nil {
			return
		}
		for _, v := range ws.Volumes {
			if v.Type == "secret" && v.SecretName != "" && !slices.Contains(out, v.SecretName) {
				out = append(out, v.SecretName)
			}
		}
	}
	add(ar.Spec.Workload)
	if ar.Spec.Workflow != nil {
		for i := range ar.Spec.Workflow.Steps {
			add(ar.Spec.Workflow.Steps[i].Workload)
		}
	}
	return out
}

// jobEnv is the agent container's environment: who it runs for, the Agent's env, the parameters
// (as AGENT_PARAMETERS JSON and one PARAM_<NAME> each), the implementation, and the simulate-*
// annotations of ann through the downward API.
func jobEnv(w work, ann map[string]string) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: "AGENTRUN_NAME", Value: w.run.Name},
		{Name: "AGENTRUN_NAMESPACE", Value: w.run.Namespace},
		{Name: "AGENT_NAME", Value: w.agent.Name},
		{Name: "AGENT_PROVIDER", Value: w.agent.Spec.ProviderRef.Name},
	}
	if w.step != "" {
		env = append(env, corev1.EnvVar{Name: "AGENTRUN_STEP", Value: w.step},
			corev1.EnvVar{Name: "AGENTRUN_ATTEMPT", Value: strconv.Itoa(int(w.attempt))})
	}
	// The simulate-* annotations reach the container through the downward API, so that an agent
	// on a real node (the example agent, examples/agent) can do what kwok's Stages make a
	// simulated pod do.
	for _, a := range []struct{ annotation, name string }{
		{agentsv1alpha1.AnnotationSimulateDuration, "AGENTPLANE_SIMULATE_DURATION"},
		{agentsv1alpha1.AnnotationSimulateExitCode, "AGENTPLANE_SIMULATE_EXIT_CODE"},
	} {
		if _, ok := ann[a.annotation]; ok {
			env = append(env, corev1.EnvVar{Name: a.name, ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: fmt.Sprintf("metadata.annotations['%s']", a.annotation)},
			}})
		}
	}
	for _, e := range w.agent.Spec.Env {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	if len(w.params) > 0 {
		raw, _ := json.Marshal(w.params)
		env = append(env, corev1.EnvVar{Name: "AGENT_PARAMETERS", Value: string(raw)})
		keys := make([]string, 0, len(w.params))
		for k := range w.params {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			env = append(env, corev1.EnvVar{Name: "PARAM_" + strings.Trim(notEnvChar.ReplaceAllString(strings.ToUpper(k), "_"), "_"), Value: w.params[k]})
		}
	}
	if w.impl != "" {
		env = append(env, corev1.EnvVar{Name: "AGENT_IMPLEMENTATION", Value: w.impl})
	}
	if w.implRef != "" {
		env = append(env, corev1.EnvVar{Name: "AGENT_IMPLEMENTATION_SPEC_REF", Value: w.implRef})
	}
	return env
}

// jobResources are the container's requests and limits; an error names the quantity that is not one.
func jobResources(r *agentsv1alpha1.WorkloadResources) (corev1.ResourceRequirements, error) {
	var res corev1.ResourceRequirements
	if r != nil {
		var err error
		if res.Requests, err = quantities("requests", r.Requests); err != nil {
			return res, err
		}
		if res.Limits, err = quantities("limits", r.Limits); err != nil {
			return res, err
		}
	}
	return res, nil
}

// jobVolumes are the pod's volumes and the container's mounts; an error names the volume that is wrong.
func jobVolumes(volumes []agentsv1alpha1.WorkloadVolume) ([]corev1.Volume, []corev1.VolumeMount, error) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, v := range volumes {
		vol := corev1.Volume{Name: v.Name}
		switch v.Type {
		case "emptyDir":
			ed := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMedium(v.Medium)}
			if v.SizeLimit != "" {
				q, err := resource.ParseQuantity(v.SizeLimit)
				if err != nil {
					return nil, nil, fmt.Errorf("volume %s: sizeLimit %q is not a quantity", v.Name, v.SizeLimit)
				}
				ed.SizeLimit = &q
			}
			vol.EmptyDir = ed
		case "pvc":
			if v.ClaimName == "" {
				return nil, nil, fmt.Errorf("volume %s: type pvc needs claimName", v.Name)
			}
			vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.ClaimName, ReadOnly: v.ReadOnly}
		case "secret":
			if v.SecretName == "" {
				return nil, nil, fmt.Errorf("volume %s: type secret needs secretName", v.Name)
			}
			vol.Secret = &corev1.SecretVolumeSource{SecretName: v.SecretName}
		default:
			return nil, nil, fmt.Errorf("volume %s: type %q is not emptyDir, pvc or secret", v.Name, v.Type)
		}
		vols = append(vols, vol)
		mounts = append(mounts, corev1.VolumeMount{Name: v.Name, MountPath: v.MountPath, ReadOnly: v.ReadOnly})
	}
	return vols, mounts, nil
}
