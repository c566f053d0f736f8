//go:build e2e

package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// ctPath is chart-testing's ct, built by make tools from its Go module.
const ctPath = "bin/tools/ct/v3.14.0/ct"

var updateSnapshots = flag.Bool("update-snapshots", false, "rewrite e2e/testdata/charts/ from what the charts render now")

// TestHelmIsBuiltAsAReleaseIs (#34 item 4): the pinned helm carries the version and commit
// upstream's release build stamps in (the commit when the module proxy names it), and the Kubernetes version of its client-go as the default
// of helm template and helm lint, so a chart renders without --kube-version (an unstamped helm
// assumes v1.20, which the charts' kubeVersion >= 1.29 refuses).
func TestHelmIsBuiltAsAReleaseIs(t *testing.T) {
	h := newHelmEnv(t)
	out, stderr, err := h.run("version")
	if err != nil {
		t.Fatalf("helm version: %v\n%s", err, stderr)
	}
	// The commit comes from the module proxy's record of the tag, which stopped naming it on
	// 2026-12-02: then none is stamped (never a made-up one).
	if !regexp.MustCompile(`Version:"v3\.22\.0", GitCommit:"([0-9a-f]{40}", GitTreeState:"clean|", GitTreeState:)"`).MatchString(out) {
		t.Errorf("helm version says %s, want v3.22.0 with its commit and a clean tree, or no commit and no tree state", out)
	}
	for _, chart := range append([]string{"agentplane-crds", "agentplane"}, services...) {
		args := append([]string{"template", chart, filepath.Join("charts", chart)}, withChoices(chart)...)
		if _, stderr, err := h.run(args...); err != nil {
			t.Errorf("helm template charts/%s without --kube-version: %v\n%s", chart, err, stderr)
		}
		if out, stderr, err := h.run(append([]string{"lint", "--strict", filepath.Join("charts", chart)}, withChoices(chart)...)...); err != nil {
			t.Errorf("helm lint --strict charts/%s without --kube-version: %v\n%s%s", chart, err, out, stderr)
		}
	}
}

// ctEnv is the environment ct runs in: helm, yamllint and git on PATH.
func ctEnv(t *testing.T, h *helmEnv) []string {
	t.Helper()
	if _, err := exec.LookPath("yamllint"); err != nil {
		t.Fatal("yamllint is not installed: hack/deps.sh test installs it (Debian: apt-get install yamllint)")
	}
	return append(h.env, "PATH="+filepath.Dir(filepath.Join(h.root, helmPath))+":"+os.Getenv("PATH"))
}

// TestChartTestingLintsEveryChart (#34 item 4): ct lint --all (helm lint of every chart, yamllint
// of each Chart.yaml and values.yaml with .ct/lintconf.yaml) passes.
func TestChartTestingLintsEveryChart(t *testing.T) {
	h := newHelmEnv(t)
	ct := mustExist(t, filepath.Join(h.root, ctPath), "tools")
	cmd := exec.Command(ct, "lint", "--all", "--config", ".ct/ct.yaml", "--lint-conf", ".ct/lintconf.yaml")
	cmd.Dir, cmd.Env = h.root, ctEnv(t, h)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ct lint --all: %v\n%s", err, out)
	}
}

