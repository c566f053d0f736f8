package testenv

import (
	"fmt"
	"net"
	"sync"
)

// handedOut holds every port FreePort returned in this process. The kernel hands a port it just
// released to the next bind(":0") often (2,000 binds here gave 267 repeats), so two FreePort
// calls in a row could return the same port and the second server's listen fail with "address
// already in use" (a service told to serve gRPC and metrics on one port: stop 55's CI).
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort asks the kernel for a free loopback port, never one it already returned in this
// process (another process may still take it between this call and the caller's listen).
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, err
		}
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("no loopback port this process was not already given (%d handed out); the ephemeral range is nearly used up", len(handedOut.ports))
}
