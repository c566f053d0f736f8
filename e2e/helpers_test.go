//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/libs/testenv"
)

// Services are the long-running binaries; agentctl is the CLI.
var services = []string{"status-writer", "event-emitter", "job-gc", "cancel-propagator", "run-controller", "watch-gateway"}

func TestMain(m *testing.M) {
	// The engine here cannot pull Ryuk's image; every test cleans up after itself instead.
	_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	// Inside a sandbox testcontainers would guess the default gateway as the Docker host; the
	// engine publishes ports on this machine, so reach them on loopback only.
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		_ = os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	os.Exit(m.Run())
}

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// mustExist fails the test with the make target that provides path.
func mustExist(t *testing.T, path, target string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: run `make %s`", path, target)
	}
	return path
}

// run executes a command and returns its combined output; it is stopped after 5 minutes.
func run(ctx context.Context, t testing.TB, env []string, name string, args ...string) (string, error) {
	t.Helper()
	return runWithin(ctx, t, 5*time.Minute, env, name, args...)
}

// runWithin is run with another time limit, for a command that may build much from cold caches.
func runWithin(ctx context.Context, t testing.TB, limit time.Duration, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// eventually polls cond until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := poll(timeout, cond); err != nil {
		t.Fatalf("%s: not true after %s: %v", what, timeout, err)
	}
}

// poll calls cond until it returns nil or timeout passes, and returns its last error.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func binPath(t *testing.T, name string) string {
	return mustExist(t, filepath.Join(repoRoot(t), "bin", name), "build")
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func httpGet(url string) (string, error) { return httpGetWith(http.DefaultClient, url) }

// httpGetWith fetches url with client; a status other than 200 is an error with the body.
func httpGetWith(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

// grepLines keeps the lines of s that contain substr.
func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// kubectlStdin applies a manifest given on standard input.
func kubectlStdin(ctx context.Context, t *testing.T, kubectl, kubeconfig, manifest string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
