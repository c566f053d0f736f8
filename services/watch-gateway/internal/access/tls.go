package access

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/libs/grpcx"
)

// TLSFiles name the PEM files of the gateway's TLS: its certificate and key, and for mtls the
// CA that signs client certificates.
type TLSFiles struct {
	CertFile, KeyFile, ClientCAFile string
}

// Enabled reports whether a server certificate is configured.
func (f TLSFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" }

// ServerConfig returns the TLS configuration for mode, or nil for plaintext. mtls requires all
// three files; token may use TLS (recommended: the token is a credential) or not.
func ServerConfig(mode Mode, f TLSFiles) (*tls.Config, error) {
	if mode == MTLS && (f.CertFile == "" || f.KeyFile == "" || f.ClientCAFile == "") {
		return nil, errors.New("JANGAR_WATCH_AUTH_MODE=mtls needs JANGAR_WATCH_TLS_CERT_FILE, JANGAR_WATCH_TLS_KEY_FILE and JANGAR_WATCH_TLS_CLIENT_CA_FILE")
	}
	if !f.Enabled() {
		if f.ClientCAFile != "" {
			return nil, errors.New("JANGAR_WATCH_TLS_CLIENT_CA_FILE needs JANGAR_WATCH_TLS_CERT_FILE and JANGAR_WATCH_TLS_KEY_FILE")
		}
		return nil, nil
	}
	if mode != MTLS && f.ClientCAFile != "" {
		return nil, errors.New("JANGAR_WATCH_TLS_CLIENT_CA_FILE is only used with JANGAR_WATCH_AUTH_MODE=mtls: unset it, or set the mode")
	}
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("set both JANGAR_WATCH_TLS_CERT_FILE and JANGAR_WATCH_TLS_KEY_FILE, or neither")
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load the TLS certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if mode == MTLS {
		pool, err := grpcx.CertPool(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("JANGAR_WATCH_TLS_CLIENT_CA_FILE: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
