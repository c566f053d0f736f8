package gateway

// An SSE watch over HTTP/1.1 does not keep a goroutine: the handler takes the connection over
// (http.Hijacker), writes the response head and the first events, attaches the connection to
// the hub as a sink and returns. Deltas are written by the hub's fan-out workers, each delta
// encoded once for all watchers; heartbeats, keep-alive comments and access re-checks run from
// one timer per connection. What a watch then costs is its socket, this struct and a timer, which
// is what lets one gateway hold tens of thousands of watchers (docs/benchmarks.md).
//
// HTTP/2 connections cannot be taken over; they are served by a goroutine per stream
// (serveStreaming).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
)

// writeTimeout bounds one write to a watcher. A watcher whose socket buffer stays full that
// long is cut off; it resumes with its Last-Event-ID.
const writeTimeout = 2 * time.Second

// recheckTimeout bounds an open watch's access re-check; a review that fails keeps the watch.
const recheckTimeout = 10 * time.Second

// detachedConn is one SSE watch served without a goroutine of its own.
type detachedConn struct {
	g      *Gateway
	conn   net.Conn
	ndjson bool
	hb     time.Duration
	token  string

	mu        sync.Mutex
	done      bool
	timer     *time.Timer
	lastWrite time.Time
	lastBeat  time.Time
	lastCheck time.Time // read and written by tick only
}

var _ health.Sink = (*detachedConn)(nil)

// encodeSSE and encodeNDJSON are an event's two wire forms.
func encodeSSE(ev health.Event) []byte {
	data, err := ev.MarshalJSON()
	if err != nil {
		data = []byte(`{}`)
	}
	return fmt.Appendf(nil, "event: %s\nid: %s\ndata: %s\n\n", ev.Type, ev.Cursor, data)
}

func encodeNDJSON(ev health.Event) []byte {
	data, err := ev.MarshalJSON()
	if err != nil {
		data = []byte(`{}`)
	}
	return append(data, '\n')
}

func (c *detachedConn) encode(ev health.Event) []byte {
	if c.ndjson {
		return encodeNDJSON(ev)
	}
	return encodeSSE(ev)
}

// serveDetached takes the connection over; it returns false (and has written nothing) when the
// connection cannot be taken over.
func (g *Gateway) serveDetached(w http.ResponseWriter, r *http.Request, ndjson bool, hb time.Duration, since, token string) bool {
	hj, ok := w.(http.Hijacker)
	if !ok || r.ProtoMajor != 1 {
		return false
	}
	// Before taking the connection: a request made right after start waits for the first status.
	g.waitReady(r.Context())
	conn, _, err := hj.Hijack()
	if err != nil {
		return false
	}
	_ = conn.SetDeadline(time.Time{})
	c := &detachedConn{g: g, conn: conn, ndjson: ndjson, hb: hb, token: token}
	contentType := "text/event-stream"
	if ndjson {
		contentType = "application/x-ndjson"
	}
	head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: %s\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\nRetry: %d\r\nConnection: close\r\n\r\n",
		contentType, retryMillis)
	if !ndjson {
		head += fmt.Sprintf("retry: %d\n\n", retryMillis)
	}

	g.metrics.active.WithLabelValues("sse").Inc()
	g.trackDetached(c, true)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.lastBeat, c.lastCheck = now, now
	if c.writeLocked([]byte(head)) != nil {
		c.closeLocked("write")
		return true
	}
	// Attach and the first events under c.mu: a delta delivered meanwhile waits for the lock,
	// so it follows them.
	var first strings.Builder
	for _, ev := range g.hub.Attach(since, false, c) {
		first.Write(c.encode(ev))
	}
	if c.writeLocked([]byte(first.String())) != nil {
		c.closeLocked("write")
		return true
	}
	c.timer = time.AfterFunc(c.nextTickLocked(time.Now()), c.tick)
	return true
}

