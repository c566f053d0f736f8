//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	mobynet "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/agentplane/agentplane/libs/testenv"
)

// The whole system in containers: the Kubernetes part of the local control plane (etcd,
// kube-apiserver, controller-manager, scheduler, kwok) runs as processes (`make up` with
// AGENTPLANE_CONTROL_PLANE_ONLY=1), and Redis, Jaeger and the six services run as containers on
// one Docker network, each service configured by its own chart: the Deployment that
// `helm template` renders gives the container its env, ports, user and read-only root, and the
// chart's ServiceAccount and RBAC are applied to the API server, whose token the container
// mounts where a pod would have it. Service addresses resolve as in a cluster (network aliases
// status-writer, event-emitter, redis, jaeger), and `kubernetes` resolves to the host.

const (
	sysOffset    = 6000 // ports of this stack's control plane (the other e2e stacks use 1000 and 3000)
	sysNamespace = "agents"
	sysViewer    = "status-viewer" // the ServiceAccount that reads the gateway's streams
)

// sysStartOrder: the servers the controllers call come first.
var sysStartOrder = []string{"status-writer", "event-emitter", "job-gc", "cancel-propagator", "run-controller", "watch-gateway"}

type sysContainer struct {
	name    string
	c       testcontainers.Container
	aliases []string
	ports   map[string]string // port name -> "N/tcp"
	host    map[string]int    // port name -> the host port it is published on (fixed, so restarts keep it)
}

type system struct {
	t                      *testing.T
	ctx                    context.Context
	root, dir, kubeconfig  string
	kubectlBin, helm       string
	env                    []string // make up's environment
	docker                 *testcontainers.DockerClient
	net                    *testcontainers.DockerNetwork
	hostIP                 string // the network's gateway: the host, as containers see it
	redis, jaeger          *sysContainer
	postgres               *sysContainer // the run archive job-gc writes and watch-gateway reads
	svc                    map[string]*sysContainer
	kube                   kubernetes.Interface
	dyn                    dynamic.Interface
	viewerToken            string
	eventRate, eventBurst  int // event-emitter's chart values, for the per-object bound
	missingJobGraceSeconds int
}

// startSystem brings the whole system up and registers its teardown (containers, network,
// control plane) with t, so it goes even when a test fails.
func startSystem(t *testing.T) *system {
	t.Helper()
	needDocker(t)
	root := repoRoot(t)
	s := &system{
		t: t, ctx: context.Background(), root: root, svc: map[string]*sysContainer{},
		kubectlBin: mustExist(t, filepath.Join(root, "bin", "envtest", "kubectl"), "tools"),
		helm:       mustExist(t, filepath.Join(root, helmPath), "tools"),
		eventRate:  10, eventBurst: 5, missingJobGraceSeconds: 10,
	}
	jaegerBin := mustExist(t, filepath.Join(root, "bin", "tools", "jaeger", jaegerVersion(t), "jaeger"), "tools-jaeger")
	// A directory the containers' non-root user can read (bind-mounted tokens live here).
	dir, err := os.MkdirTemp("", "agentplane-system-")
	if err != nil {
		t.Fatal(err)
	}
	s.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.docker, err = testcontainers.NewDockerClientWithOpts(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.docker.Close() })
	s.net, err = tcnetwork.New(s.ctx)
	if err != nil {
		t.Fatalf("docker network: %v", err)
	}
	t.Cleanup(func() { _ = s.net.Remove(context.Background()) })
	ni, err := s.docker.NetworkInspect(s.ctx, s.net.ID, client.NetworkInspectOptions{})
	if err != nil || len(ni.Network.IPAM.Config) == 0 {
		t.Fatalf("inspect network: %v %+v", err, ni.Network.IPAM)
	}
	s.hostIP = ni.Network.IPAM.Config[0].Gateway.String()

	// Jaeger first: kube-apiserver exports its spans to it from its first request.
	s.jaeger = s.startJaeger(jaegerBin)
	otlp, err := s.jaeger.c.PortEndpoint(s.ctx, "4317/tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	s.env = []string{fmt.Sprintf("AGENTPLANE_PORT_OFFSET=%d", sysOffset), "AGENTPLANE_CONTROL_PLANE_ONLY=1",
		"AGENTPLANE_APISERVER_BIND_ADDRESS=0.0.0.0", "AGENTPLANE_APISERVER_OTLP_ENDPOINT=" + otlp}
	t.Cleanup(func() { _, _ = s.make("down") })
	if out, err := s.make("up"); err != nil {
		t.Fatalf("make up (control plane only): %v\n%s", err, out)
	}
	s.kubeconfig = filepath.Join(dir, "local", "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	s.kube = kubernetes.NewForConfigOrDie(cfg)
	s.dyn = dynamic.NewForConfigOrDie(cfg)

	s.redis = s.startRedis()
	s.postgres = s.startPostgres()
	for _, name := range sysStartOrder {
		s.svc[name] = s.startService(name)
	}
	for _, name := range sysStartOrder {
		s.waitReady(name)
	}
	s.viewerToken = s.grantViewer()
	return s
}

