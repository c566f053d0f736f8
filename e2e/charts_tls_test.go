//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestTheGatewayServesTLSByDefault (#31 item 4): the watch-gateway chart serves HTTPS and gRPC
// over TLS with no value set: Helm generates a CA and a certificate for the Service's names,
// localhost and 127.0.0.1 (and http.allowedHosts), mounts it, publishes the CA in a ConfigMap that
// the status-viewer Role may read and the pod names (agentctl verifies the gateway with it), and
// helm test verifies the server with it. tls.secretName and cert-manager replace the generated
// pair; tls.generate=false is plaintext; cert-manager without its API is refused, saying so.
func TestTheGatewayServesTLSByDefault(t *testing.T) {
	h := newHelmEnv(t)
	const chart, fullname = "watch-gateway", "watch-gateway"
	find := func(objs []map[string]any, kind, name string) map[string]any {
		for _, o := range objs {
			if o["kind"] == kind && at(o, "metadata", "name") == name {
				return o
			}
		}
		return nil
	}
	deployment := func(objs []map[string]any) map[string]any {
		d := find(objs, "Deployment", fullname)
		if d == nil {
			t.Fatal("no Deployment")
		}
		return d
	}
	annotations := func(objs []map[string]any) map[string]any {
		a, _ := at(deployment(objs), "spec", "template", "metadata", "annotations").(map[string]any)
		return a
	}
	env := func(objs []map[string]any, name string) (string, bool) {
		for _, e := range at(deployment(objs), "spec", "template", "spec", "containers").([]any)[0].(map[string]any)["env"].([]any) {
			if e := e.(map[string]any); e["name"] == name {
				return fmt.Sprint(e["value"]), true
			}
		}
		return "", false
	}
	tlsVolume := func(objs []map[string]any) string {
		for _, v := range at(deployment(objs), "spec", "template", "spec", "volumes").([]any) {
			if v := v.(map[string]any); v["name"] == "tls" {
				return fmt.Sprint(at(v, "secret", "secretName"))
			}
		}
		return ""
	}
	b64 := func(o map[string]any, key string) []byte {
		b, err := base64.StdEncoding.DecodeString(fmt.Sprint(at(o, "data", key)))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return b
	}

	t.Run("generated at install", func(t *testing.T) {
		objs := objects(t, h, chart, "--set", "http.allowedHosts={gw.example.com}")
		secret := find(objs, "Secret", fullname+"-tls")
		if secret == nil || secret["type"] != "kubernetes.io/tls" {
			t.Fatalf("no kubernetes.io/tls Secret %s-tls: %v", fullname, secret)
		}
		pair, err := tls.X509KeyPair(b64(secret, "tls.crt"), b64(secret, "tls.key"))
		if err != nil {
			t.Fatalf("tls.crt and tls.key are not a pair: %v", err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(b64(secret, "ca.crt")) {
			t.Fatal("ca.crt holds no certificate")
		}
		for _, name := range []string{fullname + "." + chartNamespace + ".svc", fullname, "localhost", "127.0.0.1", "gw.example.com"} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				t.Errorf("the certificate does not verify for %s with the Secret's CA: %v", name, err)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "elsewhere.example.com"}); err == nil {
			t.Error("the certificate verifies for a name it was not made for")
		}

		cm := find(objs, "ConfigMap", fullname+"-ca")
		if cm == nil {
			t.Fatalf("no ConfigMap %s-ca with the CA", fullname)
		}
		if ca := fmt.Sprint(at(cm, "data", "ca.crt")); strings.TrimSpace(ca) != strings.TrimSpace(string(b64(secret, "ca.crt"))) {
			t.Errorf("the ConfigMap's CA is not the Secret's:\n%s", ca)
		} else if block, _ := pem.Decode([]byte(ca)); block == nil {
			t.Error("the ConfigMap's CA is not PEM")
		}

		if v, ok := env(objs, "JANGAR_WATCH_TLS_CERT_FILE"); !ok || v != "/etc/watch-gateway/tls/tls.crt" {
			t.Errorf("JANGAR_WATCH_TLS_CERT_FILE = %q (%v)", v, ok)
		}
		if got := tlsVolume(objs); got != fullname+"-tls" {
			t.Errorf("the tls volume mounts Secret %q, want %s-tls", got, fullname)
		}
		a := annotations(objs)
		if a["agentplane.dev/tls-server-name"] != fullname+"."+chartNamespace+".svc" || a["agentplane.dev/tls-ca-configmap"] != fullname+"-ca" || a["agentplane.dev/tls-ca-key"] != "ca.crt" {
			t.Errorf("pod annotations %v: want the server name and the CA's ConfigMap for agentctl", a)
		}

		p := testPod(objs)
		if args := fmt.Sprint(at(p, "spec", "containers", "0", "args")); !strings.Contains(args, "--ca-file=/etc/agentplane/tls/ca.crt --server-name="+fullname+"."+chartNamespace+".svc") {
			t.Errorf("helm test does not verify the server: %s", args)
		}
		if got := fmt.Sprint(at(p, "spec", "volumes", "0", "secret", "secretName")); got != fullname+"-tls" {
			t.Errorf("helm test reads its CA from %q", got)
		}

		readable := false
		for _, o := range objs {
			if o["kind"] != "Role" || at(o, "metadata", "name") != fullname+"-status-viewer" {
				continue
			}
			for _, r := range o["rules"].([]any) {
				r := r.(map[string]any)
				if fmt.Sprint(r["resources"]) == "[configmaps]" && fmt.Sprint(r["resourceNames"]) == "["+fullname+"-ca]" && fmt.Sprint(r["verbs"]) == "[get]" {
					readable = true
				}
			}
		}
		if !readable {
			t.Error("the status-viewer Role may not get the CA's ConfigMap (and only it)")
		}
	})

	t.Run("tls.generate=false is plaintext", func(t *testing.T) {
		objs := objects(t, h, chart, "--set", "tls.generate=false")
		if _, ok := env(objs, "JANGAR_WATCH_TLS_CERT_FILE"); ok || find(objs, "Secret", fullname+"-tls") != nil || find(objs, "ConfigMap", fullname+"-ca") != nil {
			t.Error("TLS still configured")
		}
		if a := annotations(objs); a["agentplane.dev/tls-server-name"] != nil {
			t.Errorf("a plaintext pod says it serves TLS: %v", a)
		}
	})

	t.Run("tls.secretName replaces the generated pair", func(t *testing.T) {
		objs := objects(t, h, chart, "--set", "tls.secretName=mine")
		if find(objs, "Secret", fullname+"-tls") != nil || find(objs, "ConfigMap", fullname+"-ca") != nil {
			t.Error("a certificate is generated beside tls.secretName")
		}
		if got := tlsVolume(objs); got != "mine" {
			t.Errorf("tls volume %q, want mine", got)
		}
		a := annotations(objs)
		if a["agentplane.dev/tls-server-name"] == nil || a["agentplane.dev/tls-ca-configmap"] != nil {
			t.Errorf("annotations %v: want the server name and no CA ConfigMap (none is known)", a)
		}
		a = annotations(objects(t, h, chart, "--set", "tls.secretName=mine", "--set", "tls.caConfigMap.name=bundle", "--set", "tls.caConfigMap.key=root.pem"))
		if a["agentplane.dev/tls-ca-configmap"] != "bundle" || a["agentplane.dev/tls-ca-key"] != "root.pem" {
			t.Errorf("annotations %v: want the named CA ConfigMap", a)
		}
	})

	t.Run("cert-manager", func(t *testing.T) {
		wantRefused(t, h, chart, "cert-manager", "--set", "tls.certManager.issuerRef.name=ca-issuer")
		objs := objects(t, h, chart, "--set", "tls.certManager.issuerRef.name=ca-issuer", "--set", "tls.certManager.issuerRef.kind=ClusterIssuer",
			"--api-versions", "cert-manager.io/v1/Certificate")
		c := find(objs, "Certificate", fullname+"-tls")
		if c == nil {
			t.Fatal("no Certificate")
		}
		if at(c, "spec", "secretName") != fullname+"-tls" || at(c, "spec", "issuerRef", "name") != "ca-issuer" || at(c, "spec", "issuerRef", "kind") != "ClusterIssuer" {
			t.Errorf("Certificate %v", c["spec"])
		}
		names, _ := at(c, "spec", "dnsNames").([]any)
		if !slices.Contains(names, any(fullname+"."+chartNamespace+".svc")) || !slices.Contains(names, any("localhost")) {
			t.Errorf("Certificate names %v", names)
		}
		if find(objs, "Secret", fullname+"-tls") != nil || find(objs, "ConfigMap", fullname+"-ca") != nil {
			t.Error("Helm generates a certificate beside cert-manager's")
		}
		if got := tlsVolume(objs); got != fullname+"-tls" {
			t.Errorf("tls volume %q", got)
		}
	})
}
