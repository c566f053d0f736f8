package cancel

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// GCWait is how long after deleting a Job without finalizers a cancel leaves its pods to the
// garbage collector (the background deletion removes the Job at once, and the collector then
// deletes its pods, each with its grace period) before deleting those still not stopping itself;
// a quarter of the cancel's timeout when that is shorter. A Job with finalizers (run-controller's
// job-result finalizer) outlives its deletion, and the collector leaves its pods until it is gone,
// so a cancel deletes those pods at once.
const GCWait = 2 * time.Second

// StopJob deletes the Job (background propagation), counting it for the run with uid run, and
// remembers it in set under the run's queue key k. The Job controller starts no pod for a Job
// being deleted, so nothing replaces the pods a cancel stops. A Job this process already deleted
// is not deleted or counted again, however stale the cache's copy (a second pass can run before
// the cache shows the deletion).
func (p *Protocol) StopJob(ctx context.Context, run types.UID, set JobSet, k string, j *batchv1.Job) error {
	set.Remember(k, j.UID, j.Name)
	if j.DeletionTimestamp != nil {
		return nil
	}
	// Remembered before the deletion, so that the informer's delete event, which may arrive
	// before Delete returns, is what forgets it (no entry outlives its Job).
	if p.MarkJob(j.UID) {
		return nil
	}
	forget := func() { p.ForgetJob(j.UID) }
	jobs := p.o.Kube.BatchV1().Jobs(j.Namespace)
	err := jobs.Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
		Preconditions: &metav1.Preconditions{UID: ptr.To(j.UID)}})
	switch {
	case err == nil:
		p.Record(run, "Job", 1)
		if len(j.Finalizers) == 0 {
			p.mu.Lock()
			p.deletedAt[j.UID] = p.o.Now()
			p.mu.Unlock()
		}
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Already gone (a stale copy of a Job whose deletion was observed and forgotten), or
		// another Job of that name: nothing this call stopped, counted or needs to remember.
		forget()
	default:
		forget()
		return fmt.Errorf("delete Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}

// LeftToGC reports how much longer the pods of the Job with uid are left to the garbage
// collector: this process deleted the Job, which had no finalizers, less than GCWait (or a
// quarter of the timeout) ago; 0 otherwise.
func (p *Protocol) LeftToGC(uid types.UID) time.Duration {
	p.mu.Lock()
	at, ok := p.deletedAt[uid]
	p.mu.Unlock()
	if !ok {
		return 0
	}
	return max(0, min(GCWait, p.o.Timeout/4)-p.o.Now().Sub(at))
}

// StopPods deletes, with their grace period, the pods (in the informer pods, indexed ByJobUID) of
// the Job with uid that are not being deleted yet, counting them for the run with uid run, and
// returns how many of the Job's pods have not finished. Right after this process deleted the Job
// its pods may be left to the garbage collector (LeftToGC), and the run (queue key k) is looked at
// again once that wait is over.
func (p *Protocol) StopPods(ctx context.Context, pods cache.SharedIndexInformer, k string, run, uid types.UID) (int, error) {
	items, _ := pods.GetIndexer().ByIndex(ByJobUID, string(uid))
	running := 0
	wait := p.LeftToGC(uid)
	for _, o := range items {
		pod := o.(*corev1.Pod)
		if ph := pod.Status.Phase; ph == corev1.PodSucceeded || ph == corev1.PodFailed {
			continue
		}
		running++
		if pod.DeletionTimestamp != nil {
			continue
		}
		if wait > 0 {
			p.EnqueueAfter(k, wait)
			continue
		}
		if p.MarkPod(pod.UID) {
			continue
		}
		err := p.o.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			p.ForgetPod(pod.UID)
			return running, fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if err == nil { // a pod already gone was not stopped by this call
			p.Record(run, "Pod", 1)
		}
	}
	return running, nil
}

// Each calls fn for each of n items, at most width at a time, and returns the first error.
func Each(n, width int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		slots = make(chan struct{}, max(width, 1))
	)
	for i := range n {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := fn(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
