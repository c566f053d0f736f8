//go:build integration

package access

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/testenv"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

var apiServer *testenv.Kube

// spans records every span of the test binary: the guarded server's and the clients'.
var spans = tracetest.NewSpanRecorder()

func TestMain(m *testing.M) {
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	os.Exit(testenv.NoLeaks(func() int {
		var err error
		if apiServer, err = testenv.StartKube(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer apiServer.Stop()
		return m.Run()
	}()))
}

// recorder is a StatusWriter that records who got through the guard.
type recorder struct {
	pb.UnimplementedStatusWriterServer
	mu      sync.Mutex
	callers []string
}

func (r *recorder) WriteStatus(ctx context.Context, _ *pb.WriteStatusRequest) (*pb.WriteStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.callers = append(r.callers, CallerFrom(ctx))
	return &pb.WriteStatusResponse{}, nil
}

func (r *recorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.callers...)
}

// serve runs a guarded gRPC server (the way status-writer and event-emitter are built) on a free
// loopback port and returns its address.
func serve(t *testing.T, a ServerAuth, reg *prometheus.Registry, o ReviewerOptions) (string, *recorder) {
	t.Helper()
	g := NewGuard(a, apiServer.Client, reg, o)
	opts, err := g.ServerOptions()
	if err != nil {
		t.Fatal(err)
	}
	s := grpcx.NewServer(reg, opts...)
	rec := &recorder{}
	pb.RegisterStatusWriterServer(s, rec)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String(), rec
}

func write(t *testing.T, addr string, o grpcx.ClientOptions) error {
	t.Helper()
	conn, err := grpcx.Dial(addr, o)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = pb.NewStatusWriterClient(conn).WriteStatus(ctx, &pb.WriteStatusRequest{Phase: "Running"})
	return err
}

func withToken(tok string) grpcx.ClientOptions {
	return grpcx.ClientOptions{Extra: []grpc.DialOption{grpc.WithPerRPCCredentials(staticToken(tok))}}
}

type staticToken string

func (s staticToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(s)}, nil
}
func (staticToken) RequireTransportSecurity() bool { return false }

// refusals collects every refusal the tests saw, to search them for tokens.
var refusals []string

func wantCode(t *testing.T, what string, err error, code codes.Code, says string) {
	t.Helper()
	if err != nil {
		refusals = append(refusals, err.Error())
	}
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), says) {
		t.Fatalf("%s: %v; want %s saying %q", what, err, code, says)
	}
}

