// Package telemetry configures OpenTelemetry tracing from the standard OTEL_* environment
// variables, through go.opentelemetry.io/contrib's autoexport (OTEL_TRACES_EXPORTER,
// OTEL_EXPORTER_OTLP_*) and autoprop (OTEL_PROPAGATORS). With no exporter configured it installs
// nothing but the propagators, so a service costs nothing to trace until someone points it at a
// collector (Jaeger's OTLP ports).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Shutdown flushes and stops the tracer provider.
type Shutdown func(context.Context) error

// Enabled reports whether the OTEL_* environment asks for traces to be exported: an exporter
// other than otlp is named in OTEL_TRACES_EXPORTER (console), or an OTLP endpoint is set.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return false
	case "", "otlp":
	default:
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Propagator is the text-map propagator OTEL_PROPAGATORS names (tracecontext,baggage when it is
// unset). An unknown name is an error rather than a silent fallback.
func Propagator(getenv func(string) string) (propagation.TextMapPropagator, error) {
	v := strings.TrimSpace(getenv("OTEL_PROPAGATORS"))
	if v == "" {
		return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}), nil
	}
	var names []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	p, err := autoprop.TextMapPropagator(names...)
	if err != nil {
		return nil, fmt.Errorf("OTEL_PROPAGATORS=%q: %w (known: tracecontext, baggage, b3, b3multi, jaeger, xray, ottrace, none)", v, err)
	}
	return p, nil
}

// Resource describes this process: service.name and service.version, the pod it runs in
// (k8s.pod.name from POD_NAME, k8s.namespace.name from POD_NAMESPACE, which the charts pass from
// the downward API) and service.instance.id (POD_UID, else POD_NAME, else host name and pid).
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override any of them.
func Resource(ctx context.Context, serviceName, version string, getenv func(string) string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{semconv.ServiceName(serviceName), semconv.ServiceVersion(version)}
	pod, ns := getenv("POD_NAME"), getenv("POD_NAMESPACE")
	if pod != "" {
		attrs = append(attrs, semconv.K8SPodName(pod))
	}
	if ns != "" {
		attrs = append(attrs, semconv.K8SNamespaceName(ns))
	}
	instance := getenv("POD_UID")
	if instance == "" {
		instance = pod
	}
	if instance == "" {
		host, _ := os.Hostname()
		instance = host + "-" + strconv.Itoa(os.Getpid())
	}
	attrs = append(attrs, semconv.ServiceInstanceID(instance))
	res, err := resource.New(ctx,
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	return res, nil
}

// Setup installs the propagators OTEL_PROPAGATORS names and, when Enabled, the global tracer
// provider with the exporter autoexport builds from OTEL_TRACES_EXPORTER and
// OTEL_EXPORTER_OTLP_* (protocol http/protobuf unless OTEL_EXPORTER_OTLP_PROTOCOL says grpc;
// headers, TLS and timeouts from the same variables). serviceName is the default service.name.
func Setup(ctx context.Context, serviceName, version string) (Shutdown, error) {
	prop, err := Propagator(os.Getenv)
	if err != nil {
		return nil, err
	}
	otel.SetTextMapPropagator(prop)
	if !Enabled(os.Getenv) {
		return func(context.Context) error { return nil }, nil
	}
	res, err := Resource(ctx, serviceName, version, os.Getenv)
	if err != nil {
		return nil, err
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry exporter (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_PROTOCOL): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
