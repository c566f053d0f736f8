package health

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentplane/agentplane/libs/redact"
)

// EventType is one of the seed's stream events.
type EventType string

const (
	Snapshot  EventType = "snapshot"
	Delta     EventType = "delta"
	Heartbeat EventType = "heartbeat"
	ErrorEv   EventType = "error"
)

// Event is one stream event. Items holds the full list for a snapshot and the changed items for
// a delta; the seed's NDJSON calls the latter "changes". Removed names the components a delta
// took out of the list: only hubs fed with Apply (the runs stream) send it; the health stream
// reports a component that went away as an item ("no longer reported").
type Event struct {
	Type        EventType `json:"type"`
	GeneratedAt time.Time `json:"generated_at"`
	Items       []Item    `json:"items,omitempty"`
	Removed     []string  `json:"removed,omitempty"`
	Message     string    `json:"message,omitempty"`
	Cursor      string    `json:"cursor,omitempty"`
}

// Hub keeps the current status, a bounded window of recent deltas, and the subscribers. A client
// resuming with a cursor inside the window gets exactly the deltas it missed; any other cursor
// (expired, from another gateway process, malformed) gets a fresh snapshot.
type Hub struct {
	mu      sync.Mutex
	epoch   string
	seq     uint64
	current []Item
	index   map[string]int // component -> position in current, built by Apply (nil until then)
	window  []Event        // deltas, oldest first, at most cap
	cap     int
	subs    map[*Subscription]struct{}
	sinks   map[Sink]struct{}
	buffer  int
	ready   chan struct{}
	now     func() time.Time
	// OnDispatch, when set, is told how long a delta took from generation to hand-off to each
	// subscriber, and to delivery to each sink.
	OnDispatch func(time.Duration)

	fanout fanout
}

// NewHub keeps the last window deltas; each subscriber may fall buffer events behind before it
// is cut off (it then resumes with its cursor and catches up).
func NewHub(window, buffer int) *Hub {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &Hub{epoch: hex.EncodeToString(b), cap: window, buffer: buffer, subs: map[*Subscription]struct{}{}, sinks: map[Sink]struct{}{},
		now: time.Now, ready: make(chan struct{})}
}

// Cursor is the opaque cursor of position seq.
func (h *Hub) cursor(seq uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1:" + h.epoch + ":" + strconv.FormatUint(seq, 10)))
}

// parseCursor returns the position of a cursor this hub issued, or false.
func (h *Hub) parseCursor(c string) (uint64, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, false
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != "v1" || parts[1] != h.epoch {
		return 0, false
	}
	seq, err := strconv.ParseUint(parts[2], 10, 64)
	return seq, err == nil
}

// Update replaces the current status; when something changed it records a delta and sends it to
// every subscriber. It returns the delta, if any.
func (h *Hub) Update(items []Item) (Event, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	changes := Diff(h.current, items)
	h.current = append([]Item(nil), items...)
	h.index = nil
	return h.recordLocked(changes, nil)
}

// Apply records a delta from changes that arrive item by item, without recomputing the whole
// list (the runs stream: a run changed, a run was deleted). Each changed item replaces the
// current item of its component, or joins the list; each removed component leaves it. Changes
// equal to the current item and removals of unknown components are dropped; when nothing is
// left, no delta is recorded. The list's order is not kept: a component that leaves is replaced
// by the last one. The first Apply, like the first Update, makes the hub ready.
func (h *Hub) Apply(changes []Item, removed []string) (Event, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.index == nil {
		h.index = make(map[string]int, len(h.current))
		for i, it := range h.current {
			h.index[it.Component] = i
		}
	}
	var changed []Item
	for _, it := range changes {
		if i, ok := h.index[it.Component]; ok {
			if reflect.DeepEqual(h.current[i], it) {
				continue
			}
			h.current[i] = it
		} else {
			h.index[it.Component] = len(h.current)
			h.current = append(h.current, it)
		}
		changed = append(changed, it)
	}
	var gone []string
	for _, c := range removed {
		i, ok := h.index[c]
		if !ok {
			continue
		}
		last := len(h.current) - 1
		h.current[i] = h.current[last]
		h.index[h.current[i].Component] = i
		h.current[last] = Item{}
		h.current = h.current[:last]
		delete(h.index, c)
		gone = append(gone, c)
	}
	return h.recordLocked(changed, gone)
}