func TestTokensOfAllowedServiceAccountsOnly(t *testing.T) {
	ctx := t.Context()
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	callers, err := ParseCallers([]string{"run-controller"}, "default")
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktesting.NewFakePassiveClock(time.Now())
	reg := prometheus.NewRegistry()
	var reviews atomic.Int32
	addr, rec := serve(t, ServerAuth{Mode: Token, Audiences: []string{DefaultAudience}, Callers: callers, CacheTTL: 30 * time.Second},
		reg, ReviewerOptions{Clock: clock, OnReview: func(string) { reviews.Add(1) }})

	allowed, err := apiServer.ServiceAccountToken(ctx, "default", "run-controller", DefaultAudience)
	if err != nil {
		t.Fatal(err)
	}
	other, err := apiServer.ServiceAccountToken(ctx, "default", "intruder", DefaultAudience)
	if err != nil {
		t.Fatal(err)
	}
	wrongAudience, err := apiServer.ServiceAccountToken(ctx, "default", "run-controller") // the API server's own audience
	if err != nil {
		t.Fatal(err)
	}
	expired, err := apiServer.ExpiredToken(allowed)
	if err != nil {
		t.Fatal(err)
	}

	// The allowed ServiceAccount, with a token file as the controllers send it.
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(allowed), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := ClientAuth{TokenFile: tokenFile}.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	if err := write(t, addr, o); err != nil {
		t.Fatalf("the allowed ServiceAccount was refused: %v", err)
	}
	if got := rec.calls(); len(got) != 1 || got[0] != "system:serviceaccount:default:run-controller" {
		t.Fatalf("the server saw callers %v, want the allowed ServiceAccount once", got)
	}

	wantCode(t, "another ServiceAccount of the namespace", write(t, addr, withToken(other)), codes.PermissionDenied, "system:serviceaccount:default:intruder may not call")
	// Refused before any TokenReview: what the token says of itself already rules it out.
	wantCode(t, "a token for another audience", write(t, addr, withToken(wrongAudience)), codes.Unauthenticated, "issued for audience")
	wantCode(t, "an expired token", write(t, addr, withToken(expired)), codes.Unauthenticated, "expired")
	wantCode(t, "a token that is not one", write(t, addr, withToken("not-a-token")), codes.Unauthenticated, "not a JWT")
	wantCode(t, "no token", write(t, addr, grpcx.ClientOptions{}), codes.Unauthenticated, "requires a caller identity")
	if got := rec.calls(); len(got) != 1 {
		t.Fatalf("refused callers reached the service: %v", got)
	}

	// Health stays open to anyone: kubelet probes and watch-gateway's collector.
	conn, err := grpcx.Dial(addr, grpcx.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health without a token: %v", err)
	}

	// Revocation: the ServiceAccount is deleted. Within the cache bound its cached grant holds;
	// past it the API server no longer accepts the token, and neither does the server.
	if err := apiServer.Client.CoreV1().ServiceAccounts("default").Delete(ctx, "run-controller", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	before := reviews.Load()
	if err := write(t, addr, withToken(allowed)); err != nil {
		t.Fatalf("within the cache bound the grant was not kept: %v", err)
	}
	if reviews.Load() != before {
		t.Fatal("within the cache bound the token was reviewed again: decisions are not cached")
	}
	// Past the bound the server asks again; the API server itself caches a token's success for
	// up to 10 s and learns of the deletion from its informer, so its answer may lag a moment.
	testenv.Eventually(t, 30*time.Second, "a deleted ServiceAccount refused past the cache bound", func() error {
		clock.SetTime(clock.Now().Add(30 * time.Second))
		err := write(t, addr, withToken(allowed))
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "not accepted") {
			return fmt.Errorf("%v; want Unauthenticated", err)
		}
		return nil
	})

	if n := testenv.Metric(t, reg, "agentplane_grpc_auth_decisions_total", "result", "forbidden"); n != 1 {
		t.Errorf("forbidden decisions counted %v, want 1", n)
	}
	if n := testenv.Metric(t, reg, "agentplane_grpc_auth_decisions_total", "result", "allowed"); n < 2 {
		t.Errorf("allowed decisions counted %v, want at least 2", n)
	}

	// No token in the logs or the traces, whatever happened above.
	for name, tok := range map[string]string{"allowed": allowed, "other": other, "wrong audience": wrongAudience, "expired": expired} {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("the %s token is in the log", name)
		}
		for _, r := range refusals {
			if strings.Contains(r, tok) {
				t.Errorf("the %s token is in the refusal %q", name, r)
			}
		}
		for _, s := range spans.Ended() {
			for _, kv := range s.Attributes() {
				if strings.Contains(kv.Value.String(), tok) {
					t.Errorf("the %s token is in span %q attribute %s", name, s.Name(), kv.Key)
				}
			}
			for _, ev := range s.Events() {
				for _, kv := range ev.Attributes {
					if strings.Contains(kv.Value.String(), tok) {
						t.Errorf("the %s token is in span %q event %q", name, s.Name(), ev.Name)
					}
				}
			}
			if strings.Contains(s.Status().Description, tok) {
				t.Errorf("the %s token is in span %q status", name, s.Name())
			}
		}
	}
	if len(spans.Ended()) == 0 {
		t.Fatal("no span was recorded: the trace check checked nothing")
	}
	if !strings.Contains(logs.String(), "system:serviceaccount:default:intruder") {
		t.Error("the refused caller is not named in the log")
	}
}

func TestMTLSCertificatesOfAllowedCallersOnly(t *testing.T) {
	ca := testenv.NewPKI(t, "agentplane internal CA")
	stranger := testenv.NewPKI(t, "some other CA")
	callers, err := ParseCallers([]string{"run-controller"}, "default")
	if err != nil {
		t.Fatal(err)
	}
	addr, rec := serve(t, ServerAuth{Mode: MTLS, Callers: callers,
		TLS: TLSFiles{Prefix: EnvGRPCPrefix, CertFile: ca.CertFile, KeyFile: ca.KeyFile, ClientCAFile: ca.CAFile}},
		prometheus.NewRegistry(), ReviewerOptions{})
	clientTLS := func(cert *tls.Certificate) *tls.Config {
		c := &tls.Config{RootCAs: ca.CAPool, MinVersion: tls.VersionTLS12}
		if cert != nil { // sent whatever CAs the server names, so another CA's certificate reaches it
			c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		return c
	}
	client := func(cert *tls.Certificate) grpcx.ClientOptions {
		return grpcx.ClientOptions{TLS: credentials.NewTLS(clientTLS(cert))}
	}
	cert, key := ca.ClientFiles("system:serviceaccount:default:run-controller")
	o, err := ClientAuth{CAFile: ca.CAFile, CertFile: cert, KeyFile: key}.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	if err := write(t, addr, o); err != nil {
		t.Fatalf("the allowed certificate was refused: %v", err)
	}
	intruder := ca.Client("system:serviceaccount:default:intruder")
	wantCode(t, "a certificate of another ServiceAccount", write(t, addr, client(&intruder)),
		codes.PermissionDenied, "system:serviceaccount:default:intruder may not call")
	foreign := stranger.Client("system:serviceaccount:default:run-controller")
	for what, cert := range map[string]*tls.Certificate{"a certificate from another CA": &foreign, "no certificate": nil} {
		if err := testenv.TLSAlert(addr, clientTLS(cert)); !testenv.TLSRefusal(err) {
			t.Errorf("%s: %v; want the TLS handshake to refuse it", what, err)
		}
		if err := write(t, addr, client(cert)); err == nil {
			t.Errorf("%s: the call was served", what)
		}
	}
	if got := rec.calls(); len(got) != 1 || got[0] != "system:serviceaccount:default:run-controller" {
		t.Fatalf("the server saw callers %v, want only the allowed certificate's", got)
	}
}
