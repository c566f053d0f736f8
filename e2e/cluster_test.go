//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/agentplane/agentplane/libs/testenv"
)

// TestClusterInstall installs agentplane as an operator would (#30): on `make cluster-up`'s
// cluster (a real node: kubelet, containerd, kube-proxy, CoreDNS; kwok's node beside it), the
// images and charts pushed to the local registry with `make push`, and `helm install` from
// oci:// overriding only the registry and the Redis address. Every Deployment becomes Available
// on the real node with its readiness probe passing; the services reach each other by cluster
// DNS names with projected tokens; the examples run in real containers; cancel, retention and
// WorkflowJobMissing behave; helm test passes; every command the NOTES print works; uninstall
// leaves nothing but the CRDs (kept). Then the same with one release per service, an upgrade from
// the 0.1.x charts and images (upgradeFrom) with 100 runs in flight, leader pods deleted
// mid-flight, and make cluster-down leaving nothing on the host.
func TestClusterInstall(t *testing.T) {
	c := startCluster(t)
	if !t.Run("the node runs real containers beside kwok's", c.checkNodes) {
		return
	}
	jobs := recordJobs(t, c.kube, metav1.NamespaceAll) // runs go to more than one namespace
	var version string

	if !t.Run("one release from the registry", func(t *testing.T) {
		before := c.clusterObjects(t)
		// The one-release chart's default: runs apart from the control plane (#31 item 10).
		c.runsNS = clusterNS + "-runs"
		// README.md's commands: make push, helm install from oci:// with the registry and
		// Redis given, the examples, their logs, helm test.
		c.runReadme(t)
		version = c.chartVersion(t)
		c.checkRelease(t, "agentplane", version, true)
		t.Run("runs live apart from the control plane's Secrets", c.checkRunsApart)
		t.Run("the threat model's gateway refusals, over its default TLS", c.checkGatewayThreats)
		t.Run("an upgrade keeps the gateway's generated certificate", c.checkCertificateKept)
		t.Run("the examples run in real containers", func(t *testing.T) { c.checkExamples(t, jobs) })
		t.Run("the threat model's admission refusals", c.checkThreats)
		t.Run("the threat model on a real run: redaction, the console's cancel, watch bounds", c.checkRunThreats)
		t.Run("cancel, retention and WorkflowJobMissing", c.checkLifecycle)
		t.Run("helm test", func(t *testing.T) { c.helmTest(t, "agentplane") })
		t.Run("every command the NOTES print works", func(t *testing.T) {
			c.prepareNotes(t)
			c.runNotes(t, "agentplane", map[string]string{"<namespace>": c.runsNS, "<name>": "notes-cancel"})
		})
		t.Run("helm uninstall leaves no held Job and no stray object", func(t *testing.T) {
			c.uninstall(t, before, "agentplane")
			c.checkCRDsKept(t)
		})
	}) {
		return
	}

	if !t.Run("one release per service, in dependency order", func(t *testing.T) {
		c.runsNS = clusterNS // each chart's own default: the release namespace
		before := c.clusterObjects(t)
		releases := []string{"agentplane-crds", "status-writer", "event-emitter", "job-gc", "cancel-propagator", "run-controller", "watch-gateway"}
		// The CRDs the one-release chart left (kept on uninstall) go to the agentplane-crds
		// release, as charts/agentplane-crds's README says.
		c.adoptCRDs(t, "agentplane-crds")
		// The run archive on (#37): job-gc writes to, and watch-gateway reads from, make
		// cluster-up's PostgreSQL, its password from a Secret, as docs/archive.md sets it up.
		archive := c.archiveValues(t)
		for _, r := range releases {
			var extra []string
			switch r {
			case "watch-gateway": // the aggregated API on the real node: its NOTES' commands below use it
				extra = append([]string{"--set", "apiService.enabled=true"}, archive...)
			case "job-gc":
				extra = archive
			}
			c.helmInstall(t, r, r, version, extra...)
		}
		for _, r := range releases[1:] {
			c.checkRelease(t, r, version, false)
		}
		t.Run("the examples run in real containers", func(t *testing.T) { c.checkExamples(t, jobs) })
		t.Run("the run archive: real logs in PostgreSQL, read back through the gateway", c.checkArchive)
		for _, r := range releases[1:] {
			c.helmTest(t, r)
		}
		t.Run("NetworkPolicy: only the chart's peers reach a service", func(t *testing.T) { c.checkNetworkPolicy(t, version) })
		t.Run("every command the NOTES print works", func(t *testing.T) {
			c.prepareNotes(t)
			for _, r := range releases {
				c.runNotes(t, r, map[string]string{"<namespace>": c.runsNS, "<name>": "notes-cancel"})
			}
		})
		t.Run("helm uninstall leaves no held Job and no stray object", func(t *testing.T) {
			rev := slices.Clone(releases)
			slices.Reverse(rev)
			c.uninstall(t, before, rev...)
			if out, err := c.kubectl("delete", "secret", archiveSecret); err != nil {
				t.Errorf("delete the archive's password Secret: %v %s", err, out)
			}
		})
	}) {
		return
	}

	t.Run("upgrade from the 0.1.x charts (upgradeFrom) with 100 runs in flight, then leaders deleted", func(t *testing.T) {
		c.checkUpgrade(t, version, jobs)
	})

	t.Run("make cluster-down leaves nothing behind", c.stop)
}

