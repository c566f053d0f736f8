package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/health"
)

// statusOptions are the seed's flags for status, status watch and diagnose.
type statusOptions struct {
	watch, followOnly, retry, fallbackPoll, debug bool
	output, transport, since, server              string
	heartbeat, retryBackoff, timeout              time.Duration
	access                                        grpcAccess
}

const maxBackoff = 30 * time.Second

func addStatusFlags(cmd *cobra.Command, o *statusOptions, defaultOutput string) {
	f := cmd.Flags()
	f.BoolVar(&o.watch, "watch", false, "stream changes after the initial status")
	f.StringVarP(&o.output, "output", "o", defaultOutput, "output format: table, json or ndjson")
	f.BoolVar(&o.followOnly, "follow-only", false, "do not print the initial snapshot; only changes")
	f.DurationVar(&o.heartbeat, "heartbeat", 30*time.Second, "heartbeat interval")
	f.BoolVar(&o.retry, "retry", true, "reconnect when the stream breaks")
	f.DurationVar(&o.retryBackoff, "retry-backoff", time.Second, "first reconnect delay; doubles with jitter up to 30s")
	f.BoolVar(&o.fallbackPoll, "fallback-poll", false, "poll the one-shot status when streaming is unavailable")
	f.StringVar(&o.since, "since", "", "resume from a cursor (an SSE Last-Event-ID or gRPC cursor)")
	f.DurationVar(&o.timeout, "timeout", 0, "overall watch duration (default: none)")
	f.StringVar(&o.transport, "transport", "", "kube (default) or grpc (default when --server or AGENTCTL_SERVER is set)")
	f.StringVar(&o.server, "server", os.Getenv("AGENTCTL_SERVER"), "watch-gateway gRPC address for --transport grpc")
	f.BoolVar(&o.debug, "debug", false, "log transport, cursor and reconnects to stderr")
	// AGENTCTL_TOKEN is read when the command runs, not as the flag's default: help prints defaults.
	f.StringVar(&o.access.token, "token", "", "bearer token for watch-gateway (--transport grpc; default $AGENTCTL_TOKEN)")
	f.StringVar(&o.access.tokenFile, "token-file", "", "file holding the bearer token for watch-gateway (--transport grpc)")
	f.StringVar(&o.access.caFile, "tls-ca", os.Getenv("AGENTCTL_TLS_CA"), "CA certificate to verify watch-gateway's TLS; setting any --tls-* flag turns TLS on (env AGENTCTL_TLS_CA)")
	f.StringVar(&o.access.certFile, "tls-cert", os.Getenv("AGENTCTL_TLS_CERT"), "client certificate for mTLS to watch-gateway (env AGENTCTL_TLS_CERT)")
	f.StringVar(&o.access.keyFile, "tls-key", os.Getenv("AGENTCTL_TLS_KEY"), "client key for mTLS to watch-gateway (env AGENTCTL_TLS_KEY)")
	f.StringVar(&o.access.serverName, "tls-server-name", "", "name to verify watch-gateway's certificate against (default: the --server host)")
}

func newStatusCommand(g *globalOptions) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show control-plane health (--watch to stream it)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runStatus(cmd, g, o) },
	}
	addStatusFlags(cmd, o, "table")
	watch := &cobra.Command{
		Use:   "watch",
		Short: "Stream control-plane health: a snapshot, then changes and heartbeats",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.watch = true
			return runStatus(cmd, g, o)
		},
	}
	addStatusFlags(watch, o, "table")
	cmd.AddCommand(watch)
	return cmd
}

func newDiagnoseCommand(g *globalOptions) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "diagnose",
		Short: "Diagnose the control plane: its health, with --watch to follow it",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runStatus(cmd, g, o) },
	}
	addStatusFlags(cmd, o, "table")
	return cmd
}

func (o *statusOptions) validate() error {
	if o.heartbeat < time.Second {
		return fmt.Errorf("--heartbeat %s is shorter than 1s", o.heartbeat)
	}
	if o.retryBackoff <= 0 {
		return errors.New("--retry-backoff must be positive")
	}
	switch o.transport {
	case "":
		o.transport = "kube"
		if o.server != "" {
			o.transport = "grpc"
		}
	case "kube", "grpc":
	default:
		return fmt.Errorf("--transport %q must be kube or grpc", o.transport)
	}
	if o.transport == "grpc" && o.server == "" {
		return errors.New("--transport grpc needs --server host:port (or AGENTCTL_SERVER)")
	}
	return nil
}

