package health

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func items(status Status) []Item { return []Item{{Component: "database", Status: status}} }

func TestResumeGetsExactlyTheMissedDeltas(t *testing.T) {
	h := NewHub(10, 10)
	h.Update(items(Healthy))
	first, sub := h.Subscribe("", false)
	if len(first) != 1 || first[0].Type != Snapshot || first[0].Items[0].Status != Healthy {
		t.Fatalf("first = %+v", first)
	}
	cursor := first[0].Cursor
	sub.Close()
	d1, _ := h.Update(items(Degraded))
	d2, _ := h.Update(items(Healthy))
	if _, changed := h.Update(items(Healthy)); changed {
		t.Fatal("an unchanged update produced a delta")
	}
	missed, sub2 := h.Subscribe(cursor, false)
	defer sub2.Close()
	if len(missed) != 2 || missed[0].Cursor != d1.Cursor || missed[1].Cursor != d2.Cursor || missed[0].Items[0].Status != Degraded {
		t.Fatalf("missed = %+v", missed)
	}
	// Live deltas follow.
	d3, _ := h.Update(items(Error))
	select {
	case ev := <-sub2.Events():
		if ev.Cursor != d3.Cursor || ev.Type != Delta {
			t.Fatalf("live = %+v", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no live delta")
	}
	// Resuming from the latest cursor misses nothing and gets nothing.
	none, sub3 := h.Subscribe(d3.Cursor, false)
	sub3.Close()
	if len(none) != 0 {
		t.Fatalf("resume at head = %+v", none)
	}
}

func TestExpiredOrInvalidCursorGetsASnapshot(t *testing.T) {
	h := NewHub(2, 10)
	first, s := h.Subscribe("", false)
	s.Close()
	for _, st := range []Status{Healthy, Degraded, Healthy, Degraded} {
		h.Update(items(st))
	}
	for name, c := range map[string]string{
		"expired":         first[0].Cursor,
		"garbage":         "not-a-cursor",
		"other process":   NewHub(2, 10).Current().Cursor,
		"from the future": h.cursor(99),
	} {
		evs, s := h.Subscribe(c, true)
		s.Close()
		if len(evs) != 1 || evs[0].Type != Snapshot || evs[0].Items[0].Status != Degraded {
			t.Fatalf("%s cursor: %+v, want a fresh snapshot", name, evs)
		}
	}
}

// TestACursorFromAnotherReplicaGetsASnapshot: gateway replicas follow the same cluster, so their
// hubs can hold the same history at the same positions; a watcher that reconnects to another
// replica with its cursor still gets a snapshot there, never that replica's deltas after the same
// number (they need not be the changes it missed). On the replica that issued it, the same cursor
// resumes with exactly the missed deltas.
func TestACursorFromAnotherReplicaGetsASnapshot(t *testing.T) {
	a, b := NewHub(10, 10), NewHub(10, 10)
	for _, h := range []*Hub{a, b} {
		h.Update(items(Healthy))
		h.Update(items(Degraded))
	}
	cursor := a.Current().Cursor
	for _, h := range []*Hub{a, b} {
		h.Update(items(Healthy))
	}
	if evs, s := a.Subscribe(cursor, false); len(evs) != 1 || evs[0].Type != Delta || evs[0].Items[0].Status != Healthy {
		s.Close()
		t.Fatalf("on the replica that issued the cursor: %+v, want the one missed delta", evs)
	} else {
		s.Close()
	}
	evs, s := b.Subscribe(cursor, false)
	s.Close()
	if len(evs) != 1 || evs[0].Type != Snapshot || evs[0].Items[0].Status != Healthy || evs[0].Cursor != b.Current().Cursor {
		t.Fatalf("on another replica at the same position: %+v, want a snapshot of its current state and cursor", evs)
	}
}

func TestFollowOnlySkipsTheSnapshot(t *testing.T) {
	h := NewHub(5, 5)
	h.Update(items(Healthy))
	evs, s := h.Subscribe("", true)
	defer s.Close()
	if len(evs) != 0 {
		t.Fatalf("follow-only got %+v", evs)
	}
}

func TestSlowSubscriberIsCutOffNotWaitedFor(t *testing.T) {
	h := NewHub(100, 2)
	_, slow := h.Subscribe("", true)
	for i := 0; i < 10; i++ {
		st := Healthy
		if i%2 == 0 {
			st = Degraded
		}
		h.Update(items(st)) // must not block
	}
	select {
	case <-slow.Lagged():
	default:
		t.Fatal("a subscriber that stopped reading was not cut off")
	}
	if h.Subscribers() != 0 {
		t.Fatalf("%d subscribers left", h.Subscribers())
	}
}

func TestReadyAfterTheFirstUpdate(t *testing.T) {
	h := NewHub(5, 5)
	select {
	case <-h.Ready():
		t.Fatal("ready before any status")
	default:
	}
	h.Update(items(Healthy))
	h.Update(items(Healthy))
	select {
	case <-h.Ready():
	default:
		t.Fatal("not ready after an update")
	}
}

// recordingSink collects what the fan-out delivers, as a socket-writing sink would: under a lock
// that Attach's caller also holds while it writes the first events.
type recordingSink struct {
	mu   sync.Mutex
	got  []string // cursors, first events included
	done chan struct{}
	want int
}

func (r *recordingSink) Deliver(d *Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, d.Event.Cursor)
	if len(r.got) == r.want {
		close(r.done)
	}
}

func TestSinksGetEveryLaterDeltaOnceAndInOrder(t *testing.T) {
	h := NewHub(1000, 10)
	h.Update(items(Healthy))
	const deltas, sinks = 200, 50
	statuses := []Status{Degraded, Healthy}
	var all []string // cursors of every delta, in order
	var allMu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // deltas keep coming while sinks attach
		defer wg.Done()
		for i := range deltas {
			ev, _ := h.Update(items(statuses[i%2]))
			allMu.Lock()
			all = append(all, ev.Cursor)
			allMu.Unlock()
		}
	}()
	rs := make([]*recordingSink, sinks)
	for i := range rs {
		r := &recordingSink{done: make(chan struct{})}
		r.mu.Lock()
		first, at := h.Attach("", false, r)
		if at != first[0].Cursor {
			t.Fatalf("Attach's position %q is not its snapshot's %q", at, first[0].Cursor)
		}
		if len(first) != 1 || first[0].Type != Snapshot {
			t.Fatalf("first events %v", first)
		}
		r.got = append(r.got, first[0].Cursor)
		seq, _ := h.parseCursor(first[0].Cursor)
		r.want = 1 + deltas - int(seq-1) //nolint:gosec // G115: seq counts this test's updates. The snapshot, then every delta after it (seq 1 was the first Update)
		if r.want == 1 {
			close(r.done)
		}
		r.mu.Unlock()
		rs[i] = r
	}
	wg.Wait()
	for i, r := range rs {
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("sink %d got %d of %d events", i, len(r.got), r.want)
		}
		r.mu.Lock()
		seq, _ := h.parseCursor(r.got[0])
		want := all[seq-1:] // the deltas after the snapshot's position
		if len(r.got)-1 != len(want) || !slices.Equal(r.got[1:], want) {
			t.Fatalf("sink %d: got %d deltas after its snapshot at %d, want exactly %d in order", i, len(r.got)-1, seq, len(want))
		}
		r.mu.Unlock()
	}
	// Detached sinks get nothing more: more deltas go out, a witness attached after the detach
	// receives them (dispatch is in order, so a detached sink still attached would have had
	// them by then), and the detached sinks' counts have not moved.
	for _, r := range rs {
		h.Detach(r)
	}
	if h.Sinks() != 0 {
		t.Fatalf("%d sinks after detaching all", h.Sinks())
	}
	before := make([]int, len(rs))
	for i, r := range rs {
		r.mu.Lock()
		before[i] = len(r.got)
		r.mu.Unlock()
	}
	witness := &recordingSink{done: make(chan struct{}), want: 1 + 3}
	witness.mu.Lock()
	first, _ := h.Attach("", false, witness)
	witness.got = append(witness.got, first[0].Cursor)
	witness.mu.Unlock()
	for i := range 3 {
		h.Update(items(statuses[i%2]))
	}
	select {
	case <-witness.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the witness got %d of 4 events", len(witness.got))
	}
	for i, r := range rs {
		r.mu.Lock()
		n := len(r.got)
		r.mu.Unlock()
		if n != before[i] {
			t.Fatalf("detached sink %d got %d more events", i, n-before[i])
		}
	}
}