// checkNodes: the real node is Ready on containerd, kwok's node is tainted, CoreDNS runs on the
// real node from the registry's image, and the `kubernetes` Service's endpoint is an address pods
// reach (not loopback).
func (c *kcluster) checkNodes(t *testing.T) {
	ctx := context.Background()
	node, err := c.kube.CoreV1().Nodes().Get(ctx, c.nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rt := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "containerd://") {
		t.Errorf("node %s runs %q, want containerd", c.nodeName, rt)
	}
	kwok, err := c.kube.CoreV1().Nodes().Get(ctx, "kwok-node-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(kwok.Spec.Taints) == 0 || kwok.Spec.Taints[0].Key != "kwok.x-k8s.io/node" {
		t.Errorf("kwok's node has taints %v: bulk run pods must be the only ones there", kwok.Spec.Taints)
	}
	eps, err := c.kube.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
	if err != nil || len(eps.Items) == 0 || len(eps.Items[0].Endpoints) == 0 || eps.Items[0].Endpoints[0].Addresses[0] != c.hostIP {
		t.Errorf("the kubernetes Service's endpoints %+v (%v), want %s", eps, err, c.hostIP)
	}
	pods, err := c.kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("CoreDNS pods: %v %v", pods, err)
	}
	p := pods.Items[0]
	if p.Spec.NodeName != c.nodeName || !podReady(&p) || !strings.HasPrefix(p.Status.ContainerStatuses[0].ImageID, c.registry+"/agentplane/coredns@sha256:") {
		t.Errorf("CoreDNS on %s, ready %v, image %s", p.Spec.NodeName, podReady(&p), p.Status.ContainerStatuses[0].ImageID)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// chartVersion is the version `make push` gave this tree's charts.
func (c *kcluster) chartVersion(t *testing.T) string {
	t.Helper()
	out, err := c.make("chart-version")
	if err != nil {
		t.Fatal(err, out)
	}
	return strings.TrimSpace(out)
}

// helmInstall installs chart from the registry as release, giving it only the registry and,
// where the chart takes one, the Redis address.
func (c *kcluster) helmInstall(t *testing.T, release, chart, version string, extra ...string) {
	t.Helper()
	args := []string{"install", release, "oci://" + c.registry + "/charts/" + chart, "--version", version, "--plain-http",
		"-n", clusterNS, "--wait", "--timeout", "5m"}
	args = append(args, withChoices(chart)...)
	switch chart {
	case "agentplane-crds":
	case "agentplane":
		args = append(args, "--set", "global.imageRegistry="+c.registry, "--set", "global.redis.url="+c.redisURL, "--render-subchart-notes")
	case "event-emitter", "watch-gateway":
		args = append(args, "--set", "image.registry="+c.registry, "--set", "redis.url="+c.redisURL)
	default:
		args = append(args, "--set", "image.registry="+c.registry)
	}
	start := time.Now()
	if out, err := c.helm(append(args, extra...)...); err != nil {
		pods, _ := c.kubectl("get", "pods", "-o", "wide")
		t.Fatalf("helm install %s: %v\n%s\n%s", release, err, out, pods)
	}
	t.Logf("helm install %s %s: %s", release, version, time.Since(start).Round(time.Second))
}

// checkRelease: every Deployment of the release is Available on the real node, its pods Ready
// with the image pulled from the registry at the release's tag, /readyz answering through the API
// server; the controllers dial status-writer and event-emitter by DNS name with a projected
// token, which those accept.
func (c *kcluster) checkRelease(t *testing.T, release, version string, firstPull bool) {
	t.Helper()
	ctx := context.Background()
	tag := strings.TrimPrefix(version[strings.Index(version, "-g"):], "-g")
	deps, err := c.kube.AppsV1().Deployments(clusterNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil || len(deps.Items) == 0 {
		t.Fatalf("release %s has no Deployments (%v)", release, err)
	}
	for _, d := range deps.Items {
		available := false
		for _, cond := range d.Status.Conditions {
			available = available || (cond.Type == "Available" && cond.Status == corev1.ConditionTrue)
		}
		if !available || d.Status.ReadyReplicas != *d.Spec.Replicas {
			t.Errorf("Deployment %s: available %v, %d of %d ready", d.Name, available, d.Status.ReadyReplicas, *d.Spec.Replicas)
		}
		ctr := d.Spec.Template.Spec.Containers[0]
		if rp := ctr.ReadinessProbe; rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" {
			t.Errorf("Deployment %s has readiness probe %+v, want GET /readyz", d.Name, rp)
		}
		sel := metav1.FormatLabelSelector(d.Spec.Selector)
		pods, err := c.kube.CoreV1().Pods(clusterNS).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			cs := p.Status.ContainerStatuses
			switch {
			case p.Spec.NodeName != c.nodeName:
				t.Errorf("pod %s runs on %s, want the real node %s", p.Name, p.Spec.NodeName, c.nodeName)
			case !podReady(&p) || len(cs) == 0:
				t.Errorf("pod %s not Ready", p.Name)
			case !strings.HasPrefix(cs[0].Image, c.registry+"/agentplane/") || !strings.HasSuffix(cs[0].Image, ":"+tag) ||
				!strings.HasPrefix(cs[0].ImageID, c.registry+"/agentplane/") || !strings.Contains(cs[0].ImageID, "@sha256:"):
				t.Errorf("pod %s runs %s (%s), want it pulled from %s at tag %s", p.Name, cs[0].Image, cs[0].ImageID, c.registry, tag)
			}
			body, err := c.kube.CoreV1().RESTClient().Get().Namespace(clusterNS).Resource("pods").Name(p.Name + ":9090").
				SubResource("proxy").Suffix("readyz").DoRaw(ctx)
			if err != nil || !strings.Contains(string(body), "ok") {
				t.Errorf("pod %s /readyz through the API server: %v %s", p.Name, err, body)
			}
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range ctr.Env {
			env[e.Name] = e
		}
		for _, name := range []string{"JANGAR_STATUS_WRITER_ADDR", "JANGAR_EVENT_EMITTER_ADDR"} {
			e, ok := env[name]
			if !ok {
				continue
			}
			if host, _, _ := strings.Cut(e.Value, ":"); host == "" || strings.Trim(host, "0123456789.") == "" {
				t.Errorf("Deployment %s dials %s=%q, want a Service's DNS name", d.Name, name, e.Value)
			}
			projected := false
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Projected != nil {
					for _, s := range v.Projected.Sources {
						projected = projected || (s.ServiceAccountToken != nil && s.ServiceAccountToken.Audience == "agentplane")
					}
				}
			}
			if !projected {
				t.Errorf("Deployment %s calls %s without a projected token for audience agentplane", d.Name, name)
			}
		}
	}
	if firstPull {
		evs, err := c.kube.CoreV1().Events(clusterNS).List(ctx, metav1.ListOptions{FieldSelector: "reason=Pulled"})
		if err != nil {
			t.Fatal(err)
		}
		pulled := map[string]bool{}
		re := regexp.MustCompile(`Successfully pulled image "([^"]+)"`)
		for _, e := range evs.Items {
			if m := re.FindStringSubmatch(e.Message); m != nil {
				pulled[m[1]] = true
			}
		}
		for _, svc := range services {
			if img := c.registry + "/agentplane/" + svc + ":" + tag; !pulled[img] {
				t.Errorf("no event says the node pulled %s (pulled: %v)", img, pulled)
			}
		}
	}
}

// checkAuthDecisions: status-writer and event-emitter allowed the controllers' calls and refused
// none (read from their metrics through the API server).
func (c *kcluster) checkAuthDecisions(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, svc := range []string{"status-writer", "event-emitter"} {
		pods, err := c.kube.CoreV1().Pods(clusterNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + svc})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("%s pods: %v", svc, err)
		}
		allowed := 0.0
		for _, p := range pods.Items {
			body, err := c.kube.CoreV1().RESTClient().Get().Namespace(clusterNS).Resource("pods").Name(p.Name + ":9090").
				SubResource("proxy").Suffix("metrics").DoRaw(ctx)
			if err != nil {
				t.Fatalf("%s metrics: %v", p.Name, err)
			}
			for _, l := range strings.Split(string(body), "\n") {
				var v float64
				switch {
				case strings.HasPrefix(l, `agentplane_grpc_auth_decisions_total{result="allowed"} `):
					_, _ = fmt.Sscan(strings.Fields(l)[1], &v)
					allowed += v
				case strings.HasPrefix(l, "agentplane_grpc_auth_decisions_total{"):
					if _, _ = fmt.Sscan(strings.Fields(l)[1], &v); v > 0 {
						t.Errorf("%s refused calls: %s", p.Name, l)
					}
				}
			}
		}
		if allowed == 0 {
			t.Errorf("%s allowed no authenticated call: the controllers did not reach it", svc)
		}
	}
}

