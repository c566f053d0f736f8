package controller

import (
	"time"

	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
)

// NewExpiring is apimachinery's expiring map on the clock now (a reconciler's Now, which tests
// move): what a controller remembers for a while of what its caches do not show yet.
func NewExpiring(now func() time.Time) *utilcache.Expiring {
	return utilcache.NewExpiringWithClock(nowClock{now: now})
}

// nowClock is the clock of an expiring map: only Now is read.
type nowClock struct {
	clock.RealClock
	now func() time.Time
}

func (n nowClock) Now() time.Time { return n.now() }
