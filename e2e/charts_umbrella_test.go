//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// umbrellaObjects renders charts/agentplane as release rel with flags and returns its objects by
// "kind/name" ("kind/name@namespace" outside the release namespace), each as parsed YAML.
func umbrellaObjects(t *testing.T, h *helmEnv, rel string, flags ...string) map[string]map[string]any {
	t.Helper()
	args := append([]string{"template", rel, "charts/agentplane", "--namespace", chartNamespace, "--kube-version", renderKubeVersion}, flags...)
	stdout, stderr, err := h.run(args...)
	if err != nil {
		t.Fatalf("helm template charts/agentplane %v: %v\n%s", flags, err, stderr)
	}
	return byName(t, stdout)
}

func byName(t *testing.T, out string) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	for _, doc := range docSeparator.Split(out, -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("parse: %v\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		key := fmt.Sprintf("%v/%v", m["kind"], at(m, "metadata", "name"))
		if ns := at(m, "metadata", "namespace"); ns != nil && ns != chartNamespace {
			key += "@" + fmt.Sprint(ns) // a Role per namespace acted in
		}
		if _, dup := objs[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		objs[key] = m
	}
	return objs
}

// containerEnv returns the env (name → value, or "<from>" for valueFrom) of the named
// Deployment's first container.
func containerEnv(t *testing.T, objs map[string]map[string]any, deployment string) map[string]string {
	t.Helper()
	d, ok := objs["Deployment/"+deployment]
	if !ok {
		t.Fatalf("no Deployment %s (have %v)", deployment, keysOf(objs))
	}
	env := map[string]string{}
	for _, e := range at(d, "spec", "template", "spec", "containers", "0", "env").([]any) {
		m := e.(map[string]any)
		if v, ok := m["value"]; ok {
			env[m["name"].(string)] = fmt.Sprint(v)
		} else {
			env[m["name"].(string)] = "<from>"
		}
	}
	return env
}

func keysOf(objs map[string]map[string]any) []string {
	var ks []string
	for k := range objs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// umbrellaRedis is the Redis every umbrella render gives (global.redis.url).
var umbrellaRedis = []string{"--set", "global.redis.url=redis://redis:6379/0"}

// TestUmbrellaChart (#13 item 3, #34 item 2): charts/agentplane installs the CRDs' chart and the
// six services in one release as real subcharts (Chart.yaml dependencies, each with its
// condition; no links, no tpl of other charts), each service exactly as its own chart renders it
// with the values the umbrella hands it (its block, and global), wired to the others whatever the
// release name; the seeds' values work under global, and at the top level are refused saying where
// they go.
func TestUmbrellaChart(t *testing.T) {
	h := newHelmEnv(t)
	if stdout, stderr, err := h.run(append([]string{"lint", "--strict", "charts/agentplane"}, umbrellaRedis...)...); err != nil {
		t.Fatalf("helm lint --strict charts/agentplane: %v\n%s%s", err, stdout, stderr)
	}

	t.Run("real subcharts: no links, no tpl, a condition each", func(t *testing.T) {
		_ = filepath.WalkDir(filepath.Join(h.root, "charts"), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type()&os.ModeSymlink != 0 {
				t.Errorf("%s is a symbolic link: a chart must hold its files (checkouts without links break it)", p)
			}
			return nil
		})
		var chart struct {
			Dependencies []struct {
				Name, Repository, Condition string
			} `json:"dependencies"`
		}
		raw, err := os.ReadFile(filepath.Join(h.root, "charts", "agentplane", "Chart.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, &chart); err != nil {
			t.Fatal(err)
		}
		conds := map[string]string{}
		for _, d := range chart.Dependencies {
			conds[d.Name] = d.Condition
			if d.Repository != "file://../"+d.Name {
				t.Errorf("dependency %s comes from %s, want file://../%s", d.Name, d.Repository, d.Name)
			}
		}
		for _, svc := range services {
			if !strings.HasPrefix(conds[svc], svc+".enabled") {
				t.Errorf("subchart %s has condition %q, want %s.enabled first", svc, conds[svc], svc)
			}
		}
		templates, _ := filepath.Glob(filepath.Join(h.root, "charts", "agentplane", "templates", "*"))
		for _, f := range templates {
			b, _ := os.ReadFile(f)
			if strings.Contains(string(b), "tpl ") || strings.Contains(string(b), ".Files.Get") {
				t.Errorf("%s renders other charts' files (tpl, .Files.Get): the services are subcharts", f)
			}
		}
		_, stderr, err := h.run(append([]string{"template", "agentplane", "charts/agentplane", "--namespace", chartNamespace}, umbrellaRedis...)...)
		if err != nil || strings.Contains(stderr, "symbolic link") {
			t.Errorf("helm template charts/agentplane: %v, warnings: %s", err, stderr)
		}
	})

	// Each service's objects are what its own chart renders for the same release name, given the
	// values the umbrella hands it (its block of the umbrella's values.yaml, and global); nothing
	// else is rendered but the CRDs chart's and the runs' namespace.
	t.Run("each service as its own chart renders it", func(t *testing.T) {
		for _, rel := range []string{"agentplane", "prod"} {
			all := umbrellaObjects(t, h, rel, umbrellaRedis...)
			seen := map[string]bool{}
			for _, sc := range serviceCharts {
				// What the umbrella's values.yaml and global give the subchart.
				flags := []string{"template", rel, "charts/" + sc.name, "--namespace", chartNamespace,
					"--set", "global.agentplane.umbrella=true", "--set", "global.redis.url=redis://redis:6379/0", "--set", "global.runs.createNamespace=true"}
				switch sc.name {
				case "status-writer", "event-emitter":
					flags = append(flags, "--set-json", "auth.allowedCallers=[]")
				case "run-controller":
					flags = append(flags, "--set", "statusWriter.address=", "--set", "eventEmitter.address=", "--set", "controller.jobResultFinalizer=true")
				case "job-gc", "cancel-propagator":
					flags = append(flags, "--set", "statusWriter.address=", "--set", "eventEmitter.address=")
				}
				stdout, stderr, err := h.run(flags...)
				if err != nil {
					t.Fatalf("helm template charts/%s: %v\n%s", sc.name, err, stderr)
				}
				alone := byName(t, stdout)
				for key, want := range alone {
					got, ok := all[key]
					if !ok {
						t.Errorf("%s (release %s): the umbrella does not render %s", sc.name, rel, key)
						continue
					}
					seen[key] = true
					if sc.name == "watch-gateway" && (key == "Secret/"+rel+"-watch-gateway-tls" || key == "ConfigMap/"+rel+"-watch-gateway-ca") {
						got, want = generatedData(got), generatedData(want) // a new pair at each render
					}
					if !reflect.DeepEqual(got, want) {
						a, _ := yaml.Marshal(got)
						b, _ := yaml.Marshal(want)
						t.Errorf("%s (release %s): %s differs from charts/%s's\numbrella:\n%s\nchart:\n%s", sc.name, rel, key, sc.name, a, b)
					}
				}
			}
			// The CRDs chart's own objects, as that chart renders them.
			stdout, stderr, err := h.run("template", rel, "charts/agentplane-crds", "--namespace", chartNamespace)
			if err != nil {
				t.Fatalf("helm template charts/agentplane-crds: %v\n%s", err, stderr)
			}
			for key, want := range byName(t, stdout) {
				got, ok := all[key]
				if ok && key == "CustomResourceDefinition/agentruns.agents.proompteng.ai" {
					// the chart label names the subchart either way; compare the rest
					ok = reflect.DeepEqual(at(got, "spec"), at(want, "spec"))
				} else if ok {
					ok = reflect.DeepEqual(got, want)
				}
				if !ok {
					t.Errorf("release %s: the umbrella's %s differs from charts/agentplane-crds's (or is missing)", rel, key)
				}
				seen[key] = true
			}
			seen["Namespace/"+chartNamespace+"-runs"] = true // its own: where the runs live (TestTheUmbrellaKeepsRunsApart)
			for key := range all {
				if !seen[key] {
					t.Errorf("release %s: the umbrella renders %s, which no service chart does", rel, key)
				}
			}
		}
	})

	t.Run("the wiring follows the release name and the ports", func(t *testing.T) {
		objs := umbrellaObjects(t, h, "team-a", append(umbrellaRedis, "--set", "global.grpc.port=6000")...)
		for _, c := range []string{"run-controller", "job-gc", "cancel-propagator"} {
			env := containerEnv(t, objs, "team-a-"+c)
			if env["JANGAR_STATUS_WRITER_ADDR"] != "team-a-status-writer:6000" || env["JANGAR_EVENT_EMITTER_ADDR"] != "team-a-event-emitter:6000" {
				t.Errorf("%s: status-writer at %q, event-emitter at %q", c, env["JANGAR_STATUS_WRITER_ADDR"], env["JANGAR_EVENT_EMITTER_ADDR"])
			}
		}
		for _, s := range []string{"status-writer", "event-emitter"} {
			if got := containerEnv(t, objs, "team-a-"+s)["JANGAR_GRPC_AUTH_ALLOWED_CALLERS"]; got != "team-a-job-gc,team-a-cancel-propagator,team-a-run-controller" {
				t.Errorf("%s admits %q, want this release's controllers", s, got)
			}
			if got := containerEnv(t, objs, "team-a-"+s)["JANGAR_GRPC_PORT"]; got != "6000" {
				t.Errorf("%s listens on %q, want global.grpc.port 6000", s, got)
			}
		}
		// A port given to one service alone would leave the others calling the old one.
		wantRefused(t, h, "agentplane", "global.grpc.port=6000", append(umbrellaRedis, "--set", "status-writer.grpc.port=6000")...)
		// A controller's ServiceAccount renamed in its block: the servers cannot know it unless told.
		wantRefused(t, h, "agentplane", "status-writer.auth.allowedCallers", append(umbrellaRedis, "--set", "run-controller.serviceAccount.name=rc")...)
		objs = umbrellaObjects(t, h, "agentplane", append(umbrellaRedis, "--set", "run-controller.serviceAccount.name=rc",
			"--set", "status-writer.auth.allowedCallers={rc,agentplane-job-gc}", "--set", "event-emitter.auth.allowedCallers={rc}")...)
		if got := containerEnv(t, objs, "agentplane-status-writer")["JANGAR_GRPC_AUTH_ALLOWED_CALLERS"]; got != "rc,agentplane-job-gc" {
			t.Errorf("status-writer.auth.allowedCallers was replaced: %q", got)
		}
		// What a service's block sets is not rewired.
		objs = umbrellaObjects(t, h, "agentplane", append(umbrellaRedis, "--set", "run-controller.statusWriter.address=elsewhere:1")...)
		if got := containerEnv(t, objs, "agentplane-run-controller")["JANGAR_STATUS_WRITER_ADDR"]; got != "elsewhere:1" {
			t.Errorf("run-controller.statusWriter.address was replaced: %q", got)
		}
	})

	// A values file from the seeds' world (argocd/applications/agents/values.yaml's shape), its
	// shared parts moved under global and the rest under the service that reads them.
	t.Run("the seeds' values", func(t *testing.T) {
		seeds := `
global:
  controller:
    namespaces: [agents, team-b]
  grpc:
    port: 7000
  controllers:
    env:
      vars:
        JANGAR_CONTROLLER_EVENTS_RATE_LIMIT_PER_MIN: "30"
        JANGAR_ORCHESTRATION_CANCEL_TIMEOUT_MS: "45000"
  env:
    vars:
      JANGAR_LOG_LEVEL: debug
  controlPlane:
    env:
      vars:
        JANGAR_WATCH_HEARTBEAT: 10s
  redis:
    url: redis://redis.agents:6379/0
    passwordSecretRef: {name: redis, key: password}
run-controller:
  controller:
    jobTtlSecondsAfterFinished: 0
    concurrency: {namespace: 5, agent: 2, cluster: 50}
    queue: {namespace: 100, repo: 20, cluster: 1000}
    rate: {windowSeconds: 30, namespace: 10, repo: 5, cluster: 60}
    admissionPolicy:
      imagesAllowed: ["registry.example.com/agents/*"]
      blockedSecrets: [prod-db]
job-gc:
  controller:
    agentRunRetentionSeconds: 7200
`
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(seeds), 0o644); err != nil {
			t.Fatal(err)
		}
		objs := umbrellaObjects(t, h, "agents", "-f", f)
		want := map[string]map[string]string{
			"run-controller": {
				"JANGAR_AGENTS_CONTROLLER_NAMESPACES": "agents,team-b", "JANGAR_AGENT_RUNNER_JOB_TTL_SECONDS": "0",
				"JANGAR_AGENTS_CONTROLLER_CONCURRENCY_NAMESPACE": "5", "JANGAR_AGENTS_CONTROLLER_CONCURRENCY_AGENT": "2", "JANGAR_AGENTS_CONTROLLER_CONCURRENCY_CLUSTER": "50",
				"JANGAR_AGENTS_CONTROLLER_QUEUE_NAMESPACE": "100", "JANGAR_AGENTS_CONTROLLER_QUEUE_REPO": "20", "JANGAR_AGENTS_CONTROLLER_QUEUE_CLUSTER": "1000",
				"JANGAR_AGENTS_CONTROLLER_RATE_WINDOW_SECONDS": "30", "JANGAR_AGENTS_CONTROLLER_RATE_NAMESPACE": "10", "JANGAR_AGENTS_CONTROLLER_RATE_REPO": "5", "JANGAR_AGENTS_CONTROLLER_RATE_CLUSTER": "60",
				"JANGAR_AGENTS_CONTROLLER_IMAGES_ALLOWED": "registry.example.com/agents/*", "JANGAR_AGENTS_CONTROLLER_BLOCKED_SECRETS": "prod-db",
				"JANGAR_GRPC_PORT": "7000", "JANGAR_STATUS_WRITER_ADDR": "agents-status-writer:7000", "JANGAR_EVENT_EMITTER_ADDR": "agents-event-emitter:7000",
				"JANGAR_LOG_LEVEL": "debug",
			},
			"job-gc":            {"JANGAR_AGENTS_CONTROLLER_NAMESPACES": "agents,team-b", "JANGAR_AGENTS_CONTROLLER_AGENTRUN_RETENTION_SECONDS": "7200", "JANGAR_GRPC_PORT": "7000"},
			"cancel-propagator": {"JANGAR_ORCHESTRATION_CANCEL_TIMEOUT_MS": "45000", "JANGAR_AGENTS_CONTROLLER_NAMESPACES": "agents,team-b"},
			// The seeds put the events rate under controllers.env.vars; event-emitter is where it is read.
			"event-emitter": {"JANGAR_CONTROLLER_EVENTS_RATE_LIMIT_PER_MIN": "30", "JANGAR_REDIS_URL": "redis://redis.agents:6379/0", "JANGAR_REDIS_PASSWORD": "<from>", "JANGAR_GRPC_PORT": "7000"},
			"status-writer": {"JANGAR_GRPC_PORT": "7000", "JANGAR_AGENTS_CONTROLLER_NAMESPACES": "agents,team-b", "JANGAR_LOG_LEVEL": "debug"},
			"watch-gateway": {"JANGAR_WATCH_HEARTBEAT": "10s", "JANGAR_REDIS_URL": "redis://redis.agents:6379/0", "JANGAR_GRPC_PORT": "7000", "JANGAR_LOG_LEVEL": "debug"},
		}
		for svc, vars := range want {
			env := containerEnv(t, objs, "agents-"+svc)
			for k, v := range vars {
				if env[k] != v {
					t.Errorf("%s: %s=%q, want %q", svc, k, env[k], v)
				}
			}
		}
		// A global variable goes only where it is read.
		for svc, v := range map[string]string{"watch-gateway": "JANGAR_ORCHESTRATION_CANCEL_TIMEOUT_MS", "run-controller": "JANGAR_CONTROLLER_EVENTS_RATE_LIMIT_PER_MIN", "status-writer": "JANGAR_WATCH_HEARTBEAT"} {
			if _, ok := containerEnv(t, objs, "agents-"+svc)[v]; ok {
				t.Errorf("%s reached %s, which does not read it", v, svc)
			}
		}
		// A service's own block wins over global, and false or 0 are values too.
		objs = umbrellaObjects(t, h, "agents", "-f", f, "--set", "job-gc.controller.namespaces={gc-only}", "--set", "status-writer.tests.enabled=false",
			"--set", "run-controller.controller.concurrency.cluster=0", "--set", "status-writer.env.vars.JANGAR_LOG_LEVEL=warn")
		if got := containerEnv(t, objs, "agents-job-gc")["JANGAR_AGENTS_CONTROLLER_NAMESPACES"]; got != "gc-only" {
			t.Errorf("job-gc.controller.namespaces lost to global.controller.namespaces: %q", got)
		}
		if got := containerEnv(t, objs, "agents-run-controller")["JANGAR_AGENTS_CONTROLLER_CONCURRENCY_CLUSTER"]; got != "0" {
			t.Errorf("run-controller.controller.concurrency.cluster=0 lost to the values file's 50: %q", got)
		}
		if got := containerEnv(t, objs, "agents-status-writer")["JANGAR_LOG_LEVEL"]; got != "warn" {
			t.Errorf("status-writer.env.vars lost to global.env.vars: JANGAR_LOG_LEVEL=%q", got)
		}
		for key, o := range objs {
			if at(o, "metadata", "annotations", "helm.sh/hook") == "test" && strings.Contains(key, "status-writer") {
				t.Errorf("status-writer.tests.enabled=false still renders %s", key)
			}
		}
		// The same file with its shared parts at the top level, as the seeds' single chart has
		// them: each refused, naming where it goes.
		for key, where := range map[string]string{
			"controller.namespaces={agents}":       "global.controller.namespaces",
			"controllers.env.vars.JANGAR_X=1":      "global.controllers.env.vars",
			"env.vars.JANGAR_LOG_LEVEL=debug":      "global.env.vars",
			"redis.url=redis://r:6379/0":           "global.redis",
			"grpc.port=7000":                       "global.grpc.port",
			"image.registry=r.example.com":         "global.imageRegistry",
			"controlPlane.env.vars.JANGAR_X=1":     "global.controlPlane.env.vars",
			"runs.namespace=x":                     "global.runs",
			"orchestrationController.enabled=true": "run-controller.orchestrationController",
		} {
			wantRefused(t, h, "agentplane", where, "--set", key)
		}
	})

	t.Run("enabled flags and the CRDs", func(t *testing.T) {
		deployments := func(objs map[string]map[string]any) []string {
			var out []string
			for k := range objs {
				if name, ok := strings.CutPrefix(k, "Deployment/agentplane-"); ok {
					out = append(out, name)
				}
			}
			sort.Strings(out)
			return out
		}
		if got := deployments(umbrellaObjects(t, h, "agentplane", umbrellaRedis...)); len(got) != 6 {
			t.Errorf("default: %v, want all six services", got)
		}
		if got := deployments(umbrellaObjects(t, h, "agentplane", append(umbrellaRedis, "--set", "watch-gateway.enabled=false")...)); slices.Contains(got, "watch-gateway") || len(got) != 5 {
			t.Errorf("watch-gateway.enabled=false: %v", got)
		}
		if got := deployments(umbrellaObjects(t, h, "agentplane", append(umbrellaRedis, "--set", "global.controllers.enabled=false")...)); !reflect.DeepEqual(got, []string{"event-emitter", "status-writer", "watch-gateway"}) {
			t.Errorf("global.controllers.enabled=false: %v", got)
		}
		// A controller's own enabled wins over the group's.
		if got := deployments(umbrellaObjects(t, h, "agentplane", append(umbrellaRedis, "--set", "global.controllers.enabled=false", "--set", "cancel-propagator.enabled=true")...)); !slices.Contains(got, "cancel-propagator") || slices.Contains(got, "job-gc") {
			t.Errorf("global.controllers.enabled=false, cancel-propagator.enabled=true: %v", got)
		}
		crds := func(flags ...string) int {
			n := 0
			for _, o := range umbrellaObjects(t, h, "agentplane", append(umbrellaRedis, flags...)...) {
				if o["kind"] == "CustomResourceDefinition" {
					n++
				}
			}
			return n
		}
		if n := crds(); n != len(wantCRDs) {
			t.Errorf("%d CRDs with the release, want %d", n, len(wantCRDs))
		}
		if n := crds("--set", "crds.enabled=false"); n != 0 {
			t.Errorf("crds.enabled=false still installs %d CRDs", n)
		}
	})

	// Each subchart's schema holds in its block; the umbrella's own keys are checked too.
	t.Run("the schema refuses what a service chart refuses", func(t *testing.T) {
		for _, c := range []struct{ field, set string }{
			{"rateLimitPerMin", "event-emitter.events.rateLimitPerMin=0"},
			{"workers", "run-controller.controller.workers=0"},
			{"heartbeat", "watch-gateway.heartbeat=0s"},
			{"always serve gRPC", "run-controller.grpc.enabled=false"}, // the service charts' refusal, with why
			{"vcsProviders", "run-controller.controller.vcsProviders.enabled=true"},
			{"port", "global.grpc.port=0"},
			{"noSuchService", "noSuchService.enabled=true"},
		} {
			wantRefused(t, h, "agentplane", c.field, append(umbrellaRedis, "--set", c.set)...)
		}
	})
}

// generatedData is o with each value of its data replaced by a mark: what Helm generates anew at
// each render (watch-gateway's certificate) compares by its keys only.
func generatedData(o map[string]any) map[string]any {
	c := maps.Clone(o)
	if d, ok := o["data"].(map[string]any); ok {
		marked := map[string]any{}
		for k := range d {
			marked[k] = "<generated>"
		}
		c["data"] = marked
	}
	return c
}

// TestTheUmbrellaKeepsRunsApart (#31 item 10): the one-release chart's services act on runs in a
// namespace of their own (<release namespace>-runs, made by the release and kept on uninstall),
// not in the control plane's, where its Secrets are; the gateway reports on the control plane
// there and shows the runs' namespace; global.runs.namespace names another,
// global.runs.createNamespace=false leaves its creation to the operator, and
// global.controller.namespaces, when given, wins.
func TestTheUmbrellaKeepsRunsApart(t *testing.T) {
	h := newHelmEnv(t)
	namespaceOf := func(objs map[string]map[string]any) (string, bool) {
		for key, o := range objs {
			if strings.HasPrefix(key, "Namespace/") {
				return fmt.Sprint(at(o, "metadata", "name")), at(o, "metadata", "annotations", "helm.sh/resource-policy") == "keep"
			}
		}
		return "", false
	}
	actsIn := func(t *testing.T, objs map[string]map[string]any, rel, want string) {
		t.Helper()
		for _, sc := range serviceCharts {
			if got := containerEnv(t, objs, rel+"-"+sc.name)["JANGAR_AGENTS_CONTROLLER_NAMESPACES"]; got != want {
				t.Errorf("%s acts in %q, want %q", sc.name, got, want)
			}
		}
	}

	objs := umbrellaObjects(t, h, "agentplane", umbrellaRedis...)
	if ns, kept := namespaceOf(objs); ns != chartNamespace+"-runs" || !kept {
		t.Errorf("the release makes namespace %q (kept on uninstall: %v), want %s-runs, kept", ns, kept, chartNamespace)
	}
	actsIn(t, objs, "agentplane", chartNamespace+"-runs")
	// The console's Roles go where the runs are; the status viewer's stays with the control plane.
	if _, ok := objs["Role/agentplane-watch-gateway-console-viewer@"+chartNamespace+"-runs"]; !ok {
		t.Errorf("no console-viewer Role in %s-runs: %v", chartNamespace, slices.Sorted(maps.Keys(objs)))
	}
	if _, ok := objs["Role/agentplane-watch-gateway-status-viewer"]; !ok {
		t.Error("no status-viewer Role in the release namespace")
	}
	for key := range objs {
		if strings.HasPrefix(key, "Secret/") && strings.Contains(key, "@") {
			t.Errorf("a control-plane Secret rendered outside the release namespace: %s", key)
		}
	}

	objs = umbrellaObjects(t, h, "agentplane", append(umbrellaRedis, "--set", "global.runs.namespace=team-a")...)
	if ns, _ := namespaceOf(objs); ns != "team-a" {
		t.Errorf("global.runs.namespace=team-a makes namespace %q", ns)
	}
	actsIn(t, objs, "agentplane", "team-a")

	objs = umbrellaObjects(t, h, "agentplane", append(umbrellaRedis, "--set", "global.runs.createNamespace=false")...)
	if ns, _ := namespaceOf(objs); ns != "" {
		t.Errorf("global.runs.createNamespace=false still makes namespace %q", ns)
	}
	actsIn(t, objs, "agentplane", chartNamespace+"-runs")

	objs = umbrellaObjects(t, h, "agentplane", append(umbrellaRedis, "--set", "global.controller.namespaces={"+chartNamespace+"}")...)
	if ns, _ := namespaceOf(objs); ns != "" {
		t.Errorf("global.controller.namespaces given, yet the release makes namespace %q", ns)
	}
	actsIn(t, objs, "agentplane", chartNamespace)
}
