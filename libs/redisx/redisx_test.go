package redisx

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentplane/agentplane/libs/config"
)

func TestLoadConfigPicksOneMode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		def      string
		mode     Mode
		err      string
		describe string
	}{
		{name: "default URL", def: "redis://127.0.0.1:6379/0", mode: Single, describe: "127.0.0.1:6379"},
		{name: "no default: disabled", mode: Disabled},
		{name: "URL", env: map[string]string{"JANGAR_REDIS_URL": "redis://r:6380/1"}, def: "redis://127.0.0.1:6379/0", mode: Single, describe: "r:6380"},
		{name: "sentinel", env: map[string]string{"JANGAR_REDIS_SENTINEL_MASTER": "m", "JANGAR_REDIS_SENTINEL_ADDRS": "s1:26379, s2:26379"},
			def: "redis://127.0.0.1:6379/0", mode: Sentinel, describe: "sentinel m via s1:26379,s2:26379"},
		{name: "cluster", env: map[string]string{"JANGAR_REDIS_CLUSTER_ADDRS": "c1:6379,c2:6379,c3:6379"}, mode: Cluster, describe: "cluster c1:6379,c2:6379,c3:6379"},
		{name: "two modes", env: map[string]string{"JANGAR_REDIS_URL": "redis://r:6379", "JANGAR_REDIS_CLUSTER_ADDRS": "c1:6379"}, err: "not several"},
		{name: "sentinel without master", env: map[string]string{"JANGAR_REDIS_SENTINEL_ADDRS": "s1:26379"}, err: "needs both JANGAR_REDIS_SENTINEL_MASTER"},
		{name: "master without sentinels", env: map[string]string{"JANGAR_REDIS_SENTINEL_MASTER": "m"}, err: "needs both"},
		{name: "bad seed", env: map[string]string{"JANGAR_REDIS_CLUSTER_ADDRS": "c1"}, err: `"c1" is not host:port`},
		{name: "cluster with a DB", env: map[string]string{"JANGAR_REDIS_CLUSTER_ADDRS": "c1:6379", "JANGAR_REDIS_DB": "2"}, err: "only database 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := config.FromMap(tc.env)
			c := LoadConfig(env, tc.def)
			if err := env.Err(); err != nil {
				t.Fatal(err)
			}
			mode, err := c.Mode()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				if _, nerr := New(c, Options{}); nerr == nil {
					t.Fatal("New accepted a configuration Mode refuses")
				}
				return
			}
			if err != nil || mode != tc.mode {
				t.Fatalf("mode %q, %v; want %q", mode, err, tc.mode)
			}
			if d := c.Describe(); d != tc.describe {
				t.Fatalf("Describe() = %q, want %q", d, tc.describe)
			}
		})
	}
}

func TestNewBuildsTheClientForEachMode(t *testing.T) {
	o := Options{Timeout: 50 * time.Millisecond, PoolSize: 7}
	single, err := New(Config{URL: "redis://:in-url@127.0.0.1:6390/2", Password: "from-secret"}, o)
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	so := single.(*redis.Client).Options()
	if so.Addr != "127.0.0.1:6390" || so.DB != 2 || so.Password != "from-secret" || so.ReadTimeout != 50*time.Millisecond ||
		so.PoolSize != 7 || so.MaxRetries > 0 || so.DialerRetries != 1 || so.TLSConfig != nil {
		t.Fatalf("single options = %+v", so)
	}
	tlsURL, err := New(Config{URL: "rediss://redis.example:6390/0"}, o)
	if err != nil {
		t.Fatal(err)
	}
	defer tlsURL.Close()
	if tc := tlsURL.(*redis.Client).Options().TLSConfig; tc == nil || tc.ServerName != "redis.example" {
		t.Fatalf("rediss:// gave TLS config %+v, want TLS verifying redis.example", tc)
	}
	cluster, err := New(Config{ClusterAddrs: []string{"a:1", "b:2"}, Password: "pw", TLS: true, TLSServerName: "redis.internal"}, o)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cc, ok := cluster.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("cluster mode built a %T", cluster)
	}
	co := cc.Options()
	if strings.Join(co.Addrs, ",") != "a:1,b:2" || co.Password != "pw" || co.MaxRedirects != 1 || co.DialerRetries != 1 ||
		co.ReadTimeout != 50*time.Millisecond || co.TLSConfig == nil || co.TLSConfig.ServerName != "redis.internal" {
		t.Fatalf("cluster options = %+v", co)
	}
	sentinel, err := New(Config{SentinelMaster: "m", SentinelAddrs: []string{"s:26379"}}, o)
	if err != nil {
		t.Fatal(err)
	}
	defer sentinel.Close()
	if _, ok := sentinel.(*redis.Client); !ok {
		t.Fatalf("sentinel mode built a %T", sentinel)
	}
	if c, err := New(Config{}, o); c != nil || err != nil {
		t.Fatalf("disabled: %v, %v; want no client and no error", c, err)
	}
}

func TestErrorsRepeatNoSecret(t *testing.T) {
	_, err := New(Config{URL: "http://user:hunter2@host"}, Options{}) //nolint:gosec // G101: a made-up password the error must not repeat
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad URL error %v must not repeat the URL", err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{ClusterAddrs: []string{"a:1"}, TLS: true, TLSCAFile: bad}, Options{}); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Fatalf("a CA file with no certificate: %v", err)
	}
	if _, err := New(Config{ClusterAddrs: []string{"a:1"}, TLSCAFile: filepath.Join(dir, "missing.pem")}, Options{}); err == nil || !strings.Contains(err.Error(), "JANGAR_REDIS_TLS_CA_FILE") {
		t.Fatalf("a missing CA file: %v", err)
	}
}