func TestDeliveryEncodesOnce(t *testing.T) {
	d := &Delivery{Event: Event{Type: Delta, Cursor: "c"}}
	calls := 0
	enc := func(ev Event) []byte { calls++; return []byte(ev.Cursor) }
	for range 3 {
		if string(d.Encoded("sse", enc)) != "c" {
			t.Fatal("wrong bytes")
		}
	}
	if calls != 1 {
		t.Fatalf("encoded %d times, want once", calls)
	}
}

// TestPositionIsWhatTheWatcherWasSent: a heartbeat carries the position a watcher has reached;
// a delta queued for it but not yet taken must not move that position, or resuming from the
// heartbeat would skip the delta.
func TestPositionIsWhatTheWatcherWasSent(t *testing.T) {
	h := NewHub(10, 10)
	h.Update(items(Healthy))
	before := h.Current().Cursor
	_, sub := h.Subscribe("", true)
	defer sub.Close()
	sink := &recordingSink{done: make(chan struct{}), want: 1}
	sink.mu.Lock() // the delta waits, as behind a slow socket
	_, at := h.Attach("", true, sink)
	d, _ := h.Update(items(Degraded))
	if sub.At() != before || at != before {
		t.Fatalf("positions %q / %q moved to the queued delta %q; want %q", sub.At(), at, d.Cursor, before)
	}
	if got := HeartbeatAt(sub.At()); got.Type != Heartbeat || got.Cursor != before {
		t.Fatalf("heartbeat %+v", got)
	}
	sink.mu.Unlock()
	if ev := <-sub.Events(); ev.Cursor != d.Cursor {
		t.Fatalf("the delta after the position: %q, want %q", ev.Cursor, d.Cursor)
	}
	<-sink.done
}

