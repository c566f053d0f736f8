//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// objects renders chart and returns every object as a map.
func objects(t *testing.T, h *helmEnv, chart string, flags ...string) []map[string]any {
	t.Helper()
	stdout, stderr, err := h.templateErr(chart, flags...)
	if err != nil {
		t.Fatalf("helm template %s %v: %v\n%s", chart, flags, err, stderr)
	}
	var out []map[string]any
	for _, doc := range strings.Split(stdout, "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if len(m) > 0 {
			out = append(out, m)
		}
	}
	return out
}

// at walks m along path (map keys, or "0" for the first list item).
func at(m any, path ...string) any {
	for _, p := range path {
		switch v := m.(type) {
		case map[string]any:
			m = v[p]
		case []any:
			if len(v) == 0 {
				return nil
			}
			m = v[0]
		default:
			return nil
		}
	}
	return m
}

func kind(objs []map[string]any, k string) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if o["kind"] == k {
			out = append(out, o)
		}
	}
	return out
}

// TestChartKnobsOperatorsExpect (#13 item 5, in part): labels on everything, pod labels, priority,
// topology spread, overridable security contexts, registry and digest, a PodDisruptionBudget,
// and a `global` block accepted (the charts work as dependencies).
func TestChartKnobsOperatorsExpect(t *testing.T) {
	h := newHelmEnv(t)
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, sc := range serviceCharts {
		t.Run(sc.name, func(t *testing.T) {
			objs := objects(t, h, sc.name,
				"--set", "commonLabels.team=agents", "--set", "podLabels.tier=control",
				"--set", "priorityClassName=system-cluster-critical",
				"--set", "topologySpreadConstraints[0].maxSkew=1", "--set", "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
				"--set", "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
				"--set", "podSecurityContext.runAsUser=1000", "--set", "podSecurityContext.runAsNonRoot=true",
				"--set", "image.registry=registry.example.com", "--set", "image.digest="+digest,
				"--set", "podDisruptionBudget.enabled=true", "--set", "global.imageRegistry=ignored")
			for _, o := range objs {
				if at(o, "metadata", "labels", "team") != "agents" {
					t.Errorf("%s/%s lacks commonLabels", o["kind"], at(o, "metadata", "name"))
				}
			}
			deps := kind(objs, "Deployment")
			if len(deps) != 1 {
				t.Fatalf("%d Deployments", len(deps))
			}
			d := deps[0]
			pod := at(d, "spec", "template")
			if at(pod, "metadata", "labels", "tier") != "control" || at(pod, "metadata", "labels", "team") != "agents" {
				t.Errorf("pod labels %v", at(pod, "metadata", "labels"))
			}
			if at(pod, "spec", "priorityClassName") != "system-cluster-critical" {
				t.Errorf("priorityClassName %v", at(pod, "spec", "priorityClassName"))
			}
			if at(pod, "spec", "topologySpreadConstraints", "0", "topologyKey") != "kubernetes.io/hostname" {
				t.Errorf("topologySpreadConstraints %v", at(pod, "spec", "topologySpreadConstraints"))
			}
			if at(pod, "spec", "securityContext", "runAsUser") != float64(1000) || at(pod, "spec", "securityContext", "fsGroup") != float64(65532) {
				t.Errorf("pod securityContext %v: podSecurityContext is merged into the defaults", at(pod, "spec", "securityContext"))
			}
			if img := at(pod, "spec", "containers", "0", "image"); img != "registry.example.com/agentplane/"+sc.name+"@"+digest {
				t.Errorf("image %v", img)
			}
			pdbs := kind(objs, "PodDisruptionBudget")
			if len(pdbs) != 1 || fmt.Sprint(at(pdbs[0], "spec", "minAvailable")) != "1" ||
				fmt.Sprint(at(pdbs[0], "spec", "selector", "matchLabels")) != fmt.Sprint(at(d, "spec", "selector", "matchLabels")) {
				t.Errorf("PodDisruptionBudget %v", pdbs)
			}
			if pdb := kind(objects(t, h, sc.name, "--set", "podDisruptionBudget.enabled=true", "--set", "podDisruptionBudget.maxUnavailable=1"), "PodDisruptionBudget"); len(pdb) != 1 ||
				at(pdb[0], "spec", "minAvailable") != nil || fmt.Sprint(at(pdb[0], "spec", "maxUnavailable")) != "1" {
				t.Errorf("maxUnavailable: %v", pdb)
			}
			if n := len(kind(objects(t, h, sc.name), "PodDisruptionBudget")); n != 0 {
				t.Errorf("%d PodDisruptionBudgets by default, want none", n)
			}
			// Defaults keep the restricted security context and the appVersion tag.
			def := at(kind(objects(t, h, sc.name), "Deployment")[0], "spec", "template", "spec")
			if at(def, "securityContext", "runAsNonRoot") != true || at(def, "containers", "0", "securityContext", "readOnlyRootFilesystem") != true ||
				!strings.HasPrefix(fmt.Sprint(at(def, "containers", "0", "image")), "agentplane/"+sc.name+":") {
				t.Errorf("defaults changed: %v", def)
			}
			wantRefused(t, h, sc.name, "digest", "--set", "image.digest=latest")
		})
	}
}

