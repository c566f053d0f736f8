// Package leader runs work on exactly one replica at a time with client-go leader election on a
// coordination.k8s.io Lease.
package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/logging"
)

// Config names the Lease and this candidate.
type Config struct {
	Namespace string
	Name      string
	// LegacyName, when set, is a second Lease the candidate holds with Name: the one earlier
	// releases elected on, so that their replicas and this one's never lead at once (pairLock).
	LegacyName string
	Identity   string
	// Durations default to client-go's recommended 15s/10s/2s.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// Run campaigns for the lease until ctx ends. lead runs while this candidate leads and must
// return when its context ends; it is cancelled when leadership is lost. The lease is released
// on shutdown so another replica takes over at once. Run returns nil when ctx ends, and an
// error when leadership was lost while ctx was still live, so the process restarts cleanly
// rather than acting without the lease. It returns only once lead has returned.
func Run(ctx context.Context, client kubernetes.Interface, c Config, lead func(ctx context.Context)) error {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 15 * time.Second
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = 10 * time.Second
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = 2 * time.Second
	}
	lease := func(name string) *resourcelock.LeaseLock {
		return &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: c.Namespace, Name: name},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: c.Identity},
		}
	}
	var lock resourcelock.Interface = lease(c.Name)
	log := logging.FromContext(ctx).With("lease", c.Namespace+"/"+c.Name, "identity", c.Identity)
	if c.LegacyName != "" && c.LegacyName != c.Name {
		lock = &pairLock{primary: lease(c.Name), legacy: lease(c.LegacyName), now: time.Now}
		log = log.With("legacy_lease", c.Namespace+"/"+c.LegacyName)
	}
	lost := false
	// client-go starts OnStartedLeading in a goroutine and does not wait for it: Run does, so
	// that lead has returned (and what it wrote is visible) when Run returns.
	var (
		mu      sync.Mutex
		stopped bool
		leading sync.WaitGroup
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   c.LeaseDuration,
		RenewDeadline:   c.RenewDeadline,
		RetryPeriod:     c.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            c.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				mu.Lock()
				if stopped {
					mu.Unlock()
					return
				}
				leading.Add(1)
				mu.Unlock()
				defer leading.Done()
				log.Info("started leading")
				lead(ctx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
					log.Warn("lost leadership")
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election %s/%s: %w", c.Namespace, c.Name, err)
	}
	le.Run(ctx)
	mu.Lock()
	stopped = true
	mu.Unlock()
	leading.Wait()
	if lost {
		return fmt.Errorf("lost leadership of lease %s/%s", c.Namespace, c.Name)
	}
	return nil
}

// RunService runs work for a service: under its Lease (JANGAR_LEADER_ELECTION_LEASE_NAME, by
// default agentplane-<service>; with JANGAR_LEADER_ELECTION_LEGACY_LEASE_NAME, that one too) when
// JANGAR_LEADER_ELECTION_ENABLED is true (only the leader works; see Run), else at once. It is
// the one way run-controller, job-gc and cancel-propagator elect a leader.
func RunService(ctx context.Context, cfg config.Service, client kubernetes.Interface, work func(ctx context.Context) error) error {
	if !cfg.LeaderElection {
		return work(ctx)
	}
	var werr error
	err := Run(ctx, client, Config{
		Namespace: cfg.LeaderElectionNamespace, Name: cfg.LeaseName, LegacyName: cfg.LegacyLeaseName, Identity: cfg.Identity,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
	}, func(ctx context.Context) { werr = work(ctx) })
	if werr != nil && !errors.Is(werr, context.Canceled) {
		return werr
	}
	return err
}
