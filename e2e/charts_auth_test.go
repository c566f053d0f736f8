//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestServerChartsAuthenticateCallers renders status-writer's and event-emitter's auth modes:
// token by default (every interface, a TokenReview grant and nothing more, the controllers
// allowed by name), none on loopback only, mtls only with its certificates.
func TestServerChartsAuthenticateCallers(t *testing.T) {
	h := newHelmEnv(t)
	for _, chart := range []string{"status-writer", "event-emitter"} {
		t.Run(chart, func(t *testing.T) {
			reviewer := func(objs []manifest) bool {
				for _, o := range ofKind(objs, "ClusterRole") {
					if isTokenReviewer(o) {
						return true
					}
				}
				return false
			}
			token := h.template(t, chart)
			wantEnv(t, token, "JANGAR_GRPC_AUTH_MODE", "token")
			wantEnv(t, token, "JANGAR_GRPC_HOST", "0.0.0.0")
			wantEnv(t, token, "JANGAR_GRPC_AUTH_AUDIENCES", "agentplane")
			wantEnv(t, token, "JANGAR_GRPC_AUTH_ALLOWED_CALLERS", "run-controller,job-gc,cancel-propagator")
			wantEnv(t, token, "JANGAR_GRPC_AUTH_CACHE_TTL", "30s")
			if !reviewer(token) {
				t.Error("auth.mode=token: no ClusterRole to create TokenReviews")
			}
			if _, ok := envOf(t, token, "JANGAR_GRPC_TLS_CERT_FILE"); ok {
				t.Error("TLS configured without tls.secretName")
			}
			wantEnv(t, h.template(t, chart, "--set", "auth.allowedCallers={ops/runner,job-gc}"), "JANGAR_GRPC_AUTH_ALLOWED_CALLERS", "ops/runner,job-gc")

			none := h.template(t, chart, "--set", "auth.mode=none")
			wantEnv(t, none, "JANGAR_GRPC_HOST", "127.0.0.1")
			if reviewer(none) {
				t.Error("auth.mode=none still grants TokenReviews")
			}

			wantRefused(t, h, chart, "tls.secretName", "--set", "auth.mode=mtls")
			mtls := h.template(t, chart, "--set", "auth.mode=mtls", "--set", "tls.secretName=internal-tls", "--set", "tls.clientCA.secretName=internal-ca")
			wantEnv(t, mtls, "JANGAR_GRPC_HOST", "0.0.0.0")
			wantEnv(t, mtls, "JANGAR_GRPC_TLS_CERT_FILE", "/etc/agentplane/tls/tls.crt")
			wantEnv(t, mtls, "JANGAR_GRPC_TLS_CLIENT_CA_FILE", "/etc/agentplane/client-ca/ca.crt")
			if reviewer(mtls) {
				t.Error("auth.mode=mtls grants TokenReviews")
			}
			wantMount(t, mtls, "tls", "/etc/agentplane/tls")
			wantMount(t, mtls, "client-ca", "/etc/agentplane/client-ca")

			for _, bad := range []struct{ field, set string }{
				{"allowedCallers", "auth.allowedCallers={Bad_Name}"},
				{"allowedCallers", "auth.allowedCallers=null"},
				{"cacheTTL", "auth.cacheTTL=soon"},
				{"mode", "auth.mode=open"},
			} {
				wantRefused(t, h, chart, bad.field, "--set", bad.set)
			}
		})
	}
}

// TestControllerChartsProjectATokenForTheirCallees: the controllers present an audience-bound,
// rotated ServiceAccount token to status-writer and event-emitter, or a client certificate.
func TestControllerChartsProjectATokenForTheirCallees(t *testing.T) {
	h := newHelmEnv(t)
	for _, chart := range []string{"run-controller", "job-gc", "cancel-propagator"} {
		t.Run(chart, func(t *testing.T) {
			objs := h.template(t, chart)
			wantEnv(t, objs, "JANGAR_SERVICE_TOKEN_FILE", "/var/run/secrets/agentplane/token/token")
			wantMount(t, objs, "service-token", "/var/run/secrets/agentplane/token")
			vol := volume(t, objs, "service-token")
			src := fmt.Sprint(vol["projected"])
			if want := "map[sources:[map[serviceAccountToken:map[audience:agentplane expirationSeconds:3600 path:token]]]]"; src != want {
				t.Errorf("the token volume projects %s, want %s", src, want)
			}

			off := h.template(t, chart, "--set", "serviceToken.enabled=false")
			if _, ok := envOf(t, off, "JANGAR_SERVICE_TOKEN_FILE"); ok {
				t.Error("serviceToken.enabled=false still sets JANGAR_SERVICE_TOKEN_FILE")
			}
			wantRefused(t, h, chart, "expirationSeconds", "--set", "serviceToken.expirationSeconds=60")

			tls := h.template(t, chart, "--set", "backendTLS.secretName=internal-client", "--set", "backendTLS.clientCertificate=true")
			wantEnv(t, tls, "JANGAR_GRPC_CLIENT_CA_FILE", "/etc/agentplane/backend-tls/ca.crt")
			wantEnv(t, tls, "JANGAR_GRPC_CLIENT_CERT_FILE", "/etc/agentplane/backend-tls/tls.crt")
			wantEnv(t, tls, "JANGAR_GRPC_CLIENT_KEY_FILE", "/etc/agentplane/backend-tls/tls.key")
			wantMount(t, tls, "backend-tls", "/etc/agentplane/backend-tls")
		})
	}
}

