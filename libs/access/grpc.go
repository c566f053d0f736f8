package access

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/config"
)

// The variables a gRPC server with callers reads (status-writer, event-emitter), by name.
const (
	EnvGRPCPrefix      = "JANGAR_GRPC"
	EnvAuthMode        = "JANGAR_GRPC_AUTH_MODE"
	EnvAuthAudiences   = "JANGAR_GRPC_AUTH_AUDIENCES"
	EnvAllowedCallers  = "JANGAR_GRPC_AUTH_ALLOWED_CALLERS"
	EnvAuthCacheTTL    = "JANGAR_GRPC_AUTH_CACHE_TTL"
	EnvTLSCertFile     = "JANGAR_GRPC_TLS_CERT_FILE"
	EnvTLSKeyFile      = "JANGAR_GRPC_TLS_KEY_FILE"
	EnvTLSClientCAFile = "JANGAR_GRPC_TLS_CLIENT_CA_FILE"
)

// DefaultAudience is the audience the controllers' projected tokens are issued for and the
// internal services accept.
const DefaultAudience = "agentplane"

// DefaultCallers are the ServiceAccounts (in the server's namespace) allowed by default: the
// controllers, under the names their charts give them.
var DefaultCallers = []string{"run-controller", "job-gc", "cancel-propagator"}

// ServiceAccountUser is the Kubernetes username of a ServiceAccount.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Callers are the identities allowed to call a server, as Kubernetes usernames.
type Callers struct {
	users []string
}

// ParseCallers reads a list of ServiceAccounts: "name" (in defaultNamespace), "namespace/name"
// or "system:serviceaccount:namespace:name".
func ParseCallers(entries []string, defaultNamespace string) (Callers, error) {
	var c Callers
	for _, e := range entries {
		e = strings.TrimSpace(e)
		ns, name := defaultNamespace, e
		if rest, ok := strings.CutPrefix(e, "system:serviceaccount:"); ok {
			var found bool
			if ns, name, found = strings.Cut(rest, ":"); !found {
				return c, fmt.Errorf("%s item %q must be system:serviceaccount:<namespace>:<name>", EnvAllowedCallers, e)
			}
		} else if n, nm, found := strings.Cut(e, "/"); found {
			ns, name = n, nm
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return c, fmt.Errorf("%s item %q: namespace %q: %s", EnvAllowedCallers, e, ns, strings.Join(errs, "; "))
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return c, fmt.Errorf("%s item %q: ServiceAccount name %q: %s", EnvAllowedCallers, e, name, strings.Join(errs, "; "))
		}
		if u := ServiceAccountUser(ns, name); !slices.Contains(c.users, u) {
			c.users = append(c.users, u)
		}
	}
	return c, nil
}

// Allowed reports whether user may call.
func (c Callers) Allowed(user string) bool { return slices.Contains(c.users, user) }

// Users returns the allowed usernames.
func (c Callers) Users() []string { return slices.Clone(c.users) }

func (c Callers) refuse(user, what string) error {
	return &Error{Kind: Forbidden, Msg: fmt.Sprintf("%s may not call %s: only the ServiceAccounts in the server's %s "+
		"(chart value auth.allowedCallers) may; add it there if it should", user, what, EnvAllowedCallers)}
}

// Authorize is an Authorize for a Reviewer: the token's user must be one of c.
func (c Callers) Authorize(what string) Authorize {
	return func(_ context.Context, u authnv1.UserInfo, _ string) error {
		if !c.Allowed(u.Username) {
			return c.refuse(u.Username, what)
		}
		return nil
	}
}

// ServerAuth is how a gRPC server with callers authenticates them (JANGAR_GRPC_AUTH_*,
// JANGAR_GRPC_TLS_*).
type ServerAuth struct {
	Mode      Mode
	Audiences []string
	Callers   Callers
	CacheTTL  time.Duration
	TLS       TLSFiles
}

// LoadServerAuth reads the server's authentication. Unset, the mode is none, which is only
// accepted on a loopback address (the local control plane's tests); the charts set token.
func LoadServerAuth(env *config.Env, svc config.Service) (ServerAuth, error) {
	a := ServerAuth{
		Audiences: env.List(EnvAuthAudiences, []string{DefaultAudience}),
		CacheTTL:  env.Duration(EnvAuthCacheTTL, 30*time.Second),
		TLS: TLSFiles{Prefix: EnvGRPCPrefix, CertFile: env.String(EnvTLSCertFile, ""),
			KeyFile: env.String(EnvTLSKeyFile, ""), ClientCAFile: env.String(EnvTLSClientCAFile, "")},
	}
	mode, err := ParseMode(EnvAuthMode, env.String(EnvAuthMode, string(None)))
	callers := env.List(EnvAllowedCallers, DefaultCallers)
	if err := env.Err(); err != nil {
		return a, err
	}
	if err != nil {
		return a, err
	}
	a.Mode = mode
	if a.CacheTTL <= 0 || a.CacheTTL > 10*time.Minute {
		return a, fmt.Errorf("%s %s must be more than 0 and at most 10m: it bounds how long a revoked caller keeps access", EnvAuthCacheTTL, a.CacheTTL)
	}
	if a.Callers, err = ParseCallers(callers, svc.PodNamespace); err != nil {
		return a, err
	}
	if mode != None && len(a.Callers.users) == 0 {
		return a, fmt.Errorf("%s is empty: no caller could write; name the controllers' ServiceAccounts", EnvAllowedCallers)
	}
	if err := ListenCheck(mode, EnvAuthMode, "JANGAR_GRPC_HOST:JANGAR_GRPC_PORT", svc.GRPCAddr); err != nil {
		return a, err
	}
	if _, err := ServerConfig(mode, a.TLS); err != nil {
		return a, err
	}
	return a, nil
}