// checkRunsApart: the one-release chart's services act on runs in the namespace it made for them
// (kept on uninstall), not in the control plane's; the examples' runs are there; a run's pod (the
// runs namespace's default ServiceAccount) may read no Secret of the control plane's namespace.
func (c *kcluster) checkRunsApart(t *testing.T) {
	out, err := c.kubectl("get", "namespace", c.runsNS, "-o", `jsonpath={.metadata.annotations.helm\.sh/resource-policy}`)
	if err != nil || strings.TrimSpace(out) != "keep" {
		t.Errorf("namespace %s: %v %q, want it made by the release and kept on uninstall", c.runsNS, err, out)
	}
	for _, d := range []string{"run-controller", "job-gc", "cancel-propagator", "status-writer", "event-emitter", "watch-gateway"} {
		out, err := c.kubectl("get", "deployment", "agentplane-"+d, "-o",
			`jsonpath={.spec.template.spec.containers[0].env[?(@.name=="JANGAR_AGENTS_CONTROLLER_NAMESPACES")].value}`)
		if err != nil || strings.TrimSpace(out) != c.runsNS {
			t.Errorf("%s acts in %q (%v), want %s", d, out, err, c.runsNS)
		}
	}
	if out, err := c.kubectl("get", "agentruns,orchestrationruns", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("runs in the control plane's namespace %s: %v %s", clusterNS, err, out)
	}
	if out, err := c.kubectlRuns("get", "agentrun", "hello", "-o", "name"); err != nil {
		t.Errorf("the README's example run is not in %s: %v %s", c.runsNS, err, out)
	}
	out, _ = c.kubectl("auth", "can-i", "get", "secrets", "-n", clusterNS, "--as", "system:serviceaccount:"+c.runsNS+":default")
	if strings.TrimSpace(out) != "no" {
		t.Errorf("a run's pod may read the control plane's Secrets: %q", out)
	}
}

// checkGatewayThreats makes, from outside the cluster through a port-forward, the attacks of
// docs/security.md on watch-gateway's HTTP that its defaults refuse: it serves TLS (plain HTTP is
// refused; a client that does not trust the chart's CA cannot connect), a junk bearer string and
// a token of the API server's own audience are refused (401), a token of the gateway's audience
// whose user holds no grant is forbidden (403), another Host is misdirected (421); the same token
// bound to the status-viewer Role streams the status.
func (c *kcluster) checkGatewayThreats(t *testing.T) {
	const svc, path = "agentplane-watch-gateway", "/api/agents/control-plane/status/stream"
	trusting, base := c.gatewayClient(t) // every call below has its own 15 s deadline
	port := base[strings.LastIndex(base, ":")+1:]
	call := func(client *http.Client, url, host, token string) (int, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if host != "" {
			req.Host = host
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return resp.StatusCode, string(b), nil
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				return resp.StatusCode, data, nil
			}
		}
		return resp.StatusCode, "", sc.Err()
	}
	secure := "https://localhost:" + port + path

	if code, body, err := call(&http.Client{Timeout: 15 * time.Second}, "http://127.0.0.1:"+port+path, "", ""); err == nil && (code != http.StatusBadRequest || !strings.Contains(body, "HTTPS")) {
		t.Errorf("plain HTTP to the gateway: %d %q, want refused (TLS is the default)", code, body)
	}
	if _, _, err := call(&http.Client{Timeout: 15 * time.Second}, secure, "", ""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client that does not trust the chart's CA: %v, want a certificate error", err)
	}

	must := func(args ...string) string {
		t.Helper()
		out, err := c.kubectl(args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(out)
	}
	must("create", "serviceaccount", "threat-eve")
	t.Cleanup(func() {
		_, _ = c.kubectl("delete", "serviceaccount/threat-eve", "rolebinding/threat-eve-status", "--ignore-not-found")
	})
	apiToken := must("create", "token", "threat-eve")
	gwToken := must("create", "token", "threat-eve", "--audience", "agentplane-gateway")

	for _, tc := range []struct {
		name, token, host string
		want              int
	}{
		{"a junk bearer string", "not-a-token", "", http.StatusUnauthorized},
		{"a token of the API server's audience", apiToken, "", http.StatusUnauthorized},
		{"a token of the gateway's audience without the grant", gwToken, "", http.StatusForbidden},
		{"another Host (DNS rebinding)", gwToken, "gateway.attacker.example", http.StatusMisdirectedRequest},
	} {
		if code, body, err := call(trusting, secure, tc.host, tc.token); err != nil || code != tc.want {
			t.Errorf("%s: %d %q (%v), want %d", tc.name, code, body, err, tc.want)
		} else if strings.Contains(body, tc.token) {
			t.Errorf("%s: the refusal repeats the token", tc.name)
		}
	}
	must("create", "rolebinding", "threat-eve-status", "--role", svc+"-status-viewer", "--serviceaccount", clusterNS+":threat-eve")
	eventually(t, 30*time.Second, "the bound token streams the status over TLS", func() error {
		code, body, err := call(trusting, secure, "", gwToken)
		if err != nil || code != http.StatusOK || !strings.Contains(body, `"component"`) {
			return errorf("%d %q %v", code, body, err)
		}
		return nil
	})
}

// checkCertificateKept: helm upgrade of the one-release chart (its watch-gateway templates
// rendered through tpl) reads the generated certificate back instead of making a new one, so
// clients that saved the CA keep trusting the gateway.
func (c *kcluster) checkCertificateKept(t *testing.T) {
	read := func() string {
		out, err := c.kubectl("get", "secret", "agentplane-watch-gateway-tls", "-o", `jsonpath={.data.tls\.crt}/{.data.ca\.crt}`)
		if err != nil || len(out) < 100 {
			t.Fatalf("the gateway's certificate: %v %q", err, out)
		}
		return out
	}
	before := read()
	if out, err := c.helm("upgrade", "agentplane", "oci://"+c.registry+"/charts/agentplane", "--version", c.chartVersion(t), "--plain-http",
		"-n", clusterNS, "--reuse-values", "--wait", "--timeout", "5m", "--render-subchart-notes"); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	if read() != before {
		t.Error("helm upgrade made the gateway a new certificate: clients holding its CA are cut off")
	}
}

// portForward runs kubectl port-forward to target's remote port on a free local port until the
// test ends and returns the local port.
func (c *kcluster) portForward(t *testing.T, target string, remote int) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, c.lookPath("kubectl"), "-n", clusterNS, "port-forward", target, fmt.Sprintf(":%d", remote))
	cmd.Env = c.environ()
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	ports := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`).FindStringSubmatch(sc.Text()); m != nil {
				ports <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case p := <-ports:
		return p
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl port-forward %s: no local port within 30s: %s", target, stderr.String())
		return ""
	}
}

// checkThreats makes, as kubectl users on this cluster, the attacks of docs/security.md's threat
// model that the API server refuses with the policies the release installed: a user who may only
// create AgentRuns names a Secret they may not read (the confused deputy), and a user who may
// patch runs swaps a run's Secrets after creation. Both are refused with a message naming what is
// wrong, and nothing is created or changed.
func (c *kcluster) checkThreats(t *testing.T) {
	must := func(args ...string) {
		t.Helper()
		if out, err := c.kubectlRuns(args...); err != nil {
			t.Fatalf("kubectl %v: %v %s", args, err, out)
		}
	}
	must("create", "secret", "generic", "threat-root", "--from-literal=token=not-for-mallory")
	must("create", "role", "threat-runs-only", "--verb=create,get,list,watch", "--resource=agentruns.agents.proompteng.ai")
	must("create", "rolebinding", "threat-mallory", "--role=threat-runs-only", "--user=mallory")
	t.Cleanup(func() {
		_, _ = c.kubectlRuns("delete", "secret/threat-root", "role/threat-runs-only", "rolebinding/threat-mallory", "--ignore-not-found")
		_, _ = c.kubectlRuns("delete", "agentrun", "threat-deputy", "--ignore-not-found", "--wait=false")
	})
	if out, err := c.kubectlRuns("auth", "can-i", "get", "secret/threat-root", "--as", "mallory"); err == nil || strings.TrimSpace(out) != "no" {
		t.Fatalf("mallory may read the Secret (%q): the attack would prove nothing", out)
	}
	deputy := `apiVersion: agents.proompteng.ai/v1alpha1
