package archive

import (
	"net/url"
	"strconv"

	"github.com/agentplane/agentplane/libs/config"
)

// The variables a service reads the archive's settings from (the charts' archive values).
const (
	EnvURL      = "JANGAR_ARCHIVE_URL"
	EnvPassword = "JANGAR_ARCHIVE_PASSWORD" //nolint:gosec // the variable's name, not a password
	EnvMaxConns = "JANGAR_ARCHIVE_MAX_CONNS"
)

// LoadConfig reads the archive's settings; an empty URL means archiving is off. A URL that holds
// a password is refused: the password belongs in a Secret (JANGAR_ARCHIVE_PASSWORD), not in the
// pod's spec.
func LoadConfig(env *config.Env) Config {
	c := Config{URL: env.String(EnvURL, ""), Password: env.Secret(EnvPassword)}
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		switch {
		case err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "":
			env.Fail(EnvURL, redactedURL(c.URL), "a postgres:// URL with a host, e.g. postgres://agentplane@db:5432/agentplane?sslmode=verify-full")
		case hasPassword(u):
			env.Fail(EnvURL, u.Redacted(), "a URL without a password: give the password in "+EnvPassword+" (from a Secret)")
		}
	}
	if n := env.Int(EnvMaxConns, 0); n < 0 || n > 1000 {
		env.Fail(EnvMaxConns, strconv.Itoa(n), "between 0 (the pool's default) and 1000")
	} else {
		c.MaxConns = int32(n) //nolint:gosec // bounded above
	}
	return c
}

// Enabled reports whether an archive is configured.
func (c Config) Enabled() bool { return c.URL != "" }

func hasPassword(u *url.URL) bool {
	_, set := u.User.Password()
	return set
}

// redactedURL is a URL that does not parse, shown without anything that could be a password.
func redactedURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(a value that is not a URL)"
}
