package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/agentplane/agentplane/libs/health"
)

// printer writes events in one of the seed's formats: table (a snapshot table, then UPDATE,
// HEARTBEAT and ERROR lines), json (one indented object per event) or ndjson (one object per
// line); or as yaml (one document per event, the JSON's fields).
type printer struct {
	w      io.Writer
	format string
	// separated is set once the table has been followed by its "---" line.
	separated bool
}

func newPrinter(w io.Writer, format string) (*printer, error) {
	switch format {
	case "table", "json", "ndjson", "yaml":
		return &printer{w: w, format: format}, nil
	}
	return nil, fmt.Errorf("--output %q must be table, json, ndjson or yaml", format)
}

func (p *printer) print(ev health.Event) error {
	switch p.format {
	case "ndjson":
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	case "json":
		b, err := json.MarshalIndent(ev, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	case "yaml":
		j, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		b, err := yaml.JSONToYAML(j)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "---\n%s", b)
		return err
	}
	return p.table(ev)
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func (p *printer) table(ev health.Event) error {
	var b strings.Builder
	switch ev.Type {
	case health.Snapshot:
		b.WriteString(row("COMPONENT", "NAMESPACE", "STATUS", "MESSAGE"))
		for _, it := range ev.Items {
			b.WriteString(row(it.Component, it.Namespace, string(it.Status), it.Message))
		}
		p.separated = false
	case health.Delta:
		p.separate(&b)
		for _, it := range ev.Items {
			fmt.Fprintf(&b, "UPDATE %s %s status=%s message=%q\n", ts(ev.GeneratedAt), it.Component, it.Status, it.Message)
		}
	case health.Heartbeat:
		p.separate(&b)
		fmt.Fprintf(&b, "HEARTBEAT %s\n", ts(ev.GeneratedAt))
	case health.ErrorEv:
		p.separate(&b)
		fmt.Fprintf(&b, "ERROR %s message=%q\n", ts(ev.GeneratedAt), ev.Message)
	}
	_, err := io.WriteString(p.w, b.String())
	return err
}

// separate writes the "---" between the snapshot table and the stream lines, once.
func (p *printer) separate(b *strings.Builder) {
	if !p.separated {
		b.WriteString("---\n")
		p.separated = true
	}
}

func row(component, namespace, status, message string) string {
	return strings.TrimRight(fmt.Sprintf("%-24s %-10s %-10s %s", component, namespace, status, message), " ") + "\n"
}
