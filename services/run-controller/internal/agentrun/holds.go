package agentrun

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentplane/agentplane/libs/jobresult"
	"github.com/agentplane/agentplane/libs/logging"
)

// releaseHolds is the repair of #32 item 8, for run-controller told that job-gc is not installed
// (JobFinalizer off): a Job of the run that still carries the job-result finalizer (put on by an
// earlier version, or while job-gc was installed) would never be released, and a Job marked for
// deletion would stay Terminating. Once the run has recorded its outcome (it is finished) or is
// gone, nothing needs the Job's result any more: the hold is released with the tested patch
// (libs/jobresult). uid, when set, is the run's: only Jobs it controls are touched.
func (c *Reconciler) releaseHolds(ctx context.Context, ns, run string, uid types.UID) error {
	for _, j := range c.JobsOf(ns, run) {
		if jobresult.Index(j) < 0 {
			continue
		}
		if uid != "" {
			if ref := metav1.GetControllerOf(j); ref == nil || ref.UID != uid {
				continue
			}
		}
		patch, err := jobresult.ReleasePatch(j)
		if err != nil {
			continue
		}
		_, err = c.Kube.BatchV1().Jobs(ns).Patch(ctx, j.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "agentplane-run-controller"})
		switch {
		case err == nil:
			logging.FromContext(ctx).Info("released a job-result hold nothing else would release (job-gc is not installed)",
				"job", ns+"/"+j.Name, "run", run)
		case apierrors.IsNotFound(err), apierrors.IsInvalid(err): // gone, or its finalizers changed: the next event looks again
		default:
			return fmt.Errorf("release the job-result hold on Job %s/%s: %w", ns, j.Name, err)
		}
	}
	return nil
}
