//go:build integration

package redisx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentplane/agentplane/libs/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

func newClient(t *testing.T, c Config) redis.UniversalClient {
	t.Helper()
	rdb, err := New(c, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestOneNodeOverTLSWithAPassword: a rediss:// URL with the CA from JANGAR_REDIS_TLS_CA_FILE and
// the password from JANGAR_REDIS_PASSWORD reaches a TLS-only Redis; a wrong password or an
// unknown CA is refused, and no error repeats the password.
func TestOneNodeOverTLSWithAPassword(t *testing.T) {
	ctx := context.Background()
	pki := testenv.NewPKI(t, "redis")
	r, err := testenv.StartRedisTLS(pki.CertFile, pki.KeyFile, pki.CAFile, "s3cret-pw")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	url := "rediss://" + r.Addr + "/0"
	good := newClient(t, Config{URL: url, Password: "s3cret-pw", TLSCAFile: pki.CAFile})
	if err := good.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("over TLS with the password: %v", err)
	}
	if v, err := good.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k = %q, %v", v, err)
	}
	err = newClient(t, Config{URL: url, Password: "wrong-pw", TLSCAFile: pki.CAFile}).Ping(ctx).Err()
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), "wrong-pw") {
		t.Fatalf("a wrong password: %v", err)
	}
	other := testenv.NewPKI(t, "other")
	err = newClient(t, Config{URL: url, Password: "s3cret-pw", TLSCAFile: other.CAFile}).Ping(ctx).Err()
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a server certificate from an unknown CA: %v", err)
	}
	err = newClient(t, Config{URL: "redis://" + r.Addr + "/0", Password: "s3cret-pw"}).Ping(ctx).Err()
	if err == nil {
		t.Fatal("plain TCP to a TLS-only Redis answered")
	}
}

// TestSentinelClientFollowsAFailover: the client finds the master through the sentinels, and
// after the master is killed writes reach the promoted replica, which holds what was written
// before.
func TestSentinelClientFollowsAFailover(t *testing.T) {
	ctx := context.Background()
	sg, err := testenv.StartRedisSentinel(1, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer sg.Close()
	c := newClient(t, Config{SentinelMaster: sg.Name, SentinelAddrs: sg.SentinelAddrs()})
	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	first, err := sg.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The write must have reached the replica before the master goes, or the test is about luck.
	if err := c.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	_ = first.Stop()
	testenv.Eventually(t, time.Minute, "a write after the failover", func() error {
		return c.Set(ctx, "after", "1", 0).Err()
	})
	now, err := sg.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if now == first {
		t.Fatalf("the sentinels still name the killed %s", first.Addr)
	}
	if v, err := c.Get(ctx, "before").Result(); err != nil || v != "1" {
		t.Fatalf("what was written before the failover: %q, %v", v, err)
	}
}

// TestClusterClientSpansTheSlots: keys spread over every master, and a script may touch several
// keys only when they share a hash tag, which is why the limiter's keys carry one.
func TestClusterClientSpansTheSlots(t *testing.T) {
	ctx := context.Background()
	rc, err := testenv.StartRedisCluster(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	c := newClient(t, Config{ClusterAddrs: rc.Addrs()[:1]})
	for i := 0; i < 300; i++ {
		if err := c.Set(ctx, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range rc.Masters {
		n := redis.NewClient(&redis.Options{Addr: m.Addr})
		size, err := n.DBSize(ctx).Result()
		_ = n.Close()
		if err != nil || size == 0 {
			t.Fatalf("master %s holds %d keys (%v): the client did not spread them", m.Addr, size, err)
		}
	}
	script := redis.NewScript(`redis.call('SET', KEYS[1], 'a'); redis.call('SET', KEYS[2], 'b'); return 1`)
	if err := script.Run(ctx, c, []string{"p:{obj-1}:bucket", "p:{obj-1}:first:X"}).Err(); err != nil {
		t.Fatalf("a script on two keys of one hash tag: %v", err)
	}
	err = script.Run(ctx, c, []string{"p:obj-1:bucket", "p:obj-2:first:X"}).Err()
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a script on keys of two slots: %v, want CROSSSLOT", err)
	}
}
