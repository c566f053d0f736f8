//go:build tools

// Package tools pins the Kubernetes control-plane commands that the local stack and the
// integration tests run. They are built from their Go modules by `make tools`.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
