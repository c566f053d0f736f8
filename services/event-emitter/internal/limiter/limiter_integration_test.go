//go:build integration

package limiter

import (
	"context"
	"fmt"
	"os"
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

func TestBucketSharedByEveryReplica(t *testing.T) {
	ctx := context.Background()
	prefix := fmt.Sprintf("shared:%d", time.Now().UnixNano())
	var replicas []*Limiter
	for i := 0; i < 4; i++ {
		replicas = append(replicas, newLimiter(t, Config{PerMinute: 60, Burst: 5, Prefix: prefix}, nil))
	}
	var allowed atomic.Int32
	var wg sync.WaitGroup
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
	// 100 decisions in well under a second: the burst of 5, plus at most one refilled token.
	if n := allowed.Load(); n < 5 || n > 6 {
		t.Fatalf("4 replicas allowed %d events for one object, want the shared burst of 5", n)
	}
	time.Sleep(1100 * time.Millisecond)
	if replicas[2].Allow(ctx, "uid-1", "InvalidSpec", false) != Allowed {
		t.Fatal("no token refilled after a second at 60/min")
	}
	if replicas[0].Allow(ctx, "uid-2", "InvalidSpec", false) != Allowed {
		t.Fatal("another object shares the bucket")
	}
}

func TestTransientErrorsFirstOccurrenceOnly(t *testing.T) {
	ctx := context.Background()
	l := newLimiter(t, Config{PerMinute: 600, Burst: 10, TransientWindow: 500 * time.Millisecond}, nil)
	if d := l.Allow(ctx, "u", "ReconcileError", true); d != Allowed {
		t.Fatalf("first = %s", d)
	}
	for i := 0; i < 5; i++ {
		if d := l.Allow(ctx, "u", "ReconcileError", true); d != Suppressed {
			t.Fatalf("repeat %d = %s, want suppressed", i, d)
		}
	}
	time.Sleep(600 * time.Millisecond)
	if d := l.Allow(ctx, "u", "ReconcileError", true); d != Allowed {
		t.Fatalf("after the window = %s", d)
	}
}

func TestKeysExpireWhenAnObjectGoesQuiet(t *testing.T) {
	ctx := context.Background()
	cfg := Config{PerMinute: 60, Burst: 5, Prefix: fmt.Sprintf("ttl:%d", time.Now().UnixNano())}
	l := newLimiter(t, cfg, nil)
	l.Allow(ctx, "quiet", "InvalidSpec", false)
	ttl, err := client(t).PTTL(ctx, cfg.Prefix+":{quiet}:bucket").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Full again after burst/rate = 5s; the key lives that long plus a second, then goes.
	if ttl <= 0 || ttl > 6*time.Second {
		t.Fatalf("bucket key TTL = %s, want (0, 6s]", ttl)
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
	l := newLimiter(t, Config{PerMinute: 60, Burst: 3, ProbeInterval: 100 * time.Millisecond}, func(d bool) {
		mu.Lock()
		switches = append(switches, d)
		mu.Unlock()
	})
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	defer srv.Start()
	allowed := 0
	start := time.Now()
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
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("50 decisions took %s without Redis: callers must not wait on it", d)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.Degraded() {
		if time.Now().After(deadline) {
			t.Fatal("never returned to Redis")
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(switches) != 2 || !switches[0] || switches[1] {
		t.Fatalf("degraded switches = %v, want [true false]", switches)
	}
}
