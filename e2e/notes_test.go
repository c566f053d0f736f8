//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// noteCommand is one command a chart's NOTES print: a line that starts with kubectl, helm,
// curl, agentctl or VAR=$(...), or a URL to open.
type noteCommand struct {
	line string
	url  bool
}

var (
	noteCommandStart = regexp.MustCompile(`^(kubectl|helm|curl|agentctl) |^[A-Z_]+=\$\(`)
	notePlaceholder  = regexp.MustCompile(`<[a-z-]+>`)
	notePortPair     = regexp.MustCompile(`\b(\d{2,5}):\d{2,5}\b`)
)

// noteCommands picks the commands out of a release's NOTES, in order, each once (helm test is
// printed once per service).
func noteCommands(notes string) []noteCommand {
	var cmds []noteCommand
	seen := map[string]bool{}
	for _, l := range strings.Split(notes, "\n") {
		l = strings.TrimSpace(l)
		l = strings.TrimPrefix(l, "Try it: ")
		var c noteCommand
		switch {
		case strings.HasPrefix(l, "#"):
			continue
		case strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://"):
			c = noteCommand{line: l, url: true}
		case noteCommandStart.MatchString(l):
			c = noteCommand{line: l}
		default:
			continue
		}
		if !seen[c.line] {
			seen[c.line] = true
			cmds = append(cmds, c)
		}
	}
	return cmds
}

// runNotes executes every command of a release's NOTES as a user pasting them would, from the
// repository's root with the cluster's KUBECONFIG and tools: a port-forward runs in the background
// (until the next one), a stream (curl -N, agentctl --watch) runs for a few seconds and must have
// printed something, a URL is fetched, VAR=$(...) keeps VAR for the commands after it, and every
// other command must exit 0. Placeholders (<namespace>, <name>) are filled from fill.
func (c *kcluster) runNotes(t *testing.T, release string, fill map[string]string) {
	t.Helper()
	notes, err := c.helm("get", "notes", release, "-n", clusterNS)
	if err != nil {
		t.Fatalf("helm get notes %s: %v\n%s", release, err, notes)
	}
	if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(notes), "NOTES:")) == "" {
		t.Logf("%s prints no NOTES", release)
		return
	}
	cmds := noteCommands(notes)
	if len(cmds) == 0 {
		t.Fatalf("no command found in %s's NOTES:\n%s", release, notes)
	}
	vars := []string{}
	var forward *exec.Cmd
	stopForward := func() {
		if forward != nil {
			_ = forward.Process.Kill()
			_ = forward.Wait()
			forward = nil
		}
	}
	defer stopForward()
	bash := func(ctx context.Context, line string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "bash", "-c", line)
		cmd.Dir, cmd.Env = c.root, append(c.environ(), vars...)
		return cmd
	}
	// A NOTES command may save the gateway's CA as ca.crt where it runs (git ignores it there).
	defer os.Remove(filepath.Join(c.root, "ca.crt"))
	ran := 0
	for _, nc := range cmds {
		line := nc.line
		for k, v := range fill {
			line = strings.ReplaceAll(line, k, v)
		}
		if p := notePlaceholder.FindString(line); p != "" {
			t.Errorf("%s NOTES: %q has a placeholder (%s) this test cannot fill", release, nc.line, p)
			continue
		}
		ran++
		switch {
		case nc.url:
			get := httpGet
			if strings.HasPrefix(line, "https://") {
				get = func(url string) (string, error) { return httpsGet(url, filepath.Join(c.root, "ca.crt")) }
			}
			out, err := get(line)
			if err != nil {
				t.Errorf("%s NOTES: GET %s: %v\n%s", release, line, err, out)
			}
		case strings.Contains(line, " port-forward "):
			stopForward()
			forward = bash(context.Background(), "exec "+line)
			var log strings.Builder
			forward.Stdout, forward.Stderr = &log, &log
			if err := forward.Start(); err != nil {
				t.Fatalf("%s NOTES: %s: %v", release, line, err)
			}
			for _, m := range notePortPair.FindAllStringSubmatch(line, -1) {
				port := m[1]
				eventually(t, 30*time.Second, release+" NOTES: "+line, func() error {
					conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
					if err != nil {
						return fmt.Errorf("%v (%s)", err, log.String())
					}
					return conn.Close()
				})
			}
		case strings.HasPrefix(line, "curl -N") || strings.Contains(line, " --watch"):
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			out, err := bash(ctx, line).CombinedOutput()
			cancel()
			if len(strings.TrimSpace(string(out))) == 0 || (err != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded)) {
				t.Errorf("%s NOTES: %s streamed nothing or failed: %v\n%s", release, line, err, out)
			}
		case regexp.MustCompile(`^[A-Z_]+=\$\(`).MatchString(line):
			name := line[:strings.Index(line, "=")]
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			out, err := bash(ctx, line+`; printf %s "$`+name+`"`).Output()
			cancel()
			if err != nil || len(out) == 0 {
				t.Errorf("%s NOTES: %s: %v (%q)", release, line, err, out)
			}
			vars = append(vars, name+"="+string(out))
		default:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			out, err := bash(ctx, line).CombinedOutput()
			cancel()
			if err != nil {
				t.Errorf("%s NOTES: %s: %v\n%s", release, line, err, out)
			} else if strings.HasPrefix(line, "curl ") && len(strings.TrimSpace(string(out))) == 0 {
				t.Errorf("%s NOTES: %s printed nothing", release, line)
			}
		}
	}
	t.Logf("%s NOTES: %d commands run", release, ran)
	_ = os.Stdout.Sync()
}

// httpsGet fetches url trusting only the CA in the PEM file caFile, as a browser told to trust
// that CA would.
func httpsGet(url, caFile string) (string, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return "", fmt.Errorf("an https URL and no CA to verify it with: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return "", fmt.Errorf("%s holds no certificate", caFile)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	return httpGetWith(client, url)
}