// needDocker fails a container suite loudly when the Docker engine is not reachable, unless
// AGENTPLANE_E2E_SKIP_DOCKER=1 asks to skip the container suites.
func needDocker(t *testing.T) {
	t.Helper()
	if os.Getenv("AGENTPLANE_E2E_SKIP_DOCKER") == "1" {
		t.Skip("AGENTPLANE_E2E_SKIP_DOCKER=1: the container suites are skipped on purpose")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err == nil {
		defer cli.Close()
		_, err = cli.Ping(ctx, client.PingOptions{})
	}
	if err != nil {
		t.Fatalf("the Docker engine is not reachable (%v): start it, or set AGENTPLANE_E2E_SKIP_DOCKER=1 to skip the container suites", err)
	}
}

func jaegerVersion(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "hack", "tools", "jaeger", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "require" && f[1] == "github.com/jaegertracing/jaeger" {
			return f[2]
		}
	}
	t.Fatal("no jaeger version in hack/tools/jaeger/go.mod")
	return ""
}

// make runs a target of the local control plane with this stack's environment.
func (s *system) make(target string) (string, error) {
	return run(s.ctx, s.t, s.env, "make", "-C", s.root, "-s", target, "LOCAL_DIR="+filepath.Join(s.dir, "local"))
}

func (s *system) kubectl(args ...string) (string, error) {
	return run(s.ctx, s.t, nil, s.kubectlBin, append([]string{"--kubeconfig", s.kubeconfig, "-n", sysNamespace}, args...)...)
}

