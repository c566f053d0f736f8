// Package history keeps the timeline of control-plane component status transitions (seed 004's
// open question, a "rolling status timeline") in Redis, so that every gateway replica serves the
// same timeline and a restart keeps it.
//
// One replica writes: the holder of a lease in Redis (taken with SET NX, renewed every RenewEvery,
// lasting LeaseFor), so a transition that several replicas see is recorded once by design. The
// writer offers each status its health hub sees to a Lua script, which records it only when it
// differs from the component's last recorded status and is not older than it; so a restarted or
// newly leading replica, which starts by offering the current status of every component, adds
// only what changed. The other replicas follow their hubs without writing and take the lease when
// it is free (the writer gave it up on shutdown, or it lapsed). Entries live in a Redis stream,
// trimmed to the retention (and a count bound). While Redis is away the writer keeps transitions in
// a bounded buffer (oldest dropped first, counted) and writes them when Redis is back, if it
// still holds the lease; a replica that finds another holds it drops its buffer (counted too),
// since the new writer records where things stand when it takes over.
package history

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/libs/redact"
)

//go:embed record.lua
var recordLua string

//go:embed lead.lua
var leadLua string

//go:embed release.lua
var releaseLua string

var (
	script       = redis.NewScript(recordLua)
	leadScript   = redis.NewScript(leadLua)
	releaseScrpt = redis.NewScript(releaseLua)
)

// Transition is one change of a component's status.
type Transition struct {
	Component string    `json:"component"`
	Status    string    `json:"status"`
	Previous  string    `json:"previous,omitempty"`
	Message   string    `json:"message,omitempty"`
	At        time.Time `json:"at"`
}

// Options configure a Store.
type Options struct {
	// Retention is how long transitions are kept (default 24h).
	Retention time.Duration
	// MaxEntries bounds the stream whatever the retention (default 50,000).
	MaxEntries int64
	// Buffer bounds the transitions kept in memory while Redis is away (default 1,000).
	Buffer int
	// Timeout bounds one Redis call (default 1s).
	Timeout time.Duration
	// RenewEvery is how often the writer renews its lease and a follower tries to take it
	// (default 2s); LeaseFor how long a lease lasts unrenewed (default 10s).
	RenewEvery, LeaseFor time.Duration
	// Registerer gets the metrics (nil: none).
	Registerer prometheus.Registerer
}

// Store records and reads one namespace's timeline.
type Store struct {
	rdb                 redis.UniversalClient
	last, stream, lease string
	id                  string
	o                   Options

	mu      sync.Mutex
	buffer  []Transition
	known   map[string]bool // components this process has seen in a known status
	flushMu sync.Mutex      // one flush at a time, so transitions reach Redis in order
	writing atomic.Bool

	writes   *prometheus.CounterVec
	dropped  prometheus.Counter
	buffered prometheus.Gauge
	writer   prometheus.Gauge
}

// ErrUnavailable is returned by Since when Redis cannot be reached.
var ErrUnavailable = errors.New("the status history is unavailable: Redis cannot be reached (the gateway's log says why); retry shortly")

// New keeps namespace's timeline in rdb. The keys share a hash tag, so on a Redis Cluster the
// script touches one slot: agentplane:history:{<namespace>}:last and :transitions.
func New(rdb redis.UniversalClient, namespace string, o Options) *Store {
	if o.Retention <= 0 {
		o.Retention = 24 * time.Hour
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 50000
	}
	if o.Buffer <= 0 {
		o.Buffer = 1000
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.RenewEvery <= 0 {
		o.RenewEvery = 2 * time.Second
	}
	if o.LeaseFor <= o.RenewEvery {
		o.LeaseFor = 5 * o.RenewEvery
	}
	prefix := "agentplane:history:{" + namespace + "}:"
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	s := &Store{rdb: rdb, last: prefix + "last", stream: prefix + "transitions", lease: prefix + "writer", id: hex.EncodeToString(id),
		o: o, known: map[string]bool{},
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_watch_history_writes_total",
			Help: "Component statuses offered to the history: recorded (a transition), unchanged (already recorded, by this or another replica), error (Redis failed; kept in the buffer)."}, []string{"result"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "agentplane_watch_history_dropped_total",
			Help: "Transitions dropped because the buffer kept while Redis is away was full."}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentplane_watch_history_buffered",
			Help: "Transitions waiting for Redis."}),
		writer: prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentplane_watch_history_writer",
			Help: "1 while this replica holds the history's writer lease (it records transitions), else 0."}),
	}
	for _, r := range []string{"recorded", "unchanged", "error"} {
		s.writes.WithLabelValues(r)
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.writes, s.dropped, s.buffered, s.writer)
	}
	return s
}

