//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	grafana "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"sigs.k8s.io/yaml"
)

// promtoolPath is promtool, built by make tools from the Prometheus module.
const promtoolPath = "bin/tools/promtool/v0.316.0/promtool"

// alertCase makes one alert fire: the series (as promtool's input_series, with {sel} standing for
// a release's selector, job="<fullname>", namespace="<namespace>") and the labels the alert then
// carries besides namespace, job and severity.
type alertCase struct {
	series map[string]string
	labels map[string]string
}

// alertCases covers every alert the charts render; TestAlertsFireForTheirOwnReleaseOnly fails on
// one it has no case for.
var alertCases = map[string]alertCase{
	"AgentplaneServiceDown":   {series: map[string]string{`up{sel}`: "0x30"}},
	"AgentplaneServiceAbsent": {series: map[string]string{}},
	"AgentplaneStatusWriteErrors": {series: map[string]string{
		`agentplane_status_writes_total{sel, kind="AgentRun", outcome="error"}`: "0+60x30"}},
	"AgentplaneEventEmitterFallback": {series: map[string]string{`agentplane_events_fallback_active{sel}`: "1x30"}},
	"AgentplaneWorkflowJobMissing": {series: map[string]string{
		`agentplane_job_gc_missing_jobs_total{sel, run_namespace="team-a"}`: "0x20 1x10"}, labels: map[string]string{"run_namespace": "team-a"}},
	"AgentplaneJobResultHeld": {series: map[string]string{`agentplane_job_gc_holds_overdue{sel}`: "3x30"}},
	"AgentplaneArchiveBehind": {series: map[string]string{`agentplane_job_gc_archive_oldest_pending_seconds{sel}`: "0x10 1000x20"}},
	"AgentplaneCancelTimedOut": {series: map[string]string{
		`agentplane_cancel_propagator_cancels_total{sel, kind="OrchestrationRun", outcome="CancelTimedOut"}`: "0x20 1x10"}},
	"AgentplaneReconcileErrors": {series: map[string]string{
		`agentplane_run_controller_reconcile_errors_total{sel, kind="AgentRun"}`: "0+60x30"}, labels: map[string]string{"kind": "AgentRun"}},
	"AgentplaneWatchStreamErrors": {series: map[string]string{
		`agentplane_watch_stream_errors_total{sel, transport="sse", reason="write"}`: "0+600x30"}},
	"AgentplaneWorkQueueBacklog": {series: map[string]string{
		`agentplane_SVC_queue_depth{sel, kind="Q"}`: "500x30"}, labels: map[string]string{"kind": "Q"}},
	"AgentplaneReconcilePanics": {series: map[string]string{
		`agentplane_SVC_reconcile_panics_total{sel, kind="Q"}`: "0x20 1x10"}, labels: map[string]string{"kind": "Q"}},
}

// promRule is one alerting rule of a rendered PrometheusRule.
type promRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type promGroup struct {
	Name  string     `json:"name"`
	Rules []promRule `json:"rules"`
}

