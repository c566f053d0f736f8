// Command coredns is CoreDNS v1.15 with only the plugins a cluster's DNS needs: the cluster
// domain from the API server (kubernetes), health and readiness for the kubelet's probes,
// metrics, a cache, and forwarding of other names. `make tools-cluster` builds it from the
// Go module (CGO_ENABLED=0) for the FROM-scratch image the local cluster runs as its DNS.
//
// CoreDNS's own main imports every plugin it ships (cloud DNS providers among them); a build
// that lists its own plugins is the way CoreDNS documents for a smaller binary. The order of
// Directives is the order CoreDNS runs them in, taken from its plugin.cfg.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func init() {
	dnsserver.Directives = []string{
		"reload", "ready", "health", "prometheus", "errors", "log", "loadbalance",
		"cache", "kubernetes", "loop", "forward",
	}
}

func main() { coremain.Run() }
