// Package session is the web console's sign-in state: a cookie that carries who signed in (the
// user a TokenReview returned, never the token) and until when, signed by the gateway with
// HMAC-SHA256, so that any replica holding the same key accepts it and none needs a store. Each
// session also has a CSRF token derived from its random ID with the same key: a page of the
// console learns it from the session endpoint and sends it with every change it asks for, which a
// page of another site cannot read.
package session

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
)

// CookieName is the session cookie's name.
const CookieName = "agentplane_session"

// MinKeyBytes is the shortest signing key accepted.
const MinKeyBytes = 32

// maxCookieBytes keeps a cookie under what every browser stores (4 KiB with its name and
// attributes): a user in very many groups is refused with a message, not silently cut.
const maxCookieBytes = 3800

// Session is one signed-in user.
type Session struct {
	// ID is random; the CSRF token is derived from it.
	ID string `json:"i"`
	// User is who signed in; an anonymous session (no authentication configured) has none.
	User    string   `json:"u,omitempty"`
	UID     string   `json:"d,omitempty"`
	Groups  []string `json:"g,omitempty"`
	Expires int64    `json:"x"` // Unix seconds
}

// UserInfo is the session's user as the authorization API wants it.
func (s Session) UserInfo() authnv1.UserInfo {
	return authnv1.UserInfo{Username: s.User, UID: s.UID, Groups: s.Groups}
}

// Anonymous reports a session without a user.
func (s Session) Anonymous() bool { return s.User == "" }

// Keys signs and checks sessions.
type Keys struct {
	key []byte
	ttl time.Duration
	now func() time.Time
}

// New signs with key (at least MinKeyBytes) sessions that last ttl.
func New(key []byte, ttl time.Duration) (*Keys, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("the console's session key has %d bytes; it needs at least %d (for example: head -c 32 /dev/urandom | base64)", len(key), MinKeyBytes)
	}
	if ttl <= 0 {
		return nil, errors.New("the console's session lifetime must be positive")
	}
	return &Keys{key: append([]byte(nil), key...), ttl: ttl, now: time.Now}, nil
}

// Random is New with a key drawn at start: sessions then end when the process does and are not
// accepted by other replicas.
func Random(ttl time.Duration) *Keys {
	b := make([]byte, MinKeyBytes)
	_, _ = rand.Read(b)
	k, _ := New(b, ttl)
	return k
}

// FromFile reads the key from a file (a mounted Secret): its bytes, trailing white space cut.
func FromFile(path string, ttl time.Duration) (*Keys, error) {
	raw, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's configuration
	if err != nil {
		return nil, fmt.Errorf("read the console's session key: %w", err)
	}
	return New([]byte(strings.TrimRight(string(raw), " \t\r\n")), ttl)
}

// Start makes a session for user (nil: anonymous).
func (k *Keys) Start(user *authnv1.UserInfo) Session {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	s := Session{ID: base64.RawURLEncoding.EncodeToString(b), Expires: k.now().Add(k.ttl).Unix()}
	if user != nil {
		s.User, s.UID, s.Groups = user.Username, user.UID, user.Groups
	}
	return s
}

func (k *Keys) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, k.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// Encode is the cookie value: base64url(JSON) "." base64url(HMAC).
func (k *Keys) Encode(s Session) (string, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	body := base64.RawURLEncoding.EncodeToString(raw)
	v := body + "." + base64.RawURLEncoding.EncodeToString(k.mac("session", body))
	if len(v) > maxCookieBytes {
		return "", fmt.Errorf("the session of %s would not fit in a cookie (%d groups)", s.User, len(s.Groups))
	}
	return v, nil
}

// Errors of Decode. None says more than that the cookie is not a valid session.
var (
	ErrInvalid = errors.New("the session cookie is not valid; sign in again")
	ErrExpired = errors.New("the session has expired; sign in again")
)

// Decode checks a cookie value's signature and expiry.
func (k *Keys) Decode(v string) (Session, error) {
	body, sig, ok := strings.Cut(v, ".")
	if !ok {
		return Session{}, ErrInvalid
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, k.mac("session", body)) {
		return Session{}, ErrInvalid
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return Session{}, ErrInvalid
	}
	var s Session
	if err := json.Unmarshal(raw, &s); err != nil || s.ID == "" {
		return Session{}, ErrInvalid
	}
	if k.now().Unix() >= s.Expires {
		return Session{}, ErrExpired
	}
	return s, nil
}

// FromRequest returns the request's session, if its cookie holds a valid one.
func (k *Keys) FromRequest(r *http.Request) (Session, bool) {
	if k == nil {
		return Session{}, false
	}
	c, err := r.Cookie(CookieName)
	if err != nil {
		return Session{}, false
	}
	s, err := k.Decode(c.Value)
	return s, err == nil
}

// Cookie is the Set-Cookie for s: HttpOnly, SameSite=Strict, Secure (browsers keep a Secure
// cookie over plain HTTP only from localhost, as through kubectl port-forward), for the whole
// site, as long as the session lasts.
func (k *Keys) Cookie(s Session) (*http.Cookie, error) {
	v, err := k.Encode(s)
	if err != nil {
		return nil, err
	}
	return &http.Cookie{Name: CookieName, Value: v, Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode,
		MaxAge: max(1, int(time.Until(time.Unix(s.Expires, 0)).Seconds()))}, nil
}

// Clear is the Set-Cookie that removes the session.
func (k *Keys) Clear() *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: "", Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode, MaxAge: -1}
}

// CSRF is the session's CSRF token.
func (k *Keys) CSRF(s Session) string {
	return base64.RawURLEncoding.EncodeToString(k.mac("csrf", s.ID))
}

// CheckCSRF reports whether token is s's CSRF token.
func (k *Keys) CheckCSRF(s Session, token string) bool {
	got, err := base64.RawURLEncoding.DecodeString(token)
	return err == nil && token != "" && hmac.Equal(got, k.mac("csrf", s.ID))
}