func (s *system) kubectlIn(stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(s.ctx, s.kubectlBin, append([]string{"--kubeconfig", s.kubeconfig, "-n", sysNamespace}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// logsOnFailure prints a container's log when the test failed.
func (s *system) logsOnFailure(sc *sysContainer) {
	s.t.Cleanup(func() {
		if !s.t.Failed() || sc.c == nil {
			return
		}
		if r, err := sc.c.Logs(context.Background()); err == nil {
			b, _ := io.ReadAll(r)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			s.t.Logf("--- %s log (tail) ---\n%s", sc.name, b)
		}
	})
}

func (s *system) start(sc *sysContainer, req testcontainers.ContainerRequest) {
	s.t.Helper()
	req.Networks = []string{s.net.Name}
	req.NetworkAliases = map[string][]string{s.net.Name: sc.aliases}
	c, err := testcontainers.GenericContainer(s.ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	sc.c = c
	testcontainers.CleanupContainer(s.t, c)
	s.logsOnFailure(sc)
	if err != nil {
		s.t.Fatalf("start %s: %v", sc.name, err)
	}
}

func (s *system) startJaeger(bin string) *sysContainer {
	dir := s.t.TempDir()
	copyFile(s.t, bin, filepath.Join(dir, "jaeger"), 0o755)
	copyFile(s.t, filepath.Join(s.root, "hack", "local", "jaeger.yaml"), filepath.Join(dir, "jaeger.yaml"), 0o644)
	df := "FROM scratch\nCOPY jaeger /jaeger\nCOPY jaeger.yaml /etc/jaeger/jaeger.yaml\nUSER 65532:65532\n" +
		"ENV JAEGER_LISTEN_HOST=0.0.0.0 JAEGER_OTLP_GRPC_PORT=4317 JAEGER_OTLP_HTTP_PORT=4318 JAEGER_UI_PORT=16686\n" +
		"ENTRYPOINT [\"/jaeger\", \"--config\", \"/etc/jaeger/jaeger.yaml\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		s.t.Fatal(err)
	}
	sc := &sysContainer{name: "jaeger", aliases: []string{"jaeger"}}
	s.start(sc, testcontainers.ContainerRequest{
		FromDockerfile: testcontainers.FromDockerfile{Context: dir, Repo: "agentplane/jaeger", Tag: "e2e", KeepImage: true},
		ExposedPorts:   []string{"4317/tcp", "4318/tcp", "16686/tcp", "13133/tcp"},
		WaitingFor:     wait.ForHTTP("/status").WithPort("13133/tcp").WithStartupTimeout(60 * time.Second),
	})
	return sc
}

func (s *system) startRedis() *sysContainer {
	sc := &sysContainer{name: "redis", aliases: []string{"redis"}}
	s.start(sc, testcontainers.ContainerRequest{
		FromDockerfile: redisImage(s.t),
		ExposedPorts:   []string{"6379/tcp"},
		WaitingFor:     wait.ForLog("Ready to accept connections").WithStartupTimeout(30 * time.Second),
	})
	return sc
}

func (s *system) startPostgres() *sysContainer {
	sc := &sysContainer{name: "postgres", aliases: []string{"postgres"}}
	s.start(sc, testcontainers.ContainerRequest{
		FromDockerfile: postgresImage(s.t),
		ExposedPorts:   []string{"5432/tcp"},
		WaitingFor:     wait.ForLog("database system is ready to accept connections").WithStartupTimeout(60 * time.Second),
	})
	return sc
}

// sysArchiveURL is the run archive in the system's PostgreSQL (trust on its network).
const sysArchiveURL = "postgres://agentplane@postgres:5432/postgres?sslmode=disable"

// chartValues are the values each release gets here: what any install sets (where Redis and the
// OTLP collector are) plus what the scenarios need (Job TTL 0, a short missing-Job grace, quick
// heartbeats, and the gateway's targets, since no Deployments exist for it to discover).
func (s *system) chartValues(name string) []string {
	v := withChoices(name, "--set", "otel.endpoint=http://jaeger:4318", "--set", "image.tag=e2e")
	switch name {
	case "event-emitter":
		v = append(v, "--set", "redis.url=redis://redis:6379/0",
			"--set", "events.rateLimitPerMin="+strconv.Itoa(s.eventRate), "--set", "events.burst="+strconv.Itoa(s.eventBurst))
	case "run-controller":
		v = append(v, "--set", "controller.jobTtlSecondsAfterFinished=0")
	case "job-gc":
		v = append(v, "--set", "env.vars.JANGAR_JOB_GC_MISSING_JOB_GRACE_SECONDS="+strconv.Itoa(s.missingJobGraceSeconds),
			"--set", "archive.enabled=true", "--set", "archive.url="+sysArchiveURL)
	case "watch-gateway":
		var targets []string
		for _, svc := range services {
			if svc != "watch-gateway" {
				targets = append(targets, svc+"="+svc+":50051")
			}
		}
		// Plaintext here: the chart's generated certificate is a Secret volume, which these
		// containers do not emulate (TestClusterInstall runs the TLS default on real pods).
		v = append(v, "--set", "tls.generate=false", "--set", "redis.url=redis://redis:6379/0", "--set", "heartbeat=2s",
			"--set", "archive.enabled=true", "--set", "archive.url="+sysArchiveURL,
			"--set", "env.vars.JANGAR_WATCH_TARGETS="+strings.ReplaceAll(strings.Join(targets, ","), ",", `\,`))
	}
	return v
}

// render returns the chart's Deployment and applies every other object that is not a workload
// or network object (ServiceAccount, Roles, ClusterRoles and their bindings) to the API server.
func (s *system) render(name string) *appsv1.Deployment {
	args := append([]string{"template", name, filepath.Join(s.root, "charts", name), "-n", sysNamespace, "--kube-version", renderKubeVersion}, s.chartValues(name)...)
	out, err := exec.Command(s.helm, args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("helm template %s: %v\n%s", name, err, out)
	}
	var dep *appsv1.Deployment
	var apply []string
	for _, doc := range strings.Split(string(out), "\n---") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind == "" {
			continue
		}
		switch meta.Kind {
		case "Deployment":
			dep = &appsv1.Deployment{}
			if err := yaml.Unmarshal([]byte(doc), dep); err != nil {
				s.t.Fatal(err)
			}
		case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
			apply = append(apply, doc)
		}
	}
	if dep == nil {
		s.t.Fatalf("chart %s renders no Deployment", name)
	}
	if out, err := s.kubectlIn(strings.Join(apply, "\n---\n"), "apply", "-f", "-"); err != nil {
		s.t.Fatalf("apply %s's RBAC: %v\n%s", name, err, out)
	}
	return dep
}

func (s *system) token(sa string, audience ...string) string {
	args := []string{"create", "token", sa, "--duration", "24h"}
	for _, a := range audience {
		args = append(args, "--audience", a)
	}
	out, err := s.kubectl(args...)
	if err != nil {
		s.t.Fatalf("token for %s: %v %s", sa, err, out)
	}
	return strings.TrimSpace(out)
}

func (s *system) writeFile(path, content string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// startService runs one service the way its chart's Deployment describes it.
func (s *system) startService(name string) *sysContainer {
	dep := s.render(name)
	pod := dep.Spec.Template.Spec
	ctr := pod.Containers[0]
	sa := pod.ServiceAccountName
	podName := name + "-" + randomHex(3)
	uid := randomHex(8)

	// The pod's ServiceAccount token, CA and namespace where client-go's in-cluster config reads them.
	saDir := filepath.Join(s.dir, name, "serviceaccount")
	s.writeFile(filepath.Join(saDir, "token"), s.token(sa))
	ca, err := os.ReadFile(filepath.Join(s.dir, "local", "pki", "ca.crt"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.writeFile(filepath.Join(saDir, "ca.crt"), string(ca))
	s.writeFile(filepath.Join(saDir, "namespace"), sysNamespace)
	binds := []string{saDir + ":/var/run/secrets/kubernetes.io/serviceaccount:ro"}

	env := map[string]string{
		"KUBERNETES_SERVICE_HOST": "kubernetes",
		"KUBERNETES_SERVICE_PORT": strconv.Itoa(16443 + sysOffset),
	}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = podName
			case "metadata.namespace":
				env[e.Name] = sysNamespace
			case "metadata.uid":
				env[e.Name] = uid
			default:
				s.t.Fatalf("%s: env %s from %s is not emulated here", name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			s.t.Fatalf("%s: env %s comes from a Secret or ConfigMap, not emulated here", name, e.Name)
		}
	}
	// The projected token for the services it calls (audience agentplane), where the chart mounts it.
	if f := env["JANGAR_SERVICE_TOKEN_FILE"]; f != "" {
		d := filepath.Join(s.dir, name, "service-token")
		s.writeFile(filepath.Join(d, filepath.Base(f)), s.token(sa, "agentplane"))
		binds = append(binds, d+":"+filepath.Dir(f)+":ro")
	}
	sc := &sysContainer{name: name, ports: map[string]string{}, host: map[string]int{},
		aliases: []string{name, name + "." + sysNamespace, name + "." + sysNamespace + ".svc", name + "." + sysNamespace + ".svc.cluster.local"}}
	var exposed []string
	bindings := mobynet.PortMap{}
	for _, p := range ctr.Ports {
		port := fmt.Sprintf("%d/tcp", p.ContainerPort)
		hp, err := testenv.FreePort()
		if err != nil {
			s.t.Fatal(err)
		}
		sc.ports[p.Name], sc.host[p.Name] = port, hp
		exposed = append(exposed, port)
		bindings[mobynet.MustParsePort(port)] = []mobynet.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(hp)}}
	}
	tmpfs := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil {
				tmpfs[m.MountPath] = "rw,size=64m,mode=1777"
			}
		}
	}
	user := ""
	if sc := ctr.SecurityContext; sc != nil && sc.RunAsUser != nil {
		user = strconv.FormatInt(*sc.RunAsUser, 10)
		if sc.RunAsGroup != nil {
			user += ":" + strconv.FormatInt(*sc.RunAsGroup, 10)
		}
	} else if psc := pod.SecurityContext; psc != nil && psc.RunAsUser != nil {
		user = strconv.FormatInt(*psc.RunAsUser, 10)
		if psc.RunAsGroup != nil {
			user += ":" + strconv.FormatInt(*psc.RunAsGroup, 10)
		}
	}
	readOnly := ctr.SecurityContext != nil && ctr.SecurityContext.ReadOnlyRootFilesystem != nil && *ctr.SecurityContext.ReadOnlyRootFilesystem
	s.start(sc, testcontainers.ContainerRequest{
		FromDockerfile: serviceImage(s.t, name),
		Env:            env,
		ExposedPorts:   exposed,
		ConfigModifier: func(c *container.Config) {
			if user != "" {
				c.User = user
			}
		},
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.PortBindings = bindings
			hc.Binds = binds
			hc.Tmpfs = tmpfs
			hc.ReadonlyRootfs = readOnly
			hc.CapDrop = []string{"ALL"}
			hc.SecurityOpt = []string{"no-new-privileges"}
			hc.ExtraHosts = []string{"kubernetes:" + s.hostIP}
			// A pod's restartPolicy Always: kubelet restarts a container whose process exits (a
			// controller that lost its Lease while the API server was away exits 1 on purpose).
			// Docker does not restart a container killed by hand, so the faults stay in control.
			hc.RestartPolicy = container.RestartPolicy{Name: container.RestartPolicyOnFailure}
		},
	})
	return sc
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// endpoint is the host address a service's named port (grpc, metrics, http) is published on.
func (s *system) endpoint(sc *sysContainer, port string) string {
	s.t.Helper()
	hp, ok := sc.host[port]
	if !ok {
		s.t.Fatalf("%s has no %s port", sc.name, port)
	}
	return "127.0.0.1:" + strconv.Itoa(hp)
}

