package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryCommandHasLongHelpAndExamples: the kubectl-like surface, command by command.
func TestEveryCommandHasLongHelpAndExamples(t *testing.T) {
	root, _ := newRootCommand(nil, io.Discard, io.Discard)
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" || (c.HasParent() && c.Parent().Name() == "completion") {
			return
		}
		if strings.TrimSpace(c.Long) == "" || strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s: no Long help or no Example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root.InitDefaultCompletionCmd()
	walk(root)
	var out bytes.Buffer
	if code := Execute(context.Background(), []string{"--help"}, nil, &out, &out); code != 0 || !strings.Contains(out.String(), "Exit codes:") {
		t.Fatalf("agentctl --help (exit %d) does not document the exit codes:\n%s", code, out.String())
	}
}

// TestFlagValuesComplete: -o, --transport and --context complete from their values.
func TestFlagValuesComplete(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c1, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u1, user: {token: t}}]
contexts: [{name: dev, context: {cluster: c1, user: u1}}, {name: prod, context: {cluster: c1, user: u1}}]
current-context: dev
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "status", "-o", ""}, []string{"table", "json", "ndjson", "yaml"}},
		{[]string{"__complete", "status", "watch", "--transport", ""}, []string{"kube", "grpc"}},
		{[]string{"__complete", "--kubeconfig", kubeconfig, "status", "--context", ""}, []string{"dev", "prod"}},
		{[]string{"__complete", "status", "wait", "--for", ""}, []string{"healthy"}},
	} {
		var out bytes.Buffer
		Execute(context.Background(), c.args, nil, &out, io.Discard)
		for _, w := range c.want {
			if !strings.Contains(out.String(), w+"\n") {
				t.Errorf("%v: completions %q lack %s", c.args, out.String(), w)
			}
		}
	}
}

// TestBadInputNeverPanics: bad kubeconfigs and flags end with a message and a usage or error
// code, never a panic (Execute turns one into exit 1 with "unexpectedly", which fails here).
func TestBadInputNeverPanics(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"garbage":      "{{{ not yaml",
		"empty":        "",
		"no-context":   "apiVersion: v1\nkind: Config\n",
		"bad-server":   "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"::not a url\"}}]\nusers: [{name: u}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
		"missing-user": "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\ncontexts: [{name: x, context: {cluster: c, user: nobody}}]\ncurrent-context: x\n",
		"bad-ca":       "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\", certificate-authority-data: bm90IGEgY2VydA==}}]\nusers: [{name: u}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := [][]string{
		{"status", "--heartbeat", "banana"},
		{"status", "--heartbeat", "0s"},
		{"status", "-o", "xml"},
		{"status", "--transport", "carrier-pigeon"},
		{"status", "--transport", "grpc"},
		{"status", "--gateway", "::::", "--timeout", "1s"},
		{"status", "--gateway", "127.0.0.1:1", "--tls-ca", filepath.Join(dir, "garbage")},
		{"status", "--gateway", "127.0.0.1:1", "--gateway-token", "a", "--gateway-token-file", filepath.Join(dir, "empty")},
		{"status", "--request-timeout", "forever"},
		{"cancel", "pod", "x"},
		{"cancel"},
		{"nonsense"},
		{"--context", "does-not-exist", "version"},
	}
	for name := range files {
		cases = append(cases,
			[]string{"--kubeconfig", filepath.Join(dir, name), "status", "--request-timeout", "2s"},
			[]string{"--kubeconfig", filepath.Join(dir, name), "version", "--request-timeout", "2s"},
			[]string{"--kubeconfig", filepath.Join(dir, name), "cancel", "agentrun", "x", "--request-timeout", "2s"},
			[]string{"--kubeconfig", filepath.Join(dir, name), "jobs", "release-holds", "--request-timeout", "2s"},
		)
	}
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel() // some wait for an unreachable API server
			var errOut bytes.Buffer
			code := Execute(context.Background(), args, nil, io.Discard, &errOut)
			if code == ExitOK || strings.Contains(errOut.String(), "unexpectedly") || !strings.HasPrefix(errOut.String(), "error: ") && !strings.Contains(errOut.String(), "\nerror: ") {
				t.Errorf("exit %d, stderr %q; want a non-zero exit with an error line and no panic", code, errOut.String())
			}
		})
	}
}
