//go:build integration

package wiring

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/libs/testenv"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// recordingWriter is a status-writer peer that only answers: the test is about the trace
// context crossing the call (status-writer's own span and its API call join the caller's trace:
// status-writer's TestWriteSpanJoinsTheCallersTrace).
type recordingWriter struct {
	pb.UnimplementedStatusWriterServer
}

func (recordingWriter) WriteStatus(context.Context, *pb.WriteStatusRequest) (*pb.WriteStatusResponse, error) {
	return &pb.WriteStatusResponse{}, nil
}

// A cancel is one trace: the reconcile's span is the parent of the status write it makes.
func TestACancelIsOneTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	defer otel.SetTracerProvider(noop.NewTracerProvider())

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler()))
	pb.RegisterStatusWriterServer(srv, recordingWriter{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	sw, err := statusclient.New(lis.Addr().String(), "cancel-propagator", statusclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()

	f := newFixture(t)
	f.apply(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"traced"},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`)
	f.setARStatus("traced", agentsv1alpha1.AgentRunStatus{Phase: "Running"})
	p, err := New(Config{Namespaces: []string{f.ns}, Enabled: true, Timeout: time.Minute, Workers: 1},
		Deps{Kube: env.Client, REST: env.Config, Status: sw, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	f.cancel("agentruns", "traced")

	// Every reconcile is a trace of its own; the informer's first look at the run (before the
	// cancel) is one that writes nothing, so the write is looked for among all of them.
	testenv.Eventually(t, 20*time.Second, "a status write inside the cancel's trace", func() error {
		reconciles := map[trace.TraceID]bool{}
		var writes []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			switch {
			case s.Name() == "Reconcile AgentRun":
				reconciles[s.SpanContext().TraceID()] = true
			case s.Name() == "agentplane.v1.StatusWriter/WriteStatus" && s.SpanKind().String() == "server":
				writes = append(writes, s)
			}
		}
		if len(reconciles) == 0 || len(writes) == 0 {
			return fmt.Errorf("spans: %d reconciles, %d status-writer side", len(reconciles), len(writes))
		}
		for _, w := range writes {
			if !reconciles[w.SpanContext().TraceID()] {
				return fmt.Errorf("status write in trace %s, which no reconcile started", w.SpanContext().TraceID())
			}
		}
		return nil
	})
}