// TestNetworkPolicies: off by default; on, each chart admits gRPC only from its callers and
// metrics only from the scraper.
func TestNetworkPolicies(t *testing.T) {
	h := newHelmEnv(t)
	grpcPeers := map[string]string{
		"status-writer":     "[map[podSelector:map[matchExpressions:[map[key:app.kubernetes.io/name operator:In values:[run-controller job-gc cancel-propagator watch-gateway]]]]]]",
		"event-emitter":     "[map[podSelector:map[matchExpressions:[map[key:app.kubernetes.io/name operator:In values:[run-controller job-gc cancel-propagator watch-gateway]]]]]]",
		"run-controller":    "[map[podSelector:map[matchLabels:map[app.kubernetes.io/name:watch-gateway]]]]",
		"job-gc":            "[map[podSelector:map[matchLabels:map[app.kubernetes.io/name:watch-gateway]]]]",
		"cancel-propagator": "[map[podSelector:map[matchLabels:map[app.kubernetes.io/name:watch-gateway]]]]",
		"watch-gateway":     "[]",
	}
	const scraper = "[map[namespaceSelector:map[matchLabels:map[kubernetes.io/metadata.name:monitoring]]]]"
	for _, sc := range serviceCharts {
		t.Run(sc.name, func(t *testing.T) {
			if n := len(ofKind(h.template(t, sc.name), "NetworkPolicy")); n != 0 {
				t.Fatalf("%d NetworkPolicies by default, want none (networkPolicy.enabled=false)", n)
			}
			// helm test's probe pod is admitted to gRPC too, when the chart has its test and a
			// peer list (an empty list admits everyone anyway).
			withTest := ofKind(h.template(t, sc.name, "--set", "networkPolicy.enabled=true"), "NetworkPolicy")
			if len(withTest) == 1 && sc.name != "watch-gateway" {
				testPeer := "map[podSelector:map[matchLabels:map[app.kubernetes.io/component:helm-test app.kubernetes.io/instance:" + sc.name + "]]]"
				for _, in := range withTest[0].Spec.Ingress {
					if in.Ports[0].Port == "grpc" && !strings.Contains(fmt.Sprint(in.From), testPeer) {
						t.Errorf("with tests.enabled the gRPC peers %v lack the helm test pod", in.From)
					}
				}
			}
			pols := ofKind(h.template(t, sc.name, "--set", "networkPolicy.enabled=true", "--set", "tests.enabled=false"), "NetworkPolicy")
			if len(pols) != 1 {
				t.Fatalf("%d NetworkPolicies, want 1", len(pols))
			}
			p := pols[0]
			if !slices.Equal(p.Spec.PolicyTypes, []string{"Ingress"}) {
				t.Errorf("policyTypes %v, want [Ingress]", p.Spec.PolicyTypes)
			}
			from := map[string]string{}
			for _, in := range p.Spec.Ingress {
				for _, port := range in.Ports {
					from[port.Port] = fmt.Sprint(in.From)
				}
			}
			if got := from["grpc"]; got != grpcPeers[sc.name] {
				t.Errorf("gRPC from %s, want %s", got, grpcPeers[sc.name])
			}
			if got := from["metrics"]; got != scraper {
				t.Errorf("metrics from %s, want %s", got, scraper)
			}
			if sc.name == "watch-gateway" && from["http"] != grpcPeers[sc.name] {
				t.Errorf("the SSE port from %s, want the gRPC port's peers", from["http"])
			}
			if len(from) != map[bool]int{true: 3, false: 2}[sc.name == "watch-gateway"] {
				t.Errorf("ports admitted: %v", from)
			}
		})
	}
}

func wantMount(t *testing.T, objs []manifest, name, path string) {
	t.Helper()
	for _, m := range theDeployment(t, objs).Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == name {
			if m.MountPath != path {
				t.Errorf("volume %s mounted at %s, want %s", name, m.MountPath, path)
			}
			volume(t, objs, name)
			return
		}
	}
	t.Errorf("volume %s is not mounted", name)
}

func volume(t *testing.T, objs []manifest, name string) map[string]any {
	t.Helper()
	for _, v := range theDeployment(t, objs).Spec.Template.Spec.Volumes {
		if v["name"] == name {
			return v
		}
	}
	t.Fatalf("no volume %s", name)
	return nil
}
