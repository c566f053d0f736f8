package limiter

import (
	"testing"
	"time"
)

func TestLocalBucketRefillsAndFailsClosedWhenFull(t *testing.T) {
	now := time.Unix(1000, 0)
	lb := newLocalBuckets(2, 3, 1) // 2 objects at most, burst 3, 1 token/s
	allowed := 0
	for i := 0; i < 10; i++ {
		if lb.allow("a", "InvalidSpec", false, time.Minute, now) == Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("allowed %d of 10 at once, want the burst of 3", allowed)
	}
	if lb.allow("a", "InvalidSpec", false, time.Minute, now.Add(1100*time.Millisecond)) != Allowed {
		t.Fatal("no token after a second")
	}
	for i := 0; i < 3; i++ {
		if lb.allow("b", "InvalidSpec", false, time.Minute, now) != Allowed {
			t.Fatal("second object refused")
		}
	}
	// Both buckets are draining: a third object must wait rather than evict one of them.
	if d := lb.allow("c", "InvalidSpec", false, time.Minute, now.Add(1200*time.Millisecond)); d != RateLimited {
		t.Fatalf("third object got %s while every bucket was draining", d)
	}
	// Once they have refilled they can be forgotten.
	if d := lb.allow("c", "InvalidSpec", false, time.Minute, now.Add(time.Minute)); d != Allowed {
		t.Fatalf("third object got %s after the others refilled", d)
	}
}

func TestLocalTransientFirstOccurrenceOnly(t *testing.T) {
	now := time.Unix(1000, 0)
	lb := newLocalBuckets(10, 5, 1)
	if lb.allow("a", "ReconcileError", true, time.Minute, now) != Allowed {
		t.Fatal("first transient occurrence refused")
	}
	if d := lb.allow("a", "ReconcileError", true, time.Minute, now.Add(time.Second)); d != Suppressed {
		t.Fatalf("repeat within the window = %s", d)
	}
	if d := lb.allow("a", "MissingSecret", true, time.Minute, now.Add(time.Second)); d != Allowed {
		t.Fatalf("another reason = %s", d)
	}
	if d := lb.allow("a", "ReconcileError", true, time.Minute, now.Add(2*time.Minute)); d != Allowed {
		t.Fatalf("after the window = %s", d)
	}
}
