// Package redisx builds the Redis client the services share, for Redis as operators run it: one
// node (JANGAR_REDIS_URL), a Sentinel group (JANGAR_REDIS_SENTINEL_MASTER and
// JANGAR_REDIS_SENTINEL_ADDRS) or a Redis Cluster (JANGAR_REDIS_CLUSTER_ADDRS), with the password
// from JANGAR_REDIS_PASSWORD (a Secret in the charts) and TLS. Errors never repeat a URL or a
// password.
package redisx

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentplane/agentplane/libs/config"
)

// Mode is how Redis is deployed.
type Mode string

const (
	// Disabled: no Redis configured (only where Redis is optional).
	Disabled Mode = ""
	// Single: one node at URL.
	Single Mode = "single"
	// Sentinel: the master named SentinelMaster, found through SentinelAddrs.
	Sentinel Mode = "sentinel"
	// Cluster: a Redis Cluster discovered from the seed ClusterAddrs.
	Cluster Mode = "cluster"
)

// Config says where Redis is and how to reach it: exactly one of URL, SentinelAddrs or
// ClusterAddrs.
type Config struct {
	// URL is redis://host:port/db (rediss:// for TLS), without a password in it.
	URL string
	// SentinelMaster and SentinelAddrs (host:port of each sentinel) select Sentinel mode.
	SentinelMaster string
	SentinelAddrs  []string
	// ClusterAddrs (host:port seeds) select Cluster mode.
	ClusterAddrs []string
	// DB is the database in Sentinel mode (a URL names its own; a cluster has only 0).
	DB       int
	Username string
	Password string
	// SentinelPassword authenticates to the sentinels themselves, when they require it.
	SentinelPassword string
	// TLS turns on TLS for Sentinel and Cluster modes (a rediss:// URL turns it on for one node).
	TLS bool
	// TLSCAFile is a PEM bundle that verifies the servers instead of the system roots.
	TLSCAFile string
	// TLSServerName overrides the name verified in the servers' certificates.
	TLSServerName string
}

// LoadConfig reads JANGAR_REDIS_*. defaultURL applies when none of the three modes is set ("" leaves
// Redis disabled). Bad values are reported through env.Err.
func LoadConfig(env *config.Env, defaultURL string) Config {
	c := Config{
		URL:              env.String("JANGAR_REDIS_URL", ""),
		SentinelMaster:   env.String("JANGAR_REDIS_SENTINEL_MASTER", ""),
		SentinelAddrs:    env.List("JANGAR_REDIS_SENTINEL_ADDRS", nil),
		ClusterAddrs:     env.List("JANGAR_REDIS_CLUSTER_ADDRS", nil),
		DB:               env.Int("JANGAR_REDIS_DB", 0),
		Username:         env.String("JANGAR_REDIS_USERNAME", ""),
		Password:         env.Secret("JANGAR_REDIS_PASSWORD"),
		SentinelPassword: env.Secret("JANGAR_REDIS_SENTINEL_PASSWORD"),
		TLS:              env.Bool("JANGAR_REDIS_TLS", false),
		TLSCAFile:        env.String("JANGAR_REDIS_TLS_CA_FILE", ""),
		TLSServerName:    env.String("JANGAR_REDIS_TLS_SERVER_NAME", ""),
	}
	if c.URL == "" && c.SentinelMaster == "" && len(c.SentinelAddrs) == 0 && len(c.ClusterAddrs) == 0 {
		c.URL = defaultURL
	}
	return c
}

// Mode reports which deployment the configuration names, or an error saying what to fix.
func (c Config) Mode() (Mode, error) {
	set := 0
	if c.URL != "" {
		set++
	}
	if c.SentinelMaster != "" || len(c.SentinelAddrs) > 0 {
		set++
	}
	if len(c.ClusterAddrs) > 0 {
		set++
	}
	switch {
	case set > 1:
		return "", errors.New("set one of JANGAR_REDIS_URL (one node), JANGAR_REDIS_SENTINEL_MASTER with JANGAR_REDIS_SENTINEL_ADDRS (Sentinel) or JANGAR_REDIS_CLUSTER_ADDRS (Cluster), not several")
	case c.URL != "":
		return Single, nil
	case c.SentinelMaster != "" || len(c.SentinelAddrs) > 0:
		if c.SentinelMaster == "" || len(c.SentinelAddrs) == 0 {
			return "", errors.New("Sentinel mode needs both JANGAR_REDIS_SENTINEL_MASTER (the master's name) and JANGAR_REDIS_SENTINEL_ADDRS (host:port of each sentinel)")
		}
		return Sentinel, checkAddrs("JANGAR_REDIS_SENTINEL_ADDRS", c.SentinelAddrs)
	case len(c.ClusterAddrs) > 0:
		if c.DB != 0 {
			return "", errors.New("JANGAR_REDIS_DB must be 0 (or unset) with JANGAR_REDIS_CLUSTER_ADDRS: a Redis Cluster has only database 0")
		}
		return Cluster, checkAddrs("JANGAR_REDIS_CLUSTER_ADDRS", c.ClusterAddrs)
	}
	return Disabled, nil
}

