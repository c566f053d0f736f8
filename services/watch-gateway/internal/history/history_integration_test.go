//go:build integration

package history

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/libs/testenv"
)

var rds *testenv.Redis

func TestMain(m *testing.M) {
	os.Exit(testenv.NoLeaks(func() int {
		var err error
		if rds, err = testenv.StartRedis(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer rds.Close()
		return m.Run()
	}()))
}

func client(t *testing.T, addr string) redis.UniversalClient {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func delta(at time.Time, items ...health.Item) health.Event {
	return health.Event{Type: health.Delta, GeneratedAt: at, Items: items}
}

func item(c string, s health.Status) health.Item {
	return health.Item{Component: c, Status: s, Message: string(s)}
}

func since(t *testing.T, s *Store) []Transition {
	t.Helper()
	out, _, err := s.Since(context.Background(), time.Hour, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func describe(ts []Transition) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Component+":"+t.Previous+"->"+t.Status)
	}
	return out
}

// Several writers offer the same changes, each a moment apart (as two replicas do for a moment
// when the writer lease changes hands); a fourth sees one change late, after the next was
// recorded. The history holds each transition once.
func TestATransitionOfferedByEveryReplicaIsRecordedOnce(t *testing.T) {
	ctx := context.Background()
	rdb := client(t, rds.Addr)
	ns := "replicas"
	replicas := []*Store{New(rdb, ns, Options{}), New(rdb, ns, Options{}), New(rdb, ns, Options{})}
	t0 := time.Now().Add(-time.Minute)
	steps := []health.Status{health.Healthy, health.Degraded, health.Healthy, health.Error}
	for i, st := range steps {
		for r, s := range replicas {
			at := t0.Add(time.Duration(i)*10*time.Second + time.Duration(r)*time.Millisecond)
			s.offer(ctx, delta(at, item("event-emitter", st), item("database", health.Healthy)))
		}
	}
	late := New(rdb, ns, Options{})
	late.offer(ctx, delta(t0.Add(15*time.Second), item("event-emitter", health.Degraded))) // older than the Healthy at 20 s
	got := describe(since(t, replicas[0]))
	want := []string{"event-emitter:->healthy", "database:->healthy", "event-emitter:healthy->degraded", "event-emitter:degraded->healthy", "event-emitter:healthy->error"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history = %v\nwant      %v", got, want)
	}
	for _, s := range append(replicas, late) {
		if s.Buffered() != 0 {
			t.Fatalf("a replica still holds %d transitions", s.Buffered())
		}
	}
	// The times are the replicas' observations, not Redis's.
	first := since(t, replicas[1])[2]
	if d := first.At.Sub(t0.Add(10 * time.Second).Truncate(time.Millisecond)); d < 0 || d > 10*time.Millisecond {
		t.Fatalf("the degraded transition is at %s, %s after it was first seen", first.At, d)
	}
}

// A restarted gateway sees the status already recorded, and components its collector has not
// reached yet (unknown): it adds nothing. A component that goes unknown while it watched is a
// transition.
func TestARestartedGatewayAddsNothing(t *testing.T) {
	ctx := context.Background()
	rdb := client(t, rds.Addr)
	ns := "restart"
	before := New(rdb, ns, Options{})
	now := time.Now()
	before.offer(ctx, delta(now.Add(-time.Minute), item("status-writer", health.Healthy), item("job-gc", health.Healthy)))
	after := New(rdb, ns, Options{}) // a new process
	after.offer(ctx, health.Event{Type: health.Snapshot, GeneratedAt: now, Items: []health.Item{item("status-writer", health.Unknown), item("job-gc", health.Healthy)}})
	after.offer(ctx, delta(now.Add(time.Second), item("status-writer", health.Healthy)))
	if got := describe(since(t, after)); len(got) != 2 {
		t.Fatalf("after a restart the history is %v, want the two first transitions only", got)
	}
	after.offer(ctx, delta(now.Add(2*time.Second), item("job-gc", health.Unknown)))
	got := describe(since(t, after))
	if len(got) != 3 || got[2] != "job-gc:healthy->unknown" {
		t.Fatalf("history = %v, want job-gc going unknown last", got)
	}
}

// While Redis is away, transitions wait in memory in order and reach Redis when it is back; past
// the buffer's bound the oldest are dropped and counted.
func TestTransitionsWaitForRedisAndAreNotLost(t *testing.T) {
	ctx := context.Background()
	own, err := testenv.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	rdb := client(t, own.Addr)
	s := New(rdb, "outage", Options{Buffer: 3, Timeout: 200 * time.Millisecond})
	now := time.Now().Add(-time.Minute)
	s.offer(ctx, delta(now, item("redis", health.Healthy)))
	if err := own.Stop(); err != nil {
		t.Fatal(err)
	}
	for i, st := range []health.Status{health.Degraded, health.Error, health.Degraded, health.Healthy} {
		s.offer(ctx, delta(now.Add(time.Duration(i+1)*time.Second), item("redis", st)))
	}
	if s.Buffered() != 3 {
		t.Fatalf("buffered %d transitions while Redis was away, want the bound, 3", s.Buffered())
	}
	if _, _, err := s.Since(ctx, time.Hour, 10); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("reading with Redis away: %v, want ErrUnavailable", err)
	}
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); s.Buffered() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d transitions still buffered 30 s after Redis came back", s.Buffered())
		}
		s.flush(ctx) // what Follow does every 2 s
		time.Sleep(100 * time.Millisecond)
	}
	// Redis came back empty (no persistence); the three kept transitions are there, in order,
	// with the times they were seen.
	got := since(t, s)
	if fmt.Sprint(describe(got)) != "[redis:->error redis:error->degraded redis:degraded->healthy]" {
		t.Fatalf("history after the outage = %v", describe(got))
	}
	if !got[0].At.Equal(now.Add(2 * time.Second).Truncate(time.Millisecond)) {
		t.Fatalf("first kept transition at %s, want %s", got[0].At, now.Add(2*time.Second))
	}
}