kind: AgentRun
metadata: {name: threat-deputy}
spec:
  agentRef: {name: codex}
  runtime: {type: job}
  secrets: [threat-root]
`
	out, err := c.kubectlRunsIn(deputy, "create", "--as", "mallory", "-f", "-")
	if err == nil || !strings.Contains(out, "threat-root") || !strings.Contains(out, "mallory") {
		t.Errorf("mallory's run naming a Secret she may not read: %v %s, want a refusal naming the Secret and the user", err, out)
	}
	if out, err := c.kubectlRuns("get", "agentrun", "threat-deputy", "-o", "name"); err == nil {
		t.Errorf("the refused run exists anyway: %s", out)
	}
	// An Agent author may list only what they may use: mallory, allowed to create Agents, lists
	// the Secret for the runs of everyone who uses her Agent.
	must("create", "role", "threat-agents", "--verb=create,get", "--resource=agents.agents.proompteng.ai")
	must("create", "rolebinding", "threat-mallory-agents", "--role=threat-agents", "--user=mallory")
	t.Cleanup(func() {
		_, _ = c.kubectlRuns("delete", "role/threat-agents", "rolebinding/threat-mallory-agents", "agent/threat-listing", "agent/threat-pinned", "agentrun/threat-unpinned", "--ignore-not-found")
	})
	listing := `apiVersion: agents.proompteng.ai/v1alpha1
kind: Agent
metadata: {name: threat-listing}
spec:
  providerRef: {name: codex-runner}
  security: {allowedSecrets: [threat-root]}
`
	out, err = c.kubectlRunsIn(listing, "create", "--as", "mallory", "-f", "-")
	if err == nil || !strings.Contains(out, "threat-root") || !strings.Contains(out, "mallory") {
		t.Errorf("mallory's Agent listing a Secret she may not read: %v %s, want a refusal naming the Secret and the user", err, out)
	}
	// A run's image outside its Agent's pins, even an admin's.
	pinned := `apiVersion: agents.proompteng.ai/v1alpha1
kind: Agent
metadata: {name: threat-pinned}
spec:
  providerRef: {name: codex-runner}
  security: {allowedImages: ["registry.example.com/agents/*"]}
`
	if out, err := c.kubectlRunsIn(pinned, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	unpinned := `apiVersion: agents.proompteng.ai/v1alpha1
kind: AgentRun
metadata: {name: threat-unpinned}
spec:
  agentRef: {name: threat-pinned}
  runtime: {type: job}
  workload: {image: "evil.example.com/x:1"}
`
	out, err = c.kubectlRunsIn(unpinned, "create", "-f", "-")
	if err == nil || !strings.Contains(out, "evil.example.com/x:1") || !strings.Contains(out, "registry.example.com/agents/*") {
		t.Errorf("a run's image outside its Agent's pins: %v %s, want a refusal naming the image and the pattern", err, out)
	}
	c.checkRecordAndMetadata(t)
	// A run that exists (the examples'): its Secrets cannot be swapped, even by an admin.
	out, err = c.kubectlRuns("patch", "agentrun", "hello", "--type=merge", "-p", `{"spec":{"secrets":["threat-root"]}}`)
	if err == nil || !strings.Contains(out, "cannot change once the run is created") {
		t.Errorf("patching a run's spec.secrets: %v %s, want the CRD's refusal", err, out)
	}
	if out, err := c.kubectlRuns("get", "agentrun", "hello", "-o", "jsonpath={.spec.secrets}"); err != nil || strings.Contains(out, "threat-root") {
		t.Errorf("hello's spec.secrets after the refused patch: %v %q", err, out)
	}
}

// checkExamples applies examples/ and waits for each run's phase; the pods ran on the real node
// and `kubectl logs` and `agentctl logs` show the example agent's output; each run had one Job.
func (c *kcluster) checkExamples(t *testing.T, jobs *jobRecorder) {
	c.deleteRuns(t)
	if out, err := c.kubectlRuns("apply", "-f", "examples/"); err != nil {
		t.Fatalf("kubectl apply -f examples/: %v\n%s", err, out)
	}
	want := map[string]string{"hello": "Succeeded", "hello-workflow": "Succeeded", "fails-on-purpose": "Failed"}
	for name, phase := range want {
		u := c.waitPhase(t, agentRunsGVR, name, phase, 3*time.Minute)
		if n := jobs.count(string(u.GetUID())); (name == "hello-workflow" && n != 2) || (name != "hello-workflow" && n != 1) {
			t.Errorf("%s had %d Jobs", name, n)
		}
	}
	c.waitPhase(t, orchestrationRunsGVRc, "plan-and-implement-1", "Succeeded", 3*time.Minute)
	if r := field(c.mustGet(t, agentRunsGVR, "fails-on-purpose"), "status", "reason"); r != "BackoffLimitExceeded" {
		t.Errorf("fails-on-purpose ended with reason %q, want BackoffLimitExceeded", r)
	}
	hello := c.mustGet(t, agentRunsGVR, "hello")
	job := field(hello, "status", "jobRef", "name")
	out, err := c.kubectlRuns("logs", "job/"+job)
	if err != nil || !strings.Contains(out, "agent codex (provider codex-runner): run "+c.runsNS+"/hello starting") ||
		!strings.Contains(out, "parameter ISSUE=42") || !strings.Contains(out, "exiting 0") {
		t.Errorf("kubectl logs job/%s: %v\n%s", job, err, out)
	}
	// agentctl logs shows the real containers' output: a lone run's as it is, each step's of the
	// diamond prefixed [step].
	out, err = c.cmd(context.Background(), "agentctl", "-n", c.runsNS, "logs", "run", "hello")
	if err != nil || !strings.Contains(out, "agent codex (provider codex-runner): run "+c.runsNS+"/hello starting") || !strings.Contains(out, "exiting 0") {
		t.Errorf("agentctl logs run hello: %v\n%s", err, out)
	}
	out, err = c.cmd(context.Background(), "agentctl", "-n", c.runsNS, "logs", "run", "plan-and-implement-1")
	for _, s := range []string{"plan", "implement", "test", "review"} {
		if !strings.Contains(out, "["+s+"] agent codex (provider codex-runner): run "+c.runsNS+"/plan-and-implement-1-"+s) {
			t.Errorf("agentctl logs run plan-and-implement-1: no [%s] line: %v\n%s", s, err, out)
		}
	}
	pods, err := c.kube.CoreV1().Pods(c.runsNS).List(context.Background(), metav1.ListOptions{LabelSelector: "agents.proompteng.ai/agent-run"})
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int32{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != c.nodeName {
			t.Errorf("run pod %s ran on %s, not the real node", p.Name, p.Spec.NodeName)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated != nil {
				codes[p.Labels["agents.proompteng.ai/agent-run"]] = cs.State.Terminated.ExitCode
			}
		}
	}
	if codes["hello"] != 0 || codes["fails-on-purpose"] != 1 {
		t.Errorf("containers' exit codes %v: want hello 0 and fails-on-purpose 1 (the annotation read through the downward API)", codes)
	}
	c.checkAuthDecisions(t)
}

func (c *kcluster) mustGet(t *testing.T, gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := c.get(gvr, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// deleteRuns removes every run and its Jobs (a phase starts clean) and waits until they are gone.
func (c *kcluster) deleteRuns(t *testing.T) {
	t.Helper()
	if out, err := c.kubectlRuns("delete", "orchestrationruns,agentruns,orchestrations,agents", "--all", "--wait=true", "--timeout=2m"); err != nil {
		t.Fatalf("delete runs: %v\n%s", err, out)
	}
	eventually(t, 2*time.Minute, "every run's Job gone", func() error {
		out, err := c.kubectlRuns("get", "jobs", "-l", "agents.proompteng.ai/agent-run", "-o", "name")
		if err != nil || strings.TrimSpace(out) != "" {
			return errorf("%v %s", err, out)
		}
		return nil
	})
}

// checkLifecycle: a cancelled run ends Cancelled and its container stops at once (SIGTERM); a
// finished run with ttlSecondsAfterFinished goes after it; a running run whose Job was deleted by
// hand fails WorkflowJobMissing (after job-gc's grace).
func (c *kcluster) checkLifecycle(t *testing.T) {
	runDoc := func(name string, ann map[string]string, spec string) string {
		var a []string
		for k, v := range ann {
			a = append(a, fmt.Sprintf("%q: %q", k, v))
		}
		return fmt.Sprintf(`apiVersion: agents.proompteng.ai/v1alpha1
