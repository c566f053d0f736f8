package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// TestTheGatewayIsFoundByNameOnly (#31 item 3): a Service that merely carries watch-gateway's
// label is never used; it is named in the error as a suggestion, and the error says how to pick
// a Service (--gateway-service).
func TestTheGatewayIsFoundByNameOnly(t *testing.T) {
	impostor := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "agentplane-watch-gateway", Namespace: "agents",
		Labels: map[string]string{"app.kubernetes.io/name": "watch-gateway"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Name: "grpc", Port: 50051}}}}
	kc := fake.NewClientset(impostor)
	_, _, _, err := forwardToGateway(context.Background(), &rest.Config{}, kc, "agents", defaultGatewayService, false)
	if err == nil || !strings.Contains(err.Error(), "no Service watch-gateway in namespace agents") ||
		!strings.Contains(err.Error(), "agentplane-watch-gateway") || !strings.Contains(err.Error(), "--gateway-service") {
		t.Fatalf("with only a labelled Service of another name: %v, want a refusal naming it as a suggestion", err)
	}
	if exitCode(err) != ExitRejected {
		t.Errorf("exit code %d, want %d", exitCode(err), ExitRejected)
	}
}

// TestAPodThatServesTLSIsVerifiedWithItsPublishedCA (#31 item 4): a pod the charts annotate as
// serving TLS is dialled over TLS, verified with the CA in the ConfigMap it names (read with the
// user's kubeconfig) and the name in its certificate; a pod without the annotation is plaintext;
// a CA that cannot be read is a refusal saying what to do, never a fall back to plaintext or to
// an unverified connection.
func TestAPodThatServesTLSIsVerifiedWithItsPublishedCA(t *testing.T) {
	ca := testCA(t)
	pod := func(annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gw-0", Namespace: "agents", Annotations: annotations}}
	}
	tlsPod := pod(map[string]string{annotationTLSServerName: "watch-gateway.agents.svc", annotationTLSCAConfigMap: "watch-gateway-ca", annotationTLSCAKey: "ca.crt"})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watch-gateway-ca", Namespace: "agents"}, Data: map[string]string{"ca.crt": string(ca)}}
	ctx := context.Background()

	if got, err := tlsOfPod(ctx, fake.NewClientset(cm), pod(nil), false); got != nil || err != nil {
		t.Fatalf("a pod without the annotation: %+v, %v; want plaintext", got, err)
	}
	got, err := tlsOfPod(ctx, fake.NewClientset(cm), tlsPod, false)
	if err != nil || got == nil || got.serverName != "watch-gateway.agents.svc" || string(got.ca) != string(ca) {
		t.Fatalf("a TLS pod with its CA published: %+v, %v", got, err)
	}
	o, err := grpcAccess{pod: got}.dialOptions()
	if err != nil || o.TLS == nil || o.TLS.Info().SecurityProtocol != "tls" {
		t.Fatalf("dial options for a TLS pod: %+v, %v; want TLS", o, err)
	}
	if _, err := tlsOfPod(ctx, fake.NewClientset(), tlsPod, true); err != nil {
		t.Fatalf("with --tls-ca the ConfigMap is not needed: %v", err)
	}

	forbidden := fake.NewClientset(cm)
	forbidden.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "watch-gateway-ca", nil)
	})
	cases := []struct {
		name string
		kc   *fake.Clientset
		pod  *corev1.Pod
		want []string
	}{
		{"the CA may not be read", forbidden, tlsPod, []string{"ConfigMap agents/watch-gateway-ca", "status-viewer", "--tls-ca"}},
		{"the ConfigMap is missing", fake.NewClientset(), tlsPod, []string{"does not exist", "--tls-ca"}},
		{"no CA is named", fake.NewClientset(cm), pod(map[string]string{annotationTLSServerName: "x.agents.svc"}), []string{"names no ConfigMap", "--tls-ca"}},
		{"the key is missing", fake.NewClientset(cm), pod(map[string]string{annotationTLSServerName: "x", annotationTLSCAConfigMap: "watch-gateway-ca", annotationTLSCAKey: "other"}), []string{"has no key other", "--tls-ca"}},
	}
	for _, c := range cases {
		got, err := tlsOfPod(ctx, c.kc, c.pod, false)
		if err == nil || got != nil {
			t.Errorf("%s: %+v, %v; want a refusal", c.name, got, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to name %q", c.name, err, w)
			}
		}
		if exitCode(err) != ExitRejected {
			t.Errorf("%s: exit code %d, want %d", c.name, exitCode(err), ExitRejected)
		}
	}
	bad := &corev1.ConfigMap{ObjectMeta: cm.ObjectMeta, Data: map[string]string{"ca.crt": "not a certificate"}}
	got, err = tlsOfPod(ctx, fake.NewClientset(bad), tlsPod, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (grpcAccess{pod: got}).dialOptions(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a ConfigMap holding no certificate: %v; want a refusal", err)
	}
}

// testCA is a self-signed CA certificate, PEM.
func testCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