// ruleGroups renders chart's PrometheusRule as release rel in namespace ns.
func ruleGroups(t *testing.T, h *helmEnv, chart, rel, ns string) []promGroup {
	t.Helper()
	args := append([]string{"template", rel, filepath.Join("charts", chart), "--namespace", ns, "--set", "metrics.prometheusRule.enabled=true"}, withChoices(chart)...)
	stdout, stderr, err := h.run(args...)
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", chart, err, stderr)
	}
	var groups []promGroup
	for _, doc := range docSeparator.Split(stdout, -1) {
		var o struct {
			Kind string `json:"kind"`
			Spec struct {
				Groups []promGroup `json:"groups"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		if o.Kind == "PrometheusRule" {
			groups = append(groups, o.Spec.Groups...)
		}
	}
	if len(groups) != 1 {
		t.Fatalf("%s: %d rule groups, want 1", chart, len(groups))
	}
	return groups
}

// TestAlertsFireForTheirOwnReleaseOnly (#34 item 5): with two installs of a chart side by side (in
// two namespaces, one of them named at length), each alert, run by promtool against series in
// which only the first install is failing, fires exactly once: for that install, with its
// namespace and job (and the alert's own labels), and not for the healthy one. A rule that summed
// across installs or dropped the namespace would fire for both or without its labels.
func TestAlertsFireForTheirOwnReleaseOnly(t *testing.T) {
	h := newHelmEnv(t)
	promtool := mustExist(t, filepath.Join(h.root, promtoolPath), "tools")
	const failing, healthy = "agents", "agents-a-namespace-with-a-long-name-for-the-second-install"
	seen := map[string]bool{}
	for _, sc := range serviceCharts {
		t.Run(sc.name, func(t *testing.T) {
			dir := t.TempDir()
			groups := append(ruleGroups(t, h, sc.name, sc.name, failing), ruleGroups(t, h, sc.name, sc.name, healthy)...)
			rules, err := yaml.Marshal(map[string]any{"groups": groups})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
				t.Fatal(err)
			}
			sel := func(ns string) string { return fmt.Sprintf(`job=%q, namespace=%q`, sc.name, ns) }
			svc := strings.ReplaceAll(sc.name, "-", "_")
			var tests []map[string]any
			for _, r := range groups[0].Rules {
				seen[r.Alert] = true
				c, ok := alertCases[r.Alert]
				if !ok {
					t.Errorf("alert %s has no case in alertCases: add the series that make it fire", r.Alert)
					continue
				}
				var input []map[string]string
				for series, values := range c.series {
					series = strings.ReplaceAll(series, "SVC", svc)
					input = append(input,
						map[string]string{"series": strings.ReplaceAll(series, "sel", sel(failing)), "values": values},
						// The healthy install: the same series, at rest.
						map[string]string{"series": strings.ReplaceAll(series, "sel", sel(healthy)), "values": "0x30"})
				}
				// Both installs are scraped (up 1), so only the failing one lacks what an alert
				// about absence looks for.
				if r.Alert != "AgentplaneServiceDown" && r.Alert != "AgentplaneServiceAbsent" {
					input = append(input, map[string]string{"series": fmt.Sprintf("up{%s}", sel(failing)), "values": "1x30"})
				}
				input = append(input, map[string]string{"series": fmt.Sprintf("up{%s}", sel(healthy)), "values": "1x30"})
				labels := map[string]string{"namespace": failing, "job": sc.name}
				for k, v := range r.Labels {
					labels[k] = v
				}
				for k, v := range c.labels {
					labels[k] = v
				}
				tests = append(tests, map[string]any{
					"interval":     "1m",
					"input_series": input,
					"alert_rule_test": []map[string]any{{
						"eval_time":  "30m",
						"alertname":  r.Alert,
						"exp_alerts": []map[string]any{{"exp_labels": labels, "exp_annotations": r.Annotations}},
					}},
				})
			}
			spec, err := yaml.Marshal(map[string]any{"rule_files": []string{"rules.yaml"}, "evaluation_interval": "1m", "tests": tests})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), spec, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(promtool, "test", "rules", "tests.yaml")
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool test rules: %v\n%s\nrules:\n%s\ntests:\n%s", err, out, rules, spec)
			}
		})
	}
	for alert := range alertCases {
		if !seen[alert] {
			t.Errorf("alertCases has %s, which no chart renders", alert)
		}
	}
}

// TestDashboardsAreOnePerRelease (#34 item 5): two releases of each chart, in namespaces of 40 and
// 62 characters, give dashboards of different uids (within Grafana's 40 characters), titles and
// ConfigMap keys, each of which Grafana's own dashboard model (grafana-foundation-sdk) reads
// strictly, every panel selecting its own release's series.
func TestDashboardsAreOnePerRelease(t *testing.T) {
	h := newHelmEnv(t)
	namespaces := []string{strings.Repeat("a", 40), strings.Repeat("b", 62)}
	uids, keys, titles := map[string]string{}, map[string]string{}, map[string]string{}
	for _, sc := range serviceCharts {
		for _, ns := range namespaces {
			for _, rel := range []string{sc.name, "agentplane"} {
				where := fmt.Sprintf("%s (release %s in %s)", sc.name, rel, ns)
				args := append([]string{"template", rel, filepath.Join("charts", sc.name), "--namespace", ns,
					"--set", "metrics.grafanaDashboard.enabled=true"}, withChoices(sc.name)...)
				stdout, stderr, err := h.run(args...)
				if err != nil {
					t.Fatalf("%s: %v\n%s", where, err, stderr)
				}
				cms := dashboardConfigMaps(slices.Collect(maps.Values(byName(t, stdout))))
				if len(cms) != 1 {
					t.Fatalf("%s: %d dashboard ConfigMaps", where, len(cms))
				}
				for key, raw := range at(cms[0], "data").(map[string]any) {
					if prev, dup := keys[key]; dup {
						t.Errorf("%s and %s both write dashboard file %s", prev, where, key)
					}
					keys[key] = where
					var d grafana.Dashboard //nolint:staticcheck // SA1019: the classic JSON model, which the dashboard sidecar loads (dashboardv2 is the newer resource API)
					dec := json.NewDecoder(strings.NewReader(fmt.Sprint(raw)))
					dec.DisallowUnknownFields()
					if err := dec.Decode(&d); err != nil {
						t.Fatalf("%s: Grafana's dashboard model does not read the dashboard: %v", where, err)
					}
					if d.Uid == nil || len(*d.Uid) > 40 {
						t.Fatalf("%s: uid %v (Grafana takes at most 40 characters)", where, d.Uid)
					}
					if prev, dup := uids[*d.Uid]; dup {
						t.Errorf("%s and %s share dashboard uid %s: one hides the other in Grafana", prev, where, *d.Uid)
					}
					uids[*d.Uid] = where
					if d.Title == nil {
						t.Fatalf("%s: no title", where)
					}
					if prev, dup := titles[*d.Title]; dup {
						t.Errorf("%s and %s share the title %q", prev, where, *d.Title)
					}
					titles[*d.Title] = where
					fullname := rel
					if !strings.Contains(rel, sc.name) {
						fullname = rel + "-" + sc.name
					}
					want := fmt.Sprintf(`job=%q, namespace=%q`, fullname, ns)
					if len(d.Panels) < 3 {
						t.Errorf("%s: %d panels", where, len(d.Panels))
					}
					for _, p := range d.Panels {
						raw, _ := json.Marshal(p)
						if !strings.Contains(string(raw), strings.ReplaceAll(want, `"`, `\"`)) {
							t.Errorf("%s: a panel does not select %s: %s", where, want, raw)
						}
					}
				}
			}
		}
	}
	if !slices.Contains([]int{len(serviceCharts) * 4}, len(uids)) {
		t.Errorf("%d distinct dashboards, want %d", len(uids), len(serviceCharts)*4)
	}
}
