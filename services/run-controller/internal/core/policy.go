package core

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// CheckImage applies JANGAR_AGENTS_CONTROLLER_IMAGES_DENIED, then IMAGES_ALLOWED (when set, an
// image must match one of its patterns).
func (p Policy) CheckImage(image string) error {
	for _, pat := range p.ImagesDenied {
		if ok, _ := path.Match(pat, image); ok {
			return fmt.Errorf("image %q is denied by %s pattern %q", image, envImagesDenied, pat)
		}
	}
	if len(p.ImagesAllowed) == 0 {
		return nil
	}
	for _, pat := range p.ImagesAllowed {
		if ok, _ := path.Match(pat, image); ok {
			return nil
		}
	}
	return fmt.Errorf("image %q matches none of %s (%s)", image, envImagesAllowed, describeList(p.ImagesAllowed))
}

// systemLabel reports labels that Kubernetes tooling and agentplane itself set; the label
// allow-list does not apply to them.
func systemLabel(k string) bool {
	return strings.HasPrefix(k, "app.kubernetes.io/") || strings.HasPrefix(k, "agents.proompteng.ai/") ||
		strings.HasPrefix(k, "orchestration.proompteng.ai/") || strings.HasPrefix(k, "kubernetes.io/") ||
		strings.HasPrefix(k, "helm.sh/")
}

// CheckLabels applies LABELS_REQUIRED, LABELS_DENIED and LABELS_ALLOWED to the run's labels.
func (p Policy) CheckLabels(labels map[string]string) error {
	var missing []string
	for _, k := range p.LabelsRequired {
		if _, ok := labels[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("label(s) %s required by %s are missing", strings.Join(missing, ", "), envLabelsReq)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(p.LabelsDenied, k) {
			return fmt.Errorf("label %s is denied by %s", k, envLabelsDenied)
		}
		if len(p.LabelsAllowed) > 0 && !systemLabel(k) && !slices.Contains(p.LabelsAllowed, k) &&
			!slices.Contains(p.LabelsRequired, k) {
			return fmt.Errorf("label %s is not in %s (%s)", k, envLabelsAllowed, describeList(p.LabelsAllowed))
		}
	}
	return nil
}

// CheckSecrets applies BLOCKED_SECRETS (the Agent's and the creator's say is checked by agentrun's checkReferences).
func (p Policy) CheckSecrets(secrets []string) error {
	for _, s := range secrets {
		if slices.Contains(p.BlockedSecrets, s) {
			return fmt.Errorf("Secret %s is blocked by %s", s, envBlockedSecret)
		}
	}
	return nil
}