// recordLocked makes the hub ready and, when something changed, records the delta and sends it
// to every subscriber; called with h.mu held.
func (h *Hub) recordLocked(changes []Item, removed []string) (Event, bool) {
	select {
	case <-h.ready:
	default:
		close(h.ready)
	}
	if len(changes) == 0 && len(removed) == 0 {
		return Event{}, false
	}
	h.seq++
	ev := Event{Type: Delta, GeneratedAt: h.now().UTC(), Items: changes, Removed: removed, Cursor: h.cursor(h.seq)}
	h.window = append(h.window, ev)
	if len(h.window) > h.cap {
		h.window = h.window[len(h.window)-h.cap:]
	}
	h.broadcastLocked(ev)
	return ev, true
}

// broadcastLocked hands ev to every subscriber and sink; called with h.mu held.
func (h *Hub) broadcastLocked(ev Event) {
	for s := range h.subs {
		s.send(ev, h)
	}
	if len(h.sinks) > 0 {
		sinks := make([]Sink, 0, len(h.sinks))
		for s := range h.sinks {
			sinks = append(sinks, s)
		}
		h.fanout.enqueue(h, batch{d: &Delivery{Event: ev}, sinks: sinks})
	}
}

// Error sends every subscriber and sink an error event: a source of the model failed (a watch,
// a service's health stream, Redis). The stream goes on; the component's item shows the failure
// in the next delta. Error events are not kept in the resume window (they describe a moment,
// not a state) and carry the current cursor, so a client resuming from one loses nothing. The
// message is redacted.
func (h *Hub) Error(msg string) Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	ev := Event{Type: ErrorEv, GeneratedAt: h.now().UTC(), Message: redact.String(msg), Cursor: h.cursor(h.seq)}
	h.broadcastLocked(ev)
	return ev
}

// Ready is closed once the hub holds a first status; before that a snapshot is empty.
func (h *Hub) Ready() <-chan struct{} { return h.ready }

// Current returns a snapshot event of the current status.
func (h *Hub) Current() Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snapshotLocked()
}

func (h *Hub) snapshotLocked() Event {
	return Event{Type: Snapshot, GeneratedAt: h.now().UTC(), Items: append([]Item(nil), h.current...), Cursor: h.cursor(h.seq)}
}

// HeartbeatAt is a heartbeat carrying cursor: the position of the last event the watcher got
// (Subscription.At or Attach's position, then each delta's cursor). The hub has no "heartbeat
// at the newest position": a delta still queued for a watcher would be skipped on resume.
func HeartbeatAt(cursor string) Event {
	return Event{Type: Heartbeat, GeneratedAt: time.Now().UTC(), Cursor: cursor}
}

// Subscribers is the number of open subscriptions.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Subscription receives the live deltas of one client.
type Subscription struct {
	ch     chan Event
	closed bool
	// Lagged is closed when the subscriber fell too far behind and was cut off.
	lagged chan struct{}
	hub    *Hub
	at     string
}

// At is the cursor of the position the subscription starts from: its first events end there
// and its live deltas follow it. Heartbeats sent before any delta carry it.
func (s *Subscription) At() string { return s.at }

// Subscribe starts a subscription. The returned events come first: the deltas after cursor when
// the window still holds them, else a snapshot (none when followOnly and no cursor was given).
func (h *Hub) Subscribe(cursor string, followOnly bool) ([]Event, *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &Subscription{ch: make(chan Event, h.buffer), lagged: make(chan struct{}), hub: h, at: h.cursor(h.seq)}
	h.subs[s] = struct{}{}
	return h.initialLocked(cursor, followOnly), s
}

// initialLocked is what a new subscriber gets first (see Subscribe).
func (h *Hub) initialLocked(cursor string, followOnly bool) []Event {
	if cursor != "" {
		if seq, ok := h.parseCursor(cursor); ok && seq <= h.seq {
			oldest := h.seq - uint64(len(h.window)) // the window holds seq oldest+1 .. h.seq
			if seq >= oldest {
				var missed []Event
				for _, ev := range h.window {
					if n, _ := h.parseCursor(ev.Cursor); n > seq {
						missed = append(missed, ev)
					}
				}
				return missed
			}
		}
		return []Event{h.snapshotLocked()}
	}
	if followOnly {
		return nil
	}
	return []Event{h.snapshotLocked()}
}

