package access

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/grpcx"
)

// The variables a client of status-writer and event-emitter reads (the controllers), by name.
const (
	EnvServiceTokenFile     = "JANGAR_SERVICE_TOKEN_FILE" //nolint:gosec // G101: the name of a variable that holds a path, not a credential
	EnvClientCAFile         = "JANGAR_GRPC_CLIENT_CA_FILE"
	EnvClientCertFile       = "JANGAR_GRPC_CLIENT_CERT_FILE"
	EnvClientKeyFile        = "JANGAR_GRPC_CLIENT_KEY_FILE"
	EnvClientTLSServerName  = "JANGAR_GRPC_CLIENT_SERVER_NAME"
	tokenRereadAtLeastEvery = time.Minute
)

// TokenFile sends the bearer token held in a file with every call, as gRPC per-call
// credentials. The file is read again when it changes (kubelet rotates projected tokens by
// swapping the file) and at least once a minute; a failed re-read keeps the last token.
type TokenFile struct {
	path string
	now  func() time.Time

	mu    sync.Mutex
	token string
	info  os.FileInfo
	read  time.Time
}

// NewTokenFile reads the token at path; an unreadable or empty file is an error now rather than
// a refused call later.
func NewTokenFile(path string) (*TokenFile, error) {
	t := &TokenFile{path: path, now: time.Now}
	if err := t.reload(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *TokenFile) reload() error {
	info, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", EnvServiceTokenFile, t.path, err)
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", EnvServiceTokenFile, t.path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return fmt.Errorf("%s %s is empty: it should hold the ServiceAccount token (a projected volume in the charts)", EnvServiceTokenFile, t.path)
	}
	t.token, t.info, t.read = tok, info, t.now()
	return nil
}

// Token returns the current token, reading the file again if it changed.
func (t *TokenFile) Token() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	info, err := os.Stat(t.path)
	changed := err == nil && (!os.SameFile(info, t.info) || !info.ModTime().Equal(t.info.ModTime()) || info.Size() != t.info.Size())
	if changed || t.now().Sub(t.read) >= tokenRereadAtLeastEvery {
		_ = t.reload() // keep the last token when the new one cannot be read (a write in progress)
	}
	return t.token
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t *TokenFile) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + t.Token()}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: tokens may travel without
// TLS inside the cluster (they are audience-bound and short-lived); set up TLS to protect them
// on the wire.
func (t *TokenFile) RequireTransportSecurity() bool { return false }

// ClientAuth is how a controller identifies itself to status-writer and event-emitter.
type ClientAuth struct {
	TokenFile                             string
	CAFile, CertFile, KeyFile, ServerName string
}

// LoadClientAuth reads JANGAR_SERVICE_TOKEN_FILE and JANGAR_GRPC_CLIENT_*.
func LoadClientAuth(env *config.Env) ClientAuth {
	return ClientAuth{
		TokenFile:  env.String(EnvServiceTokenFile, ""),
		CAFile:     env.String(EnvClientCAFile, ""),
		CertFile:   env.String(EnvClientCertFile, ""),
		KeyFile:    env.String(EnvClientKeyFile, ""),
		ServerName: env.String(EnvClientTLSServerName, ""),
	}
}

// DialOptions turns c into client options: TLS when a CA is set (with a client certificate for
// mtls), and the token file's per-call credentials when one is set.
func (c ClientAuth) DialOptions() (grpcx.ClientOptions, error) {
	var o grpcx.ClientOptions
	if (c.CertFile == "") != (c.KeyFile == "") {
		return o, fmt.Errorf("%s and %s: %w", EnvClientCertFile, EnvClientKeyFile, errNoCert)
	}
	if c.CertFile != "" && c.CAFile == "" {
		return o, fmt.Errorf("%s needs %s: a client certificate is only sent over TLS", EnvClientCertFile, EnvClientCAFile)
	}
	if c.CAFile != "" {
		pool, err := grpcx.CertPool(c.CAFile)
		if err != nil {
			return o, fmt.Errorf("%s: %w", EnvClientCAFile, err)
		}
		cfg := &tls.Config{RootCAs: pool, ServerName: c.ServerName, MinVersion: tls.VersionTLS12}
		if c.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				return o, fmt.Errorf("load the client certificate %s and key %s: %w", c.CertFile, c.KeyFile, err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		o.TLS = credentials.NewTLS(cfg)
	}
	if c.TokenFile != "" {
		tf, err := NewTokenFile(c.TokenFile)
		if err != nil {
			return o, err
		}
		o.Extra = append(o.Extra, grpc.WithPerRPCCredentials(tf))
	}
	return o, nil
}
