//go:build integration

package limiter

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/agentplane/agentplane/libs/testenv"
)

// BenchmarkLimiterDecisions measures, in one run on the same redis-server, decisions per second
// of this limiter against two baselines: a raw EVALSHA round trip of a script that only returns
// (the floor any Redis limiter pays), and github.com/go-redis/redis_rate/v10 (GCRA), both
// interleaved and in alternating rounds of their own. Reported: ours/raw (goal >= 0.8),
// ours/redis_rate (goal >= 1), and the over-grant of each limiter on one hot key: decisions
// allowed beyond burst + rate x elapsed (goal 0); each goal as a goal-met/ figure (1 or 0).
//
// This process runs on the first CPU and redis-server on the others (testenv.PinApart), as a
// Redis on another host would be: every round trip crosses CPUs, for the three paths alike. Left
// to the scheduler, a lone round trip was several times quicker when both ends happened to share
// a CPU than when they did not, so at concurrency 1 the rounds' ratios measured where the
// scheduler put each path (raw EVALSHA's own rate in its rounds moved fourfold between runs of
// the same code: docs/benchmarks.md, "Limiter: where redis-server runs").
func BenchmarkLimiterDecisions(b *testing.B) {
	if cpus, restore := testenv.PinApart(b, srv.PID()); cpus != "" {
		// One CPU, one P: what Go would have chosen had the process started on that CPU.
		procs := runtime.GOMAXPROCS(1)
		defer func() { runtime.GOMAXPROCS(procs); restore() }()
		b.Logf("this process on CPU 0 (GOMAXPROCS 1), redis-server on CPUs %s", cpus)
	}
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
			// Each path's errors fail the benchmark: a path that errs (or a limiter that fell back
			// to in-process buckets) would be measured doing something cheaper than its job.
			var failed atomic.Value
			fail := func(what string, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, fmt.Sprintf("%s: %v", what, err))
				}
			}
			var allowed, limited atomic.Int64
			paths := []func(key string){
				func(key string) { fail("raw EVALSHA", raw.Run(ctx, rdb, []string{key}).Err()) },
				func(key string) {
					if ours.Allow(ctx, key, "InvalidSpec", false) == Allowed {
						allowed.Add(1)
					} else {
						limited.Add(1)
					}
				},
				func(key string) { _, err := gcra.Allow(ctx, "rr:"+key, limit); fail("redis_rate", err) },
			}
			perRound := 1500
			if conc == 1 {
				perRound = 500
			}
			// Two ways, in the same run: interleaved call by call on every goroutine, each call
			// timed (the machine's noise falls on all three alike; decisions/s = concurrency /
			// mean latency), and each path in its own rounds, alternating raw, ours, redis_rate,
			// raw, ... (decisions/s = decisions / the round's wall time; at high concurrency the
			// paths then do not share Redis's queue).
			var spent [3]atomic.Int64
			var alone [3]time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run(conc, perRound, func(key string) {
					for p, decide := range paths {
						s := time.Now()
						decide(key)
						spent[p].Add(int64(time.Since(s)))
					}
				})
				for p, decide := range paths {
					alone[p] += run(conc, perRound, decide)
				}
			}
			b.StopTimer()
			if f, ok := failed.Load().(string); ok {
				b.Fatal(f)
			}
			if ours.Degraded() {
				b.Fatal("the limiter fell back to in-process buckets during the benchmark: its figures are not Redis's")
			}
			// 600,000/min over 1,000 keys with a burst of 1,000 each: every decision is allowed.
			if l := limited.Load(); l != 0 || allowed.Load() != int64(2*b.N*perRound) {
				b.Fatalf("ours allowed %d and limited %d of %d decisions, want all allowed", allowed.Load(), l, 2*b.N*perRound)
			}
			interleaved := func(p int) float64 {
				return float64(conc) * float64(b.N*perRound) / time.Duration(spent[p].Load()).Seconds()
			}
			rounds := func(p int) float64 { return float64(b.N*perRound) / alone[p].Seconds() }
			b.ReportMetric(interleaved(1), "ours-decisions/s")
			b.ReportMetric(interleaved(1)/interleaved(0), "ours/raw")
			b.ReportMetric(interleaved(1)/interleaved(2), "ours/redis_rate")
			b.ReportMetric(rounds(1), "ours-decisions/s-rounds")
			b.ReportMetric(rounds(1)/rounds(0), "ours/raw-rounds")
			b.ReportMetric(rounds(1)/rounds(2), "ours/redis_rate-rounds")
			oursOver, rrOver := overGrantOurs(b, rdb, conc), overGrantRedisRate(b, rdb, conc)
			b.ReportMetric(oursOver, "ours-overgrant")
			b.ReportMetric(rrOver, "redis_rate-overgrant")
			testenv.Goal(b, "ours/raw>=0.8", interleaved(1)/interleaved(0) >= 0.8)
			testenv.Goal(b, "ours/raw-rounds>=0.8", rounds(1)/rounds(0) >= 0.8)
			testenv.Goal(b, "ours/redis_rate>=1", interleaved(1)/interleaved(2) >= 1)
			testenv.Goal(b, "ours/redis_rate-rounds>=1", rounds(1)/rounds(2) >= 1)
			testenv.Goal(b, "ours-overgrant=0", oursOver == 0)
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
	if err := l.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	over := overGrant(hot(conc, func() bool { return l.Allow(context.Background(), "hot", "InvalidSpec", false) == Allowed }))
	if l.Degraded() {
		b.Fatal("the hot-key limiter fell back to in-process buckets: its over-grant is not Redis's")
	}
	return over
}

func overGrantRedisRate(b *testing.B, rdb *redis.Client, conc int) float64 {
	g := redis_rate.NewLimiter(rdb)
	key := fmt.Sprintf("rrhot:%d", time.Now().UnixNano())
	limit := redis_rate.Limit{Rate: int(hotPerSecond), Burst: hotBurst, Period: time.Second}
	var failed atomic.Value
	over := overGrant(hot(conc, func() bool {
		r, err := g.Allow(context.Background(), key, limit)
		if err != nil {
			failed.CompareAndSwap(nil, err.Error())
		}
		return err == nil && r.Allowed > 0
	}))
	if f, ok := failed.Load().(string); ok {
		b.Fatalf("redis_rate: %s", f)
	}
	return over
}