kind: AgentRun
metadata: {name: %s, annotations: {%s}}
spec: {agentRef: {name: codex}, runtime: {type: job}%s}
`, name, strings.Join(a, ", "), spec)
	}
	long := map[string]string{"agentplane.dev/simulate-duration": "600s"}
	docs := []string{runDoc("cancel-me", long, ""), runDoc("job-deleted", long, ""),
		runDoc("retain-5s", map[string]string{"agentplane.dev/simulate-duration": "2s"}, ", ttlSecondsAfterFinished: 5")}
	if out, err := c.kubectlRunsIn(strings.Join(docs, "---\n"), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	c.waitPhase(t, agentRunsGVR, "cancel-me", "Running", 2*time.Minute)
	c.waitPhase(t, agentRunsGVR, "job-deleted", "Running", 2*time.Minute)
	// The container of a Running run really runs: the agent's "working" lines.
	eventually(t, time.Minute, "cancel-me's agent working", func() error {
		out, err := c.kubectlRuns("logs", "-l", "agents.proompteng.ai/agent-run=cancel-me")
		if err != nil || !strings.Contains(out, "working: ") {
			return errorf("%v %s", err, out)
		}
		return nil
	})
	if out, err := c.kubectlRuns("delete", "jobs", "-l", "agents.proompteng.ai/agent-run=job-deleted", "--wait=false"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	cancelAt := time.Now()
	if out, err := c.kubectlRuns("patch", "agentrun", "cancel-me", "--type=merge", "-p", `{"spec":{"cancel":true}}`); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	c.waitPhase(t, agentRunsGVR, "cancel-me", "Cancelled", 2*time.Minute)
	eventually(t, time.Minute, "cancel-me's pod gone", func() error {
		out, err := c.kubectlRuns("get", "pods", "-l", "agents.proompteng.ai/agent-run=cancel-me", "-o", "name")
		if err != nil || strings.TrimSpace(out) != "" {
			return errorf("%v %s", err, out)
		}
		return nil
	})
	// The agent stops on SIGTERM: the pod goes well before its 30 s grace period.
	if took := time.Since(cancelAt); took > 25*time.Second {
		t.Errorf("cancel-me's pod took %s to go after the cancel: the container did not stop on SIGTERM", took.Round(time.Second))
	}
	c.waitPhase(t, agentRunsGVR, "retain-5s", "Succeeded", 2*time.Minute)
	eventually(t, 2*time.Minute, "retain-5s deleted after its retention", func() error {
		if _, err := c.get(agentRunsGVR, "retain-5s"); err == nil {
			return errorf("still there")
		}
		return nil
	})
	u := c.waitPhase(t, agentRunsGVR, "job-deleted", "Failed", 3*time.Minute)
	if r := field(u, "status", "reason"); r != "WorkflowJobMissing" {
		t.Errorf("job-deleted ended with reason %q, want WorkflowJobMissing", r)
	}
	if out, _ := c.kubectlRuns("get", "events", "--field-selector", "reason=WorkflowJobMissing,involvedObject.name=job-deleted", "-o", "name"); strings.TrimSpace(out) == "" {
		t.Error("no WorkflowJobMissing event for job-deleted")
	}
}

func (c *kcluster) helmTest(t *testing.T, release string) {
	t.Helper()
	if out, err := c.helm("test", release, "-n", clusterNS, "--timeout", "3m"); err != nil || !strings.Contains(out, "Phase:          Succeeded") {
		t.Errorf("helm test %s: %v\n%s", release, err, out)
	}
}

// prepareNotes makes what the NOTES' commands act on: the examples' Agent, an OrchestrationRun to
// cancel (<name>), and no RoleBinding a NOTES command creates.
func (c *kcluster) prepareNotes(t *testing.T) {
	t.Helper()
	for _, ns := range []string{clusterNS, c.runsNS} {
		_, _ = c.kubectl("-n", ns, "delete", "rolebinding", "status-viewer-me", "console-me", "--ignore-not-found")
	}
	doc := `apiVersion: orchestration.proompteng.ai/v1alpha1
