package grpcx

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestHealthWatchesAreBounded: on a real server and connections, unauthenticated
// grpc.health.v1 watches are bounded per client address (not loopback) and in all, with
// RESOURCE_EXHAUSTED naming the bound; a closed watch gives its slot back; Check stays open.
func TestHealthWatchesAreBounded(t *testing.T) {
	ip := ""
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			ip = n.IP.String()
			break
		}
	}
	if ip == "" {
		t.Fatal("this machine has no IPv4 address but loopback: the per-address bound cannot be tried")
	}
	s := NewServer(prometheus.NewRegistry())
	s.healthWatches = newWatchBound(5, 2)
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	_, port, _ := net.SplitHostPort(l.Addr().String())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := func(host string) healthpb.HealthClient {
		conn, err := Dial(net.JoinHostPort(host, port), ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return healthpb.NewHealthClient(conn)
	}
	// watch opens a Watch and returns how to end it, or the error its first receive got.
	watch := func(c healthpb.HealthClient) (func(), error) {
		wctx, wcancel := context.WithCancel(ctx)
		w, err := c.Watch(wctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		if err != nil {
			wcancel()
			return nil, err
		}
		return wcancel, nil
	}
	remote := client(ip) // from the machine's own non-loopback address
	var ends []func()
	for i := 0; i < 2; i++ {
		end, err := watch(remote)
		if err != nil {
			t.Fatalf("watch %d from %s: %v", i+1, ip, err)
		}
		ends = append(ends, end)
	}
	if _, err := watch(remote); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "from "+ip) {
		t.Fatalf("a third watch from %s: %v, want RESOURCE_EXHAUSTED naming the address", ip, err)
	}
	if resp, err := remote.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check at the bound: %v %v, want SERVING", resp, err)
	}
	// Loopback counts only toward the total (5): three more, then none.
	// The same server, reached on loopback through a second listener.
	ll, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ll) }()
	_, port, _ = net.SplitHostPort(ll.Addr().String())
	local := client("127.0.0.1")
	for i := 0; i < 3; i++ {
		end, err := watch(local)
		if err != nil {
			t.Fatalf("loopback watch %d: %v", i+1, err)
		}
		ends = append(ends, end)
	}
	if _, err := watch(local); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "the most this server keeps") {
		t.Fatalf("a sixth watch: %v, want RESOURCE_EXHAUSTED for the total", err)
	}
	// One ends; its slot comes back once the server has seen the cancel.
	ends[0]()
	deadline := time.Now().Add(10 * time.Second)
	for {
		end, err := watch(local)
		if err == nil {
			ends = append(ends, end)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a watch ended: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, end := range ends {
		end()
	}
}