func (s *system) metrics(name string) string {
	out, err := httpGet("http://" + s.endpoint(s.svc[name], "metrics") + "/metrics")
	if err != nil {
		s.t.Fatalf("%s /metrics: %v", name, err)
	}
	return out
}

func (s *system) waitReady(name string) {
	s.t.Helper()
	ep := s.endpoint(s.svc[name], "metrics")
	eventually(s.t, 90*time.Second, name+" ready", func() error {
		_, err := httpGet("http://" + ep + "/readyz")
		return err
	})
}

// grantViewer makes a ServiceAccount bound to the gateway chart's status-viewer Role and returns
// a token for it (the gateway runs with auth.mode=token, its chart's default).
func (s *system) grantViewer() string {
	if out, err := s.kubectl("create", "serviceaccount", sysViewer); err != nil {
		s.t.Fatalf("%v %s", err, out)
	}
	if out, err := s.kubectl("create", "rolebinding", sysViewer, "--role", "watch-gateway-status-viewer",
		"--serviceaccount", sysNamespace+":"+sysViewer); err != nil {
		s.t.Fatalf("%v %s", err, out)
	}
	return s.token(sysViewer, "agentplane-gateway")
}

// helmTest runs the pod `helm test` would run for a service's release (its chart's test-health
// template, rendered with the same values) as a container on the system's network, and returns
// its exit code and output.
func (s *system) helmTest(name string) (int, string) {
	s.t.Helper()
	args := append([]string{"template", name, filepath.Join(s.root, "charts", name), "-n", sysNamespace,
		"--kube-version", renderKubeVersion, "--show-only", "templates/tests/test-health.yaml"}, s.chartValues(name)...)
	out, err := exec.Command(s.helm, args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("helm template %s test-health: %v\n%s", name, err, out)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(out, &pod); err != nil || len(pod.Spec.Containers) != 1 {
		s.t.Fatalf("%s's test pod: %v\n%s", name, err, out)
	}
	if pod.Annotations["helm.sh/hook"] != "test" {
		s.t.Fatalf("%s's test pod is not a helm test hook: %v", name, pod.Annotations)
	}
	ctr := pod.Spec.Containers[0]
	c, err := testcontainers.GenericContainer(s.ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image: "agentplane/" + name + ":e2e", Cmd: ctr.Args, Networks: []string{s.net.Name},
			ConfigModifier: func(c *container.Config) { c.User = "65532:65532" },
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.ReadonlyRootfs, hc.CapDrop = true, []string{"ALL"}
			},
		},
		Started: true,
	})
	testcontainers.CleanupContainer(s.t, c)
	if err != nil {
		s.t.Fatalf("run %s's test pod: %v", name, err)
	}
	var st *container.State
	eventually(s.t, time.Minute, name+"'s test pod finished", func() error {
		if st, err = c.State(s.ctx); err != nil {
			return err
		}
		if st.Running {
			return errorf("still running")
		}
		return nil
	})
	logs, err := c.Logs(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	b, _ := io.ReadAll(logs)
	return st.ExitCode, string(b)
}

