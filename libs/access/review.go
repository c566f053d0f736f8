// Package access decides who may call an agentplane server. It is shared by watch-gateway (who
// may read the status streams) and by status-writer and event-emitter (which controllers may
// write status and emit events).
//
// Three modes:
//   - none: no check; the server then listens on loopback addresses only (ListenCheck).
//   - token: a bearer token, authenticated with a TokenReview (optionally bound to audiences),
//     then authorized by the server's own rule: a LocalSubjectAccessReview (SubjectAccess, the
//     gateway) or a list of allowed ServiceAccounts (Callers, the internal services).
//   - mtls: a client certificate signed by the configured CA, enforced by the TLS handshake; its
//     subject common name is the caller's identity.
//
// Decisions are cached by a hash of the token (never the token itself) for a short time, so
// thousands of callers reconnecting at once cost the API server a handful of reviews.
package access

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/agentplane/agentplane/libs/redact"
)

// Mode is how a server protects its calls.
type Mode string

const (
	None  Mode = "none"
	Token Mode = "token"
	MTLS  Mode = "mtls"
)

// ParseMode reads the mode from the variable envName (its value s).
func ParseMode(envName, s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "", None:
		return None, nil
	case Token, MTLS:
		return m, nil
	}
	return "", fmt.Errorf("%s %q must be none, token or mtls", envName, s)
}

// Kind classifies a refusal.
type Kind int

const (
	// Unauthenticated: no credential, or the API server does not accept it (HTTP 401).
	Unauthenticated Kind = iota + 1
	// Forbidden: a known caller without the grant (HTTP 403).
	Forbidden
	// Unavailable: the review itself failed; the client should retry (HTTP 503).
	Unavailable
)

// Error is a refusal. Its message never carries the token.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// KindOf returns the refusal kind of err, or 0.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// Authorize decides whether an authenticated user may do verb. It returns nil, an *Error of
// kind Forbidden, or one of kind Unavailable (not cached) when it could not decide.
type Authorize func(ctx context.Context, user authnv1.UserInfo, verb string) error

// Reviewer checks bearer tokens with the API server.
type Reviewer struct {
	kc        kubernetes.Interface
	audiences []string
	authorize Authorize
	missing   string
	allowTTL  time.Duration
	denyTTL   time.Duration
	clock     clock.PassiveClock

	mu sync.Mutex
	// Grants and refusals are cached apart, so a flood of bad tokens can only evict refusals.
	allowed, refused map[cacheKey]cached
	inflight         map[cacheKey]*review // one review per key at a time; the others wait for it
	// Reviews counts TokenReviews and SubjectAccessReviews sent (for tests and metrics).
	reviews func(kind string)
	// tokenReviews paces the TokenReviews of tokens the cache does not know.
	tokenReviews *rate.Limiter
}

type cacheKey struct {
	token [sha256.Size]byte
	verb  string
}

type review struct {
	done chan struct{}
	user authnv1.UserInfo
	err  error
}

type cached struct {
	user    authnv1.UserInfo
	err     error
	expires time.Time
}

// maxAllowed and maxRefused bound the two caches; beyond a bound its expired entries go first,
// then all of it.
const (
	maxAllowed = 4096
	maxRefused = 1024
)

// ReviewerOptions configure a Reviewer.
type ReviewerOptions struct {
	// Audiences the token must be issued for (empty: the API server's own).
	Audiences []string
	// Authorize, when set, decides what an authenticated user may do; unset, any authenticated
	// user may.
	Authorize Authorize
	// MissingToken is the message for a call without a token (what to send, and how).
	MissingToken string
	// AllowTTL and DenyTTL: how long a decision is reused (defaults 30 s and 5 s). A revoked
	// token or a deleted ServiceAccount is refused at most AllowTTL after the change.
	AllowTTL, DenyTTL time.Duration
	// OnReview, when set, is called for each review sent ("token" or "access"), and for each
	// token refused without one: "refused-locally" (not a plausible ServiceAccount token for the
	// audiences) or "throttled" (more new tokens than ReviewsPerSecond allows).
	OnReview func(kind string)
	// ReviewsPerSecond bounds the TokenReviews sent for tokens the cache does not know (burst
	// twice it; default 50): beyond it a new token is refused as Unavailable, so a flood of
	// distinct tokens cannot make the server flood the API server.
	ReviewsPerSecond float64
	// Clock, for tests; the real clock by default.
	Clock clock.PassiveClock
}

