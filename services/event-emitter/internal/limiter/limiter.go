// Package limiter decides whether an event may be emitted: a token bucket per object, kept in
// Redis and shared by every event-emitter replica, plus first-occurrence-only for transient
// errors. When Redis is unreachable it falls back to bounded in-process buckets, reports itself
// degraded, and returns to Redis by itself.
package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Decision is what the limiter says about one event.
type Decision int

const (
	// Allowed: emit it; a token was taken.
	Allowed Decision = iota
	// RateLimited: the object's bucket is empty.
	RateLimited
	// Suppressed: a transient error already reported for this object and reason within the window.
	Suppressed
)

func (d Decision) String() string {
	return [...]string{"allowed", "rate_limited", "suppressed"}[d]
}

// Config sets the bucket: Burst tokens, refilled at PerMinute tokens a minute.
type Config struct {
	PerMinute float64
	Burst     int
	// TransientWindow is how long repeats of a transient error are suppressed.
	TransientWindow time.Duration
	// Prefix namespaces the Redis keys.
	Prefix string
	// ProbeInterval is how often Redis is tried again while degraded.
	ProbeInterval time.Duration
	// MaxLocalKeys bounds the fallback buckets.
	MaxLocalKeys int
}

//go:embed bucket.lua
var bucketLua string

// script is EVALSHA'd; go-redis loads it with EVAL on NOSCRIPT (after a Redis restart or
// failover), so it is loaded once per server.
var script = redis.NewScript(bucketLua)

// Limiter is safe for concurrent use.
type Limiter struct {
	rdb      redis.UniversalClient
	cfg      Config
	ratePerS float64
	degraded atomic.Bool
	local    *localBuckets
	// OnDegraded is told when the limiter switches to or from the in-process fallback.
	onDegraded func(bool)
	observe    func(time.Duration)
	probing    sync.Mutex
	pipe       pipe
	// The script's fixed arguments, formatted once: burst, microseconds per token (rounded up)
	// and the transient window in milliseconds.
	burstArg, intervalArg, windowArg string
}

// New returns a limiter on rdb. onDegraded (may be nil) is called on every switch between Redis
// and the fallback; observe (may be nil) receives each Redis decision's latency, from the call to
// the answer (a wait for a round trip included: see pipeline.go).
func New(rdb redis.UniversalClient, cfg Config, onDegraded func(bool), observe func(time.Duration)) (*Limiter, error) {
	if cfg.PerMinute <= 0 || cfg.Burst < 1 {
		return nil, fmt.Errorf("event rate limit needs a positive rate and a burst of at least 1 (got %g/min, burst %d)", cfg.PerMinute, cfg.Burst)
	}
	if cfg.TransientWindow <= 0 {
		cfg.TransientWindow = 5 * time.Minute
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "agentplane:events"
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = time.Second
	}
	if cfg.MaxLocalKeys <= 0 {
		cfg.MaxLocalKeys = 10000
	}
	if onDegraded == nil {
		onDegraded = func(bool) {}
	}
	if observe == nil {
		observe = func(time.Duration) {}
	}
	l := &Limiter{rdb: rdb, cfg: cfg, ratePerS: cfg.PerMinute / 60, onDegraded: onDegraded, observe: observe}
	l.burstArg = strconv.Itoa(cfg.Burst)
	l.intervalArg = strconv.FormatFloat(max(1, math.Ceil(1e6/l.ratePerS)), 'f', 0, 64)
	l.windowArg = strconv.FormatInt(cfg.TransientWindow.Milliseconds(), 10)
	l.local = newLocalBuckets(cfg.MaxLocalKeys, float64(cfg.Burst), l.ratePerS)
	return l, nil
}

// Load loads the script into Redis ahead of the first decision. A failure is not fatal: the
// limiter starts degraded and recovers when Redis answers.
func (l *Limiter) Load(ctx context.Context) error {
	err := script.Load(ctx, l.rdb).Err()
	if err != nil {
		l.setDegraded(ctx, true)
	}
	return err
}

// Degraded reports whether decisions are taken in-process because Redis is unreachable.
func (l *Limiter) Degraded() bool { return l.degraded.Load() }

// Allow decides for one event about object (a stable key such as its UID) with reason.
func (l *Limiter) Allow(ctx context.Context, object, reason string, transient bool) Decision {
	if l.degraded.Load() {
		return l.local.allow(object, reason, transient, l.cfg.TransientWindow, time.Now())
	}
	// Hash tags keep both keys in one Redis Cluster slot.
	tag := l.cfg.Prefix + ":{" + object + "}"
	bucket, first := tag+":full", tag+":first:"+reason
	t := "0"
	if transient {
		t = "1"
	}
	start := time.Now()
	n, err := l.decide(ctx, []string{bucket, first}, []any{l.burstArg, l.intervalArg, t, l.windowArg})
	l.observe(time.Since(start))
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			// The caller left (cancelled or past its deadline), not Redis: emitting nothing is
			// the safe answer, and the limiter stays on Redis.
			return RateLimited
		}
		l.setDegraded(ctx, true)
		return l.local.allow(object, reason, transient, l.cfg.TransientWindow, time.Now())
	}
	switch n {
	case 1:
		return Allowed
	case 2:
		return Suppressed
	default:
		return RateLimited
	}
}

func (l *Limiter) setDegraded(ctx context.Context, d bool) {
	if l.degraded.Swap(d) == d {
		return
	}
	l.onDegraded(d)
	if d {
		go l.probe(context.WithoutCancel(ctx))
	}
}

// probe pings Redis until it answers, then switches back to it.
func (l *Limiter) probe(ctx context.Context) {
	if !l.probing.TryLock() {
		return
	}
	defer l.probing.Unlock()
	t := time.NewTicker(l.cfg.ProbeInterval)
	defer t.Stop()
	for range t.C {
		if !l.degraded.Load() {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, l.cfg.ProbeInterval)
		err := script.Load(pctx, l.rdb).Err()
		cancel()
		if err == nil {
			l.setDegraded(ctx, false)
			return
		}
	}
}
