// Command pause is the local cluster's sandbox ("pause") image: the first process of every pod,
// holding its namespaces until the kubelet stops the pod. It waits for SIGTERM or SIGINT and
// reaps any child handed to it (when a pod shares its process namespace, it is PID 1).
// Kubernetes' own pause image is a C program pulled from a registry; this machine cannot pull,
// so `make cluster-up` builds this one FROM scratch and points containerd's sandbox_image at it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