// send hands ev to the subscriber without ever blocking the hub; called with h.mu held.
func (s *Subscription) send(ev Event, h *Hub) {
	if s.closed {
		return
	}
	select {
	case s.ch <- ev:
		if h.OnDispatch != nil {
			h.OnDispatch(h.now().Sub(ev.GeneratedAt))
		}
	default:
		s.closed = true
		close(s.lagged)
		delete(h.subs, s)
	}
}

// Events delivers live deltas and error events.
func (s *Subscription) Events() <-chan Event { return s.ch }

// Lagged is closed when the subscription was cut off for falling behind.
func (s *Subscription) Lagged() <-chan struct{} { return s.lagged }

// Close ends the subscription.
func (s *Subscription) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	delete(s.hub.subs, s)
	s.closed = true
}

// Sink receives deltas without a goroutine or a channel of its own: the hub's fan-out calls
// Deliver for every delta after the sink was attached, in order, from a few shared worker
// goroutines. Deliver must not block for long (a sink writing to a socket bounds the write with
// a deadline) and must not call the hub's Attach.
type Sink interface {
	Deliver(d *Delivery)
}

// Delivery is one delta as handed to every sink; its encodings are computed once and shared.
type Delivery struct {
	Event Event
	enc   sync.Map // format -> []byte
}

// Encoded returns the event encoded by encode under key, computing it on first use only.
func (d *Delivery) Encoded(key string, encode func(Event) []byte) []byte {
	if v, ok := d.enc.Load(key); ok {
		return v.([]byte)
	}
	v, _ := d.enc.LoadOrStore(key, encode(d.Event))
	return v.([]byte)
}

// Attach adds a sink and returns what it gets first, as Subscribe does, and the cursor of the
// position it starts from (see Subscription.At); every later delta goes to its Deliver. Attach
// and the first events' write should happen before the sink can take a delivery: a sink guards
// both with one lock.
func (h *Hub) Attach(cursor string, followOnly bool, s Sink) ([]Event, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sinks[s] = struct{}{}
	return h.initialLocked(cursor, followOnly), h.cursor(h.seq)
}

// Detach removes a sink; a delivery already under way may still reach it.
func (h *Hub) Detach(s Sink) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.sinks, s)
}

// Sinks is the number of attached sinks.
func (h *Hub) Sinks() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sinks)
}

type batch struct {
	d     *Delivery
	sinks []Sink
}

// fanout delivers batches in order: one batch at a time, its sinks split among a few workers.
type fanout struct {
	mu      sync.Mutex
	queue   []batch
	running bool
}

// fanoutWorkers is how many goroutines share one delta's sinks: writes to sockets are
// system calls, so a few per CPU keep every CPU writing while some block.
var fanoutWorkers = max(4, 4*runtime.GOMAXPROCS(0))

// FanoutWorkers returns how many goroutines share one delta's sinks (benchmarks compare against a
// floor with as many).
func FanoutWorkers() int { return fanoutWorkers }

func (f *fanout) enqueue(h *Hub, b batch) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, b)
	if !f.running {
		f.running = true
		go f.drain(h)
	}
}

// drain runs while there are batches; the goroutine ends when the queue is empty.
func (f *fanout) drain(h *Hub) {
	for {
		f.mu.Lock()
		if len(f.queue) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		b := f.queue[0]
		f.queue[0] = batch{}
		f.queue = f.queue[1:]
		f.mu.Unlock()

		workers := min(fanoutWorkers, len(b.sinks))
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(b.sinks); i += workers {
					b.sinks[i].Deliver(b.d)
					if h.OnDispatch != nil {
						h.OnDispatch(time.Since(b.d.Event.GeneratedAt))
					}
				}
			}()
		}
		wg.Wait()
	}
}

// String is for logs.
func (e Event) String() string { return fmt.Sprintf("%s(%d items)", e.Type, len(e.Items)) }
