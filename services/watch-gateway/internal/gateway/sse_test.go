package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// deadlineCounter is a watcher's TCP connection (its file descriptor still reachable, as the
// gateway's are) that counts the write deadlines set on it.
type deadlineCounter struct {
	*net.TCPConn
	set atomic.Int64
}

func (d *deadlineCounter) SetWriteDeadline(t time.Time) error {
	d.set.Add(1)
	return d.TCPConn.SetWriteDeadline(t)
}

// tcpPair is a connected pair on loopback: the gateway's end and the watcher's. With small, the
// gateway's end has a small send buffer, so that a watcher that reads slowly, or not at all,
// fills it soon.
func tcpPair(t *testing.T, small bool) (*deadlineCounter, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	watcher, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := (<-accepted).(*net.TCPConn)
	if small {
		_ = srv.SetWriteBuffer(4096)
	}
	t.Cleanup(func() { _ = srv.Close(); _ = watcher.Close() })
	return &deadlineCounter{TCPConn: srv}, watcher.(*net.TCPConn)
}

func detachedOn(conn net.Conn) *detachedConn {
	return &detachedConn{conn: conn, raw: rawConn(conn)}
}

// A write the watcher's socket takes whole is one system call: no write deadline is armed for it
// (a timer per watcher per delta was what the fan-out paid beyond the write itself).
func TestAWriteTheSocketTakesArmsNoDeadline(t *testing.T) {
	srv, watcher := tcpPair(t, false)
	c := detachedOn(srv)
	if c.raw == nil {
		t.Fatal("a plain TCP connection's descriptor was not taken")
	}
	msg := []byte("event: delta\ndata: {}\n\n")
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(watcher, int64(200*len(msg))))
		got <- b
	}()
	for range 200 {
		if err := c.writeLocked(msg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond) // a reading watcher: the buffer never fills
	}
	if b := <-got; !bytes.Equal(b, bytes.Repeat(msg, 200)) {
		t.Fatalf("the watcher read %d bytes, not the 200 events in order", len(b))
	}
	if n := srv.set.Load(); n != 0 {
		t.Fatalf("%d write deadlines were set for 200 writes the socket took at once; want 0", n)
	}
}

// A watcher that stops reading is cut off once a write has waited writeTimeout, and what the
// socket took first is not written twice: the rest goes after it, in order.
func TestAWatcherThatStopsReadingIsCutOffAfterTheWriteTimeout(t *testing.T) {
	srv, _ := tcpPair(t, true)
	c := detachedOn(srv)
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	var err error
	start := time.Now()
	for i := 0; err == nil && i < 1000; i++ {
		start = time.Now()
		err = c.writeLocked(chunk)
	}
	took := time.Since(start)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a watcher that reads nothing: write error %v, want the write deadline exceeded", err)
	}
	if took < writeTimeout-50*time.Millisecond || took > writeTimeout+2*time.Second {
		t.Fatalf("the last write gave up after %s, want about writeTimeout (%s)", took, writeTimeout)
	}
	if srv.set.Load() == 0 {
		t.Fatal("the write that waited had no deadline")
	}
}

func TestALargeWriteArrivesWholeAndInOrder(t *testing.T) {
	srv, watcher := tcpPair(t, true)
	c := detachedOn(srv)
	msg := make([]byte, 1<<20) // far more than the socket's buffer: most of it waits for the reader
	for i := range msg {
		msg[i] = byte(i % 251)
	}
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(20 * time.Millisecond) // the first write meets a full buffer
		b, _ := io.ReadAll(io.LimitReader(watcher, int64(len(msg))))
		got <- b
	}()
	if err := c.writeLocked(msg); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, msg) {
		t.Fatalf("the watcher read %d bytes, not the message as written", len(b))
	}
}

// After a write that had to wait (its deadline armed), the next writes are not refused once
// that deadline has passed.
func TestAWriteAfterOneThatWaitedIsNotRefusedByItsDeadline(t *testing.T) {
	srv, watcher := tcpPair(t, true)
	c := detachedOn(srv)
	msg := make([]byte, 1<<20)
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = io.Copy(io.Discard, watcher)
	}()
	if err := c.writeLocked(msg); err != nil {
		t.Fatal(err)
	}
	if srv.set.Load() == 0 {
		t.Fatal("the first write did not wait: the test needs it to")
	}
	time.Sleep(writeTimeout + 100*time.Millisecond)
	if err := c.writeLocked([]byte(": keep-alive\n\n")); err != nil {
		t.Fatalf("a write after the first's deadline passed: %v", err)
	}
}
