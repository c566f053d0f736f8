package gateway

import (
	"strings"
	"testing"
)

// TestStreamLimitsBoundEachCaller: a user, or a client address, holds at most its share of the
// watches; loopback is not counted per address; the gateway-wide bound is its own; a slot comes
// back once, whatever calls release.
func TestStreamLimitsBoundEachCaller(t *testing.T) {
	l := newStreamLimits(6, 2, 3)
	var releases []func()
	take := func(user, addr string) *limitError {
		release, err := l.take(user, addr)
		if err == nil {
			releases = append(releases, release)
		}
		return err
	}
	for i := 0; i < 2; i++ {
		if err := take("alice", "10.0.0.1:40000"); err != nil {
			t.Fatalf("alice's watch %d: %v", i+1, err)
		}
	}
	if err := take("alice", "10.0.0.2:40000"); err == nil || err.total || !strings.Contains(err.Error(), "JANGAR_WATCH_MAX_STREAMS_PER_USER") {
		t.Fatalf("alice's third watch: %v, want the per-user bound", err)
	}
	if err := take("bob", "10.0.0.1:40001"); err != nil {
		t.Fatalf("bob from alice's address: %v", err)
	}
	if err := take("carol", "10.0.0.1:40002"); err == nil || err.total || !strings.Contains(err.Error(), "from 10.0.0.1") {
		t.Fatalf("a fourth watch from 10.0.0.1: %v, want the per-address bound", err)
	}
	// Loopback (port-forward, sidecars) is not counted per address; unauthenticated streams have
	// no user.
	for i := 0; i < 3; i++ {
		if err := take("", "127.0.0.1:5000"); err != nil {
			t.Fatalf("loopback watch %d: %v", i+1, err)
		}
	}
	if l.open() != 6 {
		t.Fatalf("open %d, want 6", l.open())
	}
	if err := take("dave", "10.0.0.9:1"); err == nil || !err.total {
		t.Fatalf("past the gateway's bound: %v, want the total bound", err)
	}
	// Released twice, counted once: alice gets exactly one slot back.
	releases[0]()
	releases[0]()
	if l.open() != 5 {
		t.Fatalf("after one release (twice): open %d, want 5", l.open())
	}
	if err := take("alice", "10.0.0.3:1"); err != nil {
		t.Fatalf("alice after closing one: %v", err)
	}
	if err := take("alice", "10.0.0.3:2"); err == nil {
		t.Fatal("alice got a third slot after one release")
	}
	for _, r := range releases {
		r()
	}
	if l.open() != 0 || len(l.users) != 0 || len(l.addrs) != 0 {
		t.Fatalf("after every release: open %d, users %v, addrs %v", l.open(), l.users, l.addrs)
	}
}
