//go:build integration

package limiter

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentplane/agentplane/libs/redisx"
	"github.com/agentplane/agentplane/libs/testenv"
)

// TestBucketSharedOnARedisCluster: on a 3-master Redis Cluster the script's two keys sit in one
// slot (their hash tag), so every decision runs on Redis (none falls back), objects spread over
// every master, and replicas still share one bucket per object.
func TestBucketSharedOnARedisCluster(t *testing.T) {
	ctx := context.Background()
	rc, err := testenv.StartRedisCluster(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	prefix := fmt.Sprintf("cluster:%d", time.Now().UnixNano())
	var replicas []*Limiter
	var fellBack atomic.Int32
	for i := 0; i < 4; i++ {
		rdb, err := redisx.New(redisx.Config{ClusterAddrs: rc.Addrs()}, redisx.Options{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		l, err := New(rdb, Config{PerMinute: 60, Burst: 5, Prefix: prefix, ProbeInterval: 100 * time.Millisecond},
			func(d bool) {
				if d {
					fellBack.Add(1)
				}
			}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Load(ctx); err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, l)
	}
	// Redis's clock on the first object's node bounds the refill.
	node, err := rc.MasterOf(ctx, prefix+":{uid-0}:full")
	if err != nil {
		t.Fatal(err)
	}
	nc := redis.NewClient(&redis.Options{Addr: node.Addr})
	defer nc.Close()
	before := redisNow(t, nc)
	var allowed [30]atomic.Int32
	var wg sync.WaitGroup
	for _, l := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				for o := range allowed {
					if l.Allow(ctx, fmt.Sprintf("uid-%d", o), "InvalidSpec", false) == Allowed {
						allowed[o].Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	after := redisNow(t, nc)
	if n := fellBack.Load(); n != 0 {
		t.Fatalf("%d replicas fell back to in-process buckets on a healthy cluster", n)
	}
	refilled := int64(after.Sub(before) / time.Second)
	if n := int64(allowed[0].Load()); n < 5 || n > 5+refilled {
		t.Fatalf("4 replicas allowed %d events for one object in %s, want the shared burst of 5 (+%d refilled)", n, after.Sub(before), refilled)
	}
	for _, m := range rc.Masters {
		mc := redis.NewClient(&redis.Options{Addr: m.Addr})
		size, err := mc.DBSize(ctx).Result()
		_ = mc.Close()
		if err != nil || size == 0 {
			t.Fatalf("master %s holds %d buckets (%v): 30 objects did not spread over the cluster", m.Addr, size, err)
		}
	}
}
