package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/agentplane/agentplane/libs/grpcx"
)

// grpcAccess is how agentctl proves itself to a watch-gateway that requires it: a bearer token
// (checked by the gateway with TokenReview and SubjectAccessReview) and/or TLS, with a client
// certificate for mTLS.
type grpcAccess struct {
	token, tokenFile          string
	caFile, certFile, keyFile string
	serverName                string
	// pod is how the gateway pod reached through a port-forward serves TLS (its annotations),
	// nil when it serves plaintext or was not reached that way. The flags above win over it.
	pod *podTLS
}

// presents reports whether a credential for the gateway itself was given (a token or a client
// certificate): then agentctl talks to the gateway, not to its aggregated API.
func (a grpcAccess) presents() bool {
	return a.token != "" || a.tokenFile != "" || a.certFile != ""
}

func (a grpcAccess) tlsEnabled() bool {
	return a.pod != nil || a.caFile != "" || a.certFile != "" || a.keyFile != "" || a.serverName != ""
}

func (a grpcAccess) dialOptions() (grpcx.ClientOptions, error) {
	var o grpcx.ClientOptions
	token := a.token
	if a.tokenFile != "" {
		if token != "" {
			return o, errors.New("--gateway-token and --gateway-token-file both set: use one")
		}
		b, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return o, fmt.Errorf("read --gateway-token-file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return o, fmt.Errorf("--gateway-token-file %s is empty", a.tokenFile)
		}
	}
	if a.tlsEnabled() {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: a.serverName}
		switch {
		case a.caFile != "":
			pool, err := grpcx.CertPool(a.caFile)
			if err != nil {
				return o, fmt.Errorf("--tls-ca: %w", err)
			}
			cfg.RootCAs = pool
		case a.pod != nil:
			pool, err := a.pod.pool()
			if err != nil {
				return o, err
			}
			cfg.RootCAs = pool
		}
		if cfg.ServerName == "" && a.pod != nil {
			cfg.ServerName = a.pod.serverName
		}
		if (a.certFile == "") != (a.keyFile == "") {
			return o, errors.New("--tls-cert and --tls-key go together")
		}
		if a.certFile != "" {
			cert, err := tls.LoadX509KeyPair(a.certFile, a.keyFile)
			if err != nil {
				return o, fmt.Errorf("load --tls-cert/--tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		o.TLS = credentials.NewTLS(cfg)
	}
	if token != "" {
		o.Extra = append(o.Extra, grpc.WithPerRPCCredentials(bearer{token: token, secure: a.tlsEnabled()}))
	}
	return o, nil
}

// pool is the pod's CA as a pool (empty when --tls-ca was given instead).
func (t *podTLS) pool() (*x509.CertPool, error) {
	if len(t.ca) == 0 {
		return nil, nil
	}
	pool, ok := grpcx.CertPoolPEM(t.ca)
	if !ok {
		return nil, withCode(ExitRejected, fmt.Errorf("%s holds no PEM certificate: pass --tls-ca FILE", t.caFrom))
	}
	return pool, nil
}

// credentials verify the pod with its CA and the name in its certificate.
func (t *podTLS) credentials() (credentials.TransportCredentials, error) {
	pool, err := t.pool()
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.serverName, RootCAs: pool}), nil
}

// bearer sends "authorization: Bearer <token>" with every call. Over plaintext it is allowed
// too (a port-forward to the gateway's loopback address), but the gateway warns about it.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }
