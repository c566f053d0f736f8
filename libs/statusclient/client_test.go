package statusclient

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/testenv"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// recorder stands in for status-writer in these unit tests of the client's retry rules; the
// real service is exercised by status-writer's integration tests.
type recorder struct {
	pb.UnimplementedStatusWriterServer
	calls atomic.Int32
	fail  codes.Code
}

func (r *recorder) WriteStatus(_ context.Context, in *pb.WriteStatusRequest) (*pb.WriteStatusResponse, error) {
	r.calls.Add(1)
	if r.fail != codes.OK {
		return nil, status.Error(r.fail, "refused")
	}
	return &pb.WriteStatusResponse{ResourceVersion: in.GetFieldManager()}, nil
}

func serveOn(t *testing.T, addr string, r *recorder) *grpc.Server {
	t.Helper()
	var l net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger briefly after a stop
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterStatusWriterServer(s, r)
	go func() { _ = s.Serve(l) }()
	return s
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestWriteWaitsOutARestartAndLosesNothing(t *testing.T) {
	addr := freeAddr(t)
	r := &recorder{}
	first := serveOn(t, addr, r)
	watch, failed := testenv.FailedCalls() // the test waits on attempts, not on a clock
	c, err := New(addr, "job-gc", Options{AttemptTimeout: 500 * time.Millisecond, RetryFor: 20 * time.Second,
		Dial: grpcx.ClientOptions{Extra: []grpc.DialOption{watch}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Write(ctx, &pb.WriteStatusRequest{}); err != nil {
		t.Fatal(err)
	}
	first.Stop() // status-writer goes away...
	done := make(chan error, 1)
	go func() {
		resp, err := c.Write(ctx, &pb.WriteStatusRequest{})
		if err == nil && resp.GetResourceVersion() != "agentplane-job-gc" {
			t.Errorf("field manager = %q, want the caller's default", resp.GetResourceVersion())
		}
		done <- err
	}()
	for i := 0; i < 2; i++ { // ...for two failed attempts...
		select {
		case err := <-failed:
			if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
				t.Fatalf("attempt %d failed with %v, want UNAVAILABLE or its deadline", i+1, err)
			}
		case err := <-done:
			t.Fatalf("write returned while status-writer was down: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatalf("no failed attempt %d seen in 30s", i+1)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("write returned while status-writer was down: %v", err)
	default:
	}
	second := serveOn(t, addr, r) // ...and comes back.
	defer second.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("write after restart: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("write never completed after status-writer came back")
	}
	if got := r.calls.Load(); got != 2 {
		t.Fatalf("server saw %d writes, want 2", got)
	}
}

func TestWriteReturnsRefusalsAtOnce(t *testing.T) {
	addr := freeAddr(t)
	r := &recorder{fail: codes.FailedPrecondition}
	s := serveOn(t, addr, r)
	defer s.Stop()
	c, err := New(addr, "x", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Write(context.Background(), &pb.WriteStatusRequest{})
	if status.Code(err) != codes.FailedPrecondition || r.calls.Load() != 1 {
		t.Fatalf("err=%v calls=%d: a refusal must not be retried", err, r.calls.Load())
	}
}

func TestWriteGivesUpAfterRetryFor(t *testing.T) {
	c, err := New(freeAddr(t), "x", Options{AttemptTimeout: 200 * time.Millisecond, RetryFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Write(context.Background(), &pb.WriteStatusRequest{})
	if err == nil {
		t.Fatal("write succeeded with no server")
	}
	// Ignoring RetryFor would mean the 60 s default: the bound tells the two apart with room for
	// a loaded machine.
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("gave up after %s, want about RetryFor (1s)", d)
	}
	if !strings.Contains(err.Error(), "status-writer unavailable after") {
		t.Fatalf("err = %v, want it to say status-writer was unavailable", err)
	}
}
