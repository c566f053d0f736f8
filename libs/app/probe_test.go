package app

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestProbeExitsByTheServersAnswer runs the probe against a real gRPC health server.
func TestProbeExitsByTheServersAnswer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus("agentplane.v1.EventEmitter/redis", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	addr := l.Addr().String()

	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := free.Addr().String()
	free.Close()

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		output string
	}{
		{"serving", []string{addr}, 0, addr + ": SERVING"},
		{"a subsystem not serving", []string{addr, "agentplane.v1.EventEmitter/redis"}, 1, "NOT_SERVING"},
		{"an unknown service", []string{addr, "nope"}, 1, "NotFound"},
		{"nothing listening", []string{"--timeout", "300ms", closed}, 1, "did not answer within 300ms"},
		{"no address", nil, 2, "usage: probe"},
		{"a bad flag", []string{"--nope", addr}, 2, "usage: probe"},
		{"a missing CA file", []string{"--ca-file", "/nonexistent", addr}, 2, "read --ca-file"},
		{"a certificate without its key", []string{"--cert-file", "/nonexistent", addr}, 2, "usage: probe"},
		{"a TLS handshake with a plaintext server", []string{"--tls", "--timeout", "500ms", addr}, 1, "did not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Probe(tc.args, &out, &errOut); code != tc.code {
				t.Errorf("exit %d, want %d (stdout %q, stderr %q)", code, tc.code, out.String(), errOut.String())
			}
			if got := out.String() + errOut.String(); !strings.Contains(got, tc.output) {
				t.Errorf("output %q lacks %q", got, tc.output)
			}
		})
	}
}