// kill sends SIGKILL to a container (not docker stop's SIGTERM first).
func (s *system) kill(sc *sysContainer) {
	s.t.Helper()
	if _, err := s.docker.ContainerKill(s.ctx, sc.c.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		s.t.Fatalf("kill %s: %v", sc.name, err)
	}
	eventually(s.t, 30*time.Second, sc.name+" stopped", func() error {
		st, err := sc.c.State(s.ctx)
		if err != nil {
			return err
		}
		if st.Running {
			return errorf("still running")
		}
		return nil
	})
}

func (s *system) restart(sc *sysContainer) {
	s.t.Helper()
	if err := sc.c.Start(s.ctx); err != nil {
		s.t.Fatalf("start %s again: %v", sc.name, err)
	}
}

// disconnect cuts a container off the network (it keeps running); reconnect undoes it.
func (s *system) disconnect(sc *sysContainer) {
	s.t.Helper()
	if _, err := s.docker.NetworkDisconnect(s.ctx, s.net.ID, client.NetworkDisconnectOptions{Container: sc.c.GetContainerID(), Force: true}); err != nil {
		s.t.Fatalf("disconnect %s: %v", sc.name, err)
	}
}

func (s *system) reconnect(sc *sysContainer) {
	s.t.Helper()
	if _, err := s.docker.NetworkConnect(s.ctx, s.net.ID, client.NetworkConnectOptions{
		Container: sc.c.GetContainerID(), EndpointConfig: &mobynet.EndpointSettings{Aliases: sc.aliases},
	}); err != nil {
		s.t.Fatalf("reconnect %s: %v", sc.name, err)
	}
}

