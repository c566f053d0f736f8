//go:build integration

package limiter

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// BenchmarkLimiterDecisions measures, in one run on the same redis-server, decisions per second
// of this limiter against two baselines: a raw EVALSHA round trip of a script that only returns
// (the floor any Redis limiter pays), and github.com/go-redis/redis_rate/v10 (GCRA). Reported:
// ours/raw (goal >= 0.8), ours/redis_rate (goal >= 1), and the over-grant of each limiter on one
// hot key: decisions allowed beyond burst + rate x elapsed (goal 0).
func BenchmarkLimiterDecisions(b *testing.B) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("concurrency-%d", conc), func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128})
			defer rdb.Close()
			ctx := context.Background()
			ours, err := New(rdb, Config{PerMinute: 600000, Burst: 1000, Prefix: fmt.Sprintf("bench:%d", time.Now().UnixNano())}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := ours.Load(ctx); err != nil {
				b.Fatal(err)
			}
			raw := redis.NewScript("return 1")
			if err := raw.Load(ctx, rdb).Err(); err != nil {
				b.Fatal(err)
			}
			gcra := redis_rate.NewLimiter(rdb)
			limit := redis_rate.Limit{Rate: 600000, Burst: 1000, Period: time.Minute}
			// The three paths are interleaved call by call on every goroutine and each call is
			// timed, so the machine's noise falls on all three alike; decisions/s at this
			// concurrency = concurrency / mean latency.
			paths := []func(key string){
				func(key string) { _ = raw.Run(ctx, rdb, []string{key}).Err() },
				func(key string) { ours.Allow(ctx, key, "InvalidSpec", false) },
				func(key string) { _, _ = gcra.Allow(ctx, "rr:"+key, limit) },
			}
			perRound := 1500
			if conc == 1 {
				perRound = 500
			}
			var spent [3]atomic.Int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run(conc, perRound, func(key string) {
					for p, decide := range paths {
						s := time.Now()
						decide(key)
						spent[p].Add(int64(time.Since(s)))
					}
				})
			}
			b.StopTimer()
			rate := func(p int) float64 {
				return float64(conc) * float64(b.N*perRound) / time.Duration(spent[p].Load()).Seconds()
			}
			b.ReportMetric(rate(1), "ours-decisions/s")
			b.ReportMetric(rate(1)/rate(0), "ours/raw")
			b.ReportMetric(rate(1)/rate(2), "ours/redis_rate")
			b.ReportMetric(overGrantOurs(b, rdb, conc), "ours-overgrant")
			b.ReportMetric(overGrantRedisRate(b, rdb, conc), "redis_rate-overgrant")
		})
	}
}

// run spreads n decisions over 1000 object keys from conc goroutines and returns the wall time.
func run(conc, n int, decide func(key string)) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				decide(fmt.Sprintf("obj-%d", i%1000))
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

const hotBurst, hotPerSecond, hotDecisions = 20, 50.0, 3000

func hot(conc int, allow func() bool) (allowed int64, elapsed time.Duration) {
	var n atomic.Int64
	elapsed = run(conc, hotDecisions, func(string) {
		if allow() {
			n.Add(1)
		}
	})
	return n.Load(), elapsed
}

func overGrant(allowed int64, elapsed time.Duration) float64 {
	return max(0, float64(allowed)-(hotBurst+hotPerSecond*elapsed.Seconds()))
}

func overGrantOurs(b *testing.B, rdb *redis.Client, conc int) float64 {
	l, err := New(rdb, Config{PerMinute: hotPerSecond * 60, Burst: hotBurst, Prefix: fmt.Sprintf("hot:%d", time.Now().UnixNano())}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	return overGrant(hot(conc, func() bool { return l.Allow(context.Background(), "hot", "InvalidSpec", false) == Allowed }))
}

func overGrantRedisRate(b *testing.B, rdb *redis.Client, conc int) float64 {
	g := redis_rate.NewLimiter(rdb)
	key := fmt.Sprintf("rrhot:%d", time.Now().UnixNano())
	limit := redis_rate.Limit{Rate: int(hotPerSecond), Burst: hotBurst, Period: time.Second}
	return overGrant(hot(conc, func() bool {
		r, err := g.Allow(context.Background(), key, limit)
		return err == nil && r.Allowed > 0
	}))
}
