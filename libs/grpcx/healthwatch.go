package grpcx

import (
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// grpc.health.v1 answers without credentials on every service (kubelet's probes and the
// gateway's collector use it), and a Watch is held open for as long as the caller likes. These
// bound how many such watches the server keeps: in all, and from one client address (loopback,
// where port-forwards and sidecars arrive, counted only in all). A caller beyond them gets
// RESOURCE_EXHAUSTED; Check is never bounded.
const (
	HealthWatchMax        = 1000
	HealthWatchPerAddress = 32
	healthWatchMethod     = "/grpc.health.v1.Health/Watch"
)

// watchBound counts open health watches.
type watchBound struct {
	max, perAddr int

	mu    sync.Mutex
	total int
	addrs map[string]int
}

func newWatchBound(max, perAddr int) *watchBound {
	return &watchBound{max: max, perAddr: perAddr, addrs: map[string]int{}}
}

func (b *watchBound) take(addr string) (release func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.total >= b.max {
		return nil, status.Errorf(codes.ResourceExhausted, "%d health watches are open, the most this server keeps; use Check, or retry later", b.total)
	}
	if addr != "" && b.addrs[addr] >= b.perAddr {
		return nil, status.Errorf(codes.ResourceExhausted, "%d health watches are open from %s, the most one address may hold; use Check, or close one", b.addrs[addr], addr)
	}
	b.total++
	if addr != "" {
		b.addrs[addr]++
	}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.total--
		if addr != "" {
			if b.addrs[addr]--; b.addrs[addr] <= 0 {
				delete(b.addrs, addr)
			}
		}
	}, nil
}

// boundHealthWatches is the stream interceptor that applies s.healthWatches to Watch.
func (s *Server) boundHealthWatches(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod != healthWatchMethod {
		return h(srv, ss)
	}
	addr := ""
	if p, ok := peer.FromContext(ss.Context()); ok && p.Addr != nil {
		addr = CountedIP(p.Addr.String())
	}
	release, err := s.healthWatches.take(addr)
	if err != nil {
		return err
	}
	defer release()
	return h(srv, ss)
}

// CountedIP is the IP a remote address (host:port or host) is counted under by a per-address
// bound: "" for loopback (port-forwards, sidecars and local proxies all arrive from it) and for
// what is not an IP address.
func CountedIP(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsLoopback() {
		return ""
	}
	return ip.String()
}
