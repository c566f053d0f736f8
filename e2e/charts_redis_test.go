//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/redisx"
)

// redisEnv renders chart and returns its container's environment as the process would see it:
// a variable from a Secret gets the value "<secret name/key>", and the paths of the mounted
// volumes the container has.
func redisEnv(t *testing.T, h *helmEnv, chart string, flags ...string) (map[string]string, map[string]string) {
	t.Helper()
	deps := kind(objects(t, h, chart, flags...), "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%s rendered %d Deployments", chart, len(deps))
	}
	c := at(deps[0], "spec", "template", "spec", "containers", "0").(map[string]any)
	env := map[string]string{}
	for _, e := range c["env"].([]any) {
		e := e.(map[string]any)
		if ref, ok := at(e, "valueFrom", "secretKeyRef").(map[string]any); ok {
			env[e["name"].(string)] = fmt.Sprintf("<%v/%v>", ref["name"], ref["key"])
			continue
		}
		env[e["name"].(string)], _ = e["value"].(string)
	}
	secretOf := map[string]string{}
	for _, v := range at(deps[0], "spec", "template", "spec", "volumes").([]any) {
		v := v.(map[string]any)
		if s, ok := at(v, "secret", "secretName").(string); ok {
			secretOf[v["name"].(string)] = s
		}
	}
	mounts := map[string]string{}
	for _, m := range c["volumeMounts"].([]any) {
		m := m.(map[string]any)
		if s := secretOf[m["name"].(string)]; s != "" {
			mounts[m["mountPath"].(string)] = s
		}
	}
	return env, mounts
}

// TestChartsConfigureRedisAsOperatorsRunIt: for both charts that use Redis, each deployment
// (one node, Sentinel, Cluster; TLS; passwords from Secrets) renders variables that the
// services' own loader (libs/redisx) reads as that deployment, the CA file the variables name is
// in a mounted Secret, and settings naming two deployments at once are refused.
func TestChartsConfigureRedisAsOperatorsRunIt(t *testing.T) {
	h := newHelmEnv(t)
	for _, chart := range []string{"event-emitter", "watch-gateway"} {
		t.Run(chart, func(t *testing.T) {
			for _, tc := range []struct {
				name     string
				flags    []string
				mode     redisx.Mode
				describe string
				check    func(t *testing.T, c redisx.Config, mounts map[string]string)
			}{
				{name: "one node over TLS", mode: redisx.Single, describe: "redis.agents:6380",
					flags: []string{"--set", "redis.url=rediss://redis.agents:6380/0", "--set", "redis.passwordSecretRef.name=redis-auth",
						"--set", "redis.tls.caSecretRef.name=redis-ca"},
					check: func(t *testing.T, c redisx.Config, mounts map[string]string) {
						if c.Password != "<redis-auth/password>" {
							t.Errorf("password from %q, want the Secret redis-auth/password", c.Password)
						}
						if !strings.HasPrefix(c.TLSCAFile, "/") || mounts[c.TLSCAFile[:strings.LastIndex(c.TLSCAFile, "/")]] != "redis-ca" {
							t.Errorf("CA file %q is not in the mounted Secret redis-ca (mounts %v)", c.TLSCAFile, mounts)
						}
					}},
				{name: "sentinel", mode: redisx.Sentinel, describe: "sentinel agents via s-0.sentinel:26379,s-1.sentinel:26379",
					flags: []string{"--set", "redis.sentinel.masterName=agents", "--set", "redis.sentinel.addrs={s-0.sentinel:26379,s-1.sentinel:26379}",
						"--set", "redis.sentinel.passwordSecretRef.name=sentinel-auth", "--set", "redis.db=2", "--set", "redis.tls.enabled=true"},
					check: func(t *testing.T, c redisx.Config, _ map[string]string) {
						if c.SentinelPassword != "<sentinel-auth/password>" || c.DB != 2 || !c.TLS {
							t.Errorf("sentinel config %+v", c)
						}
					}},
				{name: "cluster", mode: redisx.Cluster, describe: "cluster c-0:6379,c-1:6379,c-2:6379",
					flags: []string{"--set", "redis.cluster.addrs={c-0:6379,c-1:6379,c-2:6379}", "--set", "redis.username=agentplane",
						"--set", "redis.tls.enabled=true", "--set", "redis.tls.serverName=redis.internal"},
					check: func(t *testing.T, c redisx.Config, _ map[string]string) {
						if c.Username != "agentplane" || !c.TLS || c.TLSServerName != "redis.internal" {
							t.Errorf("cluster config %+v", c)
						}
					}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					env, mounts := redisEnv(t, h, chart, tc.flags...)
					cfg := config.FromMap(env)
					c := redisx.LoadConfig(cfg, "")
					if err := cfg.Err(); err != nil {
						t.Fatal(err)
					}
					mode, err := c.Mode()
					if err != nil || mode != tc.mode {
						t.Fatalf("the service reads mode %q (%v), want %q; env %v", mode, err, tc.mode, env)
					}
					if d := c.Describe(); d != tc.describe {
						t.Errorf("Describe() = %q, want %q", d, tc.describe)
					}
					tc.check(t, c, mounts)
					read := goStringLiterals(t, h.root+"/libs/redisx")
					for name := range env {
						if strings.HasPrefix(name, "JANGAR_REDIS_") && !read[name] {
							t.Errorf("the chart sets %s, which libs/redisx does not read", name)
						}
					}
				})
			}
			wantRefused(t, h, chart, "not several", "--set", "redis.url=redis://r:6379/0", "--set", "redis.cluster.addrs={c-0:6379}")
			wantRefused(t, h, chart, "needs both masterName and addrs", "--set", "redis.sentinel.masterName=agents")
			wantRefused(t, h, chart, "addrs", "--set", "redis.cluster.addrs={c-0}")
		})
	}
}
