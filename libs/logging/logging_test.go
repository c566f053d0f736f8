package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestLoggerAddsTraceAndHonoursLevel(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, "info", "json")
	l.Debug("hidden")
	if buf.Len() != 0 {
		t.Fatalf("debug line written at info level: %s", buf.String())
	}
	tid, _ := trace.TraceIDFromHex("0102030405060708090a0b0c0d0e0f10")
	sid, _ := trace.SpanIDFromHex("0102030405060708")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	FromContext(IntoContext(ctx, l)).InfoContext(ctx, "write status", "kind", "AgentRun")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not JSON: %v: %s", err, buf.String())
	}
	if line["trace_id"] != tid.String() || line["span_id"] != sid.String() || line["kind"] != "AgentRun" {
		t.Fatalf("line = %v", line)
	}
}
