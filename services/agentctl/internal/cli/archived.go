package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
)

// archivedOptions are the flags of get runs --archived and describe run --archived: the run
// archive is read from watch-gateway (PostgreSQL behind it, written by job-gc before a run is
// deleted), found as agentctl status history finds it.
type archivedOptions struct {
	archived     bool
	phase, agent string
	since, until string
	limit        int
	cont         string
	status       statusOptions
}

func addArchivedFlags(cmd *cobra.Command, o *archivedOptions, list bool) {
	f := cmd.Flags()
	f.BoolVar(&o.archived, "archived", false, "read finished runs from the run archive (through watch-gateway) instead of the cluster: runs job-gc archived before they were deleted")
	if list {
		f.StringVar(&o.phase, "phase", "", "with --archived: only runs that ended in this phase (Succeeded, Failed, Cancelled, ...)")
		f.StringVar(&o.agent, "agent", "", "with --archived: only AgentRuns of this agent")
		f.StringVar(&o.since, "since", "", "with --archived: only runs that finished since this RFC 3339 time or duration ago (24h)")
		f.StringVar(&o.until, "until", "", "with --archived: only runs that finished before this RFC 3339 time or duration ago")
		f.IntVar(&o.limit, "limit", 100, "with --archived: at most this many runs per page (1 to 1000)")
		f.StringVar(&o.cont, "continue", "", "with --archived: the next page (the cursor the previous page printed)")
	}
	addGatewayFlags(cmd, &o.status)
}

// archiveReader reads the run archive from watch-gateway: over gRPC, or through the API server's
// aggregated API.
type archiveReader interface {
	listArchived(ctx context.Context, req *jangarv1.ListArchivedRunsRequest) (*jangarv1.ArchivedRunList, error)
	getArchived(ctx context.Context, uid string) (*jangarv1.ArchivedRun, error)
}

func (g *grpcSource) listArchived(ctx context.Context, req *jangarv1.ListArchivedRunsRequest) (*jangarv1.ArchivedRunList, error) {
	req.Namespace = g.namespace
	return g.client.ListArchivedRuns(ctx, req)
}

func (g *grpcSource) getArchived(ctx context.Context, uid string) (*jangarv1.ArchivedRun, error) {
	return g.client.GetArchivedRun(ctx, &jangarv1.GetArchivedRunRequest{Namespace: g.namespace, Uid: uid})
}

func (a *apiSource) listArchived(ctx context.Context, req *jangarv1.ListArchivedRunsRequest) (*jangarv1.ArchivedRunList, error) {
	r := a.rc.Get().AbsPath(a.path("archivedruns"))
	for k, v := range map[string]string{"kind": req.GetKind(), "name": req.GetName(), "agent": req.GetAgent(), "phase": req.GetPhase(), "cursor": req.GetCursor()} {
		if v != "" {
			r = r.Param(k, v)
		}
	}
	if req.GetLimit() > 0 {
		r = r.Param("limit", fmt.Sprint(req.GetLimit()))
	}
	if req.GetFinishedAfter() != nil {
		r = r.Param("since", req.GetFinishedAfter().AsTime().Format(time.RFC3339Nano))
	}
	if req.GetFinishedBefore() != nil {
		r = r.Param("until", req.GetFinishedBefore().AsTime().Format(time.RFC3339Nano))
	}
	raw, err := body(r.Do(ctx))
	if err != nil {
		return nil, err
	}
	out := &jangarv1.ArchivedRunList{}
	if err := protojson.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("the gateway's list of archived runs does not decode: %w", err)
	}
	return out, nil
}

func (a *apiSource) getArchived(ctx context.Context, uid string) (*jangarv1.ArchivedRun, error) {
	raw, err := body(a.rc.Get().AbsPath(a.path("archivedruns"), uid).Do(ctx))
	if err != nil {
		return nil, err
	}
	out := &jangarv1.ArchivedRun{}
	if err := protojson.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("the gateway's archived run does not decode: %w", err)
	}
	return out, nil
}

