package limiter

import (
	"sync"
	"time"
)

// localBuckets are the in-process fallback: the same bucket per object as in Redis, bounded in
// number, so a replica without Redis still never emits without bound.
type localBuckets struct {
	mu      sync.Mutex
	max     int
	burst   float64
	rate    float64 // tokens per second
	buckets map[string]*bucket
	firsts  map[string]time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLocalBuckets(max int, burst, rate float64) *localBuckets {
	return &localBuckets{max: max, burst: burst, rate: rate, buckets: map[string]*bucket{}, firsts: map[string]time.Time{}}
}

func (lb *localBuckets) allow(object, reason string, transient bool, window time.Duration, now time.Time) Decision {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	fk := object + "\x00" + reason
	if transient {
		if until, ok := lb.firsts[fk]; ok && now.Before(until) {
			return Suppressed
		}
	}
	b := lb.buckets[object]
	if b == nil {
		if len(lb.buckets) >= lb.max && !lb.evict(now) {
			// Every bucket is still draining: forgetting one would hand its object a fresh burst,
			// so a new object waits instead. The fallback fails closed.
			return RateLimited
		}
		b = &bucket{tokens: lb.burst, last: now}
		lb.buckets[object] = b
	}
	if now.After(b.last) {
		b.tokens = min(lb.burst, b.tokens+now.Sub(b.last).Seconds()*lb.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return RateLimited
	}
	b.tokens--
	if transient {
		if len(lb.firsts) >= lb.max {
			for k, until := range lb.firsts {
				if now.After(until) {
					delete(lb.firsts, k)
				}
			}
		}
		if len(lb.firsts) < lb.max {
			lb.firsts[fk] = now.Add(window)
		}
	}
	return Allowed
}

// evict drops the buckets that have refilled completely (forgetting them loses nothing) and
// reports whether any room was made.
func (lb *localBuckets) evict(now time.Time) bool {
	n := len(lb.buckets)
	for k, b := range lb.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*lb.rate >= lb.burst {
			delete(lb.buckets, k)
		}
	}
	return len(lb.buckets) < n
}
