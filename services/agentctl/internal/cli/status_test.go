package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/libs/health"
)

// scripted is a source whose streams follow a script: each connection emits its events, then
// breaks with err (or, for the last, stays open until ctx ends). It records the cursors asked for.
type scripted struct {
	conns   [][]health.Event
	err     error
	cursors []string
	follow  []bool
}

func (s *scripted) snapshot(context.Context) (health.Event, error) {
	return health.Event{}, errors.New("unused")
}
func (s *scripted) close() {}
func (s *scripted) stream(ctx context.Context, cursor string, followOnly bool, _ time.Duration, emit func(health.Event)) error {
	n := len(s.cursors)
	s.cursors = append(s.cursors, cursor)
	s.follow = append(s.follow, followOnly)
	if n >= len(s.conns) {
		if s.err != nil && n > 0 && len(s.conns[len(s.conns)-1]) == 0 {
			return s.err
		}
		<-ctx.Done()
		return nil
	}
	for _, ev := range s.conns[n] {
		emit(ev)
	}
	return s.err
}

func ev(t health.EventType, cursor string) health.Event {
	return health.Event{Type: t, GeneratedAt: time.Date(2026, 1, 30, 18, 15, 0, 0, time.UTC), Cursor: cursor}
}

func opts() *statusOptions {
	return &statusOptions{output: "ndjson", retry: true, retryBackoff: 10 * time.Millisecond, heartbeat: time.Second, timeout: 500 * time.Millisecond}
}

func TestWatchReconnectsWithTheLastCursor(t *testing.T) {
	src := &scripted{err: errors.New("connection reset"), conns: [][]health.Event{
		{ev(health.Snapshot, "c1"), ev(health.Delta, "c2")},
		{ev(health.Delta, "c3")},
	}}
	var out bytes.Buffer
	p, _ := newPrinter(&out, "ndjson")
	o := opts()
	o.followOnly = true
	if err := watchLoop(context.Background(), src, p.print, o, notice{w: io.Discard}); err != nil {
		t.Fatalf("watch ended with %v while the last connection held", err)
	}
	if len(src.cursors) < 3 || src.cursors[0] != "" || src.cursors[1] != "c2" || src.cursors[2] != "c3" {
		t.Fatalf("cursors asked for = %q, want \"\", c2, c3", src.cursors)
	}
	if !src.follow[0] || src.follow[1] {
		t.Fatalf("follow-only = %v: only the first connection skips the snapshot", src.follow)
	}
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Fatalf("printed %d events, want 3:\n%s", n, out.String())
	}
}

func TestWatchWithoutRetryFailsOnDisconnect(t *testing.T) {
	src := &scripted{err: errors.New("connection reset"), conns: [][]health.Event{{ev(health.Snapshot, "c1")}}}
	o := opts()
	o.retry = false
	p, _ := newPrinter(&bytes.Buffer{}, "ndjson")
	err := watchLoop(context.Background(), src, p.print, o, notice{w: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "disconnected") || len(src.cursors) != 1 {
		t.Fatalf("err = %v after %d connections, want a disconnect error after one", err, len(src.cursors))
	}
}

func TestWatchFailsWhenRetriesOutlastTheTimeout(t *testing.T) {
	src := &scripted{err: errors.New("unavailable"), conns: [][]health.Event{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}}}
	p, _ := newPrinter(&bytes.Buffer{}, "ndjson")
	start := time.Now()
	err := watchLoop(context.Background(), src, p.print, opts(), notice{w: io.Discard})
	if !errors.Is(err, errRetriesExhausted) {
		t.Fatalf("err = %v, want retries exhausted", err)
	}
	// Bounded by the timeout, not by the 12 scripted connections' backoff (which would take
	// far longer): the bound leaves room for a loaded machine.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("gave up after %s with --timeout 500ms", d)
	}
	if len(src.cursors) < 3 {
		t.Fatalf("only %d attempts in 500ms with a 10ms backoff", len(src.cursors))
	}
}

func TestStatusFlagValidation(t *testing.T) {
	for _, o := range []statusOptions{
		{heartbeat: 100 * time.Millisecond, retryBackoff: time.Second},
		{heartbeat: 6 * time.Minute, retryBackoff: time.Second},
		{heartbeat: time.Second, retryBackoff: time.Second, transport: "ssh"},
	} {
		if err := o.validate(); err == nil {
			t.Fatalf("%+v accepted", o)
		}
	}
	o := statusOptions{heartbeat: time.Second, retryBackoff: time.Second, server: "gw:50051"}
	if err := o.validate(); err != nil || o.transport != "grpc" {
		t.Fatalf("--gateway should select grpc: %v %q", err, o.transport)
	}
}

// TestErrorEventsArePrintedAndTheWatchGoesOn: an error event from the source is output in the
// chosen format and the events after it follow on the same connection.
func TestErrorEventsArePrintedAndTheWatchGoesOn(t *testing.T) {
	for _, format := range []string{"table", "json", "ndjson", "yaml"} {
		errEv := ev(health.ErrorEv, "c1")
		errEv.Message = "Redis at 127.0.0.1:6379 is unreachable"
		delta := ev(health.Delta, "c2")
		delta.Items = []health.Item{{Component: "database", Status: health.Degraded}}
		src := &scripted{conns: [][]health.Event{{ev(health.Snapshot, "c1"), errEv, delta}}}
		var out bytes.Buffer
		p, _ := newPrinter(&out, format)
		if err := watchLoop(context.Background(), src, p.print, opts(), notice{w: io.Discard}); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		s := out.String()
		at := strings.Index(s, "Redis at 127.0.0.1:6379 is unreachable")
		if at < 0 || len(src.cursors) != 1 {
			t.Fatalf("%s: the error event is missing, or the watch reconnected (%d connections):\n%s", format, len(src.cursors), s)
		}
		if !strings.Contains(s[at:], "database") {
			t.Fatalf("%s: nothing after the error event:\n%s", format, s)
		}
	}
}