// typeSink records the types and messages of what it is delivered.
type typeSink struct {
	mu  sync.Mutex
	got []string
	ch  chan struct{}
}

func (s *typeSink) Deliver(d *Delivery) {
	s.mu.Lock()
	s.got = append(s.got, string(d.Event.Type)+":"+d.Event.Message)
	s.mu.Unlock()
	s.ch <- struct{}{}
}

func TestErrorEventsReachEveryWatcherAndTheStreamGoesOn(t *testing.T) {
	h := NewHub(8, 8)
	h.Update(items(Healthy))
	_, sub := h.Subscribe("", true)
	defer sub.Close()
	sink := &typeSink{ch: make(chan struct{}, 8)}
	_, at := h.Attach("", true, sink)

	ev := h.Error("Redis at 127.0.0.1:6379 is unreachable: dial tcp: password=hunter2 refused")
	if ev.Type != ErrorEv || ev.Cursor != at || strings.Contains(ev.Message, "hunter2") {
		t.Fatalf("error event %+v: want type error, the current cursor %q, and a redacted message", ev, at)
	}
	h.Update(items(Degraded))
	for i, want := range []EventType{ErrorEv, Delta} {
		select {
		case got := <-sub.Events():
			if got.Type != want {
				t.Fatalf("subscriber event %d is %s, want %s", i, got.Type, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("subscriber event %d (%s) never came", i, want)
		}
		<-sink.ch
	}
	sink.mu.Lock()
	if len(sink.got) != 2 || !strings.HasPrefix(sink.got[0], "error:Redis") || !strings.HasPrefix(sink.got[1], "delta:") {
		t.Fatalf("sink got %v, want the error then the delta", sink.got)
	}
	sink.mu.Unlock()
	// Error events are not in the resume window: resuming from before it gets the delta only.
	initial, again := h.Subscribe(at, false)
	defer again.Close()
	if len(initial) != 1 || initial[0].Type != Delta {
		t.Fatalf("resume from %q got %v, want just the delta", at, initial)
	}
}

func run(name, phase string) Item {
	return Item{Component: "AgentRun/" + name, Namespace: "agents", Status: Status(phase), Details: map[string]any{"name": name}}
}

func components(items []Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Component)
	}
	slices.Sort(out)
	return out
}

func TestApplyRecordsOnlyWhatChangedAndWhatWasRemoved(t *testing.T) {
	h := NewHub(10, 10)
	first, _ := h.Apply([]Item{run("a", "Pending"), run("b", "Pending"), run("c", "Running")}, nil)
	select {
	case <-h.Ready():
	default:
		t.Fatal("the hub is not ready after the first Apply")
	}
	if first.Type != Delta || len(first.Items) != 3 {
		t.Fatalf("first = %+v", first)
	}
	_, sub := h.Subscribe(first.Cursor, false)
	defer sub.Close()
	// a is unchanged, b moved on, d is new, c was deleted, x never existed.
	d, changed := h.Apply([]Item{run("a", "Pending"), run("b", "Succeeded"), run("d", "Pending")}, []string{"c", "AgentRun/c", "AgentRun/x"})
	if !changed {
		t.Fatal("no delta")
	}
	if got := components(d.Items); !slices.Equal(got, []string{"AgentRun/b", "AgentRun/d"}) {
		t.Fatalf("changes = %v, want b and d only", got)
	}
	if !slices.Equal(d.Removed, []string{"AgentRun/c"}) {
		t.Fatalf("removed = %v, want [AgentRun/c]", d.Removed)
	}
	if got := components(h.Current().Items); !slices.Equal(got, []string{"AgentRun/a", "AgentRun/b", "AgentRun/d"}) {
		t.Fatalf("current = %v", got)
	}
	if _, changed := h.Apply([]Item{run("a", "Pending")}, []string{"AgentRun/c"}); changed {
		t.Fatal("an Apply that changed nothing recorded a delta")
	}
	// A subscriber resuming gets the same delta, and its JSON names the removed run.
	select {
	case ev := <-sub.Events():
		raw, err := ev.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), `"removed":["AgentRun/c"]`) {
			t.Fatalf("delta JSON %s does not name the removed run", raw)
		}
		var back Event
		if err := back.UnmarshalJSON(raw); err != nil || !slices.Equal(back.Removed, []string{"AgentRun/c"}) || len(back.Items) != 2 {
			t.Fatalf("decoded %+v, %v", back, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no live delta")
	}
	// After an Update replaces the list, Apply works from the new list.
	h.Update([]Item{run("z", "Running")})
	d, _ = h.Apply([]Item{run("z", "Succeeded")}, []string{"AgentRun/a"})
	if len(d.Items) != 1 || len(d.Removed) != 0 || len(h.Current().Items) != 1 {
		t.Fatalf("after Update: delta %+v, current %+v", d, h.Current().Items)
	}
}
