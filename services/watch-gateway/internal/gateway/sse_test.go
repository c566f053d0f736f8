package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair is a connected pair on loopback: the gateway's end, with a small send buffer so that a
// watcher that reads slowly, or not at all, fills it soon, and the watcher's.
func tcpPair(t testing.TB) (gw, watcher net.Conn) {
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
	watcher, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	gw = <-accepted
	if gw == nil {
		t.Fatal("accept failed")
	}
	_ = gw.(*net.TCPConn).SetWriteBuffer(4096)
	t.Cleanup(func() { _ = gw.Close(); _ = watcher.Close() })
	return gw, watcher
}

// A watcher that stops reading is cut off once a write has waited writeTimeout for room in its
// socket buffer, rather than holding up the fan-out worker and every watcher after it.
func TestAWatcherThatStopsReadingIsCutOffAfterTheWriteTimeout(t *testing.T) {
	gw, _ := tcpPair(t)
	c := &detachedConn{conn: gw}
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	var (
		err  error
		took time.Duration
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 0; err == nil && i < 1000; i++ {
			start := time.Now()
			err = c.writeLocked(chunk)
			took = time.Since(start)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a write to a watcher that reads nothing has not given up after 10 s")
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a watcher that reads nothing: write error %v, want the write deadline exceeded", err)
	}
	if took < writeTimeout-50*time.Millisecond || took > writeTimeout+2*time.Second {
		t.Fatalf("the last write gave up after %s, want about writeTimeout (%s)", took, writeTimeout)
	}
}

// A watcher that reads slowly gets a write larger than its socket buffer whole and in order, and
// a write long after it is not refused by its deadline.
func TestASlowWatcherGetsALargeWriteWholeAndTheNextOneToo(t *testing.T) {
	gw, watcher := tcpPair(t)
	c := &detachedConn{conn: gw}
	msg := make([]byte, 256<<10) // more than the two sockets' buffers hold at first: part of it waits for the reader
	for i := range msg {
		msg[i] = byte(i % 251)
	}
	last := []byte(": keep-alive\n\n")
	got := make(chan []byte, 1)
	_ = watcher.SetReadDeadline(time.Now().Add(10 * time.Second)) // bytes never written fail the test, not hang it
	go func() {
		time.Sleep(20 * time.Millisecond) // the reader starts late
		b, _ := io.ReadAll(io.LimitReader(watcher, int64(len(msg)+len(last))))
		got <- b
	}()
	if err := c.writeLocked(msg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(writeTimeout + 100*time.Millisecond)
	if err := c.writeLocked(last); err != nil {
		t.Fatalf("a write after the first one's deadline passed: %v", err)
	}
	if b := <-got; !bytes.Equal(b, append(msg, last...)) {
		t.Fatalf("the watcher read %d bytes, not the two writes as written", len(b))
	}
}