// Retention is how long transitions are kept.
func (s *Store) Retention() time.Duration { return s.o.Retention }

// Follow follows hub until ctx ends, recording its statuses while this replica holds the writer
// lease: when it takes the lease (at start, or when another writer went away), every component's
// current status, then every delta's. It subscribes at once, before the hub's first status, so a
// writer sees every change from the first. A status "unknown" is recorded only for a component
// this process saw in a known status first, so a gateway starting up (its collector has not
// reached everything yet) adds nothing. On the way out it gives the lease up.
func (s *Store) Follow(ctx context.Context, hub *health.Hub) error {
	first, sub := hub.Subscribe("", false)
	defer func() { sub.Close() }()
	leading := s.lead(ctx, false)
	for _, ev := range first {
		s.see(ctx, ev, leading)
	}
	tick := time.NewTicker(s.o.RenewEvery)
	defer tick.Stop()
	defer s.release(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-sub.Events():
			s.see(ctx, ev, leading)
		case <-sub.Lagged():
			// Fell behind: start again from a snapshot (the script drops what is not new).
			sub.Close()
			first, sub = hub.Subscribe("", false)
			for _, ev := range first {
				s.see(ctx, ev, leading)
			}
		case <-tick.C:
			was := leading
			leading = s.lead(ctx, was)
			switch {
			case leading && !was: // took over: record where things stand
				s.see(ctx, hub.Current(), true)
			case !leading && was:
				s.drop()
			case leading:
				s.flush(ctx)
			}
		}
	}
}

// lead takes or renews the writer lease and reports whether this replica holds it. When Redis
// cannot answer, a writer goes on as one (nobody else can take the lease meanwhile) and a
// follower stays one.
func (s *Store) lead(ctx context.Context, leading bool) bool {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	n, err := leadScript.Run(ctx, s.rdb, []string{s.lease}, s.id, s.o.LeaseFor.Milliseconds()).Int()
	if err != nil {
		return leading
	}
	s.writer.Set(float64(n))
	s.writing.Store(n == 1)
	return n == 1
}

// release gives the lease up, so another replica takes over at its next try (ctx has ended by
// then: the call gets its own deadline).
func (s *Store) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.Timeout)
	defer cancel()
	_ = releaseScrpt.Run(ctx, s.rdb, []string{s.lease}, s.id).Err()
	s.writer.Set(0)
	s.writing.Store(false)
}

// drop forgets the buffer of a replica that is no longer the writer.
func (s *Store) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropped.Add(float64(len(s.buffer)))
	s.buffer = nil
	s.buffered.Set(0)
}

