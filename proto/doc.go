// Package proto holds the gRPC contracts between agentplane's services. The .proto sources sit
// beside the Go code generated from them by `make generate`.
package proto