// TestSchemaRefusesWhatTheBinaryRefuses (#13 item 6, the known cases): a value the schema
// accepts must start the binary, so the bounds the binaries enforce are in the schemas.
func TestSchemaRefusesWhatTheBinaryRefuses(t *testing.T) {
	h := newHelmEnv(t)
	for _, c := range []struct{ chart, field, set string }{
		{"event-emitter", "rateLimitPerMin", "events.rateLimitPerMin=0"},
		{"event-emitter", "burst", "events.burst=0"},
		{"watch-gateway", "heartbeat", "heartbeat=0s"},
		{"watch-gateway", "heartbeat", "heartbeat=10m"},
		{"status-writer", "cacheTTL", "auth.cacheTTL=0s"},
		{"watch-gateway", "sessionTTL", "console.sessionTTL=30s"},
		{"watch-gateway", "sessionTTL", "console.sessionTTL=200h"},
		{"watch-gateway", "retention", "history.retention=0m"},
		{"watch-gateway", "retention", "history.retention=2161h"},
		{"watch-gateway", "maxEntries", "history.maxEntries=99"},
		{"job-gc", "url", "archive.enabled=true"},
		{"job-gc", "url", "archive.url=mysql://db/runs"},
		{"job-gc", "url", "archive.url=postgres://agentplane:hunter2@db/runs"},
		{"job-gc", "logLines", "archive.logLines=10001"},
		{"job-gc", "maxConns", "archive.maxConns=1001"},
	} {
		wantRefused(t, h, c.chart, c.field, "--set", c.set)
	}
	for _, c := range []struct{ chart, set string }{
		{"event-emitter", "events.rateLimitPerMin=1"}, {"watch-gateway", "heartbeat=1s"}, {"watch-gateway", "heartbeat=5m"},
		{"watch-gateway", "console.sessionTTL=168h"}, {"watch-gateway", "history.retention=2160h"},
		{"job-gc", "archive.enabled=true,archive.url=postgres://agentplane@db:5432/runs?sslmode=verify-full"},
	} {
		h.template(t, c.chart, "--set", c.set)
	}
}

// alertMetrics renders chart's PrometheusRule and returns its alerts (name → runbook_url) and
// the agentplane_* series their expressions read.
func alertMetrics(t *testing.T, h *helmEnv, chart string) (map[string]string, []string) {
	t.Helper()
	rules := kind(objects(t, h, chart, "--set", "metrics.prometheusRule.enabled=true"), "PrometheusRule")
	if len(rules) != 1 {
		t.Fatalf("%s: %d PrometheusRules", chart, len(rules))
	}
	alerts := map[string]string{}
	var series []string
	seen := map[string]bool{}
	name := regexp.MustCompile(`agentplane_[a-z_]+`)
	for _, g := range at(rules[0], "spec", "groups").([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			alerts[fmt.Sprint(rule["alert"])] = fmt.Sprint(at(rule, "annotations", "runbook_url"))
			for _, m := range name.FindAllString(fmt.Sprint(rule["expr"]), -1) {
				if !seen[m] {
					seen[m] = true
					series = append(series, m)
				}
			}
		}
	}
	return alerts, series
}

