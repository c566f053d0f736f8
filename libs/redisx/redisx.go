// Package redisx builds the Redis client the services share: the address from JANGAR_REDIS_URL
// (no password in it), the password from JANGAR_REDIS_PASSWORD (a Secret in the charts), and
// errors that never repeat the URL, which could hold credentials.
package redisx

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options tune the client; zero values keep go-redis's defaults.
type Options struct {
	// Timeout bounds dialing, reading, writing and waiting for a pooled connection.
	Timeout  time.Duration
	PoolSize int
}

// New returns a client for url (redis://host:port/db) with password, if set, taking precedence
// over one in the URL. It does not retry failed commands: callers decide what a failure means.
func New(url, password string, o Options) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, errors.New("JANGAR_REDIS_URL is not a redis:// URL (redis://host:port/db)")
	}
	if password != "" {
		opts.Password = password
	}
	if o.Timeout > 0 {
		opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = o.Timeout, o.Timeout, o.Timeout, o.Timeout
	}
	if o.PoolSize > 0 {
		opts.PoolSize = o.PoolSize
	}
	opts.MaxRetries = -1   // no command retries
	opts.DialerRetries = 1 // one dial per attempt: an unreachable Redis fails fast
	return redis.NewClient(opts), nil
}
