package access

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/grpcx"
)

// The ConfigMap in which the Kubernetes API server publishes how it identifies itself to
// aggregated API servers (its --requestheader-* flags), readable with the built-in Role
// extension-apiserver-authentication-reader of kube-system.
const (
	FrontProxyNamespace = "kube-system"
	FrontProxyConfigMap = "extension-apiserver-authentication"
)

// FrontProxy authenticates the requests the Kubernetes API server proxies to an aggregated API
// server. The API server has already authenticated the user (with whatever the user's kubeconfig
// uses: certificates, tokens, exec or OIDC plugins) and passes the identity in request headers;
// they are believed only on a connection whose client certificate is signed by the API server's
// front-proxy CA and, when the API server names them, carries one of the allowed common names.
// Everything else is refused: headers alone prove nothing.
type FrontProxy struct {
	kc    kubernetes.Interface
	trust atomic.Pointer[frontProxyTrust]
}

type frontProxyTrust struct {
	pool                                     *x509.CertPool
	allowedNames                             []string
	userHeaders, groupHeaders, extraPrefixes []string
}

// NewFrontProxy reads the front-proxy trust the API server publishes; Run keeps it current.
func NewFrontProxy(ctx context.Context, kc kubernetes.Interface) (*FrontProxy, error) {
	f := &FrontProxy{kc: kc}
	if err := f.Refresh(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// Refresh reads the ConfigMap again (the API server rewrites it when its CA rotates).
func (f *FrontProxy) Refresh(ctx context.Context) error {
	cm, err := f.kc.CoreV1().ConfigMaps(FrontProxyNamespace).Get(ctx, FrontProxyConfigMap, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read %s/%s: %w (the ServiceAccount needs a RoleBinding in %s to the Role extension-apiserver-authentication-reader)",
			FrontProxyNamespace, FrontProxyConfigMap, err, FrontProxyNamespace)
	}
	t, err := parseFrontProxy(cm.Data)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", FrontProxyNamespace, FrontProxyConfigMap, err)
	}
	f.trust.Store(t)
	return nil
}

func parseFrontProxy(data map[string]string) (*frontProxyTrust, error) {
	ca := data["requestheader-client-ca-file"]
	if strings.TrimSpace(ca) == "" {
		return nil, errors.New("the API server publishes no front-proxy CA (requestheader-client-ca-file): start kube-apiserver with " +
			"--requestheader-client-ca-file, --proxy-client-cert-file and --proxy-client-key-file to serve aggregated APIs")
	}
	pool, ok := grpcx.CertPoolPEM([]byte(ca))
	if !ok {
		return nil, errors.New("requestheader-client-ca-file holds no PEM certificate")
	}
	t := &frontProxyTrust{pool: pool}
	for key, into := range map[string]*[]string{
		"requestheader-allowed-names": &t.allowedNames, "requestheader-username-headers": &t.userHeaders,
		"requestheader-group-headers": &t.groupHeaders, "requestheader-extra-headers-prefix": &t.extraPrefixes,
	} {
		if v := strings.TrimSpace(data[key]); v != "" && v != "null" {
			if err := json.Unmarshal([]byte(v), into); err != nil {
				return nil, fmt.Errorf("%s %q is not a JSON list of strings: %w", key, v, err)
			}
		}
	}
	if len(t.userHeaders) == 0 {
		return nil, errors.New("the API server names no user header (requestheader-username-headers): start kube-apiserver with --requestheader-username-headers=X-Remote-User")
	}
	return t, nil
}

// Run refreshes the trust every interval until ctx ends; failures go to onError and the last
// good trust stays.
func (f *FrontProxy) Run(ctx context.Context, every time.Duration, onError func(error)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := f.Refresh(ctx); err != nil && ctx.Err() == nil && onError != nil {
				onError(err)
			}
		}
	}
}

// TLSConfig is base (the server's certificate) asking for a client certificate signed by the
// front-proxy CA of the moment. A connection without one is accepted by the handshake and then
// refused by User, with a message that says why.
func (f *FrontProxy) TLSConfig(base *tls.Config) *tls.Config {
	cfg := base.Clone()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.ClientCAs = f.trust.Load().pool
		c.ClientAuth = tls.VerifyClientCertIfGiven
		return c, nil
	}
	return cfg
}

// User returns the user the API server vouches for in r, or an Unauthenticated error.
func (f *FrontProxy) User(r *http.Request) (authnv1.UserInfo, error) {
	t := f.trust.Load()
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return authnv1.UserInfo{}, &Error{Kind: Unauthenticated, Msg: "this port serves the Kubernetes API server only: call the API through it " +
			"(kubectl get --raw /apis/...), which presents its front-proxy client certificate"}
	}
	cn := r.TLS.VerifiedChains[0][0].Subject.CommonName
	if len(t.allowedNames) > 0 && !slices.Contains(t.allowedNames, cn) {
		return authnv1.UserInfo{}, &Error{Kind: Unauthenticated, Msg: fmt.Sprintf(
			"client certificate %q is not one the API server names in requestheader-allowed-names", cn)}
	}
	var u authnv1.UserInfo
	for _, h := range t.userHeaders {
		if v := strings.TrimSpace(r.Header.Get(h)); v != "" {
			u.Username = v
			break
		}
	}
	if u.Username == "" {
		return authnv1.UserInfo{}, &Error{Kind: Unauthenticated, Msg: "the API server named no user (" + strings.Join(t.userHeaders, ", ") + ")"}
	}
	for _, h := range t.groupHeaders {
		u.Groups = append(u.Groups, r.Header.Values(h)...)
	}
	for name, values := range r.Header {
		for _, p := range t.extraPrefixes {
			if len(name) > len(p) && strings.EqualFold(name[:len(p)], p) {
				key, err := url.PathUnescape(strings.ToLower(name[len(p):]))
				if err != nil {
					key = strings.ToLower(name[len(p):])
				}
				if u.Extra == nil {
					u.Extra = map[string]authnv1.ExtraValue{}
				}
				u.Extra[key] = append(u.Extra[key], values...)
			}
		}
	}
	return u, nil
}