// restartAPIServer stops kube-apiserver (SIGTERM to its process group, as a rolling restart
// would; SIGKILL if it is still shutting down 15 s later, as `make down` does) and starts it again
// with `make up`, which starts only what is not running.
//
// Then it restarts kwok, the fake node's kubelet, the same way. kwok v0.8.0 retries a failed
// stage only on connection refused, timeouts, 429 and 503 (shouldRetry in its
// pkg/kwok/controllers/utils.go); any other error (a connection reset when the server goes away,
// a 403 "not yet ready to handle request" while it starts) drops the stage, and the Pod then
// stays as it is until something else changes it. A kubelet reports a Pod's status again on its
// next sync; a restarted kwok lists every Pod and plays the stage each one is due, which is that
// resync. Without it, a Pod whose completion was dropped stays Running and its run never ends,
// which says nothing about agentplane.
func (s *system) restartAPIServer() {
	s.t.Helper()
	s.stopLocal("kube-apiserver")
	time.Sleep(5 * time.Second) // the outage the services have to ride out
	if out, err := s.make("up"); err != nil {
		s.t.Fatalf("make up (restart kube-apiserver): %v\n%s", err, out)
	}
	s.stopLocal("kwok")
	if out, err := s.make("up"); err != nil {
		s.t.Fatalf("make up (restart kwok): %v\n%s", err, out)
	}
}

// stopLocal stops one of `make up`'s processes: SIGTERM to its process group, SIGKILL if it is
// still running 15 s later.
func (s *system) stopLocal(name string) {
	s.t.Helper()
	pidFile := filepath.Join(s.dir, "local", "run", name+".pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		s.t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	alive := func() bool { // running, and not a zombie nobody reaped yet
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err == nil && !bytes.Contains(st, []byte(") Z "))
	}
	if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
		s.t.Fatalf("stop %s: %v", name, err)
	}
	for deadline := time.Now().Add(15 * time.Second); alive() && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	if alive() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	eventually(s.t, 30*time.Second, name+" stopped", func() error {
		if alive() {
			return errorf("pid %d alive", pid)
		}
		return nil
	})
}