// openArchive finds watch-gateway as agentctl status history does.
func openArchive(cmd *cobra.Command, g *globalOptions, o *archivedOptions) (archiveReader, func(), error) {
	o.status.transport = "grpc"
	src, err := openSource(cmd, g, &o.status)
	if err != nil {
		return nil, nil, err
	}
	r, ok := src.(archiveReader)
	if !ok {
		src.close()
		return nil, nil, fmt.Errorf("the run archive is read from watch-gateway only")
	}
	return r, src.close, nil
}

// archiveFailure is err with agentctl's exit code.
func archiveFailure(err error, o *archivedOptions, what string) error {
	server := o.status.server
	if server == "" {
		server = "watch-gateway"
	}
	if perm, ok := permanent(err, server); ok {
		return perm
	}
	return withCode(ExitUnavailable, fmt.Errorf("%s: %w", what, err))
}

// archivedTime reads --since/--until: an RFC 3339 time, or a duration before now.
func archivedTime(flag, v string, at time.Time) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return timestamppb.New(t), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return timestamppb.New(at.Add(-d)), nil
	}
	return nil, withCode(ExitUsage, fmt.Errorf("--%s %q must be an RFC 3339 time (2026-12-01T00:00:00Z) or a duration before now (24h)", flag, v))
}

// getArchived is agentctl get runs --archived.
func getArchived(cmd *cobra.Command, g *globalOptions, o *archivedOptions, kinds, names []string, output string) error {
	switch output {
	case "", "wide", "json", "yaml", "name":
	default:
		return withCode(ExitUsage, fmt.Errorf("with --archived, -o is wide, json, yaml or name (not %q)", output))
	}
	if o.limit < 1 || o.limit > 1000 {
		return withCode(ExitUsage, fmt.Errorf("--limit %d must be between 1 and 1000", o.limit))
	}
	if len(names) > 1 {
		return withCode(ExitUsage, fmt.Errorf("with --archived, name one run (or none): %d were named", len(names)))
	}
	req := &jangarv1.ListArchivedRunsRequest{Phase: o.phase, Agent: o.agent, Limit: int32(o.limit), Cursor: o.cont} //nolint:gosec // G115: bounded above
	if len(kinds) == 1 {
		req.Kind = kinds[0]
	}
	if len(names) == 1 {
		nk, name, err := runArg(names[0])
		if err != nil {
			return err
		}
		if k := intersect(kinds, nk); len(k) == 1 {
			req.Kind = k[0]
		} else if len(k) == 0 {
			return withCode(ExitUsage, fmt.Errorf("%s is not one of the kinds listed", names[0]))
		}
		req.Name = name
	}
	var err error
	at := now()
	if req.FinishedAfter, err = archivedTime("since", o.since, at); err != nil {
		return err
	}
	if req.FinishedBefore, err = archivedTime("until", o.until, at); err != nil {
		return err
	}
	r, done, err := openArchive(cmd, g, o)
	if err != nil {
		return err
	}
	defer done()
	list, err := r.listArchived(cmd.Context(), req)
	if err != nil {
		return archiveFailure(err, o, "list the archived runs")
	}
	w := cmd.OutOrStdout()
	for _, h := range list.GetHidden() {
		fmt.Fprintf(cmd.ErrOrStderr(), "Note: %s.\n", h)
	}
	switch output {
	case "json", "yaml":
		return printProto(w, output, list)
	case "name":
		for _, s := range list.GetRuns() {
			fmt.Fprintf(w, "%s/%s\n", strings.ToLower(s.GetKind()), s.GetName())
		}
	default:
		if len(list.GetRuns()) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "No archived runs found.")
			return nil
		}
		printArchivedTable(w, list.GetRuns(), output == "wide", at)
	}
	if list.GetNextCursor() != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "More runs: add --continue %s\n", list.GetNextCursor())
	}
	return nil
}