// NewReviewer checks tokens with the API server kc.
func NewReviewer(kc kubernetes.Interface, o ReviewerOptions) *Reviewer {
	if o.AllowTTL <= 0 {
		o.AllowTTL = 30 * time.Second
	}
	if o.DenyTTL <= 0 {
		o.DenyTTL = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.MissingToken == "" {
		o.MissingToken = "a bearer token is required: send Authorization: Bearer <token>"
	}
	if o.ReviewsPerSecond <= 0 {
		o.ReviewsPerSecond = 50
	}
	r := &Reviewer{kc: kc, audiences: o.Audiences, authorize: o.Authorize, missing: o.MissingToken, allowTTL: o.AllowTTL, denyTTL: o.DenyTTL,
		clock: o.Clock, allowed: map[cacheKey]cached{}, refused: map[cacheKey]cached{}, inflight: map[cacheKey]*review{}, reviews: o.OnReview,
		tokenReviews: rate.NewLimiter(rate.Limit(o.ReviewsPerSecond), int(2*o.ReviewsPerSecond))}
	if r.reviews == nil {
		r.reviews = func(string) {}
	}
	return r
}

// BearerToken extracts the token of an "Authorization: Bearer <token>" value.
func BearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// Check returns the user a token belongs to when it may do verb, else an *Error saying why not.
func (r *Reviewer) Check(ctx context.Context, token, verb string) (string, error) {
	if token == "" {
		return "", &Error{Kind: Unauthenticated, Msg: r.missing}
	}
	if err := plausibleToken(token, r.audiences, time.Now()); err != nil {
		r.reviews("refused-locally")
		return "", err
	}
	u, err := r.decide(ctx, cacheKey{token: sha256.Sum256([]byte(token)), verb: verb}, func(renewal bool) (authnv1.UserInfo, error) {
		return r.review(ctx, token, verb, renewal)
	})
	return u.Username, err
}

// authnVerb keys the cache of Authenticate's decisions (no verb is empty).
const authnVerb = ""

// Authenticate returns who a token belongs to (a TokenReview, with the Reviewer's audiences),
// without deciding what they may do: the console signs a user in with it, then asks CheckUser.
// Decisions are cached like Check's.
func (r *Reviewer) Authenticate(ctx context.Context, token string) (authnv1.UserInfo, error) {
	if token == "" {
		return authnv1.UserInfo{}, &Error{Kind: Unauthenticated, Msg: r.missing}
	}
	if err := plausibleToken(token, r.audiences, time.Now()); err != nil {
		r.reviews("refused-locally")
		return authnv1.UserInfo{}, err
	}
	return r.decide(ctx, cacheKey{token: sha256.Sum256([]byte(token)), verb: authnVerb}, func(renewal bool) (authnv1.UserInfo, error) {
		return r.authenticate(ctx, token, renewal)
	})
}

// CheckUser decides whether an already authenticated user may do verb, with the Reviewer's rule
// (any user when it has none). Decisions are cached by user (name, UID and groups) and verb,
// apart from tokens' decisions.
func (r *Reviewer) CheckUser(ctx context.Context, u authnv1.UserInfo, verb string) error {
	if u.Username == "" {
		return &Error{Kind: Unauthenticated, Msg: r.missing}
	}
	id := "user\x00" + u.Username + "\x00" + u.UID + "\x00" + strings.Join(u.Groups, "\x00")
	_, err := r.decide(ctx, cacheKey{token: sha256.Sum256([]byte(id)), verb: verb}, func(bool) (authnv1.UserInfo, error) {
		return u, r.authorizeUser(ctx, u, verb)
	})
	return err
}

// decide returns the cached decision for key, or makes it with fn: one fn per key at a time,
// the other callers wait for its answer. Failed reviews (Unavailable) are not cached. fn is told
// whether the decision renews a grant that has expired (a caller already known to be good).
func (r *Reviewer) decide(ctx context.Context, key cacheKey, fn func(renewal bool) (authnv1.UserInfo, error)) (authnv1.UserInfo, error) {
	now := r.clock.Now()
	r.mu.Lock()
	c, renewal := r.allowed[key]
	if renewal && now.Before(c.expires) {
		r.mu.Unlock()
		return c.user, c.err
	}
	if c, ok := r.refused[key]; ok && now.Before(c.expires) {
		r.mu.Unlock()
		return c.user, c.err
	}
	if rv, ok := r.inflight[key]; ok { // thousands of callers reconnecting with one token: one review
		r.mu.Unlock()
		select {
		case <-rv.done:
			return rv.user, rv.err
		case <-ctx.Done():
			return authnv1.UserInfo{}, &Error{Kind: Unavailable, Msg: "the access review did not finish: " + ctx.Err().Error()}
		}
	}
	rv := &review{done: make(chan struct{})}
	r.inflight[key] = rv
	r.mu.Unlock()

	rv.user, rv.err = fn(renewal)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.inflight, key)
	close(rv.done)
	if KindOf(rv.err) == Unavailable {
		return authnv1.UserInfo{}, rv.err // not cached: the next request tries again
	}
	cache, bound, ttl := r.allowed, maxAllowed, r.allowTTL
	if rv.err != nil {
		cache, bound, ttl = r.refused, maxRefused, r.denyTTL
		delete(r.allowed, key) // a revoked grant is no longer a renewal
	}
	if len(cache) >= bound {
		for k, c := range cache {
			if !now.Before(c.expires) {
				delete(cache, k)
			}
		}
		if len(cache) >= bound {
			clear(cache)
		}
	}
	cache[key] = cached{user: rv.user, err: rv.err, expires: now.Add(ttl)}
	return rv.user, rv.err
}

