package leader

import (
	"bytes"
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// pairLock is a lock held on two Leases at once: this release's (primary) and the one earlier
// releases elected on (legacy), which their pods, still running during an upgrade, know alone.
// A candidate leads only once it holds both, so a pod of an earlier release and a pod of this one
// never lead together: while an earlier pod holds the legacy Lease, Get reports that pod as the
// holder (whatever the primary says) and the elector waits for it to release it or let it expire.
// Every write carries the Lease's resourceVersion (LeaseLock), so two candidates never both win.
type pairLock struct {
	primary, legacy *resourcelock.LeaseLock
	now             func() time.Time
}

var _ resourcelock.Interface = (*pairLock)(nil)

// Get returns the record the elector decides on: the primary's, unless the legacy Lease is held
// by someone else, whose record it then is. The raw record is both, so a change in either is a
// change the elector observes.
func (p *pairLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := p.primary.Get(ctx)
	if err != nil {
		return nil, nil, err
	}
	legacy, legacyRaw, err := p.legacy.Get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		// No earlier release elects on it (any more): Update creates it.
		return rec, raw, nil
	case err != nil:
		return nil, nil, err
	}
	both := bytes.Join([][]byte{raw, legacyRaw}, []byte(","))
	if legacy.HolderIdentity != "" && legacy.HolderIdentity != rec.HolderIdentity {
		return legacy, both, nil
	}
	return rec, both, nil
}

// Create creates the primary Lease and takes the legacy one: it fails, and the candidate waits,
// while someone else holds the legacy Lease and it has not expired.
func (p *pairLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := p.primary.Create(ctx, ler); err != nil {
		return err
	}
	legacy, _, err := p.legacy.Get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return p.legacy.Create(ctx, ler)
	case err != nil:
		return err
	}
	if held(legacy, p.Identity(), p.now()) {
		return fmt.Errorf("lease %s is held by %s (a replica of an earlier release): waiting for it", p.legacy.Describe(), legacy.HolderIdentity)
	}
	return p.legacy.Update(ctx, ler)
}

// Update writes both Leases (creating the legacy one if it is gone).
func (p *pairLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := p.primary.Update(ctx, ler); err != nil {
		return err
	}
	if err := p.legacy.Update(ctx, ler); err != nil {
		if _, _, gerr := p.legacy.Get(ctx); apierrors.IsNotFound(gerr) {
			return p.legacy.Create(ctx, ler)
		}
		return err
	}
	return nil
}

func (p *pairLock) RecordEvent(s string) {
	p.primary.RecordEvent(s)
	p.legacy.RecordEvent(s)
}

func (p *pairLock) Identity() string { return p.primary.Identity() }

func (p *pairLock) Describe() string {
	return p.primary.Describe() + " (and " + p.legacy.Describe() + ")"
}

// held reports whether someone other than identity holds rec's Lease and it has not expired.
func held(rec *resourcelock.LeaderElectionRecord, identity string, now time.Time) bool {
	if rec.HolderIdentity == "" || rec.HolderIdentity == identity {
		return false
	}
	return rec.RenewTime.Add(time.Duration(rec.LeaseDurationSeconds) * time.Second).After(now)
}
