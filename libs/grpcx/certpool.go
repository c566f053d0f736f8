package grpcx

import (
	"crypto/x509"
	"fmt"
	"os"
)

// CertPool reads a PEM file of CA certificates, for verifying a server (clients) or client
// certificates (mTLS servers). A file without any certificate is an error, not an empty pool.
func CertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's own configuration
	if err != nil {
		return nil, err
	}
	pool, ok := CertPoolPEM(pem)
	if !ok {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// CertPoolPEM is CertPool for certificates already read; ok is false when pem holds none.
func CertPoolPEM(pem []byte) (pool *x509.CertPool, ok bool) {
	pool = x509.NewCertPool()
	return pool, pool.AppendCertsFromPEM(pem)
}