// TestChartTestingWantsAVersionBump (#34 item 4): against the merge-base with main, ct lint
// refuses a changed chart whose version did not go up and passes it once it did: the check `make
// chart-lint` makes on a branch.
func TestChartTestingWantsAVersionBump(t *testing.T) {
	h := newHelmEnv(t)
	ct := mustExist(t, filepath.Join(h.root, ctPath), "tools")
	dir := filepath.Join(t.TempDir(), "repo")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if out, err := exec.Command("git", "clone", "-q", "--no-local", h.root, dir).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	// main, as ct sees it (origin/main): this commit; the change goes on a branch from it.
	git("update-ref", "refs/remotes/origin/main", "HEAD")
	git("checkout", "-q", "-b", "change")
	chartDeps(t, dir, filepath.Join(h.root, helmPath))
	values := filepath.Join(dir, "charts", "job-gc", "values.yaml")
	b, err := os.ReadFile(values)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(values, append(b, []byte("# a change on a branch\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	git("commit", "-q", "-am", "job-gc: a change")
	lint := func() (string, error) {
		cmd := exec.Command(ct, "lint", "--config", ".ct/ct.yaml", "--lint-conf", ".ct/lintconf.yaml")
		cmd.Dir, cmd.Env = dir, ctEnv(t, h)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := lint()
	if err == nil || !strings.Contains(out, "charts/job-gc") || !strings.Contains(strings.ToLower(out), "version") {
		t.Fatalf("ct lint passed a changed chart whose version did not change (%v):\n%s", err, out)
	}
	chartYAML := filepath.Join(dir, "charts", "job-gc", "Chart.yaml")
	c, err := os.ReadFile(chartYAML)
	if err != nil {
		t.Fatal(err)
	}
	bumped := regexp.MustCompile(`(?m)^version: (\d+)\.(\d+)\.(\d+)$`).ReplaceAllStringFunc(string(c), func(v string) string {
		var a, b, p int
		_, _ = fmt.Sscanf(v, "version: %d.%d.%d", &a, &b, &p)
		return fmt.Sprintf("version: %d.%d.%d", a, b, p+1)
	})
	if err := os.WriteFile(chartYAML, []byte(bumped), 0o644); err != nil {
		t.Fatal(err)
	}
	git("commit", "-q", "-am", "job-gc: bump")
	if out, err := lint(); err != nil {
		t.Fatalf("ct lint refused the chart after its version went up: %v\n%s", err, out)
	}
}

// snapshotSets are the value sets each chart's rendering is kept for (e2e/testdata/charts/).
var snapshotSets = map[string][]string{
	"default": nil,
	"everything": {"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
		"--set", "metrics.grafanaDashboard.enabled=true", "--set", "networkPolicy.enabled=true", "--set", "podDisruptionBudget.enabled=true",
		"--set", "replicaCount=2", "--set", "global.imageRegistry=registry.example.com", "--set", "global.imagePullSecrets={pull}",
		"--set", "extraEnv[0].name=OTEL_EXPORTER_OTLP_HEADERS", "--set", "extraEnv[0].valueFrom.secretKeyRef.name=otlp",
		"--set", "extraEnv[0].valueFrom.secretKeyRef.key=headers", "--set", "topologySpreadConstraints[0].maxSkew=1",
		"--set", "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname", "--set", "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
		"--set", "priorityClassName=agentplane", "--set", "rbac.clusterScoped=true"},
}

// generatedData replaces what a chart makes anew at each render (its generated TLS pair) in
// rendered output.
var generatedPEM = regexp.MustCompile(`((?:tls\.crt|tls\.key|ca\.crt|caBundle): )"?[A-Za-z0-9+/=]{40,}"?|-----BEGIN [A-Z ]+-----[\s\S]*?-----END [A-Z ]+-----`)

// TestChartsRenderAsTheirSnapshots (#34 item 4): each chart renders, for each value set, exactly
// what e2e/testdata/charts/ keeps (its generated certificates aside): a change to a chart shows
// in review as a change to its output. `go test -tags e2e -run TestChartsRenderAsTheirSnapshots
// . -args -update-snapshots` rewrites them.
func TestChartsRenderAsTheirSnapshots(t *testing.T) {
	h := newHelmEnv(t)
	for _, chart := range append(slices.Clone(services), "agentplane") {
		for set, flags := range snapshotSets {
			if chart == "agentplane" && set != "default" {
				continue
			}
			name := chart + "-" + set + ".yaml"
			t.Run(name, func(t *testing.T) {
				args := append([]string{"template", chart, filepath.Join("charts", chart), "--namespace", chartNamespace}, withChoices(chart, flags...)...)
				out, stderr, err := h.run(args...)
				if err != nil {
					t.Fatalf("helm template %s: %v\n%s", chart, err, stderr)
				}
				got := snapshot(out)
				path := filepath.Join(h.root, "e2e", "testdata", "charts", name)
				if *updateSnapshots {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("no snapshot %s: run with -args -update-snapshots and review it (%v)", path, err)
				}
				if got != string(want) {
					t.Errorf("charts/%s (%s) renders other than e2e/testdata/charts/%s; if the change is meant, rewrite the snapshot (-args -update-snapshots) and review it:\n%s",
						chart, set, name, firstDifference(string(want), got))
				}
			})
		}
	}
}

// snapshot is rendered output as the snapshots keep it: what is generated anew at each render
// (the TLS pair) marked, and each CustomResourceDefinition by its name only (the CRDs are
// generated files, charts/agentplane-crds/files/crds, which make verify-gen keeps current).
func snapshot(out string) string {
	docs := docSeparator.Split(out, -1)
	for i, d := range docs {
		if strings.Contains(d, "\nkind: CustomResourceDefinition\n") {
			name := regexp.MustCompile(`(?m)^  name: (\S+)$`).FindStringSubmatch(d)
			if len(name) == 2 {
				docs[i] = "\n# CustomResourceDefinition " + name[1] + " (charts/agentplane-crds/files/crds)\n"
			}
		}
	}
	return generatedPEM.ReplaceAllString(strings.Join(docs, "---"), "${1}<generated>")
}

// firstDifference shows the lines around where a and b first differ.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			lo := max(0, i-3)
			return fmt.Sprintf("line %d:\nsnapshot: %q\nnow:      %q\n(context before: %q)", i+1, x, y, strings.Join(bl[lo:i], "\n"))
		}
	}
	return "(equal)"
}
