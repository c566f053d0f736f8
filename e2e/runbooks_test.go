//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const runbookOffset = 2500

// runbookBlock returns the lines of the first ```bash block of docs/runbooks.md's section
// headed heading.
func runbookBlock(t *testing.T, root, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("docs/runbooks.md has no section %q", heading)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, block, ok := strings.Cut(sec, "```bash\n")
	if !ok {
		t.Fatalf("docs/runbooks.md's %q has no bash block", heading)
	}
	block, _, _ = strings.Cut(block, "```")
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestRunbooksOnTheLocalStack (#32 item 9) runs the `make up` lines of docs/runbooks.md's enable,
// disable and roll-back sections as written, against a `make up` of its own: each line's comment
// says what it must do ("refused: <text>", "accepted", "prints nothing", "prints <text>", or
// nothing: it must succeed). `<name>` is a fresh AgentRun of the example Agent that runs for ten
// minutes, whose Job exists.
func TestRunbooksOnTheLocalStack(t *testing.T) {
	root := repoRoot(t)
	kubectlBin := mustExist(t, filepath.Join(root, "bin", "envtest", "kubectl"), "tools")
	ctx := context.Background()
	dir := t.TempDir()
	env := []string{fmt.Sprintf("AGENTPLANE_PORT_OFFSET=%d", runbookOffset), "LOCAL_DIR=" + dir,
		"KUBECONFIG=" + filepath.Join(dir, "kubeconfig"), "PATH=" + filepath.Dir(kubectlBin) + ":" + os.Getenv("PATH")}
	t.Cleanup(func() { _, _ = run(ctx, t, env, "make", "-C", root, "-s", "down") })
	if out, err := run(ctx, t, env, "make", "-C", root, "-s", "up"); err != nil {
		t.Fatalf("make up: %v\n%s", err, out)
	}
	kubectl := func(args ...string) (string, error) {
		return run(ctx, t, env, kubectlBin, append([]string{"-n", "agents"}, args...)...)
	}
	if out, err := kubectl("apply", "-f", filepath.Join(root, "examples", "agent.yaml")); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	n := 0
	newRun := func(t *testing.T) string {
		n++
		name := fmt.Sprintf("runbook-%d", n)
		manifest := filepath.Join(dir, name+".json") // not the subtest's TempDir: kubectl -f splits a path at its commas
		if err := os.WriteFile(manifest, []byte(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"`+name+
			`","annotations":{"agentplane.dev/simulate-duration":"600s"}},"spec":{"agentRef":{"name":"codex"},"runtime":{"type":"job"}}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := kubectl("create", "-f", manifest); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		eventually(t, time.Minute, name+"'s Job", func() error {
			out, err := kubectl("get", "jobs", "-l", "agents.proompteng.ai/agent-run="+name, "-o", "name")
			if err != nil || strings.TrimSpace(out) == "" {
				return errorf("%v %q", err, out)
			}
			return nil
		})
		return name
	}
	for _, heading := range []string{"Cancel: enable, disable, roll back", "Job results: enable, disable, roll back"} {
		t.Run(heading, func(t *testing.T) {
			lines := runbookBlock(t, root, heading)
			if len(lines) < 4 {
				t.Fatalf("the block has %d lines: %q", len(lines), lines)
			}
			for _, line := range lines {
				cmd, want, _ := strings.Cut(line, "   # ")
				cmd, want = strings.TrimSpace(cmd), strings.TrimSpace(want)
				name := ""
				if strings.Contains(cmd, "<name>") {
					name = newRun(t)
					cmd = strings.ReplaceAll(cmd, "<name>", name)
				}
				out, err := run(ctx, t, env, "bash", "-c", "cd "+root+" && "+cmd)
				switch {
				case strings.HasPrefix(want, "refused: "):
					if err == nil || !strings.Contains(out, strings.TrimPrefix(want, "refused: ")) {
						t.Fatalf("%s: %v, want it refused saying %q:\n%s", cmd, err, strings.TrimPrefix(want, "refused: "), out)
					}
				case err != nil:
					t.Fatalf("%s: %v\n%s", cmd, err, out)
				case want == "prints nothing":
					if strings.TrimSpace(out) != "" {
						t.Fatalf("%s printed %q, want nothing", cmd, out)
					}
				case strings.HasPrefix(want, "prints "):
					if !strings.Contains(out, strings.TrimPrefix(want, "prints ")) {
						t.Fatalf("%s printed %q, want %q", cmd, out, strings.TrimPrefix(want, "prints "))
					}
				case strings.HasPrefix(want, "accepted: the run ends Cancelled"):
					eventually(t, time.Minute, name+" Cancelled", func() error {
						out, err := kubectl("get", "agentrun", name, "-o", "jsonpath={.status.phase}")
						if err != nil || out != "Cancelled" {
							return errorf("%v %q", err, out)
						}
						return nil
					})
				}
			}
		})
	}
}