func runStatus(cmd *cobra.Command, g *globalOptions, o *statusOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	p, err := newPrinter(cmd.OutOrStdout(), o.output)
	if err != nil {
		return err
	}
	debugf := func(format string, args ...any) {
		if o.debug {
			fmt.Fprintf(cmd.ErrOrStderr(), "debug: "+format+"\n", args...)
		}
	}
	// The collector logs through slog; agentctl shows that only with --debug.
	if !o.debug {
		slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	var src source
	ns := g.namespace // grpc: empty means the gateway's own namespace
	if o.transport == "grpc" {
		a := o.access
		if a.token == "" && a.tokenFile == "" {
			a.token = os.Getenv("AGENTCTL_TOKEN")
		}
		if src, err = newGRPCSource(o.server, ns, a); err != nil {
			return err
		}
	} else {
		if ns, _, err = g.clientConfig().Namespace(); err != nil {
			return fmt.Errorf("load kubeconfig: %w (use --kubeconfig, or --transport grpc --server host:port)", err)
		}
		cfg, err := g.clientConfig().ClientConfig()
		if err != nil {
			return fmt.Errorf("load kubeconfig: %w (use --kubeconfig, or --transport grpc --server host:port)", err)
		}
		src = newKubeSource(kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg), ns)
	}
	defer src.close()
	debugf("transport=%s namespace=%s", o.transport, ns)
	ctx := cmd.Context()
	if !o.watch {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		snap, err := src.snapshot(sctx)
		if err != nil {
			return fmt.Errorf("get status: %w", err)
		}
		return p.print(snap)
	}
	return watchLoop(ctx, src, p, o, debugf)
}

// errRetriesExhausted is returned when the stream stayed down until --timeout.
var errRetriesExhausted = errors.New("stream unavailable until --timeout")

// watchLoop streams, reconnecting with the last cursor under exponential backoff with jitter
// (capped at 30s). It ends with nil when --timeout passes while connected or ctx ends, and with
// an error on a disconnect with --retry=false or when retries outlast --timeout.
func watchLoop(ctx context.Context, src source, p *printer, o *statusOptions, debugf func(string, ...any)) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	cursor, followOnly := o.since, o.followOnly
	backoff := o.retryBackoff
	var printErr error
	for attempt := 1; ; attempt++ {
		debugf("connecting cursor=%q attempt=%d", cursor, attempt)
		connected := false
		err := src.stream(ctx, cursor, followOnly, o.heartbeat, func(ev health.Event) {
			connected = true
			if ev.Cursor != "" {
				cursor = ev.Cursor
			}
			if e := p.print(ev); e != nil && printErr == nil {
				printErr = e
			}
		})
		if printErr != nil {
			return printErr
		}
		followOnly = false // a resumed stream starts from the cursor, not a new snapshot
		if err == nil {
			return nil // the stream held until --timeout or an interrupt
		}
		if ctx.Err() != nil {
			return errRetriesExhausted
		}
		if connected {
			backoff = o.retryBackoff
		}
		if !o.retry {
			return fmt.Errorf("stream disconnected: %w", err)
		}
		if o.fallbackPoll && !connected {
			debugf("streaming unavailable (%v); polling every %s", err, o.heartbeat)
			return pollLoop(ctx, src, p, o.heartbeat)
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		debugf("disconnected: %v; reconnecting in %s", err, sleep)
		select {
		case <-ctx.Done():
			return errRetriesExhausted
		case <-time.After(sleep):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// pollLoop stands in for a stream: the one-shot status every interval, printed as a snapshot
// and then deltas.
func pollLoop(ctx context.Context, src source, p *printer, every time.Duration) error {
	var last []health.Item
	first := true
	for {
		snap, err := src.snapshot(ctx)
		if err == nil {
			if first {
				if err := p.print(snap); err != nil {
					return err
				}
				first = false
			} else if changes := health.Diff(last, snap.Items); len(changes) > 0 {
				if err := p.print(health.Event{Type: health.Delta, GeneratedAt: snap.GeneratedAt, Items: changes}); err != nil {
					return err
				}
			}
			last = snap.Items
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}