func checkAddrs(name string, addrs []string) error {
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return fmt.Errorf("%s: %q is not host:port", name, a)
		}
	}
	return nil
}

// Describe names the deployment for logs and health details; it holds no credentials.
func (c Config) Describe() string {
	m, err := c.Mode()
	if err != nil {
		return "misconfigured"
	}
	switch m {
	case Single:
		o, err := redis.ParseURL(c.URL)
		if err != nil {
			return "misconfigured"
		}
		return o.Addr
	case Sentinel:
		return "sentinel " + c.SentinelMaster + " via " + strings.Join(c.SentinelAddrs, ",")
	case Cluster:
		return "cluster " + strings.Join(c.ClusterAddrs, ",")
	}
	return ""
}

// Options tune the client; zero values keep go-redis's defaults.
type Options struct {
	// Timeout bounds dialing, reading, writing and waiting for a pooled connection.
	Timeout  time.Duration
	PoolSize int
}

// New returns a client for the configured deployment, or nil when Redis is disabled. It does not
// retry failed commands (callers decide what a failure means) and dials once per attempt, so an
// unreachable Redis fails fast; a cluster client follows one MOVED or ASK redirect, as a slot
// moves in a failover.
func New(c Config, o Options) (redis.UniversalClient, error) {
	mode, err := c.Mode()
	if err != nil || mode == Disabled {
		return nil, err
	}
	var tlsConf *tls.Config
	if c.TLS || c.TLSCAFile != "" || c.TLSServerName != "" {
		if tlsConf, err = c.tlsConfig(); err != nil {
			return nil, err
		}
	}
	switch mode {
	case Single:
		opts, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, errors.New("JANGAR_REDIS_URL is not a redis:// or rediss:// URL (redis://host:port/db)")
		}
		if c.Password != "" {
			opts.Password = c.Password
		}
		if c.Username != "" {
			opts.Username = c.Username
		}
		if tlsConf != nil {
			if opts.TLSConfig != nil && tlsConf.ServerName == "" {
				tlsConf.ServerName = opts.TLSConfig.ServerName
			}
			opts.TLSConfig = tlsConf
		}
		tune(&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.PoolTimeout, &opts.PoolSize, o)
		opts.MaxRetries = -1
		opts.DialerRetries = 1
		return redis.NewClient(opts), nil
	case Sentinel:
		opts := &redis.FailoverOptions{
			MasterName: c.SentinelMaster, SentinelAddrs: c.SentinelAddrs, SentinelPassword: c.SentinelPassword,
			Username: c.Username, Password: c.Password, DB: c.DB, TLSConfig: tlsConf,
			MaxRetries: -1, DialerRetries: 1,
		}
		tune(&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.PoolTimeout, &opts.PoolSize, o)
		return redis.NewFailoverClient(opts), nil
	default: // Cluster
		opts := &redis.ClusterOptions{
			Addrs: c.ClusterAddrs, Username: c.Username, Password: c.Password, TLSConfig: tlsConf,
			MaxRedirects: 1, DialerRetries: 1,
		}
		tune(&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.PoolTimeout, &opts.PoolSize, o)
		return redis.NewClusterClient(opts), nil
	}
}

func tune(dial, read, write, pool *time.Duration, size *int, o Options) {
	if o.Timeout > 0 {
		*dial, *read, *write, *pool = o.Timeout, o.Timeout, o.Timeout, o.Timeout
	}
	if o.PoolSize > 0 {
		*size = o.PoolSize
	}
}

func (c Config) tlsConfig() (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName}
	if c.TLSCAFile == "" {
		return t, nil
	}
	pem, err := os.ReadFile(c.TLSCAFile)
	if err != nil {
		return nil, fmt.Errorf("JANGAR_REDIS_TLS_CA_FILE: %w", err)
	}
	t.RootCAs = x509.NewCertPool()
	if !t.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("JANGAR_REDIS_TLS_CA_FILE %s holds no PEM certificate", c.TLSCAFile)
	}
	return t, nil
}
