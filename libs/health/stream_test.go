package health

import (
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
	case <-time.After(time.Second):
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
		"other process":   NewHub(2, 10).HeartbeatEvent().Cursor,
		"from the future": h.cursor(99),
	} {
		evs, s := h.Subscribe(c, true)
		s.Close()
		if len(evs) != 1 || evs[0].Type != Snapshot || evs[0].Items[0].Status != Degraded {
			t.Fatalf("%s cursor: %+v, want a fresh snapshot", name, evs)
		}
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