kind: OrchestrationRun
metadata: {name: notes-cancel, annotations: {agentplane.dev/simulate-duration: 600s}}
spec: {orchestrationRef: {name: plan-and-implement}}
`
	if out, err := c.kubectlRuns("apply", "-f", "examples/agent.yaml", "-f", "examples/orchestration.yaml"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	_, _ = c.kubectlRuns("delete", "orchestrationrun", "notes-cancel", "--ignore-not-found", "--wait=true")
	if out, err := c.kubectlRunsIn(doc, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
}

// uninstall removes the releases and checks that no Job is left held by job-gc's finalizer and
// that no cluster-scoped object the releases made is left.
func (c *kcluster) uninstall(t *testing.T, before map[string]bool, releases ...string) {
	t.Helper()
	c.deleteRuns(t)
	// A run in flight when job-gc goes: its Job holds the job-result finalizer, which job-gc's
	// pre-delete hook must release (#32 item 2); without the hook it stays held (checked below).
	c.createBulk(t, "held", 1, "1h")
	eventually(t, 2*time.Minute, "the in-flight run's Job held by the job-result finalizer", func() error {
		out, err := c.kubectlRuns("get", "job", "-l", "agents.proompteng.ai/agent-run=held-000", "-o", "jsonpath={.items[*].metadata.finalizers}")
		if err != nil || !strings.Contains(out, "agents.proompteng.ai/job-result") {
			return errorf("%v %q", err, out)
		}
		return nil
	})
	for _, r := range releases {
		if out, err := c.helm("uninstall", r, "-n", clusterNS, "--wait", "--timeout", "3m"); err != nil {
			t.Fatalf("helm uninstall %s: %v\n%s", r, err, out)
		}
	}
	if c.runsNS != clusterNS {
		// The runs' namespace outlives the release (helm.sh/resource-policy: keep); gone by hand.
		if out, err := c.kubectl("get", "namespace", c.runsNS, "-o", "name"); err != nil {
			t.Errorf("namespace %s went with the release: %v %s", c.runsNS, err, out)
		}
		if out, err := c.kubectl("delete", "namespace", c.runsNS, "--wait=true", "--timeout=2m"); err != nil {
			t.Fatalf("delete namespace %s: %v %s", c.runsNS, err, out)
		}
	}
	out, err := c.kubectl("get", "jobs", "-A", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var jl struct {
		Items []struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &jl); err != nil {
		t.Fatal(err)
	}
	for _, j := range jl.Items {
		for _, f := range j.Metadata.Finalizers {
			if f == "agents.proompteng.ai/job-result" {
				t.Errorf("Job %s/%s is still held by %s after uninstall", j.Metadata.Namespace, j.Metadata.Name, f)
			}
		}
	}
	// Nor a run by the archive's finalizer (where job-gc archived, the in-flight run had it).
	if out, err := c.kubectl("get", "agentruns,orchestrationruns", "-A", "-o", "jsonpath={.items[*].metadata.finalizers}"); err != nil || strings.Contains(out, "agents.proompteng.ai/archive") {
		t.Errorf("a run is still held by the archive's finalizer after uninstall: %v %q", err, out)
	}
	after := c.clusterObjects(t)
	var stray []string
	for o := range after {
		// The API server's own APIServices of the CRDs' groups stay with the CRDs, which an
		// uninstall keeps (helm.sh/resource-policy: keep: checkCRDsKept).
		if !before[o] && o != "apiservice.apiregistration.k8s.io/v1alpha1.agents.proompteng.ai" && o != "apiservice.apiregistration.k8s.io/v1alpha1.orchestration.proompteng.ai" {
			stray = append(stray, o)
		}
	}
	sort.Strings(stray)
	if len(stray) > 0 {
		t.Errorf("cluster-scoped objects left after uninstalling %v: %v", releases, stray)
	}
	for _, kind := range []string{"deployments", "services", "serviceaccounts", "roles", "rolebindings", "configmaps", "secrets", "networkpolicies", "poddisruptionbudgets", "jobs"} {
		out, err := c.kubectl("get", kind, "-l", "app.kubernetes.io/managed-by=Helm", "-o", "name")
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("%s left in %s after uninstall: %v %s", kind, clusterNS, err, out)
		}
	}
	if c.runsNS == clusterNS { // the in-flight run outlives the release (CRDs stay); its Job is free now
		c.deleteRuns(t)
	}
}

// bulkAgent is an Agent whose runs go to kwok's node (its nodeSelector and toleration): the
// real node's kubelet holds 110 pods.
const bulkAgent = `apiVersion: agents.proompteng.ai/v1alpha1
kind: Agent
metadata: {name: bulk}
spec:
  providerRef: {name: bulk}
  defaults:
    retryLimit: 0
    nodeSelector: {type: kwok}
    tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