// TestServiceMonitorsAndAlerts (#13 item 7, in part): off by default; on, a ServiceMonitor on the
// metrics port and a PrometheusRule whose every alert links to its section of docs/runbooks.md.
// (The series the alerts read are checked against a live scrape in TestLocalControlPlane.)
func TestServiceMonitorsAndAlerts(t *testing.T) {
	h := newHelmEnv(t)
	runbooks, err := os.ReadFile(filepath.Join(h.root, "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(runbooks), "\n") {
		if title, ok := strings.CutPrefix(line, "## "); ok {
			anchors[strings.ToLower(strings.ReplaceAll(strings.TrimSpace(title), " ", "-"))] = true
		}
	}
	for _, sc := range serviceCharts {
		t.Run(sc.name, func(t *testing.T) {
			def := objects(t, h, sc.name)
			if len(kind(def, "ServiceMonitor"))+len(kind(def, "PrometheusRule")) != 0 {
				t.Fatal("Prometheus Operator objects rendered by default")
			}
			sm := kind(objects(t, h, sc.name, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prom"), "ServiceMonitor")
			if len(sm) != 1 || at(sm[0], "spec", "endpoints", "0", "port") != "metrics" || at(sm[0], "metadata", "labels", "release") != "prom" {
				t.Fatalf("ServiceMonitor %v", sm)
			}
			alerts, series := alertMetrics(t, h, sc.name)
			if len(alerts) < 2 || len(series) == 0 {
				t.Fatalf("alerts %v reading %v: want the shared one and at least one of the service's own", alerts, series)
			}
			for alert, url := range alerts {
				_, anchor, _ := strings.Cut(url, "#")
				if !strings.HasSuffix(strings.Split(url, "#")[0], "docs/runbooks.md") || !anchors[anchor] || anchor != strings.ToLower(alert) {
					t.Errorf("alert %s: runbook_url %q has no section in docs/runbooks.md", alert, url)
				}
			}
		})
	}
}

// TestHelmTestPodProbesTheService (#13 item 8): each chart's `helm test` pod runs the service's own
// image with `probe` against the Service's gRPC port, is not selected by the Service, and follows
// the TLS settings; it is absent where no other pod could reach the server. (The e2e system suite
// runs these pods against the running services: TestWholeSystem/HelmTestPodOfEveryChartPasses.)
func TestHelmTestPodProbesTheService(t *testing.T) {
	h := newHelmEnv(t)
	for _, sc := range serviceCharts {
		t.Run(sc.name, func(t *testing.T) {
			objs := objects(t, h, sc.name, "-n", "agents")
			p := testPod(objs)
			if p == nil {
				t.Fatal("no helm test pod")
			}
			args := fmt.Sprint(at(p, "spec", "containers", "0", "args"))
			want := "[probe " + sc.name + ".agents.svc:50051]"
			if sc.name == "watch-gateway" { // TLS by default, with the certificate the chart generates
				want = "[probe --ca-file=/etc/agentplane/tls/ca.crt --server-name=watch-gateway.agents.svc watch-gateway.agents.svc:50051]"
			}
			if args != want {
				t.Errorf("args %s, want %s", args, want)
			}
			if img, dimg := at(p, "spec", "containers", "0", "image"), at(kind(objs, "Deployment")[0], "spec", "template", "spec", "containers", "0", "image"); img != dimg {
				t.Errorf("test image %v, the service's %v", img, dimg)
			}
			svcSel := at(kind(objs, "Service")[0], "spec", "selector").(map[string]any)
			labels := at(p, "metadata", "labels").(map[string]any)
			matches := true
			for k, v := range svcSel {
				if labels[k] != v {
					matches = false
				}
			}
			if matches {
				t.Errorf("the Service's selector %v picks the test pod %v", svcSel, labels)
			}
			if testPod(objects(t, h, sc.name, "--set", "tests.enabled=false")) != nil {
				t.Error("tests.enabled=false still renders the test pod")
			}
		})
	}
	// TLS: the CA from the server's Secret and the Service's name; mTLS: a client certificate, or no test.
	p := testPod(objects(t, h, "status-writer", "-n", "agents", "--set", "tls.secretName=sw-tls"))
	if args := fmt.Sprint(at(p, "spec", "containers", "0", "args")); args != "[probe --ca-file=/etc/agentplane/tls/ca.crt --server-name=status-writer.agents.svc status-writer.agents.svc:50051]" {
		t.Errorf("TLS args %s", args)
	}
	mtls := []string{"-n", "agents", "--set", "auth.mode=mtls", "--set", "tls.secretName=sw-tls", "--set", "tls.clientCA.secretName=ca"}
	if testPod(objects(t, h, "status-writer", mtls...)) != nil {
		t.Error("mtls without tests.clientSecretName renders a test that cannot connect")
	}
	p = testPod(objects(t, h, "status-writer", append(mtls, "--set", "tests.clientSecretName=probe-client")...))
	if args := fmt.Sprint(at(p, "spec", "containers", "0", "args")); !strings.Contains(args, "--cert-file=/etc/agentplane/client/tls.crt --key-file=/etc/agentplane/client/tls.key") {
		t.Errorf("mTLS args %s", args)
	}
	if testPod(objects(t, h, "status-writer", "--set", "auth.mode=none")) != nil {
		t.Error("auth.mode=none (loopback only) renders a test no pod could pass")
	}
}

// TestChartsRequireCELTransitionRules: every chart declares the Kubernetes it needs (the CRDs'
// status rules use oldSelf, GA in 1.29), so helm refuses an older cluster by name. The CRDs
// chart's admission policies (on by default, #31) need 1.36 (MutatingAdmissionPolicy v1): on an
// older cluster it refuses with a message naming admission.enabled=false and what that gives up,
// and installs the CRDs alone when told so.
func TestChartsRequireCELTransitionRules(t *testing.T) {
	h := newHelmEnv(t)
	for _, chart := range append([]string{"agentplane-crds"}, services...) {
		_, stderr, err := h.templateErr(chart, "--kube-version", "1.28.9")
		if err == nil || !strings.Contains(stderr, "requires kubeVersion: >=1.29.0-0") {
			t.Errorf("%s renders for Kubernetes 1.28 (%v): %s", chart, err, stderr)
		}
		old := []string{"--kube-version", "1.29.0"}
		if chart == "agentplane-crds" {
			_, stderr, err := h.templateErr(chart, old...)
			if err == nil || !strings.Contains(stderr, "Kubernetes 1.36 or newer") || !strings.Contains(stderr, "admission.enabled=false") {
				t.Errorf("agentplane-crds with its admission policies renders for Kubernetes 1.29 (%v): %s", err, stderr)
			}
			old = append(old, "--set", "admission.enabled=false")
		}
		if _, stderr, err := h.templateErr(chart, old...); err != nil {
			t.Errorf("%s refuses Kubernetes 1.29 (%v): %s", chart, old, stderr)
		}
	}
}

// TestGrafanaDashboardsReadRegisteredSeries (#13 item 7): off by default; on, a ConfigMap with the
// Grafana sidecar's label holding valid dashboard JSON whose every panel queries a series the
// service registers: a metric name in the service's or libs' code (gRPC server metrics come from
// libs/grpcx), so a renamed metric fails here. The alerts' series are also checked against a live
// scrape of a fresh stack in TestLocalControlPlane, and both the panels' and the alerts' against a
// scrape of each service after TestWholeSystem's scenarios and faults (a labelled counter is only
// exported once it has counted something, so a fresh stack cannot show them all).
func TestGrafanaDashboardsReadRegisteredSeries(t *testing.T) {
	h := newHelmEnv(t)
	series := regexp.MustCompile(`\b(agentplane|grpc_server)_[a-z_]+`)
	for _, sc := range serviceCharts {
		t.Run(sc.name, func(t *testing.T) {
			if n := len(dashboardConfigMaps(objects(t, h, sc.name))); n != 0 {
				t.Fatalf("%d dashboard ConfigMaps by default, want none", n)
			}
			dash := dashboard(t, h, sc.name)
			if len(dash.Panels) < 5 {
				t.Errorf("%d panels", len(dash.Panels))
			}
			metricNames := regexp.MustCompile(`"((?:agentplane|grpc_server)_[a-z_]+)"`)
			registered := map[string]bool{}
			onScaffold := false // the service names itself to the controller scaffold, which names its metrics
			for _, dir := range []string{filepath.Join(h.root, "services", sc.name), filepath.Join(h.root, "libs", "grpcx")} {
				_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
					if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
						b, _ := os.ReadFile(p)
						for _, m := range metricNames.FindAllStringSubmatch(string(b), -1) {
							registered[m[1]] = true
						}
						onScaffold = onScaffold || strings.Contains(string(b), `Options{Service: "`+sc.name+`"`)
					}
					return nil
				})
			}
			if onScaffold {
				// libs/controller's metrics: "agentplane_<service>_" + each suffix its code names.
				b, err := os.ReadFile(filepath.Join(h.root, "libs", "controller", "metrics.go"))
				if err != nil {
					t.Fatal(err)
				}
				suffixes := regexp.MustCompile(`prefix \+ "([a-z_]+)"`).FindAllStringSubmatch(string(b), -1)
				if len(suffixes) < 4 {
					t.Fatalf("found %d metric names in libs/controller/metrics.go: the pattern no longer reads them", len(suffixes))
				}
				for _, m := range suffixes {
					registered["agentplane_"+strings.ReplaceAll(sc.name, "-", "_")+"_"+m[1]] = true
				}
			}
			for _, p := range dash.Panels {
				if len(p.Targets) != 1 || !strings.Contains(p.Targets[0].Expr, `job="`+sc.name+`", namespace="agents"`) {
					t.Errorf("panel %q: targets %v do not select this release's scrape job", p.Title, p.Targets)
				}
				for _, m := range series.FindAllString(p.Targets[0].Expr, -1) {
					m = strings.TrimSuffix(m, "_bucket")
					if !registered[m] {
						t.Errorf("panel %q reads %s, which %s does not register", p.Title, m, sc.name)
					}
				}
			}
		})
	}
}

