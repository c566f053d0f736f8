package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGRPCAccessOptions(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	tokenFile := filepath.Join(dir, "token")
	notPEM := filepath.Join(dir, "ca.crt")
	for f, content := range map[string]string{empty: " \n", tokenFile: "abc\n", notPEM: "hello"} {
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		a    grpcAccess
		says string
	}{
		{"token twice", grpcAccess{token: "a", tokenFile: tokenFile}, "use one"},
		{"empty token file", grpcAccess{tokenFile: empty}, "is empty"},
		{"missing token file", grpcAccess{tokenFile: filepath.Join(dir, "nope")}, "read --gateway-token-file"},
		{"CA not PEM", grpcAccess{caFile: notPEM}, "no PEM certificate"},
		{"cert without key", grpcAccess{certFile: notPEM}, "go together"},
	} {
		if _, err := c.a.dialOptions(); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %q", c.name, err, c.says)
		}
	}
	o, err := grpcAccess{tokenFile: tokenFile}.dialOptions()
	if err != nil || o.TLS != nil || len(o.Extra) != 1 {
		t.Fatalf("token file: %+v %v, want plaintext with per-call credentials", o, err)
	}
	md, _ := bearer{token: "abc"}.GetRequestMetadata(t.Context())
	if md["authorization"] != "Bearer abc" {
		t.Fatalf("metadata %v", md)
	}
	if o, err := (grpcAccess{serverName: "gw"}).dialOptions(); err != nil || o.TLS == nil {
		t.Fatalf("--tls-server-name alone turns TLS on: %+v %v", o, err)
	}
}

func TestTheTokenIsNotShownInHelp(t *testing.T) {
	t.Setenv("AGENTCTL_TOKEN", "s3cret-token-value")
	var out bytes.Buffer
	Execute(t.Context(), []string{"status", "--help"}, nil, &out, &out)
	if !strings.Contains(out.String(), "--gateway-token") || strings.Contains(out.String(), "s3cret-token-value") {
		t.Fatalf("help shows the token (or no --gateway-token flag):\n%s", out.String())
	}
}
