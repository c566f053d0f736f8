//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The e2e suite's own cluster (make cluster-up): a name, node network and ports of its own, so
// that it runs beside a developer's cluster (AGENTPLANE_CLUSTER_NET 0, offset 7500) and the other
// e2e stacks (offsets 1000 to 6000).
const (
	clusterName   = "agentplane-e2e"
	clusterNet    = 1
	clusterOffset = 8500
	clusterNS     = "agents"
)

var orchestrationRunsGVRc = schema.GroupVersionResource{Group: "orchestration.proompteng.ai", Version: "v1alpha1", Resource: "orchestrationruns"}

// kcluster is a running `make cluster-up` and the tools to drive it as an operator would.
type kcluster struct {
	t          *testing.T
	root, dir  string
	env        []string // the cluster's knobs, for every make call
	kubeconfig string
	registry   string // where images and charts are pushed (loopback)
	hostIP     string // the host's address on the node's link: pods reach Redis there
	redisURL   string
	name       string // AGENTPLANE_CLUSTER_NAME
	net        int    // AGENTPLANE_CLUSTER_NET
	nodeName   string
	binDirs    string // kubectl, helm and agentctl, for PATH
	kube       kubernetes.Interface
	dyn        dynamic.Interface
	down       bool
	before     hostState
	// runsNS is where the installed release acts on runs: the one-release chart's default puts
	// them apart from the control plane (clusterNS-runs), a release per service beside it.
	runsNS string
}

// startCluster brings up the e2e cluster with `make cluster-up` (as root, with Docker) and
// registers `make cluster-down` and the check that it leaves nothing behind.
func startCluster(t *testing.T) *kcluster {
	t.Helper()
	needDocker(t)
	if os.Geteuid() != 0 {
		t.Fatal("make cluster-up needs root (a network namespace, mounts and cgroups for the node): run the e2e suite as root")
	}
	root := repoRoot(t)
	c := &kcluster{t: t, root: root, dir: t.TempDir(),
		env: []string{"AGENTPLANE_CLUSTER_NAME=" + clusterName, fmt.Sprintf("AGENTPLANE_CLUSTER_NET=%d", clusterNet),
			fmt.Sprintf("AGENTPLANE_PORT_OFFSET=%d", clusterOffset)},
		registry: fmt.Sprintf("127.0.0.1:%d", 15000+clusterOffset), runsNS: clusterNS,
		hostIP: fmt.Sprintf("10.250.%d.1", clusterNet),
		name:   clusterName, net: clusterNet,
		nodeName: clusterName + "-node",
	}
	c.redisURL = fmt.Sprintf("redis://%s:%d/0", c.hostIP, 16379+clusterOffset)
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	c.binDirs = strings.Join([]string{filepath.Join(root, "bin", "tools", "kube", kubeVersion(t)), filepath.Dir(filepath.Join(root, helmPath)), filepath.Join(root, "bin")}, ":")
	c.before = readHostState(t)
	t.Cleanup(func() {
		if !c.down {
			if out, err := c.make("cluster-down"); err != nil {
				t.Errorf("make cluster-down: %v\n%s", err, out)
			}
		}
	})
	start := time.Now()
	if out, err := c.make("cluster-up"); err != nil {
		t.Fatalf("make cluster-up: %v\n%s\n%s", err, out, c.logTails())
	}
	t.Logf("make cluster-up: %s", time.Since(start).Round(time.Second))
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	c.kube = kubernetes.NewForConfigOrDie(cfg)
	c.dyn = dynamic.NewForConfigOrDie(cfg)
	return c
}

func kubeVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "hack", "tools", "kube", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^(?:require)?\s*k8s.io/kubernetes (v\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("hack/tools/kube/go.mod names no k8s.io/kubernetes version")
	}
	return string(m[1])
}

// make runs a make target of the repository with the cluster's knobs.
func (c *kcluster) make(target string, vars ...string) (string, error) {
	args := append([]string{"-C", c.root, "-s", target, "CLUSTER_DIR=" + c.dir}, vars...)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	return c.cmd(ctx, "make", args...)
}

// cmd runs a command with the cluster's environment (KUBECONFIG, the tools on PATH), from the
// repository's root, as a user following the README would.
func (c *kcluster) cmd(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.lookPath(name), args...)
	cmd.Dir = c.root
	cmd.Env = c.environ()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// lookPath finds a command in the cluster's tool folders first (exec.Command looks in the test
