//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// renderKubeVersion is the Kubernetes version charts are rendered for offline (`helm template`
// assumes v1.20 otherwise, below the charts' kubeVersion): the local control plane's.
const renderKubeVersion = "1.37.2"

// helmPath is where `make tools` builds helm, relative to the repo root.
const helmPath = "bin/tools/helm/v3.22.0-stamped/helm"

// chartNamespace is the release namespace every chart is rendered into.
const chartNamespace = "agents"

// serviceChart describes one service chart and the checks that only it gets.
type serviceChart struct {
	name string
	// envOverrides: rendering with set yields the container variable env=want.
	envOverrides []envOverride
}

type envOverride struct {
	set, env, want string
}

var serviceCharts = []serviceChart{
	{name: "status-writer"},
	{name: "event-emitter", envOverrides: []envOverride{
		{set: "events.rateLimitPerMin=7", env: "JANGAR_CONTROLLER_EVENTS_RATE_LIMIT_PER_MIN", want: "7"},
	}},
	{name: "job-gc"},
	{name: "cancel-propagator"},
	{name: "run-controller"},
	{name: "watch-gateway"},
}

// The CRDs that charts/agentplane-crds must install.
var wantCRDs = []string{
	"agents.agents.proompteng.ai",
	"agentruns.agents.proompteng.ai",
	"orchestrations.orchestration.proompteng.ai",
	"orchestrationruns.orchestration.proompteng.ai",
}

// manifest holds the fields of a rendered manifest that the checks read; the rest is ignored.
type manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	// Role and ClusterRole.
	Rules []rbacRule `json:"rules"`
	// RoleBinding and ClusterRoleBinding.
	RoleRef struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	} `json:"roleRef"`
	Spec struct {
		// Service.
		Ports []struct {
			Name string `json:"name"`
			Port int32  `json:"port"`
		} `json:"ports"`
		// Deployment.
		Template struct {
			Spec manifestPodSpec `json:"spec"`
		} `json:"template"`
		// NetworkPolicy.
		PolicyTypes []string `json:"policyTypes"`
		Ingress     []struct {
			Ports []struct {
				Port string `json:"port"`
			} `json:"ports"`
			From []map[string]any `json:"from"`
		} `json:"ingress"`
	} `json:"spec"`
}

type rbacRule struct {
	APIGroups     []string `json:"apiGroups"`
	Resources     []string `json:"resources"`
	ResourceNames []string `json:"resourceNames"`
	Verbs         []string `json:"verbs"`
}

type manifestPodSpec struct {
	SecurityContext *struct {
		RunAsNonRoot *bool `json:"runAsNonRoot"`
	} `json:"securityContext"`
	InitContainers []manifestContainer `json:"initContainers"`
	Containers     []manifestContainer `json:"containers"`
	Volumes        []map[string]any    `json:"volumes"`
}

