//go:build tools

// Package tools pins the Kubernetes commands that the local stack and the integration tests run
// (`make tools-up`: the control plane, kubectl and kwok, in one build) and the real node's kubelet
// and kube-proxy (`make tools-cluster`). They are built from their Go modules.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