// see takes one event: a writer offers its statuses, a follower only notes which components it
// has seen known.
func (s *Store) see(ctx context.Context, ev health.Event, leading bool) {
	if leading {
		s.offer(ctx, ev)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range ev.Items {
		if it.Status != health.Unknown || s.known[it.Component] {
			s.known[it.Component] = it.Status != health.Unknown
		}
	}
}

// Writing reports whether this replica held the writer lease at its last try.
func (s *Store) Writing() bool { return s.writing.Load() }

// offer queues the statuses of one event and writes what is queued.
func (s *Store) offer(ctx context.Context, ev health.Event) {
	if ev.Type != health.Snapshot && ev.Type != health.Delta {
		return
	}
	s.mu.Lock()
	for _, it := range ev.Items {
		if it.Status == health.Unknown && !s.known[it.Component] {
			continue
		}
		s.known[it.Component] = it.Status != health.Unknown
		if len(s.buffer) >= s.o.Buffer {
			s.buffer = s.buffer[1:]
			s.dropped.Inc()
		}
		s.buffer = append(s.buffer, Transition{Component: it.Component, Status: string(it.Status), Message: redact.String(it.Message), At: ev.GeneratedAt})
	}
	s.buffered.Set(float64(len(s.buffer)))
	s.mu.Unlock()
	s.flush(ctx)
}

// flush writes the buffer in order, stopping at the first failure (the rest waits for the next
// flush).
func (s *Store) flush(ctx context.Context) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	for {
		s.mu.Lock()
		if len(s.buffer) == 0 {
			s.mu.Unlock()
			return
		}
		t := s.buffer[0]
		s.mu.Unlock()
		if err := s.record(ctx, t); err != nil {
			s.writes.WithLabelValues("error").Inc()
			slog.Default().Warn("status history: Redis write failed; kept in memory and retried", "err", redact.String(err.Error()))
			return
		}
		s.mu.Lock()
		if len(s.buffer) > 0 && s.buffer[0] == t {
			s.buffer = s.buffer[1:]
		}
		s.buffered.Set(float64(len(s.buffer)))
		s.mu.Unlock()
	}
}

// record offers one status to the script.
func (s *Store) record(ctx context.Context, t Transition) error {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	minID := time.Now().Add(-s.o.Retention).UnixMilli()
	n, err := script.Run(ctx, s.rdb, []string{s.last, s.stream}, t.Component, t.Status, t.Message, t.At.UnixMilli(), minID, s.o.MaxEntries).Int()
	if err != nil {
		return err
	}
	if n == 1 {
		s.writes.WithLabelValues("recorded").Inc()
	} else {
		s.writes.WithLabelValues("unchanged").Inc()
	}
	return nil
}

// Buffered is the number of transitions waiting for Redis.
func (s *Store) Buffered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buffer)
}

// Since returns the transitions recorded in the last since, oldest first; at most limit of them
// (the newest), and whether older ones in the window were left out.
func (s *Store) Since(ctx context.Context, since time.Duration, limit int) ([]Transition, bool, error) {
	if since <= 0 {
		return nil, false, fmt.Errorf("since %s must be positive", since)
	}
	if limit <= 0 {
		limit = 1000
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	from := strconv.FormatInt(time.Now().Add(-since).UnixMilli(), 10)
	// Newest first, one more than asked, to know whether some were left out.
	msgs, err := s.rdb.XRevRangeN(ctx, s.stream, "+", from, int64(limit)+1).Result()
	if err != nil {
		slog.Default().Warn("status history: Redis read failed", "err", redact.String(err.Error()))
		return nil, false, ErrUnavailable
	}
	truncated := len(msgs) > limit
	if truncated {
		msgs = msgs[:limit]
	}
	out := make([]Transition, 0, len(msgs))
	for i := len(msgs) - 1; i >= 0; i-- {
		v := msgs[i].Values
		str := func(k string) string { s, _ := v[k].(string); return s }
		ms, _ := strconv.ParseInt(str("t"), 10, 64)
		out = append(out, Transition{Component: str("c"), Status: str("s"), Previous: str("p"), Message: str("m"), At: time.UnixMilli(ms).UTC()})
	}
	return out, truncated, nil
}

// Oldest is when the oldest transition kept was seen (false when none is kept): the timeline says
// nothing about the time before it.
func (s *Store) Oldest(ctx context.Context) (time.Time, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	msgs, err := s.rdb.XRangeN(ctx, s.stream, "-", "+", 1).Result()
	if err != nil {
		return time.Time{}, false, ErrUnavailable
	}
	if len(msgs) == 0 {
		return time.Time{}, false, nil
	}
	v, _ := msgs[0].Values["t"].(string)
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(ms).UTC(), true, nil
}
