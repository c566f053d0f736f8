package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"sigs.k8s.io/yaml"

	jangarv1 "github.com/agentplane/agentplane/proto/proompteng/jangar/v1"
)

// historyOptions are agentctl status history's flags.
type historyOptions struct {
	since  time.Duration
	limit  int
	output string
	status statusOptions
}

// addGatewayFlags adds the flags that reach watch-gateway, as status has them.
func addGatewayFlags(cmd *cobra.Command, o *statusOptions) {
	f := cmd.Flags()
	f.StringVar(&o.server, "gateway", os.Getenv("AGENTCTL_SERVER"), "watch-gateway gRPC address (env AGENTCTL_SERVER; default: found through the kubeconfig and port-forwarded)")
	f.StringVar(&o.access.token, "gateway-token", "", "bearer token for watch-gateway, issued for its audience (default $AGENTCTL_TOKEN; never the kubeconfig's)")
	f.StringVar(&o.gatewayService, "gateway-service", defaultGatewayService, "the watch-gateway Service in -n to port-forward to when no --gateway is given")
	f.StringVar(&o.access.tokenFile, "gateway-token-file", "", "file holding the bearer token for watch-gateway")
	f.StringVar(&o.access.caFile, "tls-ca", os.Getenv("AGENTCTL_TLS_CA"), "CA certificate to verify watch-gateway's TLS; setting any --tls-* flag turns TLS on (env AGENTCTL_TLS_CA)")
	f.StringVar(&o.access.certFile, "tls-cert", os.Getenv("AGENTCTL_TLS_CERT"), "client certificate for mTLS to watch-gateway (env AGENTCTL_TLS_CERT)")
	f.StringVar(&o.access.keyFile, "tls-key", os.Getenv("AGENTCTL_TLS_KEY"), "client key for mTLS to watch-gateway (env AGENTCTL_TLS_KEY)")
	f.StringVar(&o.access.serverName, "gateway-tls-server-name", "", "name to verify watch-gateway's certificate against (default: the --gateway host)")
	f.BoolVar(&o.debug, "debug", false, "log the transport to stderr")
}

func newStatusHistoryCommand(g *globalOptions) *cobra.Command {
	o := &historyOptions{}
	cmd := &cobra.Command{
		Use:   "history",
		Short: "Show the component status transitions watch-gateway recorded",
		Long: `Shows when each control-plane component changed status over a recent window, oldest first:
the timeline watch-gateway keeps in Redis (every replica records into the same one, and it survives
their restarts; how long it is kept is the gateway's JANGAR_WATCH_HISTORY_RETENTION, 24h by
default). It is read from watch-gateway, found as agentctl status --transport grpc finds it:
through the API server when it serves the gateway's aggregated API, else over gRPC. A gateway
without Redis keeps no history (exit 5).

` + exitCodesHelp,
		Example: `  agentctl status history --since 2h
  agentctl status history --since 24h -o json --gateway 127.0.0.1:50051`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runHistory(cmd, g, o) },
	}
	cmd.Flags().DurationVar(&o.since, "since", time.Hour, "how far back to look (at most what the gateway keeps)")
	cmd.Flags().IntVar(&o.limit, "limit", 1000, "at most this many transitions, the newest (1 to 10000)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	addGatewayFlags(cmd, &o.status)
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion("table", "json", "yaml"))
	return cmd
}

// historyJSON is the history as -o json and -o yaml print it.
type historyJSON struct {
	GeneratedAt string           `json:"generated_at"`
	Since       string           `json:"since"`
	Retention   string           `json:"retention"`
	Truncated   bool             `json:"truncated"`
	Oldest      string           `json:"oldest,omitempty"`
	Transitions []transitionJSON `json:"transitions"`
}

type transitionJSON struct {
	At        string `json:"at"`
	Component string `json:"component"`
	Previous  string `json:"previous,omitempty"`
	Status    string `json:"status"`
	Message   string `json:"message,omitempty"`
}

func runHistory(cmd *cobra.Command, g *globalOptions, o *historyOptions) error {
	if o.since <= 0 {
		return withCode(ExitUsage, fmt.Errorf("--since %s must be a positive duration, such as 2h", o.since))
	}
	if o.limit < 1 || o.limit > 10000 {
		return withCode(ExitUsage, fmt.Errorf("--limit %d must be between 1 and 10000", o.limit))
	}
	switch o.output {
	case "table", "json", "yaml":
	default:
		return withCode(ExitUsage, fmt.Errorf("--output %q must be table, json or yaml", o.output))
	}
	o.status.transport = "grpc"
	src, err := openSource(cmd, g, &o.status)
	if err != nil {
		return err
	}
	defer src.close()
	ctx := cmd.Context()
	if as, ok := src.(*apiSource); ok {
		out, err := as.history(ctx, o.since, o.limit)
		if err != nil {
			if perm, ok := permanent(err, "the API server"); ok {
				return perm
			}
			return withCode(ExitUnavailable, fmt.Errorf("read the status history: %w", err))
		}
		return printHistory(cmd.OutOrStdout(), o.output, out)
	}
	gs, ok := src.(*grpcSource)
	if !ok {
		return fmt.Errorf("the status history is read from watch-gateway only")
	}
	resp, err := gs.client.GetControlPlaneStatusHistory(ctx, &jangarv1.GetControlPlaneStatusHistoryRequest{
		Namespace: gs.namespace, Since: durationpb.New(o.since), Limit: int32(o.limit), //nolint:gosec // G115: bounded to 10000 above
	})
	if err != nil {
		server := o.status.server
		if server == "" {
			server = "watch-gateway"
		}
		if perm, ok := permanent(err, server); ok {
			return perm
		}
		return withCode(ExitUnavailable, fmt.Errorf("read the status history: %w", err))
	}
	out := historyJSON{GeneratedAt: ts(resp.GetGeneratedAt().AsTime()), Since: o.since.String(), Retention: resp.GetRetention().AsDuration().String(),
		Truncated: resp.GetTruncated(), Transitions: []transitionJSON{}}
	if resp.GetOldest() != nil {
		out.Oldest = ts(resp.GetOldest().AsTime())
	}
	for _, t := range resp.GetTransitions() {
		out.Transitions = append(out.Transitions, transitionJSON{At: ts(t.GetAt().AsTime()), Component: t.GetComponent(),
			Previous: t.GetPreviousStatus(), Status: t.GetStatus(), Message: t.GetMessage()})
	}
	return printHistory(cmd.OutOrStdout(), o.output, out)
}

func printHistory(w io.Writer, format string, h historyJSON) error {
	switch format {
	case "json", "yaml":
		b, err := json.MarshalIndent(h, "", "  ")
		if err != nil {
			return err
		}
		if format == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return err
			}
		}
		_, err = fmt.Fprintf(w, "%s\n", strings.TrimRight(string(b), "\n"))
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-21s %-24s %-10s %-10s %s\n", "TIME", "COMPONENT", "FROM", "TO", "MESSAGE")
	for _, t := range h.Transitions {
		from := t.Previous
		if from == "" {
			from = "-"
		}
		b.WriteString(strings.TrimRight(fmt.Sprintf("%-21s %-24s %-10s %-10s %s", t.At, t.Component, from, t.Status, t.Message), " ") + "\n")
	}
	if len(h.Transitions) == 0 {
		fmt.Fprintf(&b, "(no transitions in the last %s)\n", h.Since)
	}
	if h.Oldest != "" {
		fmt.Fprintf(&b, "(the gateway has recorded since %s)\n", h.Oldest)
	}
	if h.Truncated {
		b.WriteString("(older transitions in the window were left out: raise --limit)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
