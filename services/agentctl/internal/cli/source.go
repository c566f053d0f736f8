package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/health"
	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
)

// source is where status comes from: watch-gateway over gRPC, or the Kubernetes API directly.
type source interface {
	// snapshot returns the current status.
	snapshot(ctx context.Context) (health.Event, error)
	// stream calls emit for each event until ctx ends (nil) or the stream breaks (an error).
	stream(ctx context.Context, cursor string, followOnly bool, heartbeat time.Duration, emit func(health.Event)) error
	close()
}

// grpcSource streams from watch-gateway's AgentctlService.
type grpcSource struct {
	conn      *grpc.ClientConn
	client    jangarv1.AgentctlServiceClient
	namespace string
	// release ends what the connection needs besides itself (a port-forward), if anything.
	release func()
}

func newGRPCSource(addr, namespace string, a grpcAccess) (*grpcSource, error) {
	opts, err := a.dialOptions()
	if err != nil {
		return nil, err
	}
	conn, err := grpcx.Dial(addr, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to watch-gateway at %s: %w", addr, err)
	}
	return &grpcSource{conn: conn, client: jangarv1.NewAgentctlServiceClient(conn), namespace: namespace}, nil
}

func (g *grpcSource) close() {
	_ = g.conn.Close()
	if g.release != nil {
		g.release()
	}
}

func (g *grpcSource) snapshot(ctx context.Context) (health.Event, error) {
	st, err := g.client.GetControlPlaneStatus(ctx, &jangarv1.GetControlPlaneStatusRequest{Namespace: g.namespace})
	if err != nil {
		return health.Event{}, err
	}
	return health.Event{Type: health.Snapshot, GeneratedAt: st.GetGeneratedAt().AsTime(), Items: fromProto(st.GetItems())}, nil
}

var fromType = map[jangarv1.ControlPlaneStatusEvent_Type]health.EventType{
	jangarv1.ControlPlaneStatusEvent_SNAPSHOT: health.Snapshot, jangarv1.ControlPlaneStatusEvent_DELTA: health.Delta,
	jangarv1.ControlPlaneStatusEvent_HEARTBEAT: health.Heartbeat, jangarv1.ControlPlaneStatusEvent_ERROR: health.ErrorEv,
}

func (g *grpcSource) stream(ctx context.Context, cursor string, followOnly bool, heartbeat time.Duration, emit func(health.Event)) error {
	s, err := g.client.WatchControlPlaneStatus(ctx, &jangarv1.WatchControlPlaneStatusRequest{
		Namespace: g.namespace, Heartbeat: durationpb.New(heartbeat), Cursor: cursor, FollowOnly: followOnly,
	})
	if err != nil {
		return err
	}
	for {
		ev, err := s.Recv()
		if err != nil {
			if ctx.Err() != nil || deadlineReached(ctx) {
				return nil
			}
			return err
		}
		emit(health.Event{Type: fromType[ev.GetType()], GeneratedAt: ev.GetGeneratedAt().AsTime(), Items: fromProto(ev.GetItems()),
			Message: ev.GetMessage(), Cursor: ev.GetCursor()})
	}
}

// deadlineReached reports a stream that ended within a second of the call's deadline (--timeout):
// the server ends it there (DEADLINE_EXCEEDED, or a plain end of stream) a moment before the
// client's own context notices. The watch held until its timeout; it is not a disconnect.
func deadlineReached(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < time.Second
}

func fromProto(items []*jangarv1.ControlPlaneStatusItem) []health.Item {
	out := make([]health.Item, 0, len(items))
	for _, it := range items {
		hi := health.Item{Component: it.GetComponent(), Namespace: it.GetNamespace(), Status: health.Status(it.GetStatus()), Message: it.GetMessage()}
		if it.GetDetails() != nil {
			hi.Details = it.GetDetails().AsMap()
		}
		out = append(out, hi)
	}
	return out
}

// kubeSource computes the same model locally from the Kubernetes API, with the permissions of
// the user's kube context: the collector of libs/health, run in this process.
type kubeSource struct {
	hub       *health.Hub
	collector *health.Collector
	cancel    context.CancelFunc
	done      chan struct{} // closed when the collector has stopped
}

// dial, when set, reaches a service's health (a port-forward to one of its pods); without it
// services are judged by their Deployments alone.
func newKubeSource(kc kubernetes.Interface, dyn dynamic.Interface, namespace string, dial func(context.Context, string) (string, grpcx.ClientOptions, func(), error)) *kubeSource {
	hub := health.NewHub(1024, 256)
	ctx, cancel := context.WithCancel(context.Background())
	c := health.NewCollector(kc, dyn, hub, health.CollectorOptions{Namespace: namespace, Debounce: 300 * time.Millisecond, Dial: dial, Client: true})
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	return &kubeSource{hub: hub, collector: c, cancel: cancel, done: done}
}

// close stops the collector and waits for it, its informers and probes to stop.
func (k *kubeSource) close() { k.cancel(); <-k.done }

// settle waits until the collector has published and gone quiet for a moment, so a one-shot
// status is complete rather than the first partial view.
func (k *kubeSource) settle(ctx context.Context) (health.Event, error) {
	_, sub := k.hub.Subscribe("", true)
	defer sub.Close()
	start := time.Now()
	waited := false
	quiet := time.NewTimer(10 * time.Second)
	defer quiet.Stop()
	seen := false
	for {
		select {
		case <-ctx.Done():
			return health.Event{}, ctx.Err()
		case <-sub.Events():
			seen = true
			quiet.Reset(time.Second)
		case <-quiet.C:
			if !seen {
				return health.Event{}, errors.New("no status from the Kubernetes API within 10s: check --kubeconfig, --context and -n")
			}
			// Services whose health is still being reached (a port-forward under way) get a
			// few more seconds; then what is known is the answer.
			if k.collector.Pending() > 0 && time.Since(start) < 8*time.Second {
				quiet.Reset(200 * time.Millisecond)
				waited = true
				continue
			}
			if waited { // the last answers still have to be folded in (the collector debounces)
				waited = false
				quiet.Reset(time.Second)
				continue
			}
			return k.hub.Current(), nil
		}
	}
}

func (k *kubeSource) snapshot(ctx context.Context) (health.Event, error) { return k.settle(ctx) }

func (k *kubeSource) stream(ctx context.Context, cursor string, followOnly bool, heartbeat time.Duration, emit func(health.Event)) error {
	if cursor == "" && !followOnly {
		snap, err := k.settle(ctx)
		if err != nil {
			return err
		}
		emit(snap)
		cursor = snap.Cursor
	}
	initial, sub := k.hub.Subscribe(cursor, followOnly)
	defer sub.Close()
	last := sub.At()
	for _, ev := range initial {
		emit(ev)
	}
	t := time.NewTicker(heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-sub.Events():
			emit(ev)
			last = ev.Cursor
		case <-sub.Lagged():
			return errors.New("fell behind the local watch")
		case <-t.C:
			emit(health.HeartbeatAt(last))
		}
	}
}