`

// createBulk creates n runs of the bulk Agent labelled batch=prefix, lasting d; every tenth fails.
func (c *kcluster) createBulk(t *testing.T, prefix string, n int, d string) {
	t.Helper()
	if out, err := c.kubectlRunsIn(bulkAgent, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	api := c.dyn.Resource(agentRunsGVR).Namespace(c.runsNS)
	testenv.Parallel(t, n, 8, func(i int) error {
		ann := map[string]any{"agentplane.dev/simulate-duration": d}
		if i%10 == 0 {
			ann["agentplane.dev/simulate-exit-code"] = "1"
		}
		_, err := api.Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "agents.proompteng.ai/v1alpha1", "kind": "AgentRun",
			"metadata": map[string]any{"name": fmt.Sprintf("%s-%03d", prefix, i), "labels": map[string]any{"batch": prefix}, "annotations": ann},
			"spec":     map[string]any{"agentRef": map[string]any{"name": "bulk"}, "runtime": map[string]any{"type": "job"}},
		}}, metav1.CreateOptions{})
		return err
	})
}

// checkBulk waits for the batch to end and checks each run: Failed (BackoffLimitExceeded) for
// every tenth, Succeeded (Completed) for the rest, its pod on kwok's node, one Job, its result
// recorded (jobRef and finishedAt).
func (c *kcluster) checkBulk(t *testing.T, prefix string, n int, jobs *jobRecorder) {
	t.Helper()
	api := c.dyn.Resource(agentRunsGVR).Namespace(c.runsNS)
	var items []unstructured.Unstructured
	eventually(t, 6*time.Minute, prefix+" runs all finished", func() error {
		l, err := api.List(context.Background(), metav1.ListOptions{LabelSelector: "batch=" + prefix})
		if err != nil {
			return err
		}
		done := 0
		for _, it := range l.Items {
			switch field(&it, "status", "phase") {
			case "Succeeded", "Failed", "Cancelled":
				done++
			}
		}
		if done < n {
			return errorf("%d of %d finished", done, n)
		}
		items = l.Items
		return nil
	})
	for _, it := range items {
		var i int
		_, _ = fmt.Sscanf(strings.TrimPrefix(it.GetName(), prefix+"-"), "%d", &i)
		want, reason := "Succeeded", "Completed"
		if i%10 == 0 {
			want, reason = "Failed", "BackoffLimitExceeded"
		}
		if p, r := field(&it, "status", "phase"), field(&it, "status", "reason"); p != want || r != reason {
			t.Errorf("%s ended %s/%s, want %s/%s", it.GetName(), p, r, want, reason)
		}
		if field(&it, "status", "jobRef", "name") == "" || field(&it, "status", "finishedAt") == "" {
			t.Errorf("%s has no recorded result: %v", it.GetName(), it.Object["status"])
		}
		if k := jobs.count(string(it.GetUID())); k != 1 {
			t.Errorf("%s had %d Jobs, want 1", it.GetName(), k)
		}
	}
}

// upgradeFrom is the commit whose charts and images the upgrade test starts from: the last of the
// 0.1.x charts (the one-release chart rendering the services itself, the seeds' values at its top
// level, the CRDs in crds/), which operators run today (#34 item 7).
const upgradeFrom = "b74b55c"

// checkUpgrade installs upgradeFrom's chart and images as its README said (the seeds' values at
// the top level), starts 100 runs on kwok's node, hands the CRDs to the release and upgrades to
// this commit's chart with the values restated as charts/agentplane's README says (old and new
// pods overlap), and checks every run's end (one Job each, none lost); then, with two replicas of
// each controller, deletes each leader's pod while 100 more runs are in flight.
func (c *kcluster) checkUpgrade(t *testing.T, version string, jobs *jobRecorder) {
	prevVersion := c.pushPrevious(t, upgradeFrom)
	before := c.clusterObjects(t)
	start := time.Now()
	if out, err := c.helm("install", "agentplane", "oci://"+c.registry+"/charts/agentplane", "--version", prevVersion, "--plain-http",
		"-n", clusterNS, "--wait", "--timeout", "5m", "--set", "image.registry="+c.registry, "--set", "redis.url="+c.redisURL); err != nil {
		pods, _ := c.kubectl("get", "pods", "-o", "wide")
		t.Fatalf("helm install agentplane %s: %v\n%s\n%s", prevVersion, err, out, pods)
	}
	t.Logf("helm install agentplane %s: %s", prevVersion, time.Since(start).Round(time.Second))
	// Where the previous chart puts runs (its default may differ from this one's): the upgrade
	// must keep serving them there.
	actsIn := func() string {
		out, err := c.kubectl("get", "deployment", "agentplane-run-controller", "-o",
			`jsonpath={.spec.template.spec.containers[0].env[?(@.name=="JANGAR_AGENTS_CONTROLLER_NAMESPACES")].value}`)
		if err != nil || strings.TrimSpace(out) == "" || strings.Contains(out, ",") {
			t.Fatalf("the run-controller's namespaces: %v %q", err, out)
		}
		return strings.TrimSpace(out)
	}
	c.runsNS = actsIn()
	defer func() { c.runsNS = clusterNS }()
	const n = 100
	c.createBulk(t, "upgrade", n, "40s")
	eventually(t, 2*time.Minute, "the runs in flight", func() error {
		out, err := c.kubectlRuns("get", "agentruns", "-l", "batch=upgrade", "-o", "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}")
		if err != nil || strings.Count(out, "Running") < n/2 {
			return errorf("%v: %d running", err, strings.Count(out, "Running"))
		}
		return nil
	})
	c.adoptCRDs(t, "agentplane")
	start = time.Now()
	if out, err := c.helm("upgrade", "agentplane", "oci://"+c.registry+"/charts/agentplane", "--version", version, "--plain-http",
		"-n", clusterNS, "--set", "global.imageRegistry="+c.registry, "--set", "global.redis.url="+c.redisURL, "--wait", "--timeout", "5m"); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	t.Logf("helm upgrade %s -> %s with %d runs in flight: %s", prevVersion, version, n, time.Since(start).Round(time.Second))
	if now := actsIn(); now != c.runsNS {
		t.Errorf("the upgrade moved the controllers from %s to %s, leaving the runs in flight behind", c.runsNS, now)
	}
	c.checkRelease(t, "agentplane", version, false)
	c.checkBulk(t, "upgrade", n, jobs)

	// Two replicas of each controller; the leader's pod deleted while runs are in flight.
	controllers := []string{"run-controller", "job-gc", "cancel-propagator"}
	args := []string{"upgrade", "agentplane", "oci://" + c.registry + "/charts/agentplane", "--version", version, "--plain-http",
		"-n", clusterNS, "--reuse-values", "--wait", "--timeout", "5m"}
	for _, s := range controllers {
		args = append(args, "--set", s+".replicaCount=2")
	}
	if out, err := c.helm(args...); err != nil {
		t.Fatalf("helm upgrade (2 replicas): %v\n%s", err, out)
	}
	c.createBulk(t, "leaders", n, "30s")
	for _, s := range controllers {
		lease := "agentplane-" + s
		holder := c.leaseHolder(t, lease)
		if out, err := c.kubectl("delete", "pod", holder, "--wait=false"); err != nil {
			t.Fatalf("delete %s's leader %s: %v\n%s", s, holder, err, out)
		}
		eventually(t, 2*time.Minute, s+"'s lease taken over", func() error {
			if h := c.leaseHolder(t, lease); h == holder || h == "" {
				return errorf("held by %q", h)
			}
			return nil
		})
		t.Logf("%s: leader %s deleted, lease now held by %s", s, holder, c.leaseHolder(t, lease))
	}
	c.checkBulk(t, "leaders", n, jobs)
	c.uninstall(t, before, "agentplane")
	c.checkCRDsKept(t)
}

// adoptCRDs hands the CRDs to release (in clusterNS) with the commands of charts/agentplane-crds's
// README ("Upgrading from 0.1.x"), run as written but for the release's name.
func (c *kcluster) adoptCRDs(t *testing.T, release string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.root, "charts", "agentplane-crds", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "### Upgrading from 0.1.x")
	_, block, ok2 := strings.Cut(sec, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 || !strings.Contains(block, "meta.helm.sh/release-name=agentplane ") {
		t.Fatalf("charts/agentplane-crds/README.md has no adoption commands for release agentplane:\n%s", sec)
	}
	script := "set -euo pipefail\n" + strings.ReplaceAll(block, "meta.helm.sh/release-name=agentplane ", "meta.helm.sh/release-name="+release+" ")
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir, cmd.Env = c.root, c.environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the CRDs' adoption commands (charts/agentplane-crds/README.md): %v\n%s", err, out)
	}
}

// checkCRDsKept: helm uninstall left the CRDs (helm.sh/resource-policy: keep): deleting them
// would have deleted every run.
func (c *kcluster) checkCRDsKept(t *testing.T) {
	t.Helper()
	for _, crd := range wantCRDs {
		out, err := c.kubectl("get", "crd", crd, "-o", `jsonpath={.metadata.annotations.helm\.sh/resource-policy}`)
		if err != nil || strings.TrimSpace(out) != "keep" {
			t.Errorf("CRD %s after helm uninstall: %v %q, want it there and kept", crd, err, out)
		}
	}
}

func (c *kcluster) leaseHolder(t *testing.T, name string) string {
	t.Helper()
	l, err := c.kube.CoordinationV1().Leases(clusterNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// pushPrevious builds commit from's images and charts (from a worktree of it, with this tree's
// build scripts) and pushes them; it returns their chart version.
func (c *kcluster) pushPrevious(t *testing.T, from string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", c.root, "rev-parse", "--short", from).CombinedOutput()
	if err != nil {
		t.Fatalf("commit %s (a shallow clone lacks it; fetch more history): %v %s", from, err, out)
	}
	prev := strings.TrimSpace(string(out))
	wt := filepath.Join(t.TempDir(), "previous")
	if out, err := exec.Command("git", "-C", c.root, "worktree", "add", "--detach", wt, prev).CombinedOutput(); err != nil {
		t.Fatalf("git worktree add %s: %v %s", prev, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("git", "-C", c.root, "worktree", "remove", "--force", wt).Run() })
	version := "0.1.0-g" + prev
	start := time.Now()
	for _, script := range []string{"hack/images.sh", "hack/charts.sh"} {
		// On a fresh machine the previous commit's services compile against dependency versions
		// nothing else here builds, beside the two other e2e processes on two cores: 15 minutes
		// were not enough there (2026-12-05, killed after its fifth service).
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		cmd := exec.CommandContext(ctx, filepath.Join(c.root, script))
		cmd.Env = append(c.environ(), "SRC="+wt, "PUSH=1", "BIN="+filepath.Join(wt, "bin"), "SERVICES="+strings.Join(append(append([]string{}, services...), "agentctl"), " "),
			"IMAGE_TAG="+prev, "IMAGE_REGISTRY="+c.registry, "REGISTRY="+c.registry, "LDFLAGS=-s -w -X github.com/agentplane/agentplane/libs/app.Version="+prev,
			"HELM="+filepath.Join(c.root, helmPath), "CHART_VERSION="+version, "APP_VERSION="+prev, "OUT="+filepath.Join(wt, "bin", "charts"))
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s for the previous commit %s: %v\n%s", script, prev, err, out)
		}
	}
	t.Logf("the previous commit %s's images and charts pushed: %s", prev, time.Since(start).Round(time.Second))
	return version
}

// probeFrom runs a pod labelled app.kubernetes.io/name=label with status-writer's image and its
// `probe` subcommand against status-writer's gRPC health and reports whether it answered.
func (c *kcluster) probeFrom(t *testing.T, name, label, image string) (bool, string) {
	t.Helper()
	return c.podRun(t, name, label, image, "probe", "--timeout=5s", "status-writer."+clusterNS+".svc:50051")
}

// podRun runs image with args in a pod of its own (non-root, no token) labelled
// app.kubernetes.io/name=label, and returns whether it succeeded and its log.
func (c *kcluster) podRun(t *testing.T, name, label, image string, args ...string) (bool, string) {
	t.Helper()
	_, _ = c.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true")
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	doc := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {app.kubernetes.io/name: %s}}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: probe
    image: %s
    args: [%s]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, name, label, image, strings.Join(quoted, ", "))
	if out, err := c.kubectlIn(doc, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	var phase string
	eventually(t, 90*time.Second, name+" finished", func() error {
		out, err := c.kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}")
		if phase = strings.TrimSpace(out); err != nil || (phase != "Succeeded" && phase != "Failed") {
			return errorf("%v %q", err, phase)
		}
		return nil
	})
	logs, _ := c.kubectl("logs", name)
	_, _ = c.kubectl("delete", "pod", name, "--wait=false")
	return phase == "Succeeded", logs
}

// checkNetworkPolicy: with status-writer's networkPolicy.enabled, the node's policy agent
// (kube-router's firewall) lets the chart's peers (the controllers, watch-gateway, helm test)
// reach its gRPC port and refuses any other pod; before, any pod reached it. Runs still go
// through, and the kubelet's probes still pass.
func (c *kcluster) checkNetworkPolicy(t *testing.T, version string) {
	tag := strings.TrimPrefix(version[strings.Index(version, "-g"):], "-g")
	image := c.registry + "/agentplane/status-writer:" + tag
	if ok, logs := c.probeFrom(t, "np-intruder", "intruder", image); !ok {
		t.Fatalf("without a NetworkPolicy a pod could not reach status-writer: %s", logs)
	}
	if out, err := c.helm("upgrade", "status-writer", "oci://"+c.registry+"/charts/status-writer", "--version", version, "--plain-http",
		"-n", clusterNS, "--reuse-values", "--set", "networkPolicy.enabled=true", "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm upgrade status-writer networkPolicy.enabled=true: %v\n%s", err, out)
	}
	eventually(t, time.Minute, "the policy enforced", func() error {
		if ok, _ := c.probeFrom(t, "np-intruder", "intruder", image); ok {
			return errorf("a pod the policy does not name still reaches status-writer")
		}
		return nil
	})
	if ok, logs := c.probeFrom(t, "np-peer", "watch-gateway", image); !ok {
		t.Errorf("a pod labelled as watch-gateway (a peer the chart names) could not reach status-writer: %s", logs)
	}
	c.helmTest(t, "status-writer")
	run := `apiVersion: agents.proompteng.ai/v1alpha1
