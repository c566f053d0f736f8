package gateway

import (
	"fmt"
	"sync"

	"github.com/agentplane/agentplane/libs/grpcx"
)

// streamLimits bounds the open watches: all of them (maxActive), those of one user, and those
// from one client address, so that one caller, signed in or not, cannot take every slot.
// Loopback addresses are not counted per address: everything through kubectl port-forward, a
// sidecar or a local proxy arrives from one of them.
type streamLimits struct {
	max, perUser, perAddr int

	mu    sync.Mutex
	total int
	users map[string]int
	addrs map[string]int
}

func newStreamLimits(max, perUser, perAddr int) *streamLimits {
	return &streamLimits{max: max, perUser: perUser, perAddr: perAddr, users: map[string]int{}, addrs: map[string]int{}}
}

// limitError says which bound refused a watch; total is the gateway-wide one.
type limitError struct {
	msg   string
	total bool
}

func (e *limitError) Error() string { return e.msg }

// take admits one watch for user (empty when streams are not authenticated) from remoteAddr
// (host:port or host), or says which bound it would pass; release gives the slot back, once.
func (l *streamLimits) take(user, remoteAddr string) (release func(), err *limitError) {
	addr := grpcx.CountedIP(remoteAddr)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total >= l.max:
		return nil, &limitError{msg: fmt.Sprintf("too many status watches (%d open, the gateway's bound); retry later", l.total), total: true}
	case user != "" && l.perUser > 0 && l.users[user] >= l.perUser:
		return nil, &limitError{msg: fmt.Sprintf("user %s has %d watches open, the most one user may (JANGAR_WATCH_MAX_STREAMS_PER_USER); close one or retry later", user, l.users[user])}
	case addr != "" && l.perAddr > 0 && l.addrs[addr] >= l.perAddr:
		return nil, &limitError{msg: fmt.Sprintf("%d watches are open from %s, the most one address may (JANGAR_WATCH_MAX_STREAMS_PER_ADDRESS); close one or retry later", l.addrs[addr], addr)}
	}
	l.total++
	if user != "" {
		l.users[user]++
	}
	if addr != "" {
		l.addrs[addr]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			decrement(l.users, user)
			decrement(l.addrs, addr)
		})
	}, nil
}

func (l *streamLimits) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

func decrement(m map[string]int, k string) {
	if k == "" {
		return
	}
	if m[k] <= 1 {
		delete(m, k) // the maps hold only keys with open watches
		return
	}
	m[k]--
}
