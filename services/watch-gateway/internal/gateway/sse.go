package gateway

// An SSE watch over HTTP/1.1 does not keep a goroutine: the handler takes the connection over
// (http.Hijacker), writes the response head and the first events, attaches the connection to
// the hub as a sink and returns. Deltas are written by the hub's fan-out workers, each delta
// encoded once for all watchers; heartbeats, keep-alive comments and access re-checks run from
// one timer per connection. What a watch then costs is its socket, this struct and a timer, which
// is what lets one gateway hold tens of thousands of watchers (docs/benchmarks-history.md).
//
// HTTP/2 connections cannot be taken over; they are served by a goroutine per stream
// (serveStreaming).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/libs/health"
	"github.com/agentplane/agentplane/services/watch-gateway/internal/access"
)

// writeTimeout bounds one write to a watcher. A write blocks only when the watcher's socket
// buffer is full, i.e. it is many events behind; it is then cut off (and resumes with its
// Last-Event-ID) rather than holding up the fan-out worker, and every watcher behind it, for
// longer.
const writeTimeout = 500 * time.Millisecond

// recheckTimeout bounds an open watch's access re-check; a review that fails keeps the watch.
const recheckTimeout = 10 * time.Second

// detachedConn is one SSE watch served without a goroutine of its own.
type detachedConn struct {
	g      *Gateway
	feed   feed
	conn   net.Conn
	ndjson bool
	hb     time.Duration
	cred   Credential
	// release gives the watch's slot back (streamLimits), when it closes.
	release func()

	mu        sync.Mutex
	done      bool
	timer     *time.Timer
	lastWrite time.Time
	lastBeat  time.Time
	lastTick  time.Time
	lastCheck time.Time // read and written by tick only
	// cursor is the position of the last event written: heartbeats carry it, so a watcher never
	// resumes past a delta still queued for it.
	cursor string
}

var _ health.Sink = (*detachedConn)(nil)

// encodeSSE and encodeNDJSON are an event's two wire forms.
func encodeSSE(ev health.Event) []byte {
	data, err := ev.MarshalJSON()
	if err != nil {
		data = []byte(`{}`)
	}
	if ev.Cursor == "" { // an empty id: line would reset the client's Last-Event-ID
		return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", ev.Type, data)
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
func (g *Gateway) serveDetached(w http.ResponseWriter, r *http.Request, f feed, ndjson bool, hb time.Duration, since string, cred Credential, release func()) bool {
	hj, ok := w.(http.Hijacker)
	if !ok || r.ProtoMajor != 1 {
		return false
	}
	// Before taking the connection: a request made right after start waits for the first status.
	waitReady(r.Context(), f.hub)
	conn, _, err := hj.Hijack()
	if err != nil {
		return false
	}
	_ = conn.SetDeadline(time.Time{})
	c := &detachedConn{g: g, feed: f, conn: conn, ndjson: ndjson, hb: hb, cred: cred, release: release}
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if !g.trackDetached(c, true) { // the gateway is shutting down
		c.closeLocked("")
		return true
	}
	now := time.Now()
	c.lastBeat, c.lastCheck, c.lastTick = now, now, now
	if c.writeLocked([]byte(head)) != nil {
		c.closeLocked("write")
		return true
	}
	// Attach and the first events under c.mu: a delta delivered meanwhile waits for the lock,
	// so it follows them.
	var first strings.Builder
	initial, at := f.hub.Attach(since, false, c)
	c.cursor = at
	for _, ev := range initial {
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
		c.closeLocked("lagged")
		return
	}
	c.cursor = d.Event.Cursor
}

func (c *detachedConn) writeLocked(b []byte) error {
	now := time.Now()
	_ = c.conn.SetWriteDeadline(now.Add(writeTimeout))
	_, err := c.conn.Write(b)
	c.lastWrite = now
	return err
}

// nextTickLocked is when the connection's timer fires next: for a heartbeat when due, else
// every keep-alive interval (a keep-alive comment when idle, and a check whether the watcher
// has gone), or for an access re-check.
func (c *detachedConn) nextTickLocked(now time.Time) time.Duration {
	next := c.lastBeat.Add(c.hb)
	if ka := c.lastTick.Add(c.g.keepAlive); ka.Before(next) {
		next = ka
	}
	if c.feed.auth != nil && c.g.recheck > 0 {
		if rc := c.lastCheck.Add(c.g.recheck); rc.Before(next) {
			next = rc
		}
	}
	return max(next.Sub(now), time.Millisecond)
}

// peerClosed reports whether the watcher has closed its end, with a non-blocking peek at the
// socket: nothing else reads a connection that was taken over. A watcher sends nothing after its
// request, so bytes waiting on the socket are read and dropped (drainedToEOF): over TLS they are
// how a close begins (the close_notify record arrives ahead of the FIN, and a peek at the socket
// sees only bytes), and a client that sent stray bytes before closing is noticed too.
func peerClosed(conn net.Conn) bool {
	raw := conn
	if tc, ok := conn.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	sc, ok := raw.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed, pending := false, false
	var buf [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			closed, pending = n == 0, n > 0 // n == 0: an orderly shutdown
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		default:
			closed = true // reset
		}
		return true // never wait
	})
	if pending {
		return drainedToEOF(conn)
	}
	return closed
}