func printArchivedTable(w io.Writer, runs []*jangarv1.ArchivedRunSummary, wide bool, at time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	head := "NAME\tPHASE\tAGENT\tDURATION\tFINISHED"
	if wide {
		head += "\tARCHIVED\tUID"
	}
	fmt.Fprintln(tw, head)
	for _, s := range runs {
		agent := s.GetAgent()
		if agent == "" {
			agent = "-"
		}
		dur := "-"
		if s.GetCreatedAt() != nil && s.GetFinishedAt() != nil {
			dur = durationText(s.GetFinishedAt().AsTime().Sub(s.GetCreatedAt().AsTime()))
		}
		line := fmt.Sprintf("%s/%s\t%s\t%s\t%s\t%s ago", strings.ToLower(s.GetKind()), s.GetName(), s.GetPhase(), agent, dur,
			durationText(at.Sub(s.GetFinishedAt().AsTime())))
		if wide {
			line += "\t" + ts(s.GetArchivedAt().AsTime()) + "\t" + s.GetUid()
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
}

func printProto(w io.Writer, format string, m proto.Message) error {
	// protojson's own layout varies on purpose; encoding/json's indentation is stable.
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return err
	}
	b := buf.Bytes()
	if format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(w, "%s\n", strings.TrimRight(string(b), "\n"))
	return err
}

// describeArchived is agentctl describe run NAME --archived: the newest archived run of that name
// (agentrun/NAME or orchestrationrun/NAME for one kind), or --uid's.
func describeArchived(cmd *cobra.Command, g *globalOptions, o *archivedOptions, arg, uid string) error {
	kinds, name, err := runArg(arg)
	if err != nil {
		return err
	}
	r, done, err := openArchive(cmd, g, o)
	if err != nil {
		return err
	}
	defer done()
	ctx := cmd.Context()
	if uid == "" {
		req := &jangarv1.ListArchivedRunsRequest{Name: name, Limit: 1}
		if len(kinds) == 1 {
			req.Kind = kinds[0]
		}
		list, err := r.listArchived(ctx, req)
		if err != nil {
			return archiveFailure(err, o, "find the archived run")
		}
		if len(list.GetRuns()) == 0 {
			return withCode(ExitRejected, fmt.Errorf("no archived run %s (job-gc archives a run when it finishes; is archiving on, and was it deleted within the archive's retention?)", arg))
		}
		uid = list.GetRuns()[0].GetUid()
	}
	run, err := r.getArchived(ctx, uid)
	if err != nil {
		return archiveFailure(err, o, "read the archived run")
	}
	return printArchivedRun(cmd.OutOrStdout(), run, now())
}

func printArchivedRun(out io.Writer, run *jangarv1.ArchivedRun, at time.Time) error {
	s := run.GetSummary()
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	obj := run.GetObject().AsMap()
	status, _ := obj["status"].(map[string]any)
	field := func(label, v string) {
		if v != "" {
			fmt.Fprintf(w, "%s:\t%s\n", label, v)
		}
	}
	field("Name", s.GetName())
	field("Namespace", s.GetNamespace())
	field("Kind", s.GetKind())
	field("UID", s.GetUid())
	field("Agent", s.GetAgent())
	field("Phase", s.GetPhase())
	if reason, _ := status["reason"].(string); reason != "" {
		field("Reason", reason)
	}
	if msg, _ := status["message"].(string); msg != "" {
		field("Message", msg)
	}
	when := func(t *timestamppb.Timestamp) string {
		if t == nil {
			return ""
		}
		return ts(t.AsTime()) + " (" + durationText(at.Sub(t.AsTime())) + " ago)"
	}
	field("Created", when(s.GetCreatedAt()))
	field("Finished", when(s.GetFinishedAt()))
	if s.GetCreatedAt() != nil && s.GetFinishedAt() != nil {
		field("Duration", durationText(s.GetFinishedAt().AsTime().Sub(s.GetCreatedAt().AsTime())))
	}
	field("Archived", when(s.GetArchivedAt()))
	_ = w.Flush()
	printArchivedStatus(out, status)
	printArchivedJobs(out, run.GetJobs())
	printArchivedEvents(out, run.GetEvents())
	printArchivedLogs(out, run.GetLogs())
	for _, h := range run.GetHidden() {
		fmt.Fprintf(out, "Not shown: %s\n", h)
	}
	return nil
}

// printArchivedStatus prints the conditions and an OrchestrationRun's steps from the object's status.
func printArchivedStatus(out io.Writer, status map[string]any) {
	if conds, _ := status["conditions"].([]any); len(conds) > 0 {
		fmt.Fprintln(out, "Conditions:")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tMESSAGE")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			fmt.Fprintf(tw, "  %v\t%v\t%v\t%v\n", m["type"], m["status"], orDash(m["reason"]), orDash(m["message"]))
		}
		_ = tw.Flush()
	}
	if steps, _ := status["stepStatuses"].([]any); len(steps) > 0 {
		fmt.Fprintln(out, "Steps:")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tPHASE\tRUN")
		for _, st := range steps {
			m, _ := st.(map[string]any)
			ref, _ := m["resourceRef"].(map[string]any)
			fmt.Fprintf(tw, "  %v\t%v\t%v\n", m["name"], orDash(m["phase"]), orDash(ref["name"]))
		}
		_ = tw.Flush()
	}
}