// process's PATH, not the command's).
func (c *kcluster) lookPath(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, d := range strings.Split(c.binDirs, ":") {
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	return name
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func (c *kcluster) environ() []string {
	return append(append(os.Environ(), c.env...), "KUBECONFIG="+c.kubeconfig, "PATH="+c.binDirs+":"+os.Getenv("PATH"))
}

func (c *kcluster) kubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return c.cmd(ctx, "kubectl", append([]string{"-n", clusterNS}, args...)...)
}

// kubectlRuns runs kubectl in the namespace of the runs (kubectl takes the last -n given).
func (c *kcluster) kubectlRuns(args ...string) (string, error) {
	return c.kubectl(append([]string{"-n", c.runsNS}, args...)...)
}

func (c *kcluster) kubectlRunsIn(stdin string, args ...string) (string, error) {
	return c.kubectlIn(stdin, append([]string{"-n", c.runsNS}, args...)...)
}

func (c *kcluster) kubectlIn(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.lookPath("kubectl"), append([]string{"-n", clusterNS}, args...)...)
	cmd.Dir, cmd.Env, cmd.Stdin = c.root, c.environ(), strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *kcluster) helm(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return c.cmd(ctx, "helm", args...)
}

// logTails is the end of every cluster component's log, for a failure message.
func (c *kcluster) logTails() string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(c.dir, "logs", "*.log"))
	for _, l := range logs {
		out, _ := exec.Command("tail", "-n", "15", l).Output()
		fmt.Fprintf(&b, "--- %s\n%s", filepath.Base(l), out)
	}
	return b.String()
}

// get reads one object of gvr in the namespace of the runs.
func (c *kcluster) get(gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
	return c.dyn.Resource(gvr).Namespace(c.runsNS).Get(context.Background(), name, metav1.GetOptions{})
}

// waitPhase waits until the run is in phase and returns it.
func (c *kcluster) waitPhase(t *testing.T, gvr schema.GroupVersionResource, name, phase string, timeout time.Duration) *unstructured.Unstructured {
	t.Helper()
	var u *unstructured.Unstructured
	eventually(t, timeout, fmt.Sprintf("%s %s %s", gvr.Resource, name, phase), func() error {
		var err error
		if u, err = c.get(gvr, name); err != nil {
			return err
		}
		if p := field(u, "status", "phase"); p != phase {
			return errorf("phase %q (reason %q: %s)", p, field(u, "status", "reason"), field(u, "status", "message"))
		}
		return nil
	})
	return u
}

// hostState is what the host holds that a node could leave behind: network namespaces,
// interfaces, mounts, cgroups and processes.
type hostState struct {
	netns, links []string
}

func readHostState(t *testing.T) hostState {
	t.Helper()
	var s hostState
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			s.netns = append(s.netns, e.Name())
		}
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatalf("ip link: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			s.links = append(s.links, strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":"))
		}
	}
	return s
}