// exempt are the methods anyone may call: health (kubelet probes, watch-gateway's collector).
func exempt(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

// Guard authenticates and authorizes every call of a gRPC server but health checks.
type Guard struct {
	auth      ServerAuth
	reviewer  *Reviewer // token mode
	decisions *prometheus.CounterVec
}

// NewGuard builds the guard of a, reviewing tokens with kc and counting decisions and reviews
// in reg (agentplane_grpc_auth_decisions_total, agentplane_grpc_auth_reviews_total).
func NewGuard(a ServerAuth, kc kubernetes.Interface, reg prometheus.Registerer, o ReviewerOptions) *Guard {
	g := &Guard{auth: a,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_grpc_auth_decisions_total",
			Help: "Calls checked by the server's authentication, by result: allowed, unauthenticated, forbidden or unavailable.",
		}, []string{"result"})}
	reviews := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentplane_grpc_auth_reviews_total",
		Help: "Tokens of callers the cache did not answer, by kind: token (a TokenReview sent to the API server), refused-locally (not a plausible token, no review) or throttled (over the review bound, no review).",
	}, []string{"kind"})
	reg.MustRegister(g.decisions, reviews)
	if a.Mode == Token {
		o.Audiences = a.Audiences
		if o.AllowTTL <= 0 {
			o.AllowTTL = a.CacheTTL
		}
		o.Authorize = a.Callers.Authorize("this service")
		o.MissingToken = "this service requires a caller identity: send a ServiceAccount token issued for audience " +
			strings.Join(a.Audiences, " or ") + " as Authorization: Bearer (the controllers read it from JANGAR_SERVICE_TOKEN_FILE)"
		next := o.OnReview
		o.OnReview = func(kind string) {
			reviews.WithLabelValues(kind).Inc()
			if next != nil {
				next(kind)
			}
		}
		g.reviewer = NewReviewer(kc, o)
	}
	return g
}

// ServerOptions are the interceptors (and, for TLS, the credentials) the server needs.
func (g *Guard) ServerOptions() ([]grpc.ServerOption, error) {
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream)}
	cfg, err := ServerConfig(g.auth.Mode, g.auth.TLS)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	return opts, nil
}

type callerKey struct{}

// CallerFrom returns the caller's identity a Guard established, or "".
func CallerFrom(ctx context.Context) string {
	s, _ := ctx.Value(callerKey{}).(string)
	return s
}

func (g *Guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := g.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (g *Guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := g.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return h(srv, &identifiedStream{ServerStream: ss, ctx: ctx})
}

type identifiedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identifiedStream) Context() context.Context { return s.ctx }

func (g *Guard) admit(ctx context.Context, method string) (context.Context, error) {
	if g.auth.Mode == None || exempt(method) {
		return ctx, nil
	}
	user, err := g.identify(ctx)
	result := "allowed"
	switch KindOf(err) {
	case 0:
		if err != nil { // not an *Error: treat as unavailable
			result, err = "unavailable", &Error{Kind: Unavailable, Msg: err.Error()}
		}
	case Unauthenticated:
		result = "unauthenticated"
	case Forbidden:
		result = "forbidden"
	case Unavailable:
		result = "unavailable"
	}
	g.decisions.WithLabelValues(result).Inc()
	if err != nil {
		if result == "forbidden" {
			slog.Default().InfoContext(ctx, "call refused", "method", method, "caller", user)
		}
		return ctx, grpcError(err)
	}
	return context.WithValue(ctx, callerKey{}, user), nil
}

func (g *Guard) identify(ctx context.Context) (string, error) {
	if g.auth.Mode == MTLS {
		p, ok := peer.FromContext(ctx)
		var info credentials.TLSInfo
		if ok {
			info, ok = p.AuthInfo.(credentials.TLSInfo)
		}
		if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
			return "", &Error{Kind: Unauthenticated, Msg: "this service requires a client certificate signed by its client CA"}
		}
		user := info.State.VerifiedChains[0][0].Subject.CommonName
		if user == "" {
			return "", &Error{Kind: Unauthenticated, Msg: "the client certificate has no subject common name: issue it with CN=system:serviceaccount:<namespace>:<name>"}
		}
		if !g.auth.Callers.Allowed(user) {
			return user, g.auth.Callers.refuse(user, "this service")
		}
		return user, nil
	}
	var token string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for _, v := range md.Get("authorization") {
			if t, ok := BearerToken(v); ok {
				token = t
				break
			}
		}
	}
	return g.reviewer.Check(ctx, token, "call")
}

// grpcError maps a refusal to its status code.
func grpcError(err error) error {
	code := codes.Unavailable
	switch KindOf(err) {
	case Unauthenticated:
		code = codes.Unauthenticated
	case Forbidden:
		code = codes.PermissionDenied
	}
	return status.Error(code, err.Error())
}