// grafanaDashboard is the part of a chart's dashboard JSON the tests read.
type grafanaDashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// dashboard renders chart's Grafana dashboard ConfigMap (release namespace agents) and parses it.
func dashboard(t *testing.T, h *helmEnv, chart string) grafanaDashboard {
	t.Helper()
	cms := dashboardConfigMaps(objects(t, h, chart, "-n", "agents", "--set", "metrics.grafanaDashboard.enabled=true"))
	if len(cms) != 1 {
		t.Fatalf("want one ConfigMap labelled grafana_dashboard=1: %v", cms)
	}
	data := at(cms[0], "data").(map[string]any)
	var dash grafanaDashboard
	if err := json.Unmarshal([]byte(fmt.Sprint(data["agentplane-agents-"+chart+".json"])), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v (%v)", err, data)
	}
	return dash
}

// panelSeries returns the agentplane_* and grpc_server_* series chart's dashboard panels read
// (histograms by their family name, without _bucket).
func panelSeries(t *testing.T, h *helmEnv, chart string) []string {
	t.Helper()
	re := regexp.MustCompile(`\b(agentplane|grpc_server)_[a-z_]+`)
	var out []string
	for _, p := range dashboard(t, h, chart).Panels {
		for _, tg := range p.Targets {
			for _, m := range re.FindAllString(tg.Expr, -1) {
				if m = strings.TrimSuffix(m, "_bucket"); !slices.Contains(out, m) {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

// TestNoChartRendersAnObjectTwice: helm template accepts two objects of one kind and name, the API
// server does not (helm install fails with "already exists"; the run-controller chart once
// rendered its leader-election Role and RoleBinding twice). With every optional object on.
func TestNoChartRendersAnObjectTwice(t *testing.T) {
	h := newHelmEnv(t)
	for _, chart := range append([]string{"agentplane-crds"}, services...) {
		flags := []string{"-n", "agents"}
		if chart != "agentplane-crds" {
			flags = append(flags, "--set", "networkPolicy.enabled=true", "--set", "podDisruptionBudget.enabled=true",
				"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
				"--set", "metrics.grafanaDashboard.enabled=true")
		}
		seen := map[string]bool{}
		for _, o := range objects(t, h, chart, flags...) {
			key := fmt.Sprintf("%v/%v/%v", o["kind"], at(o, "metadata", "namespace"), at(o, "metadata", "name"))
			if seen[key] {
				t.Errorf("%s renders %s twice", chart, key)
			}
			seen[key] = true
		}
	}
}

// testPod is the chart's helm test pod among objs, or nil.
func testPod(objs []map[string]any) map[string]any {
	for _, o := range kind(objs, "Pod") {
		if at(o, "metadata", "annotations", "helm.sh/hook") == "test" {
			return o
		}
	}
	return nil
}

// dashboardConfigMaps are the ConfigMaps among objs that Grafana's sidecar loads (labelled
// grafana_dashboard); watch-gateway's chart also renders one with its CA.
func dashboardConfigMaps(objs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, cm := range kind(objs, "ConfigMap") {
		if at(cm, "metadata", "labels", "grafana_dashboard") != nil {
			out = append(out, cm)
		}
	}
	return out
}

// TestTheValuesOperatorsLookFor (#34 item 6): global.imageRegistry and global pull secrets (the
// chart's own win and add up), extraEnv with valueFrom (replacing a variable the chart sets),
// topology spread with the pods' own selector filled in, a Lease per release (and the earlier
// releases' held beside it), the console's Ingress and HTTPRoute.
func TestTheValuesOperatorsLookFor(t *testing.T) {
	h := newHelmEnv(t)
	for _, sc := range serviceCharts {
		t.Run(sc.name, func(t *testing.T) {
			objs := objects(t, h, sc.name, "--set", "global.imageRegistry=mirror.example.com", "--set", "imagePullSecrets[0].name=own",
				"--set", "global.imagePullSecrets={shared,own}", "--set", "global.priorityClassName=agentplane",
				"--set", "extraEnv[0].name=OTEL_EXPORTER_OTLP_HEADERS", "--set", "extraEnv[0].valueFrom.secretKeyRef.name=otlp",
				"--set", "extraEnv[0].valueFrom.secretKeyRef.key=headers",
				"--set", "extraEnv[1].name=JANGAR_LOG_LEVEL", "--set", "extraEnv[1].valueFrom.configMapKeyRef.name=logging",
				"--set", "extraEnv[1].valueFrom.configMapKeyRef.key=level",
				"--set", "topologySpreadConstraints[0].maxSkew=1", "--set", "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
				"--set", "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway")
			d := kind(objs, "Deployment")[0]
			pod := at(d, "spec", "template", "spec")
			if img := fmt.Sprint(at(pod, "containers", "0", "image")); !strings.HasPrefix(img, "mirror.example.com/agentplane/"+sc.name+":") {
				t.Errorf("image %s, want it from global.imageRegistry", img)
			}
			if got := fmt.Sprint(at(pod, "imagePullSecrets")); got != "[map[name:own] map[name:shared]]" {
				t.Errorf("imagePullSecrets %s, want the chart's then global's, each once", got)
			}
			if got := at(pod, "priorityClassName"); got != "agentplane" {
				t.Errorf("priorityClassName %v, want global's", got)
			}
			var headers, levels int
			for _, e := range at(pod, "containers", "0", "env").([]any) {
				m := e.(map[string]any)
				switch m["name"] {
				case "OTEL_EXPORTER_OTLP_HEADERS":
					headers++
					if at(m, "valueFrom", "secretKeyRef", "name") != "otlp" {
						t.Errorf("OTEL_EXPORTER_OTLP_HEADERS %v, want it from Secret otlp", m)
					}
				case "JANGAR_LOG_LEVEL":
					levels++
					if at(m, "valueFrom", "configMapKeyRef", "name") != "logging" || m["value"] != nil {
						t.Errorf("JANGAR_LOG_LEVEL %v, want extraEnv's valueFrom in place of the chart's value", m)
					}
				}
			}
			if headers != 1 || levels != 1 {
				t.Errorf("OTEL_EXPORTER_OTLP_HEADERS %d times, JANGAR_LOG_LEVEL %d times, want once each", headers, levels)
			}
			sel := at(pod, "topologySpreadConstraints", "0", "labelSelector", "matchLabels")
			if fmt.Sprint(sel) != fmt.Sprint(at(d, "spec", "selector", "matchLabels")) {
				t.Errorf("the topology spread's labelSelector %v, want the pods' own %v", sel, at(d, "spec", "selector", "matchLabels"))
			}
		})
	}

	t.Run("run-controller's agents come from the same registry", func(t *testing.T) {
		if got, _ := envOf(t, h.template(t, "run-controller", "--set", "global.imageRegistry=mirror.example.com"), "JANGAR_AGENT_IMAGE"); !strings.HasPrefix(got, "mirror.example.com/agentplane/agent:") {
			t.Errorf("JANGAR_AGENT_IMAGE=%q, want the example agent from global.imageRegistry", got)
		}
	})

	t.Run("a Lease per release, the earlier releases' held beside it", func(t *testing.T) {
		for _, c := range []struct {
			release string
			flags   []string
			lease   string
			legacy  string
		}{
			{"prod", nil, "prod-run-controller", "agentplane-run-controller"},
			{"agentplane", nil, "agentplane-run-controller", ""}, // the release's own name is the earlier one
			{"prod", []string{"--set", "leaderElection.holdLegacyLease=false"}, "prod-run-controller", ""},
			{"prod", []string{"--set", "leaderElection.leaseName=mine"}, "mine", "agentplane-run-controller"},
		} {
			args := append([]string{"template", c.release, "charts/run-controller", "--namespace", chartNamespace}, withChoices("run-controller", c.flags...)...)
			stdout, stderr, err := h.run(args...)
			if err != nil {
				t.Fatalf("%v: %v\n%s", c.flags, err, stderr)
			}
			objs := parseManifests(t, stdout)
			lease, _ := envOf(t, objs, "JANGAR_LEADER_ELECTION_LEASE_NAME")
			legacy, hasLegacy := envOf(t, objs, "JANGAR_LEADER_ELECTION_LEGACY_LEASE_NAME")
			if lease != c.lease || legacy != c.legacy || hasLegacy != (c.legacy != "") {
				t.Errorf("release %s %v: Lease %q, legacy %q, want %q and %q", c.release, c.flags, lease, legacy, c.lease, c.legacy)
			}
			var names []string
			for _, o := range objs {
				if o.Kind == "Role" && strings.HasSuffix(o.Metadata.Name, "-leader-election") {
					for _, r := range o.Rules {
						names = append(names, r.ResourceNames...)
					}
				}
			}
			if want := compactStrings(c.lease, c.legacy); fmt.Sprint(names) != fmt.Sprint(want) {
				t.Errorf("release %s %v: the leader-election Role may get and update Leases %v, want %v", c.release, c.flags, names, want)
			}
		}
	})

	t.Run("watch-gateway's Ingress and HTTPRoute", func(t *testing.T) {
		objs := objects(t, h, "watch-gateway", "--set", "ingress.enabled=true", "--set", "ingress.className=nginx",
			"--set", "ingress.hosts[0].host=agentplane.example.com", "--set", "ingress.tls[0].secretName=web",
			"--set", "ingress.tls[0].hosts={agentplane.example.com}")
		ing := kind(objs, "Ingress")
		if len(ing) != 1 || at(ing[0], "spec", "ingressClassName") != "nginx" ||
			at(ing[0], "spec", "rules", "0", "http", "paths", "0", "backend", "service", "port", "name") != "http" ||
			at(ing[0], "spec", "rules", "0", "http", "paths", "0", "backend", "service", "name") != "watch-gateway" {
			t.Fatalf("Ingress %v", ing)
		}
		env := map[string]string{}
		for _, e := range at(kind(objs, "Deployment")[0], "spec", "template", "spec", "containers", "0", "env").([]any) {
			m := e.(map[string]any)
			env[fmt.Sprint(m["name"])] = fmt.Sprint(m["value"])
		}
		if !slices.Contains(strings.Split(env["JANGAR_HTTP_ALLOWED_HOSTS"], ","), "agentplane.example.com") {
			t.Errorf("JANGAR_HTTP_ALLOWED_HOSTS %q lacks the Ingress's host (the gateway would refuse it: 421)", env["JANGAR_HTTP_ALLOWED_HOSTS"])
		}
		wantRefused(t, h, "watch-gateway", "ingress.hosts", "--set", "ingress.enabled=true")
		route := []string{"--set", "httpRoute.enabled=true", "--set", "httpRoute.parentRefs[0].name=gw", "--set", "httpRoute.hostnames={console.example.com}"}
		wantRefused(t, h, "watch-gateway", "Gateway API CRDs", route...)
		objs = objects(t, h, "watch-gateway", append(route, "--api-versions", "gateway.networking.k8s.io/v1/HTTPRoute")...)
		r := kind(objs, "HTTPRoute")
		if len(r) != 1 || at(r[0], "spec", "parentRefs", "0", "name") != "gw" || fmt.Sprint(at(r[0], "spec", "rules", "0", "backendRefs", "0", "port")) != "8080" {
			t.Fatalf("HTTPRoute %v", r)
		}
		wantRefused(t, h, "watch-gateway", "parentRefs", "--set", "httpRoute.enabled=true", "--api-versions", "gateway.networking.k8s.io/v1/HTTPRoute")
	})
}

func compactStrings(s ...string) []string {
	var out []string
	for _, v := range s {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}