type manifestContainer struct {
	Name  string `json:"name"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int32  `json:"containerPort"`
	} `json:"ports"`
	Env []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	SecurityContext *struct {
		ReadOnlyRootFilesystem   *bool `json:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation"`
	} `json:"securityContext"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
}

func (o manifest) String() string {
	if o.Metadata.Namespace == "" {
		return o.Kind + "/" + o.Metadata.Name
	}
	return o.Kind + "/" + o.Metadata.Namespace + "/" + o.Metadata.Name
}

// operatorChoices are the values a chart leaves to its operator (no default; rendered without
// them it fails, saying what to choose): every test that renders or installs the chart passes
// them, as an operator must.
var operatorChoices = map[string][]string{
	// job-gc is installed beside it in every test that installs it.
	"run-controller": {"--set", "controller.jobResultFinalizer=true"},
}

// withChoices is chart's operatorChoices followed by flags (which win).
func withChoices(chart string, flags ...string) []string {
	return append(slices.Clone(operatorChoices[chart]), flags...)
}

// helmEnv runs helm against charts on disk with its config, cache and data in temporary
// folders, so that nothing from the user's helm setup leaks in.
type helmEnv struct {
	bin, root string
	env       []string
}

func newHelmEnv(t *testing.T) *helmEnv {
	t.Helper()
	root := repoRoot(t)
	bin := mustExist(t, filepath.Join(root, helmPath), "tools")
	chartDeps(t, root, bin)
	home := t.TempDir()
	env := append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	return &helmEnv{bin: bin, root: root, env: env}
}

// chartDeps builds the charts' dependencies (hack/charts-deps.sh: the library chart into each
// service chart, every chart into charts/agentplane) when they are stale; the script locks, so
// test processes started together build them once.
func chartDeps(t testing.TB, root, helm string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "hack", "charts-deps.sh"))
	cmd.Env = append(os.Environ(), "HELM="+helm)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/charts-deps.sh: %v\n%s", err, out)
	}
}

// run runs helm and returns what it printed on stdout and on stderr.
func (h *helmEnv) run(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(h.bin, args...)
	cmd.Dir = h.root
	cmd.Env = h.env
	var out, errOut bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// lint runs `helm lint --strict` on a chart.
func (h *helmEnv) lint(t *testing.T, chart string) {
	t.Helper()
	stdout, stderr, err := h.run(append([]string{"lint", "--strict", filepath.Join("charts", chart)}, withChoices(chart)...)...)
	if err != nil {
		t.Fatalf("helm lint --strict charts/%s: %v\n%s%s", chart, err, stdout, stderr)
	}
}

// template renders chart as release <chart> in chartNamespace with extra flags, and parses it.
func (h *helmEnv) template(t *testing.T, chart string, flags ...string) []manifest {
	t.Helper()
	stdout, stderr, err := h.templateErr(chart, flags...)
	if err != nil {
		t.Fatalf("helm template %s %v: %v\n%s", chart, flags, err, stderr)
	}
	return parseManifests(t, stdout)
}

func (h *helmEnv) templateErr(chart string, flags ...string) (stdout, stderr string, err error) {
	args := append([]string{"template", chart, filepath.Join("charts", chart), "--namespace", chartNamespace, "--kube-version", renderKubeVersion}, withChoices(chart, flags...)...)
	return h.run(args...)
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// parseManifests splits helm's multi-document output and parses each non-empty document.
func parseManifests(t *testing.T, out string) []manifest {
	t.Helper()
	var objs []manifest
	for _, doc := range docSeparator.Split(out, -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var o manifest
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("parse rendered manifest: %v\n%s", err, doc)
		}
		if o.Kind == "" {
			continue // a document of comments only
		}
		objs = append(objs, o)
	}
	if len(objs) == 0 {
		t.Fatalf("helm rendered no objects:\n%s", out)
	}
	return objs
}

func ofKind(objs []manifest, kind string) []manifest {
	var found []manifest
	for _, o := range objs {
		if o.Kind == kind {
			found = append(found, o)
		}
	}
	return found
}

// theDeployment returns the single Deployment a service chart renders.
func theDeployment(t *testing.T, objs []manifest) manifest {
	t.Helper()
	deps := ofKind(objs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("want 1 Deployment, got %d", len(deps))
	}
	return deps[0]
}

// envOf returns the plain value of a variable of the Deployment's first container.
func envOf(t *testing.T, objs []manifest, name string) (string, bool) {
	t.Helper()
	d := theDeployment(t, objs)
	if len(d.Spec.Template.Spec.Containers) == 0 {
		t.Fatalf("%s has no containers", d)
	}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func wantEnv(t *testing.T, objs []manifest, name, want string) {
	t.Helper()
	got, ok := envOf(t, objs, name)
	if !ok {
		t.Errorf("env %s not set, want %q", name, want)
	} else if got != want {
		t.Errorf("env %s = %q, want %q", name, got, want)
	}
}

// isLeaderElectionRole tells the Role that only grants the leader-election Lease.
func isLeaderElectionRole(o manifest) bool {
	if o.Kind != "Role" || len(o.Rules) == 0 {
		return false
	}
	for _, r := range o.Rules {
		if !slices.Equal(r.APIGroups, []string{"coordination.k8s.io"}) || !slices.Equal(r.Resources, []string{"leases"}) {
			return false
		}
	}
	return true
}

// isStatusViewerRole tells watch-gateway's Role for operators to bind: get and watch of the
// virtual controlplane/status, and get on the ConfigMap of the gateway's CA by name when the
// chart publishes one (TLS by default), nothing else.
func isStatusViewerRole(o manifest) bool {
	if o.Kind != "Role" || len(o.Rules) == 0 || len(o.Rules) > 2 || !slices.Equal(o.Rules[0].APIGroups, []string{"agents.proompteng.ai"}) ||
		!slices.Equal(o.Rules[0].Resources, []string{"controlplane/status"}) || !slices.Equal(o.Rules[0].Verbs, []string{"get", "watch"}) {
		return false
	}
	if len(o.Rules) == 2 {
		r := o.Rules[1]
		return slices.Equal(r.APIGroups, []string{""}) && slices.Equal(r.Resources, []string{"configmaps"}) &&
			slices.Equal(r.Verbs, []string{"get"}) && len(r.ResourceNames) == 1 && strings.HasSuffix(r.ResourceNames[0], "-ca")
	}
	return true
}

// isConsoleUserRole tells watch-gateway's console-viewer and console-operator Roles, rendered for
// operators to bind to the console's users: the status, and reading (and for the operator
// patching) AgentRuns and OrchestrationRuns, nothing else.
func isConsoleUserRole(o manifest) bool {
	if o.Kind != "Role" || !(strings.HasSuffix(o.Metadata.Name, "-console-viewer") || strings.HasSuffix(o.Metadata.Name, "-console-operator")) {
		return false
	}
	for _, r := range o.Rules {
		for _, res := range r.Resources {
			// The runs, and what a run's page shows besides them (read only, below).
			if !slices.Contains([]string{"controlplane/status", "agentruns", "orchestrationruns", "orchestrations", "events", "jobs"}, res) {
				return false
			}
		}
		for _, v := range r.Verbs {
			if !slices.Contains([]string{"get", "list", "watch", "patch"}, v) {
				return false
			}
			if v == "patch" && !slices.Contains([]string{"agentruns", "orchestrationruns"}, r.Resources[0]) {
				return false
			}
		}
	}
	return len(o.Rules) > 0
}

// isClusterReader tells watch-gateway's ClusterRole, which may only read the agentplane CRDs and
// the watched namespaces by name (plus TokenReviews when auth.mode=token).
func isClusterReader(o manifest) bool {
	if o.Kind != "ClusterRole" {
		return false
	}
	for _, r := range o.Rules {
		for _, res := range r.Resources {
			switch res {
			case "customresourcedefinitions":
				// Read-only: definitions hold no secrets, and Argo's is needed too.
				for _, v := range r.Verbs {
					if v != "get" && v != "list" && v != "watch" {
						return false
					}
				}
			case "namespaces":
				if len(r.ResourceNames) == 0 {
					return false
				}
			case "tokenreviews":
				if !slices.Equal(r.Verbs, []string{"create"}) {
					return false
				}
			default:
				return false
			}
		}
	}
	return true
}

// isTokenReviewer tells the ClusterRole that grants creating TokenReviews and nothing else.
func isTokenReviewer(o manifest) bool {
	return o.Kind == "ClusterRole" && len(o.Rules) == 1 && slices.Equal(o.Rules[0].APIGroups, []string{"authentication.k8s.io"}) &&
		slices.Equal(o.Rules[0].Resources, []string{"tokenreviews"}) && slices.Equal(o.Rules[0].Verbs, []string{"create"})
}

// checkBindings fails when a binding refers to a role the chart did not render.
func checkBindings(t *testing.T, objs []manifest) {
	t.Helper()
	roles := map[string]bool{}
	for _, o := range objs {
		switch o.Kind {
		case "Role":
			roles["Role/"+o.Metadata.Namespace+"/"+o.Metadata.Name] = true
		case "ClusterRole":
			roles["ClusterRole//"+o.Metadata.Name] = true
		}
	}
	for _, o := range objs {
		var key string
		switch o.Kind {
		case "RoleBinding":
			if o.RoleRef.Kind == "ClusterRole" {
				key = "ClusterRole//" + o.RoleRef.Name
			} else {
				key = "Role/" + o.Metadata.Namespace + "/" + o.RoleRef.Name
			}
		case "ClusterRoleBinding":
			key = "ClusterRole//" + o.RoleRef.Name
		default:
			continue
		}
		if !roles[key] {
			t.Errorf("%s refers to %s, which the chart does not render", o, key)
		}
	}
}

// checkPodSecurity enforces the restricted pod security settings on every Deployment.
func checkPodSecurity(t *testing.T, objs []manifest) {
	t.Helper()
	for _, d := range ofKind(objs, "Deployment") {
		pod := d.Spec.Template.Spec
		if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: pod securityContext.runAsNonRoot must be true", d)
		}
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			sc := c.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s container %s: readOnlyRootFilesystem must be true", d, c.Name)
			}
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s container %s: allowPrivilegeEscalation must be false", d, c.Name)
			}
		}
	}
}

// checkGRPCPort wants the container port and the Service port named grpc to be 50051.
func checkGRPCPort(t *testing.T, objs []manifest) {
	t.Helper()
	d := theDeployment(t, objs)
	found := false
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "grpc" {
				found = true
				if p.ContainerPort != 50051 {
					t.Errorf("%s container %s: grpc port %d, want 50051", d, c.Name, p.ContainerPort)
				}
			}
		}
	}
	if !found {
		t.Errorf("%s: no container port named grpc", d)
	}
	svcs := ofKind(objs, "Service")
	if len(svcs) != 1 {
		t.Fatalf("want 1 Service, got %d", len(svcs))
	}
	found = false
	for _, p := range svcs[0].Spec.Ports {
		if p.Name == "grpc" {
			found = true
			if p.Port != 50051 {
				t.Errorf("%s: grpc port %d, want 50051", svcs[0], p.Port)
			}
		}
	}
	if !found {
		t.Errorf("%s: no port named grpc", svcs[0])
	}
	wantEnv(t, objs, "JANGAR_GRPC_PORT", "50051")
}

// wantRefused renders with flags and wants the chart's schema (or its templates) to refuse it,
// with an error that names field.
func wantRefused(t *testing.T, h *helmEnv, chart, field string, flags ...string) {
	t.Helper()
	_, out, err := h.templateErr(chart, flags...)
	if err == nil {
		t.Errorf("helm template %s %v succeeded, want it refused", chart, flags)
		return
	}
	if !strings.Contains(out, field) {
		t.Errorf("helm template %s %v was refused without naming %s:\n%s", chart, flags, field, out)
	}
}

func TestCharts(t *testing.T) {
	h := newHelmEnv(t)

	t.Run("agentplane-crds", func(t *testing.T) {
		h.lint(t, "agentplane-crds")
		crdFiles, _ := filepath.Glob(filepath.Join(h.root, "charts", "agentplane-crds", "files", "crds", "*.yaml"))
		if len(crdFiles) == 0 {
			t.Fatal("charts/agentplane-crds/files/crds holds no CRDs: run `make generate`")
		}
		// The CRDs are templates (so that helm upgrade applies them), kept on helm uninstall.
		objs := h.template(t, "agentplane-crds")
		for _, o := range objs {
			if o.Kind == "CustomResourceDefinition" && o.Metadata.Annotations["helm.sh/resource-policy"] != "keep" {
				t.Errorf("CRD %s is not kept on helm uninstall (helm.sh/resource-policy: keep)", o.Metadata.Name)
			}
		}
		var names []string
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[o.Kind]++
			if o.Kind == "CustomResourceDefinition" {
				names = append(names, o.Metadata.Name)
			}
		}
		for _, want := range wantCRDs {
			if !slices.Contains(names, want) {
				t.Errorf("CRD %s not rendered (got %v)", want, names)
			}
		}
		// Besides the CRDs: the admission policies (docs/security.md), each bound, and the
		// ClusterRole that grants `use` on ServiceAccounts; nothing else.
		want := map[string]int{"CustomResourceDefinition": len(wantCRDs), "MutatingAdmissionPolicy": 2, "MutatingAdmissionPolicyBinding": 2,
			"ValidatingAdmissionPolicy": 6, "ValidatingAdmissionPolicyBinding": 6, "ClusterRole": 1}
		if !reflect.DeepEqual(kinds, want) {
			t.Errorf("the CRD chart renders %v, want %v", kinds, want)
		}
		// Off: the CRDs alone.
		off := h.template(t, "agentplane-crds", "--set", "admission.enabled=false")
		if len(off) != len(wantCRDs) {
			t.Errorf("admission.enabled=false renders %d objects, want the %d CRDs", len(off), len(wantCRDs))
		}
		// The generated copy make up and the tests apply is what the chart renders.
		stdout, stderr, err := h.run("template", "agentplane-crds", "charts/agentplane-crds", "--kube-version", renderKubeVersion, "--show-only", "templates/admission.yaml")
		if err != nil {
			t.Fatalf("%v %s", err, stderr)
		}
		gen, err := os.ReadFile(filepath.Join(h.root, "hack", "local", "admission-policies.yaml"))
		if err != nil || !strings.HasSuffix(string(gen), stdout) {
			t.Errorf("hack/local/admission-policies.yaml is not the chart's admission.yaml as rendered now: run make generate (%v)", err)
		}
		wantRefused(t, h, "agentplane-crds", "validationActions", "--set", "admission.validationActions={Deny,Warn}")
		wantRefused(t, h, "agentplane-crds", "validationActions", "--set", "admission.validationActions={Block}")
	})

	for _, sc := range serviceCharts {
		t.Run(sc.name, func(t *testing.T) {
			h.lint(t, sc.name)

			defaults := h.template(t, sc.name)
			t.Run("defaults", func(t *testing.T) {
				for _, o := range ofKind(defaults, "ClusterRole") {
					if !(sc.name == "watch-gateway" && isClusterReader(o)) && !isTokenReviewer(o) {
						t.Errorf("%s: no ClusterRole by default, except watch-gateway's CRD and namespace reader and the TokenReview grant of the services that authenticate callers", o)
					}
				}
				for _, o := range ofKind(defaults, "Role") {
					if o.Metadata.Namespace != chartNamespace {
						t.Errorf("%s: by default every Role is in the release namespace %s", o, chartNamespace)
					}
				}
				checkBindings(t, defaults)
				checkPodSecurity(t, defaults)
				checkGRPCPort(t, defaults)
				wantEnv(t, defaults, "JANGAR_AGENTS_CONTROLLER_NAMESPACES", chartNamespace)
				wantEnv(t, defaults, "OTEL_SERVICE_NAME", sc.name)
			})

			for _, o := range sc.envOverrides {
				t.Run("set "+o.set, func(t *testing.T) {
					wantEnv(t, h.template(t, sc.name, "--set", o.set), o.env, o.want)
				})
			}

			t.Run("env.vars", func(t *testing.T) {
				wantEnv(t, h.template(t, sc.name, "--set", "env.vars.AGENTPLANE_EXTRA=on"), "AGENTPLANE_EXTRA", "on")
				// A variable the chart sets from a value is overridden by env.vars (the seeds'
				// "unless overridden via env.vars"), once, in place.
				objs := h.template(t, sc.name, "--set", "env.vars.JANGAR_LOG_LEVEL=debug", "--set", "logLevel=warn")
				wantEnv(t, objs, "JANGAR_LOG_LEVEL", "debug")
				n := 0
				for _, e := range theDeployment(t, objs).Spec.Template.Spec.Containers[0].Env {
					if e.Name == "JANGAR_LOG_LEVEL" {
						n++
					}
				}
				if n != 1 {
					t.Errorf("JANGAR_LOG_LEVEL appears %d times, want once", n)
				}
			})

			t.Run("controller.namespaces", func(t *testing.T) {
				objs := h.template(t, sc.name, "--set", "controller.namespaces={a,b}")
				// A Role in each namespace the service acts in; watch-gateway's in the control
				// plane's (its status) and the first (its runs) only.
				want, none := []string{"a", "b"}, []string(nil)
				if sc.name == "watch-gateway" {
					want, none = []string{chartNamespace, "a"}, []string{"b"}
				}
				for _, ns := range append(want, none...) {
					found := false
					for _, o := range ofKind(objs, "Role") {
						if o.Metadata.Namespace == ns && !isLeaderElectionRole(o) {
							found = true
						}
					}
					if found != slices.Contains(want, ns) {
						t.Errorf("a Role in namespace %s: %v, want %v", ns, found, !found)
					}
				}
				checkBindings(t, objs)
				wantEnv(t, objs, "JANGAR_AGENTS_CONTROLLER_NAMESPACES", "a,b")
			})

			t.Run("rbac.clusterScoped", func(t *testing.T) {
				objs := h.template(t, sc.name, "--set", "rbac.clusterScoped=true")
				var defaultNames []string
				for _, o := range ofKind(defaults, "ClusterRole") {
					defaultNames = append(defaultNames, o.Metadata.Name)
				}
				found := false
				for _, o := range ofKind(objs, "ClusterRole") {
					if !slices.Contains(defaultNames, o.Metadata.Name) {
						found = true
					}
				}
				if !found {
					t.Error("rbac.clusterScoped=true rendered no ClusterRole of its own")
				}
				if len(ofKind(objs, "ClusterRoleBinding")) == 0 {
					t.Error("rbac.clusterScoped=true rendered no ClusterRoleBinding")
				}
				for _, o := range ofKind(objs, "Role") {
					if !isLeaderElectionRole(o) && !isStatusViewerRole(o) && !isConsoleUserRole(o) {
						t.Errorf("%s: with rbac.clusterScoped=true only the leader-election Role (and watch-gateway's status-viewer and console Roles for others to bind) stays", o)
					}
				}
				checkBindings(t, objs)
			})

			t.Run("schema", func(t *testing.T) {
				for _, bad := range []struct{ field, set string }{
					{"logLevel", "logLevel=loud"},
					{"logFormat", "logFormat=yaml"},
					{"replicaCount", "replicaCount=abc"},
					{"grpc", "grpc.port=0"},
					{"unknownValue", "unknownValue=1"},
				} {
					wantRefused(t, h, sc.name, bad.field, "--set", bad.set)
				}
			})
		})
	}
}

// TestWatchGatewayChartAccess renders each auth.mode: protected streams listen everywhere with
// the RBAC their checks need; unprotected ones listen on loopback only; mtls without its
// certificates is refused with a message.
func TestWatchGatewayChartAccess(t *testing.T) {
	h := newHelmEnv(t)
	const chart = "watch-gateway"
	grants := func(objs []manifest, kind, resource string) bool {
		for _, o := range ofKind(objs, kind) {
			for _, r := range o.Rules {
				if slices.Contains(r.Resources, resource) && slices.Equal(r.Verbs, []string{"create"}) {
					return true
				}
			}
		}
		return false
	}
	viewer := func(objs []manifest) bool {
		for _, o := range ofKind(objs, "Role") {
			if isStatusViewerRole(o) {
				return true
			}
		}
		return false
	}

	token := h.template(t, chart) // the default
	wantEnv(t, token, "JANGAR_WATCH_AUTH_MODE", "token")
	wantEnv(t, token, "JANGAR_HTTP_ADDR", "0.0.0.0:8080")
	wantEnv(t, token, "JANGAR_GRPC_HOST", "0.0.0.0")
	// Tokens for the gateway's own audience only (#31 item 4); an empty list is refused.
	wantEnv(t, token, "JANGAR_WATCH_AUTH_AUDIENCES", "agentplane-gateway")
	wantRefused(t, h, chart, "audiences", "--set-json", "auth.audiences=[]")
	if !grants(token, "ClusterRole", "tokenreviews") || !grants(token, "Role", "localsubjectaccessreviews") {
		t.Error("auth.mode=token: the gateway may not create TokenReviews (ClusterRole) and LocalSubjectAccessReviews (Role)")
	}
	if grants(token, "ClusterRole", "subjectaccessreviews") {
		t.Error("auth.mode=token: cluster-wide SubjectAccessReviews granted; the namespaced kind is enough")
	}
	if !viewer(token) {
		t.Error("auth.mode=token: no status-viewer Role to bind")
	}
	// TLS is on by default (#31 item 4; TestTheGatewayServesTLSByDefault checks the certificate).
	wantEnv(t, token, "JANGAR_WATCH_TLS_CERT_FILE", "/etc/watch-gateway/tls/tls.crt")

	none := h.template(t, chart, "--set", "auth.mode=none")
	wantEnv(t, none, "JANGAR_HTTP_ADDR", "127.0.0.1:8080")
	wantEnv(t, none, "JANGAR_GRPC_HOST", "127.0.0.1")
	if grants(none, "ClusterRole", "tokenreviews") || grants(none, "Role", "localsubjectaccessreviews") || viewer(none) {
		t.Error("auth.mode=none still grants review rights or renders the viewer Role")
	}

	wantRefused(t, h, chart, "tls.clientCA.secretName", "--set", "auth.mode=mtls")
	wantRefused(t, h, chart, "tls.secretName", "--set", "auth.mode=mtls", "--set", "tls.generate=false", "--set", "tls.clientCA.secretName=gw-client-ca")
	mtls := h.template(t, chart, "--set", "auth.mode=mtls", "--set", "tls.secretName=gw-tls", "--set", "tls.clientCA.secretName=gw-client-ca")
	wantEnv(t, mtls, "JANGAR_HTTP_ADDR", "0.0.0.0:8080")
	wantEnv(t, mtls, "JANGAR_WATCH_TLS_CERT_FILE", "/etc/watch-gateway/tls/tls.crt")
	wantEnv(t, mtls, "JANGAR_WATCH_TLS_CLIENT_CA_FILE", "/etc/watch-gateway/client-ca/ca.crt")
	if grants(mtls, "ClusterRole", "tokenreviews") {
		t.Error("auth.mode=mtls grants TokenReviews")
	}
}

// TestEveryChartEnvVarIsReadByCode: a variable a chart renders that no code reads promises
// behaviour that does not exist. For each service chart, every variable of its container must
// appear as a Go string literal in the service's module or in libs (OTEL_* are read by the
// OpenTelemetry SDK, POD_* by libs/config).
func TestEveryChartEnvVarIsReadByCode(t *testing.T) {
	h := newHelmEnv(t)
	libs := goStringLiterals(t, filepath.Join(h.root, "libs"))
	for _, c := range serviceCharts {
		t.Run(c.name, func(t *testing.T) {
			read := goStringLiterals(t, filepath.Join(h.root, "services", c.name))
			d := theDeployment(t, h.template(t, c.name))
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				if strings.HasPrefix(e.Name, "OTEL_") {
					continue
				}
				if !read[e.Name] && !libs[e.Name] {
					t.Errorf("the chart sets %s, which no code in services/%s or libs reads", e.Name, c.name)
				}
			}
		})
	}
}

// goStringLiterals collects the string literals of the non-test Go files under dir.
func goStringLiterals(t *testing.T, dir string) map[string]bool {
	t.Helper()
	lit := regexp.MustCompile(`"([A-Z][A-Z0-9_]+)"`)
	out := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllSubmatch(b, -1) {
			out[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
