// Package telemetry configures OpenTelemetry tracing from the standard OTEL_* environment
// variables. With no exporter endpoint configured it installs nothing but the propagators, so a
// service costs nothing to trace until someone points it at a collector (Jaeger's OTLP port).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Shutdown flushes and stops the tracer provider.
type Shutdown func(context.Context) error

// Enabled reports whether the OTEL_* environment asks for traces to be exported.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if exp := strings.ToLower(getenv("OTEL_TRACES_EXPORTER")); exp == "none" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the global tracer provider and W3C propagators. serviceName is the default for
// service.name; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it. The exporter reads
// the rest of its configuration (headers, TLS, timeouts) from the OTEL_EXPORTER_OTLP_* variables.
func Setup(ctx context.Context, serviceName, version string) (Shutdown, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if !Enabled(os.Getenv) {
		return func(context.Context) error { return nil }, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName), semconv.ServiceVersion(version)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	var exp sdktrace.SpanExporter
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case "", "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q is not supported: use grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
