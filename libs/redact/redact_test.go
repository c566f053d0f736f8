package redact

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// corpus holds secrets in the contexts they appear in; the secret itself must never survive.
var corpus = []struct {
	name, text, secret string
}{
	{"bearer header", "GET /v1 failed: Authorization: Bearer abcDEF123456789.xyz", "abcDEF123456789.xyz"},
	{"jwt", "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.SflKxwRJSMeKKF2QT4fwpM rejected", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.SflKxwRJSMeKKF2QT4fwpM"},
	{"github token", "clone failed with ghp_0123456789abcdefghijABCDEFGHIJklmnop", "ghp_0123456789abcdefghijABCDEFGHIJklmnop"},
	{"github pat", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz used", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"},
	{"aws key", "aws: AKIAIOSFODNN7EXAMPLE denied", "AKIAIOSFODNN7EXAMPLE"},
	{"openai key", "model call with sk-proj-abcdefghijklmnop1234 failed", "sk-proj-abcdefghijklmnop1234"},
	{"slack", "post xoxb-123456789012-abcdefABCDEF failed", "xoxb-123456789012-abcdefABCDEF"},
	{"url password", "dial postgres://jangar:s3cr3t-pw@db:5432/app: refused", "s3cr3t-pw"},
	{"redis url", "redis://:hunter2hunter2@redis:6379/0 unreachable", "hunter2hunter2"},
	{"key=value", "config password=hunter2 rejected", "hunter2"},
	{"key: value quoted", `{"api_key": "A1b2C3d4E5"}`, "A1b2C3d4E5"},
	{"client secret", "client_secret=zzTopSecret&grant=x", "zzTopSecret"},
	{"prefixed key", "dbpassword=letmein123 invalid", "letmein123"},
	{"private key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAsecretmaterial\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEAsecretmaterial"},
}

func TestRedactCorpus(t *testing.T) {
	for _, c := range corpus {
		t.Run(c.name, func(t *testing.T) {
			got := String(c.text)
			if strings.Contains(got, c.secret) {
				t.Fatalf("secret survived: %q", got)
			}
			if !strings.Contains(got, Mask) {
				t.Fatalf("nothing marked as redacted: %q", got)
			}
		})
	}
}

func TestRedactKeepsTheMessage(t *testing.T) {
	in := `secret "github-token" not found in namespace agents`
	if got := String(in); got != in {
		t.Fatalf("a message naming a Secret was mangled: %q", got)
	}
	in = "job agentrun-hello-1 failed: BackoffLimitExceeded"
	if got := String(in); got != in {
		t.Fatalf("plain message changed: %q", got)
	}
	if got := String("dial postgres://jangar:pw123@db/app"); !strings.Contains(got, "postgres://jangar:") {
		t.Fatalf("user name lost: %q", got)
	}
}

func TestRedactKnownValues(t *testing.T) {
	r := New("plain-value-9", "abc", "plain-value-9-longer")
	got := r.String("got plain-value-9-longer and plain-value-9 and abc")
	if strings.Contains(got, "plain-value-9") || !strings.Contains(got, "abc") {
		t.Fatalf("got %q: known values must go, values under 4 characters stay", got)
	}
}

func TestTruncate(t *testing.T) {
	s := strings.Repeat("é", 600) // 1200 bytes
	got := Truncate(s, 1024)
	if len(got) > 1024 || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Fatalf("len=%d valid=%v", len(got), utf8.ValidString(got))
	}
	if Truncate("short", 1024) != "short" {
		t.Fatal("short string changed")
	}
}

// secretForms are the forms a Secret's value takes in messages: as stored, trimmed of trailing
// whitespace, base64 (standard and URL, padded and not), JSON- and Go-quoted (without the quotes).
func secretForms(v string) []string {
	trimmed := strings.TrimRight(v, " \t\r\n")
	j, _ := json.Marshal(v)
	return []string{v, trimmed,
		base64.StdEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(trimmed)),
		base64.StdEncoding.EncodeToString([]byte(trimmed)), base64.URLEncoding.EncodeToString([]byte(v)),
		string(j[1 : len(j)-1]), strconv.Quote(trimmed)[1 : len(strconv.Quote(trimmed))-1]}
}

// A known Secret value is removed in every form it takes in a message.
func TestKnownValuesInEveryForm(t *testing.T) {
	stored := "s3cr3t \"quoted\" \\path<>&\n"
	r := New(stored)
	for _, form := range secretForms(stored) {
		msg := "clone failed: " + form + " rejected"
		if out := r.String(msg); strings.Contains(out, form) || !strings.Contains(out, Mask) {
			t.Errorf("form %q survived: %q", form, out)
		}
	}
	// A value below the minimum length is left alone in every form (it would destroy messages).
	if out := New("ab").String("ab YWI= ab"); out != "ab YWI= ab" {
		t.Errorf("a 2-byte value was redacted: %q", out)
	}
}