// Deliver writes one delta (called by the hub's fan-out).
func (c *detachedConn) Deliver(d *health.Delivery) {
	var b []byte
	if c.ndjson {
		b = d.Encoded("ndjson", encodeNDJSON)
	} else {
		b = d.Encoded("sse", encodeSSE)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	if c.writeLocked(b) != nil {
		c.closeLocked("write")
	}
}

func (c *detachedConn) writeLocked(b []byte) error {
	now := time.Now()
	_ = c.conn.SetWriteDeadline(now.Add(writeTimeout))
	_, err := c.conn.Write(b)
	c.lastWrite = now
	return err
}

// nextTickLocked is when the next heartbeat, keep-alive comment or access re-check is due.
func (c *detachedConn) nextTickLocked(now time.Time) time.Duration {
	next := c.lastBeat.Add(c.hb)
	if !c.ndjson {
		if ka := c.lastWrite.Add(c.g.keepAlive); ka.Before(next) {
			next = ka
		}
	}
	if c.g.auth != nil && c.g.recheck > 0 {
		if rc := c.lastCheck.Add(c.g.recheck); rc.Before(next) {
			next = rc
		}
	}
	return max(next.Sub(now), time.Millisecond)
}

// tick runs on the connection's timer.
func (c *detachedConn) tick() {
	now := time.Now()
	var refused error
	if c.g.auth != nil && c.g.recheck > 0 && !now.Before(c.lastCheck.Add(c.g.recheck)) {
		// Outside c.mu: a review may take a while and deliveries must not wait for it.
		ctx, cancel := context.WithTimeout(context.Background(), recheckTimeout)
		refused = c.g.stillAllowed(ctx, c.token, access.VerbWatch)
		cancel()
		c.lastCheck = now
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	if refused != nil {
		_ = c.writeLocked(c.encode(health.Event{Type: health.ErrorEv, GeneratedAt: now.UTC(), Message: refused.Error()}))
		c.closeLocked("access")
		return
	}
	var err error
	switch {
	case !now.Before(c.lastBeat.Add(c.hb)):
		c.lastBeat = now
		err = c.writeLocked(c.encode(c.g.hub.HeartbeatEvent()))
	case !c.ndjson && !now.Before(c.lastWrite.Add(c.g.keepAlive)):
		err = c.writeLocked([]byte(": keep-alive\n\n"))
	}
	if err != nil {
		c.closeLocked("write")
		return
	}
	c.timer.Reset(c.nextTickLocked(time.Now()))
}

// closeLocked ends the watch; reason "" is a shutdown, not an error.
func (c *detachedConn) closeLocked(reason string) {
	if c.done {
		return
	}
	c.done = true
	if c.timer != nil {
		c.timer.Stop()
	}
	_ = c.conn.Close()
	c.g.hub.Detach(c)
	c.g.trackDetached(c, false)
	c.g.active.Add(-1)
	c.g.metrics.active.WithLabelValues("sse").Dec()
	if reason != "" {
		c.g.metrics.errors.WithLabelValues("sse", reason).Inc()
	}
}

func (g *Gateway) trackDetached(c *detachedConn, add bool) {
	g.detachedMu.Lock()
	defer g.detachedMu.Unlock()
	if add {
		g.detached[c] = struct{}{}
	} else {
		delete(g.detached, c)
	}
}

// CloseStreams ends every SSE watch the gateway took over (the HTTP server's Shutdown does not
// know them). Clients reconnect with their Last-Event-ID.
func (g *Gateway) CloseStreams() {
	g.detachedMu.Lock()
	conns := make([]*detachedConn, 0, len(g.detached))
	for c := range g.detached {
		conns = append(conns, c)
	}
	g.detachedMu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		c.closeLocked("")
		c.mu.Unlock()
	}
}

// DetachedStreams is the number of SSE watches served without a goroutine.
func (g *Gateway) DetachedStreams() int {
	g.detachedMu.Lock()
	defer g.detachedMu.Unlock()
	return len(g.detached)
}
