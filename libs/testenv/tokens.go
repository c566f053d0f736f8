package testenv

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ServiceAccountToken creates the ServiceAccount ns/name if it does not exist and asks the API
// server (TokenRequest) for a token of it issued for audiences (none: the API server's own),
// valid for ten minutes: what kubelet projects into a pod.
func (k *Kube) ServiceAccountToken(ctx context.Context, ns, name string, audiences ...string) (string, error) {
	_, err := k.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	tr, err := k.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// ExpiredToken returns token (one this API server issued) re-signed with the API server's own
// key after moving its validity an hour into the past: a genuine token that has expired. The
// API server refuses at least ten minutes of validity in a TokenRequest, so a test cannot wait
// for one to expire.
func (k *Kube) ExpiredToken(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", err
	}
	claims := map[string]any{}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", err
	}
	past := time.Now().Add(-time.Hour).Unix()
	claims["iat"], claims["nbf"], claims["exp"] = past-600, past-600, past
	if payload, err = json.Marshal(claims); err != nil {
		return "", err
	}
	pemBytes, err := os.ReadFile(filepath.Join(k.env.ControlPlane.APIServer.CertDir, "sa-signer.key"))
	if err != nil {
		return "", fmt.Errorf("the API server's signing key: %w", err)
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return "", errors.New("the API server's signing key is not PEM")
	}
	key, err := parseKey(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("the API server's signing key: %w", err)
	}
	signed := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload)
	sum := sha256.Sum256([]byte(signed))
	var sig []byte
	switch k := key.(type) {
	case *rsa.PrivateKey: // RS256
		if sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:]); err != nil {
			return "", err
		}
	case *ecdsa.PrivateKey: // ES256: r and s, 32 bytes each
		r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
		if err != nil {
			return "", err
		}
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	default:
		return "", fmt.Errorf("the API server's signing key is a %T", key)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

func parseKey(der []byte) (any, error) {
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	return x509.ParsePKCS8PrivateKey(der)
}
