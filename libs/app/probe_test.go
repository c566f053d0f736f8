package app

import (
	"bytes"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
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

	// A server that keeps two watches, refusing the third as grpcx's bound does.
	lb, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held atomic.Int32
	bsrv := grpc.NewServer(grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if held.Add(1) > 2 {
			return status.Error(codes.ResourceExhausted, "2 health watches are open, the most this server keeps")
		}
		return handler(srv, ss)
	}))
	healthpb.RegisterHealthServer(bsrv, h)
	go func() { _ = bsrv.Serve(lb) }()
	defer bsrv.Stop()
	bounded := lb.Addr().String()

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
		{"watches all answered", []string{"--watches", "3", addr}, 0, addr + ": 3 watches held"},
		{"more watches than the server keeps", []string{"--watches", "3", bounded}, 1, "watch 3 of 3 refused, 2 held: rpc error: code = ResourceExhausted"},
		{"a negative number of watches", []string{"--watches", "-1", addr}, 2, "usage: probe"},
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
