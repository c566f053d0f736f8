//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestCIRefusesVariablesThatNarrowASuite: every variable the e2e suite, hack/test-e2e.sh,
// hack/bench.sh or the fuzz target reads to skip, narrow or shorten what runs is refused by
// .ci/run, by name and before it installs anything, and so is GOFLAGS picking tests; a variable
// that does not narrow anything (GOFLAGS=-mod=mod) is let through.
func TestCIRefusesVariablesThatNarrowASuite(t *testing.T) {
	root := repoRoot(t)
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// What the suites read: the e2e tests' AGENTPLANE_E2E_* settings, the scripts' defaulted
	// variables, and the fuzz budget.
	vars := map[string]bool{"FUZZTIME": true}
	files, _ := filepath.Glob(filepath.Join(root, "e2e", "*_test.go"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`Getenv\("(AGENTPLANE_E2E_[A-Z_]+)"\)`).FindAllStringSubmatch(string(b), -1) {
			vars[m[1]] = true
		}
	}
	for _, script := range []string{"hack/test-e2e.sh", "hack/bench.sh"} {
		for _, m := range regexp.MustCompile(`\$\{([A-Z][A-Z0-9_]*):[-+]`).FindAllStringSubmatch(read(script), -1) {
			vars[m[1]] = true
		}
	}
	if len(vars) < 8 {
		t.Fatalf("found only %v: the scan is broken", vars)
	}
	ci := read(".ci/run")
	list := regexp.MustCompile(`(?s)for v in (.*?); do`).FindStringSubmatch(ci)
	if list == nil {
		t.Fatal(".ci/run has no refusal list (for v in ...; do)")
	}
	listed := map[string]bool{}
	for _, v := range strings.Fields(strings.ReplaceAll(list[1], "\\", " ")) {
		listed[v] = true
	}
	// .ci/run with exactly the given variables set among those it checks (this test itself may
	// run under E2E_RUN).
	ciRun := func(set ...string) (string, error) {
		var env []string
		for _, kv := range os.Environ() {
			name, _, _ := strings.Cut(kv, "=")
			if !listed[name] && name != "GOFLAGS" {
				env = append(env, kv)
			}
		}
		cmd := exec.CommandContext(context.Background(), "bash", filepath.Join(root, ".ci", "run"))
		cmd.Env = append(env, set...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for v := range vars {
		if !listed[v] {
			t.Errorf("%s narrows a suite but .ci/run does not refuse it", v)
			continue
		}
		out, err := ciRun(v + "=1")
		if err == nil || !strings.Contains(out, "unset "+v) {
			t.Errorf("%s=1 bash .ci/run: %v, want exit 2 naming it:\n%s", v, err, out)
		}
	}
	for _, flags := range []string{"-run=TestX", "-mod=mod -short", "-count=0"} {
		out, err := ciRun("GOFLAGS=" + flags)
		if err == nil || !strings.Contains(out, "unset GOFLAGS") {
			t.Errorf("GOFLAGS=%s bash .ci/run: %v, want the refusal:\n%s", flags, err, out)
		}
	}
	// A GOFLAGS that picks nothing is not refused: beside a refused variable, only that one is named.
	out, err := ciRun("GOFLAGS=-mod=mod", "E2E_RUN=x")
	if err == nil || !strings.Contains(out, "unset E2E_RUN ") || strings.Contains(out, "GOFLAGS") {
		t.Errorf("GOFLAGS=-mod=mod E2E_RUN=x bash .ci/run: %v, want only E2E_RUN refused:\n%s", err, out)
	}
}

// TestStacksSideBySideShareNoPort: hack/test-e2e.sh runs TestWholeSystem, the real-node tests and
// the rest as three processes at once, each starting local stacks moved by its own
// AGENTPLANE_PORT_OFFSET. No port of one process's stacks may be a port of another's (the
// runbooks' stack once shared TestWholeSystem's offset and failed whenever they overlapped).
func TestStacksSideBySideShareNoPort(t *testing.T) {
	root := repoRoot(t)
	var base []int
	for _, f := range []string{"hack/local/lib.sh", "hack/cluster/lib.sh"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`\$\(port [A-Z_]+ ([0-9]+)\)`).FindAllStringSubmatch(string(b), -1) {
			p, _ := strconv.Atoi(m[1])
			base = append(base, p)
		}
	}
	if len(base) < 20 {
		t.Fatalf("found %d base ports in hack/local/lib.sh and hack/cluster/lib.sh: the pattern no longer reads them", len(base))
	}
	ports := func(offset int) map[int]bool {
		out := map[int]bool{}
		for _, p := range base {
			out[p+offset] = true
		}
		return out
	}
	processes := map[string][]int{
		"system":  {sysOffset},
		"cluster": {clusterOffset},
		"rest":    {offset, gcOffset, consoleOffset, runbookOffset},
	}
	for a, as := range processes {
		for b, bs := range processes {
			if a >= b {
				continue
			}
			for _, x := range as {
				for _, y := range bs {
					px, py := ports(x), ports(y)
					for p := range px {
						if py[p] {
							t.Errorf("port %d: a stack of %s (offset %d) and one of %s (offset %d), which run at once, both use it", p, a, x, b, y)
						}
					}
				}
			}
		}
	}
}

// TestIntegrationTierRunsEveryPackageTheTagChanges: make test-integration runs only the packages
// hack/test-integration.sh picks (a test file tagged integration), on the assumption that the tag
// changes no other package's test binary. Every package of every workspace module but e2e whose
// files differ under -tags integration must be picked, and the Makefile must hand the script
// every such module.
func TestIntegrationTierRunsEveryPackageTheTagChanges(t *testing.T) {
	root := repoRoot(t)
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				stderr = ee.Stderr
			}
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr)
		}
		return string(out)
	}
	// The workspace's modules, from go.work.
	var modules []string
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal([]byte(run("go", "work", "edit", "-json")), &work); err != nil {
		t.Fatal(err)
	}
	for _, u := range work.Use {
		if m := strings.TrimPrefix(u.DiskPath, "./"); m != "e2e" {
			modules = append(modules, m)
		}
	}
	if len(modules) < 10 {
		t.Fatalf("go.work names %d modules besides e2e: %v", len(modules), modules)
	}
	// What the Makefile hands the script.
	var given []string
	for _, line := range strings.Split(run("make", "-s", "-n", "test-integration"), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasSuffix(f[0], "hack/test-integration.sh") {
			given = f[1:]
		}
	}
	sort.Strings(modules)
	sort.Strings(given)
	if strings.Join(given, " ") != strings.Join(modules, " ") {
		t.Errorf("make test-integration hands hack/test-integration.sh %v; the workspace's modules less e2e are %v", given, modules)
	}
	picked := map[string]bool{}
	for _, p := range strings.Fields(run("hack/test-integration.sh", append([]string{"--list"}, modules...)...)) {
		picked[p] = true
	}
	// Each package's files with and without the tag.
	files := func(tags ...string) map[string]string {
		args := append([]string{"list", "-e"}, tags...)
		args = append(args, "-f", "{{.Dir}} {{.GoFiles}} {{.CgoFiles}} {{.TestGoFiles}} {{.XTestGoFiles}} {{.EmbedFiles}}")
		for _, m := range modules {
			args = append(args, "./"+m+"/...")
		}
		out := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(run("go", args...)), "\n") {
			dir, rest, _ := strings.Cut(line, " ")
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				t.Fatal(err)
			}
			out[rel] = rest
		}
		return out
	}
	plain, tagged := files(), files("-tags", "integration")
	changed := 0
	for dir, f := range tagged {
		if plain[dir] == f {
			continue
		}
		changed++
		if !picked[dir] {
			t.Errorf("%s: -tags integration changes its files (%s, without: %s), but the integration tier does not run it", dir, f, plain[dir])
		}
	}
	if changed == 0 || len(picked) == 0 {
		t.Fatalf("the tag changes %d packages and the script picks %d: this test no longer sees the tier", changed, len(picked))
	}
}