// Since returns the window's transitions, oldest first, at most limit of them (the newest).
func TestSinceReturnsTheNewestInTheWindow(t *testing.T) {
	ctx := context.Background()
	rdb := client(t, rds.Addr)
	s := New(rdb, "window", Options{})
	now := time.Now()
	for i := range 10 {
		st := health.Healthy
		if i%2 == 1 {
			st = health.Degraded
		}
		s.offer(ctx, delta(now.Add(time.Duration(i)*time.Millisecond), item("grpc", st)))
	}
	got, truncated, err := s.Since(ctx, time.Hour, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !truncated || len(got) != 4 || got[3].Status != "degraded" || got[0].Status != "healthy" || got[0].At.After(got[3].At) {
		t.Fatalf("Since(1h, 4) = %v (truncated %v)", describe(got), truncated)
	}
	if _, _, err := s.Since(ctx, 0, 4); err == nil {
		t.Fatal("a zero window was accepted")
	}
}

// Two replicas follow hubs that see the same changes: only the lease holder writes, so each
// transition is one entry however the two interleave; when it stops, the other takes the lease
// and records from there.
func TestOneReplicaWritesAndAnotherTakesOver(t *testing.T) {
	rdb := client(t, rds.Addr)
	ns := "lease"
	o := Options{RenewEvery: 20 * time.Millisecond, LeaseFor: 500 * time.Millisecond}
	type replica struct {
		hub    *health.Hub
		store  *Store
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func() *replica {
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{hub: health.NewHub(64, 64), store: New(rdb, ns, o), cancel: cancel, done: make(chan struct{})}
		go func() { defer close(r.done); _ = r.store.Follow(ctx, r.hub) }()
		for deadline := time.Now().Add(30 * time.Second); r.hub.Subscribers() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the store never followed its hub")
			}
		}
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	a, b := start(), start()
	await := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 30 s", what)
			}
		}
	}
	await("one writer", func() bool { return a.store.Writing() != b.store.Writing() })
	writer, follower := a, b
	if b.store.Writing() {
		writer, follower = b, a
	}
	for _, st := range []health.Status{health.Healthy, health.Degraded, health.Healthy} {
		follower.hub.Update([]health.Item{item("job-gc", st)})
		writer.hub.Update([]health.Item{item("job-gc", st)})
	}
	await("three transitions", func() bool { return len(since(t, writer.store)) == 3 })
	if got := fmt.Sprint(describe(since(t, follower.store))); got != "[job-gc:->healthy job-gc:healthy->degraded job-gc:degraded->healthy]" {
		t.Fatalf("history = %s", got)
	}
	writer.cancel()
	<-writer.done
	await("the follower takes over", follower.store.Writing)
	follower.hub.Update([]health.Item{item("job-gc", health.Error)})
	await("the new writer's transition", func() bool { return len(since(t, follower.store)) == 4 })
	if got := describe(since(t, follower.store))[3]; got != "job-gc:healthy->error" {
		t.Fatalf("after the take-over: %s", got)
	}
}
