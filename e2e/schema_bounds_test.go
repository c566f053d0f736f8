//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/agentplane/agentplane/libs/testenv"
)

// patternEdges are the values at the edges of each pattern the charts' schemas use for a value
// that reaches a binary: for a duration, the smallest and largest it accepts (a Go duration has no
// largest); for the others, the emptiest and the oddest. A schema with a pattern not listed here
// fails the test: add its edges.
var patternEdges = map[string][]string{
	`^(([1-9]|[1-9][0-9]|[1-5][0-9]{2}|600)s|([1-9]|10)m)$`:                          {"1s", "600s", "10m"},
	`^(([1-9]|[1-9][0-9]|[12][0-9]{2}|300)s|[1-5]m)$`:                                {"1s", "300s", "5m"},
	`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`:                                               {"0s", "1ms", "0.5s"},
	`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`:                                      {"0s", "1ns", "1h"},
	`^(rediss?://[^@/]+(/[0-9]+)?)?$`:                                                {"", "rediss://127.0.0.1:1/15"},
	`^$|^postgres(ql)?://[^/?#]+`:                                                    {"", "postgresql://agentplane@127.0.0.1:1/agentplane?sslmode=verify-full"},
	`^.+:[0-9]{1,5}$`:                                                                {"x:0", "x:99999"},
	`^(.+:[0-9]{1,5})?$`:                                                             {"", "x:0", "x:99999"},
	`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$`:                                            {"", "a", "a.b-c"},
	`^(([1-9]|[1-9][0-9]|1[0-5][0-9]|16[0-8])h|[1-9][0-9]{0,3}m)$`:                   {"1m", "9999m", "168h"},
	`^(([1-9][0-9]{0,2}|1[0-9]{3}|20[0-9]{2}|21[0-5][0-9]|2160)h|[1-9][0-9]{0,3}m)$`: {"1m", "9999m", "2160h"},
}

// boundary is one value at an edge of a chart's schema.
type boundary struct {
	path  string // dotted value path
	value any
}

func (b boundary) String() string {
	v, _ := json.Marshal(b.value)
	return b.path + "=" + string(v)
}

// schemaBoundaries walks a chart's values.schema.json and returns, for every value that reaches
// the binary (its description names the variable, "-> JANGAR_..."), the values at its edges:
// an integer's minimum and maximum, each enum value, a duration pattern's edges.
func schemaBoundaries(t *testing.T, root, chart string) []boundary {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "charts", chart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	var out []boundary
	var walk func(n map[string]any, path string)
	walk = func(n map[string]any, path string) {
		desc, _ := n["description"].(string)
		if strings.Contains(desc, "-> ") && path != "image.pullPolicy" {
			if v, ok := n["minimum"].(float64); ok {
				out = append(out, boundary{path, int64(v)})
			}
			if v, ok := n["maximum"].(float64); ok {
				out = append(out, boundary{path, int64(v)})
			}
			if e, ok := n["enum"].([]any); ok {
				for _, v := range e {
					out = append(out, boundary{path, v})
				}
			}
			if p, ok := n["pattern"].(string); ok {
				edges, known := patternEdges[p]
				if !known {
					t.Errorf("%s: %s has the pattern %q, whose edges patternEdges does not list", chart, path, p)
				}
				for _, v := range edges {
					out = append(out, boundary{path, v})
				}
			}
		}
		props, _ := n["properties"].(map[string]any)
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if m, ok := props[k].(map[string]any); ok {
				walk(m, p)
			}
		}
	}
	walk(s, "")
	return out
}

