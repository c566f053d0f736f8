package access

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/libs/config"
)

func TestParseCallersNamesServiceAccounts(t *testing.T) {
	c, err := ParseCallers([]string{"run-controller", "ops/job-gc", "system:serviceaccount:x:cancel-propagator", "run-controller"}, "agents")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"system:serviceaccount:agents:run-controller", "system:serviceaccount:ops:job-gc", "system:serviceaccount:x:cancel-propagator"}
	if got := c.Users(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("users %v, want %v", got, want)
	}
	for _, u := range want {
		if !c.Allowed(u) {
			t.Errorf("%s not allowed", u)
		}
	}
	for _, u := range []string{"system:serviceaccount:agents:job-gc", "run-controller", "system:serviceaccount:agents:run-controller-x", ""} {
		if c.Allowed(u) {
			t.Errorf("%q allowed", u)
		}
	}
	for _, bad := range []string{"Bad_Name", "ns/", "/name", "system:serviceaccount:nocolon", "a/b/c"} {
		if _, err := ParseCallers([]string{bad}, "agents"); err == nil || !strings.Contains(err.Error(), EnvAllowedCallers) {
			t.Errorf("%q: %v, want an error naming %s", bad, err, EnvAllowedCallers)
		}
	}
}

func TestLoadServerAuthRefusesBadValuesByName(t *testing.T) {
	svc := config.Service{GRPCAddr: "0.0.0.0:50051", PodNamespace: "agents"}
	for _, c := range []struct {
		env  map[string]string
		says string
	}{
		{map[string]string{}, "loopback"}, // none is the default, and not on a wildcard address
		{map[string]string{EnvAuthMode: "open"}, EnvAuthMode},
		{map[string]string{EnvAuthMode: "token", EnvAuthCacheTTL: "0s"}, EnvAuthCacheTTL},
		{map[string]string{EnvAuthMode: "token", EnvAuthCacheTTL: "1h"}, EnvAuthCacheTTL},
		{map[string]string{EnvAuthMode: "token", EnvAllowedCallers: ","}, EnvAllowedCallers},
		{map[string]string{EnvAuthMode: "mtls"}, EnvTLSClientCAFile},
	} {
		if _, err := LoadServerAuth(config.FromMap(c.env), svc); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v, want an error naming %s", c.env, err, c.says)
		}
	}
	a, err := LoadServerAuth(config.FromMap(map[string]string{EnvAuthMode: "token"}), svc)
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode != Token || a.CacheTTL != 30*time.Second || strings.Join(a.Audiences, ",") != DefaultAudience ||
		!a.Callers.Allowed("system:serviceaccount:agents:run-controller") || !a.Callers.Allowed("system:serviceaccount:agents:job-gc") ||
		!a.Callers.Allowed("system:serviceaccount:agents:cancel-propagator") || len(a.Callers.Users()) != 3 {
		t.Fatalf("defaults: %+v", a)
	}
}

func TestTokenFileFollowsRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if _, err := NewTokenFile(path); err == nil || !strings.Contains(err.Error(), EnvServiceTokenFile) {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTokenFile(path); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty file: %v", err)
	}
	// kubelet's atomic writer: a new file renamed over the old one.
	write := func(tok string) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	tf, err := NewTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md, err := tf.GetRequestMetadata(t.Context())
	if err != nil || md["authorization"] != "Bearer first" {
		t.Fatalf("metadata %v %v", md, err)
	}
	write("second")
	if got := tf.Token(); got != "second" {
		t.Fatalf("after rotation the token is %q, want second", got)
	}
	// A rotation caught mid-write (the file briefly gone) keeps the last token.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got := tf.Token(); got != "second" {
		t.Fatalf("with the file gone the token is %q, want the last one", got)
	}
	// A file rewritten in place with the same size and mtime is still read within a minute.
	write("third")
	st, _ := os.Stat(path)
	tf.Token()
	if err := os.WriteFile(path, []byte("fourth\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got := tf.Token(); got != "third" && got != "fourth" {
		t.Fatalf("token %q", got)
	}
	tf.now = func() time.Time { return time.Now().Add(2 * tokenRereadAtLeastEvery) }
	if got := tf.Token(); got != "fourth" {
		t.Fatalf("a minute later the token is %q, want fourth", got)
	}
}

func TestClientAuthNamesWhatIsWrong(t *testing.T) {
	for _, c := range []struct {
		a    ClientAuth
		says string
	}{
		{ClientAuth{CertFile: "c"}, EnvClientKeyFile},
		{ClientAuth{CertFile: "c", KeyFile: "k"}, EnvClientCAFile},
		{ClientAuth{CAFile: "/nonexistent/ca"}, EnvClientCAFile},
		{ClientAuth{TokenFile: "/nonexistent/token"}, EnvServiceTokenFile},
	} {
		if _, err := c.a.DialOptions(); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want it to name %s", c.a, err, c.says)
		}
	}
	if o, err := (ClientAuth{}).DialOptions(); err != nil || o.TLS != nil || len(o.Extra) != 0 {
		t.Fatalf("no configuration: %+v %v, want plaintext without credentials", o, err)
	}
}