// unavailable reports a failed review to the caller without the API server's words (they may
// name the server's own identity and permissions); the server's log has them.
func unavailable(what string, err error) error {
	slog.Default().Warn("access review failed", "review", what, "err", redact.String(err.Error()))
	return &Error{Kind: Unavailable, Msg: "the server cannot " + what + " now (its log says why); retry shortly"}
}

func (r *Reviewer) review(ctx context.Context, token, verb string, renewal bool) (authnv1.UserInfo, error) {
	u, err := r.authenticate(ctx, token, renewal)
	if err != nil {
		return u, err
	}
	return u, r.authorizeUser(ctx, u, verb)
}

// authorizeUser applies the Reviewer's rule (none: any user may); a refusal that is not already
// an *Error is Forbidden.
func (r *Reviewer) authorizeUser(ctx context.Context, u authnv1.UserInfo, verb string) error {
	if r.authorize == nil {
		return nil
	}
	err := r.authorize(ctx, u, verb)
	if err != nil && KindOf(err) == 0 {
		err = &Error{Kind: Forbidden, Msg: err.Error()}
	}
	return err
}

// authenticate sends the TokenReview, unless too many were sent just now for tokens the cache
// does not know. The renewal of an expired grant is not held to that bound: a flood of new
// tokens cannot lock out the callers already known (the grants cache, which only a successful
// review fills, bounds how many such renewals there can be).
func (r *Reviewer) authenticate(ctx context.Context, token string, renewal bool) (authnv1.UserInfo, error) {
	if !renewal && !r.tokenReviews.Allow() {
		r.reviews("throttled")
		return authnv1.UserInfo{}, &Error{Kind: Unavailable, Msg: "the server is reviewing too many new tokens at once; retry in a second"}
	}
	r.reviews("token")
	tr, err := r.kc.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: r.audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, unavailable("review the token", err)
	}
	if !tr.Status.Authenticated {
		msg := "the bearer token was not accepted by the Kubernetes API server"
		if tr.Status.Error != "" {
			msg += ": " + redact.String(tr.Status.Error)
		}
		return authnv1.UserInfo{}, &Error{Kind: Unauthenticated, Msg: msg}
	}
	return tr.Status.User, nil
}

// ResourceAttributes name what SubjectAccess asks about: a verb on Group/Resource/Subresource.
type ResourceAttributes struct {
	Group, Resource, Subresource string
}

// SubjectAccess authorizes with a LocalSubjectAccessReview in namespace: may the user do verb on
// the resource? So RBAC Roles grant it like any other permission.
func SubjectAccess(kc kubernetes.Interface, namespace string, res ResourceAttributes, onReview func(string)) Authorize {
	if onReview == nil {
		onReview = func(string) {}
	}
	return func(ctx context.Context, u authnv1.UserInfo, verb string) error {
		extra := map[string]authzv1.ExtraValue{}
		for k, v := range u.Extra {
			extra[k] = authzv1.ExtraValue(v)
		}
		onReview("access")
		sar, err := kc.AuthorizationV1().LocalSubjectAccessReviews(namespace).Create(ctx, &authzv1.LocalSubjectAccessReview{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace},
			Spec: authzv1.SubjectAccessReviewSpec{
				User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
				ResourceAttributes: &authzv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: res.Group, Resource: res.Resource, Subresource: res.Subresource},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return unavailable("check access", err)
		}
		if !sar.Status.Allowed {
			what := res.Resource
			if res.Subresource != "" {
				what += "/" + res.Subresource
			}
			return &Error{Kind: Forbidden, Msg: fmt.Sprintf(
				"%s may not %s %s in namespace %s: grant it with a Role rule {apiGroups: [%s], resources: [%s], verbs: [%s]}",
				u.Username, verb, what, namespace, res.Group, what, verb)}
		}
		return nil
	}
}

// ListenCheck refuses a non-loopback address when calls are not protected. modeEnv names the
// variable that sets the mode, envName the one that sets addr.
func ListenCheck(mode Mode, modeEnv, envName, addr string) error {
	if mode != None {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q must be host:port: %w", envName, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s %q is not a loopback address: without authentication (%s=none) the server "+
		"listens on loopback only; bind 127.0.0.1, or set %s=token or mtls", envName, addr, modeEnv, modeEnv)
}