// leftovers lists what the cluster left on the host after make cluster-down: mounts under its
// folders or its network namespaces, its network namespace and any pod's that appeared while it
// ran, interfaces that appeared (its veth), iptables rules naming its addresses or
// kube-proxy's/CNI's chains, its cgroups, processes (containerd, shims, kubelet, ...) whose
// command line names its folders or socket, and log links into its folder.
func (c *kcluster) leftovers(t *testing.T) []string {
	t.Helper()
	var left []string
	runRoot := "/run/" + c.name + "/"
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (strings.HasPrefix(f[4], c.dir+"/") || strings.HasPrefix(f[4], runRoot) || f[4] == "/run/netns/"+c.name+"-node") {
			left = append(left, "mount "+f[4])
		}
	}
	after := readHostState(t)
	for _, n := range after.netns {
		if !contains(c.before.netns, n) {
			left = append(left, "network namespace "+n)
		}
	}
	// The node's interfaces (its bridge, its pods' veths) live in its own network namespace; on
	// the host it has only the link's end. (Host veths that come and go are Docker's containers',
	// the e2e suites beside this one.)
	for _, l := range after.links {
		if !contains(c.before.links, l) && (l == fmt.Sprintf("apnode%d", c.net) || strings.HasPrefix(l, "cni")) {
			left = append(left, "interface "+l)
		}
	}
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(tool).Output()
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "KUBE-") || strings.Contains(l, "CNI-") || strings.Contains(l, fmt.Sprintf("10.244.%d.", c.net)) ||
				strings.Contains(l, fmt.Sprintf("10.250.%d.", c.net)) {
				left = append(left, tool+": "+l)
			}
		}
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/" + c.name)
	for _, cg := range cgs {
		left = append(left, "cgroup "+cg)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmdline, c.dir+"/") || strings.Contains(cmdline, runRoot) {
			left = append(left, "process "+strings.TrimSpace(cmdline))
		}
	}
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if dst, err := os.Readlink(l); err == nil && strings.HasPrefix(dst, c.dir+"/") {
			left = append(left, "log link "+l)
		}
	}
	sort.Strings(left)
	return left
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// stop runs make cluster-down and checks that it left nothing behind.
func (c *kcluster) stop(t *testing.T) {
	t.Helper()
	out, err := c.make("cluster-down")
	c.down = true
	if err != nil {
		t.Fatalf("make cluster-down: %v\n%s", err, out)
	}
	if left := c.leftovers(t); len(left) > 0 {
		t.Errorf("make cluster-down left %d things behind:\n  %s\n%s", len(left), strings.Join(left, "\n  "), out)
	}
}

// clusterObjects lists the cluster-scoped objects (but CRDs and what the cluster itself keeps
// changing: nodes, leases' namespaces, events) as kind/name.
func (c *kcluster) clusterObjects(t *testing.T) map[string]bool {
	t.Helper()
	out, err := c.cmd(context.Background(), "kubectl", "api-resources", "--namespaced=false", "--verbs=list", "-o", "name")
	if err != nil {
		t.Fatalf("api-resources: %v\n%s", err, out)
	}
	var kinds []string
	for _, k := range strings.Fields(out) {
		switch k {
		case "nodes", "customresourcedefinitions.apiextensions.k8s.io", "componentstatuses", "csinodes.storage.k8s.io",
			"certificatesigningrequests.certificates.k8s.io", "ipaddresses.networking.k8s.io", "servicecidrs.networking.k8s.io":
			continue
		}
		kinds = append(kinds, k)
	}
	out, err = c.cmd(context.Background(), "kubectl", "get", strings.Join(kinds, ","), "-o", "name")
	if err != nil {
		t.Fatalf("list cluster-scoped objects: %v\n%s", err, out)
	}
	objs := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			objs[l] = true
		}
	}
	return objs
}

// readmeInstall returns the commands of README.md's "Install on a cluster" block (the first
// bash block of that section), continuation lines joined, without `make cluster-up`, which the
// harness ran with the same settings.
func readmeInstall(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Install on a cluster\n")
	if !ok {
		t.Fatal(`README.md has no "## Install on a cluster" section`)
	}
	_, block, ok := strings.Cut(sec, "```bash\n")
	if !ok {
		t.Fatal(`README.md's "Install on a cluster" has no bash block`)
	}
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	cur := ""
	for _, l := range strings.Split(block, "\n") {
		if strings.HasSuffix(strings.TrimSpace(l), "\\") {
			cur += strings.TrimSuffix(strings.TrimSpace(l), "\\") + " "
			continue
		}
		l = cur + l
		cur = ""
		if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "make cluster-up") {
			continue
		}
		cmds = append(cmds, l)
	}
	return cmds
}

// runReadme runs README.md's install commands in one shell, as a user pasting them would (the
// cluster's settings in the environment, CLUSTER_DIR naming its folder), each of which must succeed.
func (c *kcluster) runReadme(t *testing.T) {
	t.Helper()
	cmds := readmeInstall(t, c.root)
	script := "set -euo pipefail\n"
	for _, l := range cmds {
		script += fmt.Sprintf("echo %q\n%s\n", "$ "+l, l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = c.root, append(c.environ(), "CLUSTER_DIR="+c.dir)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		pods, _ := c.kubectl("get", "pods", "-o", "wide")
		t.Fatalf("README.md's install commands: %v\n%s\n%s", err, out, pods)
	}
	t.Logf("README.md's %d install commands: %s", len(cmds), time.Since(start).Round(time.Second))
}