kind: AgentRun
metadata: {name: behind-policy}
spec: {agentRef: {name: codex}, runtime: {type: job}}
`
	if out, err := c.kubectlIn(run, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	c.waitPhase(t, agentRunsGVR, "behind-policy", "Succeeded", 3*time.Minute)
	// The kubelet's probes come from the node, which the policy leaves alone.
	if out, err := c.kubectl("rollout", "status", "deployment/status-writer", "--timeout", "60s"); err != nil {
		t.Errorf("status-writer not ready behind its policy: %v %s", err, out)
	}
}

// archiveSecret holds the password of make cluster-up's PostgreSQL for the charts' archive.
const archiveSecret = "agentplane-archive-db"

// archiveValues creates the Secret with the password of make cluster-up's PostgreSQL and returns
// the Helm values that turn job-gc's and watch-gateway's run archive on against it.
func (c *kcluster) archiveValues(t *testing.T) []string {
	t.Helper()
	pw, err := os.ReadFile(filepath.Join(c.dir, "postgres-password"))
	if err != nil {
		t.Fatalf("make cluster-up's PostgreSQL password: %v", err)
	}
	if out, err := c.kubectl("create", "secret", "generic", archiveSecret, "--from-literal=password="+strings.TrimSpace(string(pw))); err != nil {
		t.Fatalf("create the archive's Secret: %v %s", err, out)
	}
	url := fmt.Sprintf("postgres://agentplane@%s:%d/agentplane?sslmode=disable", c.hostIP, 15432+clusterOffset)
	return []string{"--set", "archive.enabled=true", "--set", "archive.url=" + url, "--set", "archive.passwordSecretRef.name=" + archiveSecret}
}

// checkArchive (#37 on the real node): the examples' runs, finished, are archived by job-gc in
// PostgreSQL and let go of; deleted by hand, fails-on-purpose is read back with agentctl through
// watch-gateway (the aggregated API): listed Failed, and described with its Job's exit code 1 and
// the tail of its real container's log, which job-gc read through the API server from the node's
// kubelet.
func (c *kcluster) checkArchive(t *testing.T) {
	const name = "fails-on-purpose"
	uid := string(c.mustGet(t, agentRunsGVR, name).GetUID())
	eventually(t, 2*time.Minute, "the finished examples archived and let go", func() error {
		out, err := c.kubectlRuns("get", "agentruns", "hello", name, "-o", "jsonpath={.items[*].metadata.finalizers}")
		if err != nil || strings.Contains(out, "agents.proompteng.ai/archive") {
			return errorf("finalizers %q (%v)", out, err)
		}
		return nil
	})
	if out, err := c.kubectlRuns("delete", "agentrun", name, "--timeout", "60s"); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	out, err := c.cmd(context.Background(), "agentctl", "-n", c.runsNS, "get", "runs", "--archived", "--phase", "Failed", "-o", "wide")
	if err != nil || !strings.Contains(out, "agentrun/"+name) || !strings.Contains(out, uid) {
		t.Fatalf("agentctl get runs --archived: %v\n%s", err, out)
	}
	out, err = c.cmd(context.Background(), "agentctl", "-n", c.runsNS, "describe", "run", name, "--archived")
	if err != nil || !strings.Contains(out, uid) || !strings.Contains(out, "BackoffLimitExceeded") ||
		!regexp.MustCompile(`(?m)^  `+name+`-\S+\s+-\s+Failed\s+1\s`).MatchString(out) ||
		!strings.Contains(out, "agent codex (provider codex-runner): run "+c.runsNS+"/"+name+" starting") {
		t.Fatalf("agentctl describe run %s --archived: want its uid, BackoffLimitExceeded, its Job failed with exit code 1 and its container's log: %v\n%s", name, err, out)
	}
}
