package access

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/libs/grpcx"
)

// TLSFiles name the PEM files of a server's TLS: its certificate and key, and for mtls the CA
// that signs client certificates. Prefix names the variables in messages: <Prefix>_AUTH_MODE,
// <Prefix>_TLS_CERT_FILE, <Prefix>_TLS_KEY_FILE and <Prefix>_TLS_CLIENT_CA_FILE.
type TLSFiles struct {
	Prefix                          string
	CertFile, KeyFile, ClientCAFile string
}

// Enabled reports whether a server certificate is configured.
func (f TLSFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" }

// ServerConfig returns the TLS configuration for mode, or nil for plaintext. mtls requires all
// three files; token may use TLS (recommended: the token is a credential) or not.
func ServerConfig(mode Mode, f TLSFiles) (*tls.Config, error) {
	p := f.Prefix
	if mode == MTLS && (f.CertFile == "" || f.KeyFile == "" || f.ClientCAFile == "") {
		return nil, fmt.Errorf("%s_AUTH_MODE=mtls needs %s_TLS_CERT_FILE, %s_TLS_KEY_FILE and %s_TLS_CLIENT_CA_FILE", p, p, p, p)
	}
	if !f.Enabled() {
		if f.ClientCAFile != "" {
			return nil, fmt.Errorf("%s_TLS_CLIENT_CA_FILE needs %s_TLS_CERT_FILE and %s_TLS_KEY_FILE", p, p, p)
		}
		return nil, nil
	}
	if mode != MTLS && f.ClientCAFile != "" {
		return nil, fmt.Errorf("%s_TLS_CLIENT_CA_FILE is only used with %s_AUTH_MODE=mtls: unset it, or set the mode", p, p)
	}
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, fmt.Errorf("set both %s_TLS_CERT_FILE and %s_TLS_KEY_FILE, or neither", p, p)
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load the TLS certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if mode == MTLS {
		pool, err := grpcx.CertPool(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("%s_TLS_CLIENT_CA_FILE: %w", p, err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// errNoCert is returned by ClientTLS when a key comes without its certificate or the reverse.
var errNoCert = errors.New("set both the client certificate and its key, or neither")
