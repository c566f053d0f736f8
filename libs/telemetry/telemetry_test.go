package telemetry

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabledFollowsOTELVariables(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_SDK_DISABLED": "true"}, false},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_EXPORTER": "none"}, false},
		{"otlp without endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, false},
		{"console needs no endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Enabled(env(tc.env)); got != tc.want {
				t.Fatalf("Enabled = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPropagatorHonoursOTELPropagators injects a span context with the propagators each setting
// names and checks the headers that come out.
func TestPropagatorHonoursOTELPropagators(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	cases := map[string]struct{ want, not []string }{
		"":                        {want: []string{"traceparent"}, not: []string{"b3", "uber-trace-id"}},
		"b3":                      {want: []string{"b3"}, not: []string{"traceparent"}},
		"tracecontext,jaeger":     {want: []string{"traceparent", "uber-trace-id"}, not: []string{"b3"}},
		" b3multi , tracecontext": {want: []string{"x-b3-traceid", "traceparent"}},
		"none":                    {not: []string{"traceparent", "b3", "uber-trace-id"}},
	}
	for setting, tc := range cases {
		t.Run(setting, func(t *testing.T) {
			p, err := Propagator(env(map[string]string{"OTEL_PROPAGATORS": setting}))
			if err != nil {
				t.Fatal(err)
			}
			carrier := propagation.MapCarrier{}
			p.Inject(ctx, carrier)
			for _, h := range tc.want {
				if carrier.Get(h) == "" {
					t.Errorf("no %s header (got %v)", h, carrier)
				}
			}
			for _, h := range tc.not {
				if carrier.Get(h) != "" {
					t.Errorf("unexpected %s header (got %v)", h, carrier)
				}
			}
		})
	}
	if _, err := Propagator(env(map[string]string{"OTEL_PROPAGATORS": "tracecontext,zipkin"})); err == nil || !strings.Contains(err.Error(), "OTEL_PROPAGATORS") {
		t.Errorf("an unknown propagator was accepted or not named: %v", err)
	}
}

func TestResourceNamesThePodAndInstance(t *testing.T) {
	get := func(m map[string]string) map[attribute.Key]string {
		res, err := Resource(context.Background(), "status-writer", "v1", env(m))
		if err != nil {
			t.Fatal(err)
		}
		out := map[attribute.Key]string{}
		for _, kv := range res.Attributes() {
			out[kv.Key] = kv.Value.String()
		}
		return out
	}
	got := get(map[string]string{"POD_NAME": "status-writer-7d9f", "POD_NAMESPACE": "agents", "POD_UID": "0b5e"})
	for k, want := range map[attribute.Key]string{"service.name": "status-writer", "service.version": "v1",
		"k8s.pod.name": "status-writer-7d9f", "k8s.namespace.name": "agents", "service.instance.id": "0b5e"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	got = get(map[string]string{"POD_NAME": "p"})
	if got["service.instance.id"] != "p" {
		t.Errorf("without POD_UID service.instance.id = %q, want the pod name", got["service.instance.id"])
	}
	got = get(nil)
	if got["service.instance.id"] == "" || got["k8s.pod.name"] != "" {
		t.Errorf("outside a pod: instance %q (want host-pid), pod %q (want none)", got["service.instance.id"], got["k8s.pod.name"])
	}
}
