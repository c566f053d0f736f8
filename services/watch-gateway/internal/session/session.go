// Package session is the web console's sign-in state: a cookie that carries who signed in, until
// when, and the token they signed in with, sealed (AES-256-GCM) with a key derived from the
// gateway's: the browser holds it but cannot read it. The cookie is signed with HMAC-SHA256, so
// that any replica holding the same key accepts it and none needs a store. The gateway reviews the
// sealed token again at each access check (TokenReview, cached for at most 30 s), so a session
// follows its token: refused once the token is revoked or its ServiceAccount deleted, with the
// groups the API server gives now, never those of sign-in. Each session also has a CSRF token
// derived from its random ID with the same key: a page of the console learns it from the session
// endpoint and sends it with every change it asks for, which a page of another site cannot read.
package session

import (
	"crypto/aes"
	"crypto/cipher"
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
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
)

// CookieName is the session cookie's name when Keys.Name is not called: Name gives each
// gateway's its own (agentplane_session_<namespace>, with the __Host- prefix over TLS).
const CookieName = "agentplane_session"

// MinKeyBytes is the shortest signing key accepted.
const MinKeyBytes = 32

// maxCookieBytes keeps a cookie under what every browser stores (4 KiB with its name and
// attributes): a token too long to seal in one is refused with a message, not silently cut.
const maxCookieBytes = 3800

// Session is one signed-in user.
type Session struct {
	// ID is random; the CSRF token is derived from it.
	ID string `json:"i"`
	// User is who signed in (shown on the page; access is decided from the token); an anonymous
	// session (no authentication configured) has none.
	User string `json:"u,omitempty"`
	// Sealed is the token the user signed in with, sealed with the gateway's key (Keys.Token
	// opens it). A session with a user and no token is not valid.
	Sealed  string `json:"t,omitempty"`
	Expires int64  `json:"x"` // Unix seconds
}

// Anonymous reports a session without a user.
func (s Session) Anonymous() bool { return s.User == "" }

// Keys signs and checks sessions.
type Keys struct {
	mu   sync.Mutex
	key  []byte
	ttl  time.Duration
	now  func() time.Time
	name string
	// A key read from a file is read again when the file changes (checked at most every
	// reloadEvery): rotating the Secret it is mounted from ends every session signed before.
	path       string
	checked    time.Time
	modTime    time.Time
	size       int64
	onReloaded func(error)
}

// reloadEvery is how often a key file is looked at for a change.
const reloadEvery = 10 * time.Second

// New signs with key (at least MinKeyBytes) sessions that last ttl.
func New(key []byte, ttl time.Duration) (*Keys, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("the console's session key has %d bytes; it needs at least %d (for example: head -c 32 /dev/urandom | base64)", len(key), MinKeyBytes)
	}
	if ttl <= 0 {
		return nil, errors.New("the console's session lifetime must be positive")
	}
	return &Keys{key: append([]byte(nil), key...), ttl: ttl, now: time.Now, name: CookieName}, nil
}

// Name names the cookie after the gateway's namespace, so that two gateways served on one host
// (two port-forwards to localhost) keep their sessions apart; over TLS with the __Host- prefix,
// which browsers accept only from a secure origin, for the whole host (Path=/) and no Domain.
func (k *Keys) Name(namespace string, overTLS bool) *Keys {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.name = CookieName + "_" + strings.ReplaceAll(namespace, "-", "_")
	if overTLS {
		k.name = "__Host-" + k.name
	}
	return k
}

// CookieNameOf is the name of the cookie k sets.
func (k *Keys) CookieNameOf() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.name
}

