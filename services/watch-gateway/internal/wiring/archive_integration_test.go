//go:build integration

package wiring

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/libs/archive"
	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/testenv"
	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
)

// TestTheGatewayReadsTheArchiveOnceJobGCHasMadeIt: the real service, given JANGAR_ARCHIVE_URL and
// the password apart, starts while the database has no schema (the reads answer 503 and say to
// retry), and serves the runs once the writer has migrated it and archived one: over HTTP, gRPC
// and in the console's session.
func TestTheGatewayReadsTheArchiveOnceJobGCHasMadeIt(t *testing.T) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	u := url.URL{Scheme: "postgres", User: url.User(pg.User), Host: pg.Addr, Path: "/postgres", RawQuery: "sslmode=disable"}
	grpcAddr, streamURL := run(t, map[string]string{archive.EnvURL: u.String(), archive.EnvPassword: pg.Password})
	base := strings.Replace(strings.TrimSuffix(streamURL, "/api/agents/control-plane/status/stream"), "https://", "http://", 1)

	getList := func() (int, string) {
		resp, err := http.Get(base + "/api/agents/runs/archive")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := getList(); code != http.StatusServiceUnavailable || !strings.Contains(body, "retry shortly") || strings.Contains(body, pg.Password) {
		t.Fatalf("before the schema exists: %d %s", code, body)
	}

	ctx := context.Background()
	writer, err := archive.Open(ctx, archive.Config{URL: pg.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	at := time.Now().Add(-time.Hour).UTC()
	if err := writer.Put(ctx, archive.Record{Summary: archive.Summary{UID: "u-1", Kind: "AgentRun", Namespace: "default", Name: "hello", Phase: "Succeeded",
		CreatedAt: at, FinishedAt: at.Add(time.Minute)}, Object: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the gateway lists the archived run", func() error {
		if code, body := getList(); code != http.StatusOK || !strings.Contains(body, `"name":"hello"`) {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	conn, err := grpcx.Dial(grpcAddr, grpcx.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := jangarv1.NewAgentctlServiceClient(conn).GetArchivedRun(ctx, &jangarv1.GetArchivedRunRequest{Kind: "AgentRun", Name: "hello"})
	if err != nil || r.GetSummary().GetUid() != "u-1" {
		t.Fatalf("gRPC: %v %v", r, err)
	}

	resp, err := http.Get(base + "/console/api/session")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct{ Archive bool }
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || !s.Archive {
		t.Fatalf("the console's session does not offer the archive: %+v %v", s, err)
	}
}
