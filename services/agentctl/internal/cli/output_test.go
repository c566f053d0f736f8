package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentplane/agentplane/libs/health"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// goldenStream is the seed's example: a snapshot, two updates, a heartbeat, and an error.
func goldenStream() []health.Event {
	at := func(s int) time.Time { return time.Date(2026, 1, 30, 18, 15, s, 0, time.UTC) }
	ns := "agents"
	return []health.Event{
		{Type: health.Snapshot, GeneratedAt: at(0), Cursor: "c0", Items: []health.Item{
			{Component: "namespace", Namespace: ns, Status: health.Healthy},
			{Component: "agents-controller", Namespace: ns, Status: health.Healthy},
			{Component: "supporting-controller", Namespace: ns, Status: health.Healthy},
			{Component: "orchestration-controller", Namespace: ns, Status: health.Healthy},
			{Component: "runtime:workflow", Namespace: ns, Status: health.Healthy},
			{Component: "runtime:temporal", Namespace: ns, Status: health.Configured, Message: "temporal configuration resolved"},
			{Component: "runtime:custom", Namespace: ns, Status: health.Unknown, Message: "custom runtime configured per AgentRun"},
			{Component: "database", Namespace: ns, Status: health.Healthy},
			{Component: "grpc", Namespace: ns, Status: health.Healthy, Message: "127.0.0.1:50051"},
		}},
		{Type: health.Delta, GeneratedAt: at(2), Cursor: "c1", Items: []health.Item{{Component: "runtime:temporal", Status: health.Degraded, Message: "temporal connection retrying"}}},
		{Type: health.Delta, GeneratedAt: at(12), Cursor: "c2", Items: []health.Item{{Component: "runtime:temporal", Status: health.Healthy, Message: "connection restored"}}},
		{Type: health.Heartbeat, GeneratedAt: at(32), Cursor: "c2"},
		{Type: health.ErrorEv, GeneratedAt: at(40), Message: "stream interrupted; reconnecting"},
	}
}

func TestOutputFormatsMatchTheGoldenFiles(t *testing.T) {
	for _, format := range []string{"table", "json", "ndjson", "yaml"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			p, err := newPrinter(&buf, format)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range goldenStream() {
				if err := p.print(ev); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join("testdata", "watch."+format+".golden")
			if *update {
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update once to create it)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Fatalf("output differs from %s:\n%s", path, buf.String())
			}
		})
	}
	if _, err := newPrinter(nil, "xml"); err == nil {
		t.Fatal("--output xml accepted")
	}
}