// signingKey is the key to sign and check with, re-read first when it comes from a file that
// changed.
func (k *Keys) signingKey() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.path == "" || k.now().Sub(k.checked) < reloadEvery {
		return k.key
	}
	k.checked = k.now()
	fi, err := os.Stat(k.path)
	if err != nil || (fi.ModTime().Equal(k.modTime) && fi.Size() == k.size) {
		return k.key
	}
	raw, err := os.ReadFile(k.path)
	key := []byte(strings.TrimRight(string(raw), " \t\r\n"))
	switch {
	case err != nil:
	case len(key) < MinKeyBytes:
		err = fmt.Errorf("the console's new session key has %d bytes; it needs at least %d: keeping the old one", len(key), MinKeyBytes)
	default:
		k.key, k.modTime, k.size = key, fi.ModTime(), fi.Size()
	}
	if k.onReloaded != nil {
		k.onReloaded(err)
	}
	return k.key
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
// The file is read again when it changes (a rotated Secret): sessions signed with the old key
// then end (onReloaded, when set, is told of each reload, nil, or why the new key was refused).
func FromFile(path string, ttl time.Duration, onReloaded func(error)) (*Keys, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read the console's session key: %w", err)
	}
	raw, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's configuration
	if err != nil {
		return nil, fmt.Errorf("read the console's session key: %w", err)
	}
	k, err := New([]byte(strings.TrimRight(string(raw), " \t\r\n")), ttl)
	if err != nil {
		return nil, err
	}
	k.path, k.modTime, k.size, k.checked, k.onReloaded = path, fi.ModTime(), fi.Size(), k.now(), onReloaded
	return k, nil
}

// Start makes a session for user, who signed in with token (nil and "": anonymous), that ends
// after the session lifetime, or at notAfter when that comes first (the token's expiry).
func (k *Keys) Start(user *authnv1.UserInfo, token string, notAfter time.Time) (Session, error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	end := k.now().Add(k.ttl)
	if !notAfter.IsZero() && notAfter.Before(end) {
		end = notAfter
	}
	s := Session{ID: base64.RawURLEncoding.EncodeToString(b), Expires: end.Unix()}
	if user == nil {
		return s, nil
	}
	if token == "" {
		return Session{}, errors.New("a signed-in session needs the token it was made from")
	}
	sealed, err := k.seal(s.ID, token)
	if err != nil {
		return Session{}, err
	}
	s.User, s.Sealed = user.Username, sealed
	return s, nil
}

// aead is the cipher that seals tokens: AES-256-GCM with a key derived from the signing key (so
// that rotating the signing key also ends every sealed token).
func (k *Keys) aead() (cipher.AEAD, error) {
	block, err := aes.NewCipher(k.mac("seal"))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// seal encrypts token, bound to the session id (a sealed token moved into another session does not
// open).
func (k *Keys) seal(id, token string) (string, error) {
	a, err := k.aead()
	if err != nil {
		return "", err
	}
	nonce := make([]byte, a.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(a.Seal(nonce, nonce, []byte(token), []byte(id))), nil
}

// Token opens the token s was signed in with.
func (k *Keys) Token(s Session) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s.Sealed)
	a, aerr := k.aead()
	if err != nil || aerr != nil || len(raw) < a.NonceSize() || s.Sealed == "" {
		return "", ErrInvalid
	}
	token, err := a.Open(nil, raw[:a.NonceSize()], raw[a.NonceSize():], []byte(s.ID))
	if err != nil {
		return "", ErrInvalid
	}
	return string(token), nil
}

func (k *Keys) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, k.signingKey())
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
		return "", fmt.Errorf("the session of %s would not fit in a cookie (its token has %d bytes sealed): sign in with a shorter token", s.User, len(s.Sealed))
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
	if err := json.Unmarshal(raw, &s); err != nil || s.ID == "" || (s.User != "") != (s.Sealed != "") {
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
	c, err := r.Cookie(k.CookieNameOf())
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
	return &http.Cookie{Name: k.CookieNameOf(), Value: v, Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode,
		MaxAge: max(1, int(time.Until(time.Unix(s.Expires, 0)).Seconds()))}, nil
}

// Clear is the Set-Cookie that removes the session.
func (k *Keys) Clear() *http.Cookie {
	return &http.Cookie{Name: k.CookieNameOf(), Value: "", Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode, MaxAge: -1}
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
