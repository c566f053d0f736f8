// Package statusclient is how agentplane services write status: through status-writer, with a
// deadline per attempt and retries while status-writer is unavailable, so that a restarting
// status-writer delays writes and loses none.
package statusclient

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/agentplane/agentplane/libs/grpcx"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// Options configure a Client.
type Options struct {
	// AttemptTimeout bounds one attempt (default 10s).
	AttemptTimeout time.Duration
	// RetryFor bounds the time spent retrying UNAVAILABLE (default 60s); the caller's context
	// can end it sooner.
	RetryFor time.Duration
	// FieldManager names the caller; it defaults to the service name given to New.
	FieldManager string
	// Dial options, for TLS.
	Dial grpcx.ClientOptions
}

// Client writes status through status-writer.
type Client struct {
	conn *grpc.ClientConn
	rpc  pb.StatusWriterClient
	o    Options
}

// Writer is what a controller needs of status-writer; *Client is one, and tests may use another.
type Writer interface {
	Write(ctx context.Context, req *pb.WriteStatusRequest) (*pb.WriteStatusResponse, error)
}

// New connects (lazily) to status-writer at target, for example "status-writer:50051".
func New(target, caller string, o Options) (*Client, error) {
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = 10 * time.Second
	}
	if o.RetryFor <= 0 {
		o.RetryFor = 60 * time.Second
	}
	if o.FieldManager == "" {
		o.FieldManager = "agentplane-" + caller
	}
	conn, err := grpcx.Dial(target, o.Dial)
	if err != nil {
		return nil, fmt.Errorf("status-writer client for %s: %w", target, err)
	}
	return &Client{conn: conn, rpc: pb.NewStatusWriterClient(conn), o: o}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Write writes one status. UNAVAILABLE (status-writer or the API server restarting) and an
// attempt's own timeout are retried with exponential backoff and jitter until RetryFor or ctx
// ends; every other error is returned at once, as status-writer's codes say what is wrong.
func (c *Client) Write(ctx context.Context, req *pb.WriteStatusRequest) (*pb.WriteStatusResponse, error) {
	if req.GetFieldManager() == "" {
		req.FieldManager = c.o.FieldManager
	}
	var resp *pb.WriteStatusResponse
	err := grpcx.RetryUnavailable(ctx, grpcx.Retry{AttemptTimeout: c.o.AttemptTimeout, RetryFor: c.o.RetryFor}, "status-writer",
		func(ctx context.Context) (err error) {
			resp, err = c.rpc.WriteStatus(ctx, req, grpc.WaitForReady(true))
			return err
		})
	return resp, err
}
