//go:build integration

package limiter

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentplane/agentplane/libs/testenv"
)

var srv *testenv.Redis

func TestMain(m *testing.M) {
	var err error
	if srv, err = testenv.StartRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = srv.Close()
	os.Exit(testenv.NoLeaks(code))
}

func client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func newLimiter(t testing.TB, cfg Config, onDegraded func(bool)) *Limiter {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = fmt.Sprintf("test:%s:%d", t.Name(), time.Now().UnixNano())
	}
	l, err := New(client(t), cfg, onDegraded, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l
}

// redisNow reads Redis's clock, the one the bucket script decides by.
func redisNow(t testing.TB, rc *redis.Client) time.Time {
	t.Helper()
	now, err := rc.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// awaitRedisClock waits until Redis's clock has reached at. Where time is the subject these
// tests wait on the clock that decides, so a loaded machine makes them slower, never wrong.
func awaitRedisClock(t testing.TB, rc *redis.Client, at time.Time) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "Redis's clock at "+at.Format(time.StampMicro), func() error {
		if now := redisNow(t, rc); now.Before(at) {
			return fmt.Errorf("it is %s", now.Format(time.StampMicro))
		}
		return nil
	})
}

func TestBucketSharedByEveryReplica(t *testing.T) {
	ctx := context.Background()
	prefix := fmt.Sprintf("shared:%d", time.Now().UnixNano())
	var replicas []*Limiter
	for i := 0; i < 4; i++ {
		replicas = append(replicas, newLimiter(t, Config{PerMinute: 60, Burst: 5, Prefix: prefix}, nil))
	}
	var allowed atomic.Int32
	var wg sync.WaitGroup
	rc := client(t)
	before := redisNow(t, rc)
	for _, l := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				if l.Allow(ctx, "uid-1", "InvalidSpec", false) == Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	after := redisNow(t, rc)
	// The burst of 5, plus one token for each whole second that passed on Redis's clock (at
	// 60/min) while the 100 decisions were taken.
	refilled := int64(after.Sub(before) / time.Second)
	if n := int64(allowed.Load()); n < 5 || n > 5+refilled {
		t.Fatalf("4 replicas allowed %d events for one object in %s, want the shared burst of 5 (+%d refilled)", n, after.Sub(before), refilled)
	}
	awaitRedisClock(t, rc, after.Add(time.Second))
	if replicas[2].Allow(ctx, "uid-1", "InvalidSpec", false) != Allowed {
		t.Fatal("no token refilled after a second at 60/min")
	}
	if replicas[0].Allow(ctx, "uid-2", "InvalidSpec", false) != Allowed {
		t.Fatal("another object shares the bucket")
	}
}

func TestTransientErrorsFirstOccurrenceOnly(t *testing.T) {
	ctx := context.Background()
	const window = 2 * time.Second
	l := newLimiter(t, Config{PerMinute: 600, Burst: 10, TransientWindow: window}, nil)
	rc := client(t)
	before := redisNow(t, rc)
	if d := l.Allow(ctx, "u", "ReconcileError", true); d != Allowed {
		t.Fatalf("first = %s", d)
	}
	after := redisNow(t, rc)
	checked := 0
	for i := 0; i < 5; i++ {
		d := l.Allow(ctx, "u", "ReconcileError", true)
		// The marker was set no earlier than before and lives for the window on Redis's clock:
		// a repeat that ended before then must have been suppressed.
		if redisNow(t, rc).Before(before.Add(window)) {
			checked++
			if d != Suppressed {
				t.Fatalf("repeat %d = %s, want suppressed", i, d)
			}
		}
	}
	if checked == 0 {
		t.Fatalf("no repeat fell within the %s window (Redis's clock moved %s)", window, redisNow(t, rc).Sub(before))
	}
	awaitRedisClock(t, rc, after.Add(window+2*time.Millisecond)) // expiry is whole milliseconds
	if d := l.Allow(ctx, "u", "ReconcileError", true); d != Allowed {
		t.Fatalf("after the window = %s", d)
	}
}

func TestKeysExpireWhenAnObjectGoesQuiet(t *testing.T) {
	ctx := context.Background()
	cfg := Config{PerMinute: 60, Burst: 5, Prefix: fmt.Sprintf("ttl:%d", time.Now().UnixNano())}
	l := newLimiter(t, cfg, nil)
	for i := 0; i < 3; i++ {
		if d := l.Allow(ctx, "quiet", "InvalidSpec", false); d != Allowed {
			t.Fatalf("decision %d = %s", i+1, d)
		}
	}
	ttl, err := client(t).PTTL(ctx, cfg.Prefix+":{quiet}:full").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Three tokens taken at 60/min: full again in 3s; the key lives that long plus a second.
	if ttl <= 2*time.Second || ttl > 4*time.Second {
		t.Fatalf("bucket key TTL = %s, want (2s, 4s]", ttl)
	}
}