// checkSchemaBounds (#13 item 6): a value a chart's schema accepts is one its binary accepts.
// Each chart is rendered at each edge of its schema (release namespace "bounds"); when it renders,
// its binary is started with the Deployment's environment (the downward API's fields filled in,
// the files it names created, KUBECONFIG pointing at this cluster) and must come up serving. A
// chart may also refuse to render a value (a `fail` with a message); what it may not do is render
// a value its binary then refuses.
func checkSchemaBounds(t *testing.T, root, kubeconfig string) {
	h := newHelmEnv(t)
	pki := testenv.NewPKI(t, "bounds")
	for _, chart := range services {
		bin := binPath(t, chart)
		for _, b := range schemaBoundaries(t, root, chart) {
			t.Run(chart+"/"+b.String(), func(t *testing.T) {
				flags := append(append([]string{"template", chart, filepath.Join("charts", chart), "--namespace", "bounds", "--kube-version", renderKubeVersion,
					"--show-only", "templates/agentplane.yaml"}, operatorChoices[chart]...), "--set-json", b.String())
				// job-gc's archive values reach the binary only with the archive on (and a URL).
				if strings.HasPrefix(b.path, "archive.") && b.value != "" {
					flags = append(flags, "--set", "archive.enabled=true")
					if b.path != "archive.url" {
						flags = append(flags, "--set", "archive.url=postgres://agentplane@127.0.0.1:1/agentplane")
					}
				}
				// Ports other than the one under test are free ones, so that the binary can bind them,
				// and distinct: the kernel may hand the same free port out twice in a row (CI once
				// gave metrics and http both 45115).
				taken := map[int]bool{}
				for _, p := range []string{"grpc.port", "metrics.port", "http.port"} {
					if p != b.path && (p != "http.port" || chart == "watch-gateway") {
						port, err := testenv.FreePort()
						for err == nil && taken[port] {
							port, err = testenv.FreePort()
						}
						if err != nil {
							t.Fatal(err)
						}
						taken[port] = true
						flags = append(flags, "--set", fmt.Sprintf("%s=%d", p, port))
					}
				}
				stdout, stderr, err := h.run(flags...)
				if err != nil {
					// Only a chart's own `fail`, with its message, is a refusal; a template error or a
					// schema error at a value the schema allows is a defect.
					if !strings.Contains(stderr, "execution error at (") || strings.Contains(stderr, "can't evaluate") ||
						strings.Contains(stderr, "nil pointer") || strings.Contains(stderr, "error calling") {
						t.Fatalf("helm template failed at %s, a value the schema accepts, without the chart refusing it: %v\n%s", b, err, stderr)
					}
					t.Logf("the chart refuses %s: %s", b, strings.TrimSpace(stderr))
					return
				}
				var d struct {
					Spec struct {
						Template struct {
							Spec struct {
								Containers []struct {
									Env []struct {
										Name      string         `json:"name"`
										Value     string         `json:"value"`
										ValueFrom map[string]any `json:"valueFrom"`
									} `json:"env"`
								} `json:"containers"`
							} `json:"spec"`
						} `json:"template"`
					} `json:"spec"`
				}
				// The shared objects (templates/agentplane.yaml, from the library chart): the Deployment.
				for _, doc := range docSeparator.Split(stdout, -1) {
					if strings.Contains(doc, "\nkind: Deployment\n") {
						stdout = doc
					}
				}
				if err := yaml.Unmarshal([]byte(stdout), &d); err != nil || len(d.Spec.Template.Spec.Containers) == 0 {
					t.Fatalf("parse the Deployment: %v\n%s", err, stdout)
				}
				files := t.TempDir()
				env := []string{"KUBECONFIG=" + kubeconfig, "PATH=" + os.Getenv("PATH")}
				for _, e := range d.Spec.Template.Spec.Containers[0].Env {
					v := e.Value
					if e.ValueFrom != nil {
						switch fmt.Sprint(at(e.ValueFrom, "fieldRef", "fieldPath")) {
						case "metadata.name":
							v = "bounds-0"
						case "metadata.namespace":
							v = "bounds"
						case "metadata.uid":
							v = "00000000-0000-0000-0000-000000000000"
						default:
							v = "from-a-secret"
						}
					}
					// Files the pod would have mounted (a projected token; watch-gateway's certificate,
					// on by default): created under a temporary folder, a certificate as a real one.
					for _, prefix := range []string{"/var/run/secrets/", "/etc/agentplane/", "/etc/watch-gateway/tls/"} {
						if strings.HasPrefix(v, prefix) {
							p := filepath.Join(files, v)
							if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
								t.Fatal(err)
							}
							content := []byte("not-a-real-token")
							switch {
							case strings.HasSuffix(v, "/tls.crt"):
								content = mustRead(t, pki.CertFile)
							case strings.HasSuffix(v, "/tls.key"):
								content = mustRead(t, pki.KeyFile)
							}
							if err := os.WriteFile(p, content, 0o600); err != nil {
								t.Fatal(err)
							}
							v = p
						}
					}
					env = append(env, e.Name+"="+v)
				}
				metrics := ""
				for _, e := range env {
					if a, ok := strings.CutPrefix(e, "JANGAR_METRICS_ADDR="); ok {
						_, port, _ := net.SplitHostPort(a)
						metrics = "127.0.0.1:" + port
					}
				}
				if metrics == "" {
					t.Fatalf("the Deployment sets no JANGAR_METRICS_ADDR: %v", env)
				}
				startsServing(t, bin, env, metrics)
			})
		}
	}
}

// startsServing runs bin with env until its /healthz on metrics answers (it serves once its setup
// is done), then stops it with SIGTERM; it fails the test with the binary's output when the binary
// exits first or does not serve within 30 s.
func startsServing(t *testing.T, bin string, env []string, metrics string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = env
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			t.Fatalf("the binary refused the chart's environment (%v):\n%s\nenv: %v", err, out.String(), env)
		case <-tick.C:
			if resp, err := http.Get("http://" + metrics + "/healthz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					continue
				}
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case err := <-exited:
					_ = err // how it exits after SIGTERM is not this check's subject
				case <-time.After(15 * time.Second):
					t.Errorf("still running 15 s after SIGTERM:\n%s", out.String())
				}
				return
			}
		case <-ctx.Done():
			err := <-exited
			t.Fatalf("not serving after 30 s (then stopped: %v):\n%s", err, out.String())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the process's writes and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
