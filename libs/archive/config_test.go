package archive

import (
	"strings"
	"testing"

	"github.com/agentplane/agentplane/libs/config"
)

// madeUp is the password in a URL that LoadConfig must refuse without showing it.
const madeUp = "hunter2"

func TestLoadConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr string
	}{
		{"off by default", nil, Config{}, ""},
		{"URL, password apart, pool size", map[string]string{EnvURL: "postgres://agentplane@db:5432/runs?sslmode=verify-full", EnvPassword: "pw", EnvMaxConns: "8"},
			Config{URL: "postgres://agentplane@db:5432/runs?sslmode=verify-full", Password: "pw", MaxConns: 8}, ""},
		{"a password in the URL", map[string]string{EnvURL: "postgres://agentplane:" + madeUp + "@db/runs"}, Config{}, "give the password in JANGAR_ARCHIVE_PASSWORD"},
		{"not postgres", map[string]string{EnvURL: "mysql://db/runs"}, Config{}, "a postgres:// URL with a host"},
		{"no host", map[string]string{EnvURL: "postgres:///runs"}, Config{}, "a postgres:// URL with a host"},
		{"a pool too large", map[string]string{EnvURL: "postgres://db/runs", EnvMaxConns: "5000"}, Config{}, "between 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := config.FromMap(tc.env)
			got := LoadConfig(env)
			err := env.Err()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%v, want an error saying %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), madeUp) {
					t.Fatalf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("%+v %v, want %+v", got, err, tc.want)
			}
			if got.Enabled() != (tc.want.URL != "") {
				t.Fatalf("Enabled %v for %+v", got.Enabled(), got)
			}
		})
	}
}
