// Package eventclient is how agentplane services emit Kubernetes Events: through event-emitter,
// which rate limits them per object and writes them afterwards. It retries like statusclient: a
// deadline per attempt, and UNAVAILABLE retried with backoff and jitter, so a restarting
// event-emitter delays events and loses none.
package eventclient

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/agentplane/agentplane/libs/grpcx"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// Event types.
const (
	Normal  = "Normal"
	Warning = "Warning"
)

// Options configure a Client.
type Options struct {
	// AttemptTimeout bounds one attempt (default 10s).
	AttemptTimeout time.Duration
	// RetryFor bounds the time spent retrying UNAVAILABLE (default 60s).
	RetryFor time.Duration
	// Controller and Instance fill reporting_controller and reporting_instance when a request
	// leaves them empty: the service name (as agentplane.dev/<service>) and the replica's name.
	Controller string
	Instance   string
	// Dial options, for TLS.
	Dial grpcx.ClientOptions
}

// Client emits events through event-emitter.
type Client struct {
	conn *grpc.ClientConn
	rpc  pb.EventEmitterClient
	o    Options
}

// Emitter is what a controller needs of event-emitter; *Client is one, and tests may use another.
type Emitter interface {
	Emit(ctx context.Context, req *pb.EmitRequest) (*pb.EmitResponse, error)
}

// New connects (lazily) to event-emitter at target, for example "event-emitter:50051". caller is
// the service name; instance the replica's identity.
func New(target, caller, instance string, o Options) (*Client, error) {
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = 10 * time.Second
	}
	if o.RetryFor <= 0 {
		o.RetryFor = 60 * time.Second
	}
	if o.Controller == "" {
		o.Controller = "agentplane.dev/" + caller
	}
	if o.Instance == "" {
		o.Instance = instance
	}
	conn, err := grpcx.Dial(target, o.Dial)
	if err != nil {
		return nil, fmt.Errorf("event-emitter client for %s: %w", target, err)
	}
	return &Client{conn: conn, rpc: pb.NewEventEmitterClient(conn), o: o}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Emit asks event-emitter for one event and returns its decision (emitted, counted, rate
// limited, suppressed or disabled). UNAVAILABLE is retried; every other error is returned at
// once (INVALID_ARGUMENT names the bad field).
func (c *Client) Emit(ctx context.Context, req *pb.EmitRequest) (*pb.EmitResponse, error) {
	if req.GetReportingController() == "" {
		req.ReportingController = c.o.Controller
	}
	if req.GetReportingInstance() == "" {
		req.ReportingInstance = c.o.Instance
	}
	var resp *pb.EmitResponse
	err := grpcx.RetryUnavailable(ctx, grpcx.Retry{AttemptTimeout: c.o.AttemptTimeout, RetryFor: c.o.RetryFor}, "event-emitter",
		func(ctx context.Context) (err error) {
			resp, err = c.rpc.Emit(ctx, req, grpc.WaitForReady(true))
			return err
		})
	return resp, err
}