// drainedToEOF reads what is waiting on a watcher's connection (through TLS when it is TLS, so a
// close_notify reads as io.EOF) without waiting for more, and reports whether the watcher has
// closed its end. It reads a bounded amount per call: a client that keeps sending is read again
// on the next tick.
func drainedToEOF(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now().Add(time.Millisecond))
	defer func() { _ = conn.SetReadDeadline(time.Time{}) }()
	var buf [4096]byte
	for range 4 {
		if _, err := conn.Read(buf[:]); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout()) // EOF, a reset or a bad record: gone
		}
	}
	return false
}

// tick runs on the connection's timer.
func (c *detachedConn) tick() {
	now := time.Now()
	var refused error
	if c.feed.auth != nil && c.g.recheck > 0 && !now.Before(c.lastCheck.Add(c.g.recheck)) {
		// Outside c.mu: a review may take a while and deliveries must not wait for it.
		ctx, cancel := context.WithTimeout(context.Background(), recheckTimeout)
		refused = c.g.stillAllowed(ctx, c.feed.auth, c.cred, access.VerbWatch)
		cancel()
		c.lastCheck = now
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	c.lastTick = now
	if peerClosed(c.conn) {
		c.closeLocked("")
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
		err = c.writeLocked(c.encode(health.HeartbeatAt(c.cursor)))
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
	c.feed.hub.Detach(c)
	c.g.trackDetached(c, false)
	c.release()
	c.g.metrics.active.WithLabelValues("sse").Dec()
	if reason != "" {
		c.g.metrics.errors.WithLabelValues("sse", reason).Inc()
	}
}

// trackDetached adds (false once the gateway is closing) or removes a connection.
func (g *Gateway) trackDetached(c *detachedConn, add bool) bool {
	g.detachedMu.Lock()
	defer g.detachedMu.Unlock()
	if !add {
		delete(g.detached, c)
		return true
	}
	if g.closing {
		return false
	}
	g.detached[c] = struct{}{}
	return true
}

// CloseStreams ends every SSE watch the gateway took over (the HTTP server's Shutdown does not
// know them) and refuses to take more over. Clients reconnect with their Last-Event-ID. The
// connections close in parallel: a TLS close may wait on its peer.
func (g *Gateway) CloseStreams() {
	g.detachedMu.Lock()
	g.closing = true
	conns := make([]*detachedConn, 0, len(g.detached))
	for c := range g.detached {
		conns = append(conns, c)
	}
	g.detachedMu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.mu.Lock()
			c.closeLocked("")
			c.mu.Unlock()
		}()
	}
	wg.Wait()
}

// DetachedStreams is the number of SSE watches served without a goroutine.
func (g *Gateway) DetachedStreams() int {
	g.detachedMu.Lock()
	defer g.detachedMu.Unlock()
	return len(g.detached)
}
