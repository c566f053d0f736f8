package session

import (
	"errors"
	"net/http"
	"net/http/httptest"
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

func TestASessionRoundTripsAndCarriesNoToken(t *testing.T) {
	k := keys(t, strings.Repeat("k", 32))
	s := k.Start(&authnv1.UserInfo{Username: "system:serviceaccount:agents:ops", UID: "u1", Groups: []string{"system:serviceaccounts"}})
	ck, err := k.Cookie(s)
	if err != nil {
		t.Fatal(err)
	}
	if !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.MaxAge < 3500 {
		t.Fatalf("cookie attributes = %+v", ck)
	}
	got, err := k.Decode(ck.Value)
	if err != nil || got.User != s.User || got.ID != s.ID || got.Groups[0] != "system:serviceaccounts" {
		t.Fatalf("decoded %+v, %v", got, err)
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
	s := k.Start(&authnv1.UserInfo{Username: "alice"})
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
	a, b := k.Start(nil), k.Start(nil)
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
	groups := make([]string, 500)
	for i := range groups {
		groups[i] = "group-with-a-long-name-" + strings.Repeat("x", 10)
	}
	if _, err := k.Cookie(k.Start(&authnv1.UserInfo{Username: "many", Groups: groups})); err == nil {
		t.Fatal("a session too large for a cookie was encoded")
	}
}