// A refused decision writes nothing: a storm against an empty bucket costs Redis reads only, and
// cannot push the bucket's refill further away.
func TestARefusalWritesNothing(t *testing.T) {
	ctx := context.Background()
	cfg := Config{PerMinute: 1, Burst: 2, Prefix: fmt.Sprintf("refuse:%d", time.Now().UnixNano())}
	l := newLimiter(t, cfg, nil)
	rc := client(t)
	key := cfg.Prefix + ":{o}:full"
	for i := 0; i < 2; i++ {
		if d := l.Allow(ctx, "o", "InvalidSpec", false); d != Allowed {
			t.Fatalf("decision %d = %s", i+1, d)
		}
	}
	// The bucket key's value and time to live.
	state := func() (string, time.Duration) {
		t.Helper()
		v, err := rc.Get(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := rc.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v, ttl
	}
	before, ttlBefore := state()
	for i := 0; i < 20; i++ {
		if d := l.Allow(ctx, "o", "InvalidSpec", false); d != RateLimited {
			t.Fatalf("decision %d on an empty bucket = %s", i+3, d)
		}
	}
	after, ttlAfter := state()
	if after != before || ttlAfter > ttlBefore {
		t.Fatalf("20 refusals changed the bucket: %s (TTL %s) -> %s (TTL %s)", before, ttlBefore, after, ttlAfter)
	}
	// Two tokens at 1/min: full again 120s after the first was taken (a few seconds of this test
	// have passed since).
	full, err := strconv.ParseInt(before, 10, 64)
	if err != nil {
		t.Fatalf("the bucket holds %q, not a whole number of microseconds: %v", before, err)
	}
	if left := time.Duration(full-redisNow(t, rc).UnixMicro()) * time.Microsecond; left <= 110*time.Second || left > 120*time.Second {
		t.Fatalf("the bucket is full again in %s, want (110s, 120s]", left)
	}
}

func TestScriptIsReloadedAfterAFlush(t *testing.T) {
	ctx := context.Background()
	l := newLimiter(t, Config{PerMinute: 60, Burst: 5}, nil)
	if err := client(t).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d := l.Allow(ctx, "u", "InvalidSpec", false); d != Allowed || l.Degraded() {
		t.Fatalf("after SCRIPT FLUSH: %s degraded=%v", d, l.Degraded())
	}
}

func TestFallsBackWhenRedisGoesAndReturnsByItself(t *testing.T) {
	ctx := context.Background()
	var switches []bool
	var mu sync.Mutex
	switched := make(chan bool, 4)
	var redisCalls atomic.Int32
	l, err := New(client(t), Config{PerMinute: 60, Burst: 3, ProbeInterval: 100 * time.Millisecond,
		Prefix: fmt.Sprintf("fallback:%d", time.Now().UnixNano())}, func(d bool) {
		mu.Lock()
		switches = append(switches, d)
		mu.Unlock()
		switched <- d
	}, func(time.Duration) { redisCalls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	defer srv.Start()
	allowed := 0
	for i := 0; i < 50; i++ {
		if l.Allow(ctx, "u", "InvalidSpec", false) == Allowed {
			allowed++
		}
	}
	if !l.Degraded() {
		t.Fatal("not degraded with Redis down")
	}
	if allowed > 4 {
		t.Fatalf("fallback allowed %d of 50, want the burst of 3 (+1 refill)", allowed)
	}
	// Callers must not wait on Redis while it is gone: only the first decision tried it.
	if n := redisCalls.Load(); n != 1 {
		t.Fatalf("50 decisions without Redis made %d Redis calls, want 1 (the one that found it gone)", n)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []bool{true, false} {
		select {
		case d := <-switched:
			if d != want {
				t.Fatalf("degraded switched to %v, want %v", d, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no switch to degraded=%v within 30s of Redis returning", want)
		}
	}
	if l.Degraded() {
		t.Fatal("told it returned to Redis but still degraded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(switches) != 2 || !switches[0] || switches[1] {
		t.Fatalf("degraded switches = %v, want [true false]", switches)
	}
}