func printArchivedJobs(out io.Writer, jobs []*jangarv1.ArchivedJob) {
	if len(jobs) > 0 {
		fmt.Fprintln(out, "Jobs:")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tSTEP\tRESULT\tEXIT\tDURATION\tREASON")
		for _, j := range jobs {
			result, exit, dur := "Failed", "-", "-"
			if j.GetSucceeded() {
				result = "Succeeded"
			}
			if j.ExitCode != nil {
				exit = fmt.Sprint(j.GetExitCode())
			}
			if j.GetStarted() != nil && j.GetFinished() != nil {
				dur = durationText(j.GetFinished().AsTime().Sub(j.GetStarted().AsTime()))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", j.GetName(), orDash(j.GetStep()), result, exit, dur, orDash(j.GetReason()))
		}
		_ = tw.Flush()
	}
}

func printArchivedEvents(out io.Writer, events []*jangarv1.ArchivedEvent) {
	if len(events) > 0 {
		fmt.Fprintln(out, "Events:")
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  LAST\tTYPE\tREASON\tOBJECT\tMESSAGE")
		evs := append([]*jangarv1.ArchivedEvent(nil), events...)
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].GetLast().AsTime().Before(evs[j].GetLast().AsTime()) })
		for _, e := range evs {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", ts(e.GetLast().AsTime()), e.GetType(), e.GetReason(), orDash(e.GetInvolved()), e.GetMessage())
		}
		_ = tw.Flush()
	}
}

func printArchivedLogs(out io.Writer, logs []*jangarv1.ArchivedLog) {
	for _, l := range logs {
		fmt.Fprintf(out, "Log of %s/%s", l.GetPod(), l.GetContainer())
		switch {
		case l.GetError() != "":
			fmt.Fprintf(out, ": not read (%s)\n", l.GetError())
			continue
		case l.GetTruncated():
			fmt.Fprint(out, " (its tail)")
		}
		fmt.Fprintln(out, ":")
		for _, line := range strings.Split(strings.TrimRight(l.GetTail(), "\n"), "\n") {
			fmt.Fprintln(out, "  "+line)
		}
	}
}

func orDash(v any) string {
	if v == nil || v == "" {
		return "-"
	}
	return fmt.Sprint(v)
}

// archivedOnly refuses, with --archived, the flags that read the cluster.
func archivedOnly(cmd *cobra.Command, flags ...string) error {
	for _, f := range flags {
		if fl := cmd.Flags().Lookup(f); fl != nil && fl.Changed {
			return withCode(ExitUsage, fmt.Errorf("--%s reads the cluster, not the run archive: drop it or --archived", f))
		}
	}
	return nil
}

// archivedFlagsWithout refuses the archive's own flags without --archived.
func archivedFlagsWithout(cmd *cobra.Command) error {
	for _, f := range []string{"phase", "agent", "since", "until", "limit", "continue", "uid"} {
		if fl := cmd.Flags().Lookup(f); fl != nil && fl.Changed {
			return withCode(ExitUsage, fmt.Errorf("--%s is for --archived (the run archive)", f))
		}
	}
	return nil
}
