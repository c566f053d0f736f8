package session

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
)

func keys(t *testing.T, key string) *Keys {
	t.Helper()
	k, err := New([]byte(key), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// start is Start for a user who signed in with token.
func start(t *testing.T, k *Keys, user, token string, notAfter time.Time) Session {
	t.Helper()
	s, err := k.Start(&authnv1.UserInfo{Username: user}, token, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func anonymous(k *Keys) Session {
	s, _ := k.Start(nil, "", time.Time{})
	return s
}

// The cookie carries the sign-in token sealed: no form of it can be read from the cookie, the
// gateway's key opens it, another key or another session does not, and a signed-in session
// without a token is no session.
func TestASessionRoundTripsWithItsTokenSealed(t *testing.T) {
	k := keys(t, strings.Repeat("k", 32))
	const token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6YWdlbnRzOm9wcyJ9.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg" //nolint:gosec // G101: a made-up token, the test's subject
	s := start(t, k, "system:serviceaccount:agents:ops", token, time.Time{})
	ck, err := k.Cookie(s)
	if err != nil {
		t.Fatal(err)
	}
	if !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.MaxAge < 3500 {
		t.Fatalf("cookie attributes = %+v", ck)
	}
	body, _, _ := strings.Cut(ck.Value, ".")
	inner, _ := base64.RawURLEncoding.DecodeString(body)
	for _, part := range strings.Split(token, ".") {
		if strings.Contains(ck.Value, part) || strings.Contains(string(inner), part) {
			t.Fatalf("the cookie shows a part of the token: %s", inner)
		}
	}
	got, err := k.Decode(ck.Value)
	if err != nil || got.User != s.User || got.ID != s.ID {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	if opened, err := k.Token(got); err != nil || opened != token {
		t.Fatalf("Token = %q, %v", opened, err)
	}
	if _, err := keys(t, strings.Repeat("o", 32)).Token(got); !errors.Is(err, ErrInvalid) {
		t.Errorf("another key opened the token: %v", err)
	}
	moved := start(t, k, "mallory", "other-token", time.Time{})
	moved.Sealed = s.Sealed
	if _, err := k.Token(moved); !errors.Is(err, ErrInvalid) {
		t.Errorf("a sealed token moved into another session opened: %v", err)
	}
	if _, err := k.Start(&authnv1.UserInfo{Username: "alice"}, "", time.Time{}); err == nil {
		t.Error("a signed-in session was made without its token")
	}
	noToken := s
	noToken.Sealed = ""
	if _, err := k.Decode(mustEncode(t, k, noToken)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a signed-in session without a token (an older cookie): %v, want ErrInvalid", err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(ck)
	if fr, ok := k.FromRequest(r); !ok || fr.ID != s.ID {
		t.Fatal("FromRequest did not find the session")
	}
}

func TestTamperedForeignOrExpiredSessionsAreRefused(t *testing.T) {
	k := keys(t, strings.Repeat("k", 32))
	other := keys(t, strings.Repeat("o", 32))
	s := start(t, k, "alice", "alice-token", time.Time{})
	v, err := k.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	body, sig, _ := strings.Cut(v, ".")
	forged := s
	forged.User = "system:admin"
	fv, _ := k.Encode(forged)
	fbody, _, _ := strings.Cut(fv, ".")
	for name, bad := range map[string]string{
		"another key's":          mustEncode(t, other, s),
		"a body swapped in":      fbody + "." + sig,
		"no signature":           body,
		"garbage":                "!!!.???",
		"an empty signature":     body + ".",
		"a truncated signature":  body + "." + sig[:10],
		"an empty cookie value":  "",
		"a signature of nothing": "." + sig,
	} {
		if _, err := k.Decode(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s session: Decode = %v, want ErrInvalid", name, err)
		}
	}
	k.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := k.Decode(v); !errors.Is(err, ErrExpired) {
		t.Fatalf("an expired session: %v, want ErrExpired", err)
	}
}

func mustEncode(t *testing.T, k *Keys, s Session) string {
	t.Helper()
	v, err := k.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCSRFTokensBelongToOneSession(t *testing.T) {
	k := keys(t, strings.Repeat("k", 32))
	a, b := anonymous(k), anonymous(k)
	if !k.CheckCSRF(a, k.CSRF(a)) {
		t.Fatal("a session's own CSRF token was refused")
	}
	for name, tok := range map[string]string{"another session's": k.CSRF(b), "empty": "", "not base64": "%%%",
		"another key's": keys(t, strings.Repeat("o", 32)).CSRF(a)} {
		if k.CheckCSRF(a, tok) {
			t.Errorf("%s CSRF token was accepted", name)
		}
	}
}

func TestShortKeysAndHugeSessionsAreRefused(t *testing.T) {
	if _, err := New([]byte("short"), time.Hour); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("a 5-byte key: %v", err)
	}
	k := keys(t, strings.Repeat("k", 32))
	if _, err := k.Cookie(start(t, k, "many", strings.Repeat("x", 4000), time.Time{})); err == nil || !strings.Contains(err.Error(), "would not fit in a cookie") {
		t.Fatalf("a session too large for a cookie: %v", err)
	}
	if _, err := k.Cookie(start(t, k, "sa", strings.Repeat("x", 1500), time.Time{})); err != nil {
		t.Fatalf("a session with a ServiceAccount token's length: %v", err)
	}
}

// A session ends no later than the token it was made from; the cookie names the namespace, with
// the __Host- prefix over TLS; rotating the key file ends every session signed with the old key.
func TestASessionIsBoundedByItsTokenItsKeyAndItsGateway(t *testing.T) {
	k := keys(t, strings.Repeat("k", 32))
	soon := time.Now().Add(10 * time.Minute)
	s := start(t, k, "alice", "alice-token", soon)
	if s.Expires != soon.Unix() {
		t.Errorf("a session from a 10-minute token ends at %d, want %d (not the hour of the session lifetime)", s.Expires, soon.Unix())
	}
	if s := start(t, k, "alice", "alice-token", time.Now().Add(48*time.Hour)); s.Expires > time.Now().Add(time.Hour).Unix()+1 {
		t.Errorf("a session from a long-lived token outlives the session lifetime: %d", s.Expires)
	}
	if n := k.Name("team-a", false).CookieNameOf(); n != "agentplane_session_team_a" {
		t.Errorf("cookie name %q", n)
	}
	ck, _ := k.Name("team-a", true).Cookie(s)
	if ck.Name != "__Host-agentplane_session_team_a" || !ck.Secure || ck.Path != "/" || ck.Domain != "" {
		t.Errorf("over TLS: %+v", ck)
	}

	file := t.TempDir() + "/key"
	if err := os.WriteFile(file, []byte(strings.Repeat("a", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var reloads []error
	fk, err := FromFile(file, time.Hour, func(err error) { reloads = append(reloads, err) })
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	fk.now = func() time.Time { return now }
	v, _ := fk.Encode(start(t, fk, "alice", "alice-token", time.Time{}))
	if _, err := fk.Decode(v); err != nil {
		t.Fatal(err)
	}
	// A key too short is refused and the old one kept; a new good key ends the old sessions.
	if err := os.WriteFile(file, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(11 * time.Second)
	if _, err := fk.Decode(v); err != nil || len(reloads) != 1 || reloads[0] == nil {
		t.Fatalf("a short key replaced the good one: %v %v", err, reloads)
	}
	if err := os.WriteFile(file, []byte(strings.Repeat("b", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(11 * time.Second)
	if _, err := fk.Decode(v); !errors.Is(err, ErrInvalid) || len(reloads) != 2 || reloads[1] != nil {
		t.Fatalf("after the key's rotation the old session: %v (reloads %v), want it refused", err, reloads)
	}
}
