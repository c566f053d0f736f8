package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// commandsOfTheAPIServer are every command that talks to the API server, as a user types them
// against world's runs.
var commandsOfTheAPIServer = [][]string{
	{"get", "runs"},
	{"get", "run", "hello", "-o", "yaml"},
	{"describe", "run", "hello"},
	{"logs", "run", "hello"},
	{"wait", "run", "hello"},
	{"retry", "run", "fails"},
	{"resubmit", "run", "hello"},
	{"cancel", "run", "hello"},
	{"submit", "agent/codex"},
	{"jobs", "release-holds", "--yes"},
	{"version"},
}

// TestEveryCommandExitsAsDocumentedForEachHTTPStatus (#35 item 2): each command that talks to the
// API server, when it answers 401, 403, 400, 404 or 500, exits with the code --help documents
// for it (4 access refused, 5 rejected, 1 anything else) and says what it was doing.
func TestEveryCommandExitsAsDocumentedForEachHTTPStatus(t *testing.T) {
	for _, st := range []struct {
		status int
		code   int
	}{
		{http.StatusUnauthorized, ExitAccess},
		{http.StatusForbidden, ExitAccess},
		{http.StatusBadRequest, ExitRejected},
		{http.StatusNotFound, ExitRejected},
		{http.StatusInternalServerError, ExitError},
	} {
		f := world(t)
		f.fail = st.status
		kc := f.kubeconfig(t, "agents")
		for _, args := range commandsOfTheAPIServer {
			t.Run(fmt.Sprintf("%d/%s", st.status, strings.Join(args, " ")), func(t *testing.T) {
				var out, errOut bytes.Buffer
				code := Execute(context.Background(), append([]string{"--kubeconfig", kc, "--request-timeout", "5s"}, args...), nil, &out, &errOut)
				if code != st.code {
					t.Errorf("exit %d, want %d; stderr %s", code, st.code, errOut.String())
				}
				if !strings.HasPrefix(errOut.String(), "error: ") {
					t.Errorf("stderr %q, want an error line", errOut.String())
				}
			})
		}
	}
}

// TestServerAndTokenAreTheAPIServersOnEveryCommand (#35 item 3): --server and --token are
// kubectl's on every command: they point agentctl at that API server with that bearer token,
// whatever the kubeconfig says.
func TestServerAndTokenAreTheAPIServersOnEveryCommand(t *testing.T) {
	f := world(t)
	elsewhere := newFakeAPI(t)
	kc := elsewhere.kubeconfig(t, "agents")
	cmds := append(append([][]string(nil), commandsOfTheAPIServer...), []string{"status", "-o", "json", "--exit-code=false"})
	for _, args := range cmds {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			f.mu.Lock()
			f.auth = nil
			f.mu.Unlock()
			var out, errOut bytes.Buffer
			Execute(context.Background(), append([]string{"--kubeconfig", kc, "--server", f.srv.URL, "--token", "flag-token", "--request-timeout", "5s"}, args...),
				strings.NewReader("n\n"), &out, &errOut)
			if saw, all := f.sawToken("flag-token"); !saw {
				t.Errorf("the --server API server saw no request with --token's bearer token (it saw %q); stderr %s", all, errOut.String())
			}
		})
	}
	if _, all := elsewhere.sawToken("kubeconfig-token"); len(all) > 0 {
		t.Errorf("the kubeconfig's API server was called %d times despite --server", len(all))
	}
}
