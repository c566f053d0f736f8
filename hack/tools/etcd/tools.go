//go:build tools

// Package tools pins etcd, the store behind the local control plane and envtest. It lives in a
// module of its own because its dependency versions clash with Kubernetes'.
package tools

import _ "go.etcd.io/etcd/server/v3"
