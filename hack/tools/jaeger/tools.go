//go:build tools

// Package tools pins Jaeger (all-in-one) for local tracing. It lives in a module of its own
// because its dependency versions clash with Kubernetes'.
package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
