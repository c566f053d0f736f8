package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/health"
)

// statusOptions are the seed's flags for status, status watch and diagnose.
type statusOptions struct {
	watch, followOnly, retry, fallbackPoll, debug bool
	exitCode                                      bool
	output, transport, since, server              string
	gatewayService                                string
	heartbeat, retryBackoff, timeout              time.Duration
	access                                        grpcAccess
}

const maxBackoff = 30 * time.Second

func addStatusFlags(cmd *cobra.Command, o *statusOptions, defaultOutput string) {
	f := cmd.Flags()
	f.BoolVar(&o.watch, "watch", false, "stream changes after the initial status")
	f.StringVarP(&o.output, "output", "o", defaultOutput, "output format: table, json, ndjson or yaml")
	f.BoolVar(&o.followOnly, "follow-only", false, "do not print the initial snapshot; only changes")
	f.DurationVar(&o.heartbeat, "heartbeat", 30*time.Second, "heartbeat interval (1s to 5m)")
	f.BoolVar(&o.retry, "retry", true, "reconnect when the stream breaks")
	f.DurationVar(&o.retryBackoff, "retry-backoff", time.Second, "first reconnect delay; doubles with jitter up to 30s")
	f.BoolVar(&o.fallbackPoll, "fallback-poll", false, "poll the one-shot status whenever streaming is unavailable, instead of retrying or exiting")
	f.StringVar(&o.since, "since", "", "resume from a cursor (an SSE Last-Event-ID or gRPC cursor)")
	f.DurationVar(&o.timeout, "timeout", 0, "overall watch duration (default: none)")
	f.StringVar(&o.transport, "transport", "", "kube (default), grpc (default when --gateway or AGENTCTL_SERVER is set; without them the gateway is found through the kubeconfig) or api (the gateway's aggregated API only)")
	f.StringVar(&o.server, "gateway", os.Getenv("AGENTCTL_SERVER"), "watch-gateway gRPC address for --transport grpc (env AGENTCTL_SERVER)")
	f.StringVar(&o.gatewayService, "gateway-service", defaultGatewayService, "the watch-gateway Service in -n that --transport grpc port-forwards to when no --gateway is given")
	f.BoolVar(&o.debug, "debug", false, "log transport, cursor and reconnects to stderr")
	// AGENTCTL_TOKEN is read when the command runs, not as the flag's default: help prints defaults.
	f.StringVar(&o.access.token, "gateway-token", "", "bearer token for watch-gateway (--transport grpc; default $AGENTCTL_TOKEN)")
	f.StringVar(&o.access.tokenFile, "gateway-token-file", "", "file holding the bearer token for watch-gateway (--transport grpc)")
	f.StringVar(&o.access.caFile, "tls-ca", os.Getenv("AGENTCTL_TLS_CA"), "CA certificate to verify watch-gateway's TLS; setting any --tls-* flag turns TLS on (env AGENTCTL_TLS_CA)")
	f.StringVar(&o.access.certFile, "tls-cert", os.Getenv("AGENTCTL_TLS_CERT"), "client certificate for mTLS to watch-gateway (env AGENTCTL_TLS_CERT)")
	f.StringVar(&o.access.keyFile, "tls-key", os.Getenv("AGENTCTL_TLS_KEY"), "client key for mTLS to watch-gateway (env AGENTCTL_TLS_KEY)")
	f.StringVar(&o.access.serverName, "gateway-tls-server-name", "", "name to verify watch-gateway's certificate against (default: the --gateway host)")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion("table", "json", "ndjson", "yaml"))
	_ = cmd.RegisterFlagCompletionFunc("transport", fixedCompletion("kube", "grpc", "api"))
}

// fixedCompletion completes a flag's value from a fixed list.
func fixedCompletion(values ...string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

const statusLong = `Shows the health of every control-plane component: the namespace, the Kubernetes API,
the agentplane CRDs, each runtime, Redis, and each agentplane service.

Three transports give the same model (seed 004):
  kube (default)  computed in agentctl from the Kubernetes API with your kubeconfig's rights
  api             read from watch-gateway through the Kubernetes API server, which serves it
                  as an aggregated API (the chart's apiService.enabled): the API server
                  authenticates you with whatever your kubeconfig uses (certificates, tokens,
                  exec and OIDC plugins) and vouches for you to the gateway
  grpc            read from watch-gateway: at --gateway host:port (or AGENTCTL_SERVER); else,
                  with no gateway credential given, as api when the API server serves it; else
                  the Service --gateway-service (watch-gateway) in -n, reached
                  by a port-forward through the API server, as kubectl port-forward does,
                  over TLS verified with the CA the chart publishes (the pod's
                  agentplane.dev/tls-ca-configmap) when the pod serves TLS;
                  with a bearer token issued for the gateway's audience (--gateway-token,
                  --gateway-token-file or AGENTCTL_TOKEN, from kubectl create token NAME
                  --audience agentplane-gateway) or a client certificate (--tls-cert,
                  --tls-key) when it asks for one. The kubeconfig's credentials never go to
                  the gateway.

In kube mode each service's own health (grpc.health.v1) is read through a port-forward to one of
its pods; nothing is dialled by a cluster DNS name, so it works from a laptop.

Statuses: healthy, degraded, error, unknown (not configured, or not knowable from here) and
configured. The one-shot status exits 3 when a component is degraded or in error, so it can
gate a script; --exit-code=false always exits 0 on success.

` + exitCodesHelp

const statusExample = `  # Everything at a glance; exit code 3 if a component is degraded or in error
  agentctl status

  # The same from watch-gateway, as JSON
  agentctl status --gateway 127.0.0.1:50051 -o json

  # Wait in CI until the control plane is healthy
  agentctl status wait --for healthy --timeout 2m`

func newStatusCommand(g *globalOptions) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show control-plane health (--watch to stream it)",
		Long:    statusLong,
		Example: statusExample,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runStatus(cmd, g, o) },
	}
	addStatusFlags(cmd, o, "table")
	cmd.Flags().BoolVar(&o.exitCode, "exit-code", true, "exit 3 when a component is degraded or in error (one-shot status)")
	wo := &statusOptions{}
	watch := &cobra.Command{
		Use:   "watch",
		Short: "Stream control-plane health: a snapshot, then changes and heartbeats",
		Long: `Streams control-plane health: a snapshot of every component, then a line for each change
(UPDATE), a HEARTBEAT every --heartbeat, and ERROR lines for problems the source reports while the
stream goes on. When the stream breaks it reconnects with the last cursor (exponential backoff with
jitter up to 30s), saying so on stderr each time; errors that retrying cannot fix (refused
credentials, a namespace the gateway does not serve, an unsupported call) end it at once.

` + exitCodesHelp,
		Example: `  agentctl status watch
  agentctl status watch -o ndjson --follow-only          # only changes, for alerting
  agentctl status watch --gateway 127.0.0.1:50051 --gateway-token-file token --timeout 10m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			wo.watch = true
			return runStatus(cmd, g, wo)
		},
	}
	addStatusFlags(watch, wo, "table")
	cmd.AddCommand(watch, newStatusWaitCommand(g), newStatusHistoryCommand(g))
	return cmd
}

func newDiagnoseCommand(g *globalOptions) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "diagnose",
		Short: "Diagnose the control plane: its health, with --watch to follow it",
		Long: `Shows the control plane's health like agentctl status (the same flags and exit codes); with
--watch it follows changes like agentctl status watch.

` + exitCodesHelp,
		Example: `  agentctl diagnose
  agentctl diagnose --watch -o ndjson`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStatus(cmd, g, o) },
	}
	addStatusFlags(cmd, o, "table")
	cmd.Flags().BoolVar(&o.exitCode, "exit-code", true, "exit 3 when a component is degraded or in error (one-shot)")
	return cmd
}

func (o *statusOptions) validate() error {
	if o.heartbeat < time.Second || o.heartbeat > 5*time.Minute {
		return fmt.Errorf("--heartbeat %s must be between 1s and 5m", o.heartbeat)
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
	case "kube", "grpc", "api":
	default:
		return fmt.Errorf("--transport %q must be kube, grpc or api", o.transport)
	}
	return nil
}

// prepare checks the options and opens the printer and the source; the caller closes the source.
func prepare(cmd *cobra.Command, g *globalOptions, o *statusOptions) (*printer, source, error) {
	if err := o.validate(); err != nil {
		return nil, nil, withCode(ExitUsage, err)
	}
	p, err := newPrinter(cmd.OutOrStdout(), o.output)
	if err != nil {
		return nil, nil, withCode(ExitUsage, err)
	}
	src, err := openSource(cmd, g, o)
	if err != nil {
		return nil, nil, err
	}
	return p, src, nil
}

func runStatus(cmd *cobra.Command, g *globalOptions, o *statusOptions) error {
	p, src, err := prepare(cmd, g, o)
	if err != nil {
		return err
	}
	defer src.close()
	ctx := cmd.Context()
	if !o.watch {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		snap, err := src.snapshot(sctx)
		if err != nil {
			if perm, ok := permanent(err, o.server); ok {
				return perm
			}
			return fmt.Errorf("get status: %w", err)
		}
		if err := p.print(snap); err != nil {
			return err
		}
		if bad := unhealthy(snap.Items); o.exitCode && len(bad) > 0 {
			return withCode(ExitUnhealthy, fmt.Errorf("not healthy: %s", strings.Join(bad, ", ")))
		}
		return nil
	}
	return watchLoop(ctx, src, p.print, o, notifier(cmd.ErrOrStderr(), o))
}

// unhealthy lists the components that are degraded or in error.
func unhealthy(items []health.Item) []string {
	var bad []string
	for _, it := range items {
		if it.Status == health.Degraded || it.Status == health.Error {
			bad = append(bad, it.Component+"="+string(it.Status))
		}
	}
	return bad
}

// openSource builds the transport the options name.
func openSource(cmd *cobra.Command, g *globalOptions, o *statusOptions) (source, error) {
	// The collector logs through slog; agentctl shows that only with --debug.
	if !o.debug {
		slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	note := notifier(cmd.ErrOrStderr(), o)
	if o.transport == "grpc" && o.server != "" {
		src, err := newGRPCSource(o.server, g.namespaceFlag(), o.gatewayAccess(os.Getenv("AGENTCTL_TOKEN")))
		if err != nil {
			return nil, withCode(ExitUsage, err)
		}
		note.debugf("transport=grpc gateway=%s namespace=%q", o.server, g.namespaceFlag())
		return src, nil
	}
	cc := g.clientConfig()
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("load kubeconfig: %w (use --kubeconfig, or --transport grpc --gateway host:port)", err))
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("load kubeconfig: %w (use --kubeconfig, or --transport grpc --gateway host:port)", err))
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("kubeconfig: %w", err))
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("kubeconfig: %w", err))
	}
	if o.transport == "api" || (o.transport == "grpc" && !o.gatewayAccess(os.Getenv("AGENTCTL_TOKEN")).presents()) {
		served, err := servesGatewayAPI(kc.Discovery())
		switch {
		case served:
			note.debugf("transport=api (the API server's aggregated %s/%s) namespace=%s", gatewayAPIGroup, gatewayAPIVersion, ns)
			return &apiSource{rc: kc.CoreV1().RESTClient(), namespace: ns}, nil
		case o.transport == "api" && err != nil:
			if perm, ok := permanent(err, "the API server"); ok {
				return nil, perm
			}
			return nil, withCode(ExitUnavailable, fmt.Errorf("discover %s/%s: %w", gatewayAPIGroup, gatewayAPIVersion, err))
		case o.transport == "api":
			return nil, withCode(ExitUnavailable, fmt.Errorf("the API server serves no %s/%s: install watch-gateway with apiService.enabled=true, "+
				"or use --transport grpc (a port-forward to the gateway, with a token for its audience)", gatewayAPIGroup, gatewayAPIVersion))
		case err != nil:
			note.debugf("discovery of %s/%s failed (%v): port-forwarding instead", gatewayAPIGroup, gatewayAPIVersion, err)
		}
	}
	if o.transport == "grpc" { // no --gateway: find it through the kubeconfig, as kubectl port-forward would
		addr, podTLS, stop, err := forwardToGateway(cmd.Context(), cfg, kc, ns, o.gatewayService, o.access.caFile != "")
		if err != nil {
			if perm, ok := permanent(err, "the API server"); ok {
				return nil, perm
			}
			var coded *exitError
			if errors.As(err, &coded) {
				return nil, err
			}
			return nil, withCode(ExitUnavailable, fmt.Errorf("reach watch-gateway through the API server: %w", err))
		}
		access := o.gatewayAccess(os.Getenv("AGENTCTL_TOKEN"))
		access.pod = podTLS
		src, err := newGRPCSource(addr, g.namespaceFlag(), access)
		if err != nil {
			stop()
			return nil, withCode(ExitUsage, err)
		}
		src.release = stop
		note.debugf("transport=grpc gateway=port-forward %s namespace=%s", addr, ns)
		return src, nil
	}
	note.debugf("transport=kube namespace=%s", ns)
	return newKubeSource(kc, dyn, ns, serviceDialer(cfg, kc, ns)), nil
}

// gatewayAccess is what agentctl presents to watch-gateway: the --gateway-token* flags, else
// AGENTCTL_TOKEN (env), and nothing else. The kubeconfig's credentials are for the API server and
// never go to the gateway, not even to one found through the kubeconfig: a Service anyone may
// create could stand in for it. The gateway takes only tokens issued for its own audience
// (kubectl create token NAME --audience agentplane-gateway).
func (o *statusOptions) gatewayAccess(env string) grpcAccess {
	a := o.access
	if a.token == "" && a.tokenFile == "" {
		a.token = env
	}
	return a
}

// notice writes agentctl's own lines on stderr: reconnects always, the rest with --debug.
type notice struct {
	w     io.Writer
	debug bool
}

func notifier(w io.Writer, o *statusOptions) notice { return notice{w: w, debug: o.debug} }

func (n notice) debugf(format string, args ...any) {
	if n.debug {
		fmt.Fprintf(n.w, "debug: "+format+"\n", args...)
	}
}

func (n notice) printf(format string, args ...any) {
	fmt.Fprintf(n.w, "agentctl: "+format+"\n", args...)
}

// errRetriesExhausted is returned when the stream stayed down until --timeout.
var errRetriesExhausted = withCode(ExitUnavailable, errors.New("the status stream stayed unavailable until --timeout"))

// errStop, returned by an emit function, ends the watch successfully.
var errStop = errors.New("stop")

// watchLoop streams, reconnecting with the last cursor under exponential backoff with jitter
// (capped at 30s), and says so on stderr each time. It ends with nil when --timeout passes
// while connected, ctx ends or emit returns errStop; with the error at once when the source
// refuses in a way retrying cannot fix; and with an exit code 6 error on a disconnect with
// --retry=false or when retries outlast --timeout. With --fallback-poll, a stream that cannot
// be had (unreachable, or a gateway that does not stream) is replaced by polling.
func watchLoop(ctx context.Context, src source, emit func(health.Event) error, o *statusOptions, n notice) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	cursor, followOnly := o.since, o.followOnly
	backoff := o.retryBackoff
	var emitErr error
	for attempt := 1; ; attempt++ {
		n.debugf("connecting cursor=%q attempt=%d", cursor, attempt)
		connected := false
		sctx, endStream := context.WithCancel(ctx)
		err := src.stream(sctx, cursor, followOnly, o.heartbeat, func(ev health.Event) {
			connected = true
			if ev.Cursor != "" {
				cursor = ev.Cursor
			}
			if emitErr == nil {
				if emitErr = emit(ev); emitErr != nil {
					endStream() // done (errStop) or failing: leave the stream
				}
			}
		})
		endStream()
		if errors.Is(emitErr, errStop) {
			return nil
		}
		if emitErr != nil {
			return emitErr
		}
		followOnly = false // a resumed stream starts from the cursor, not a new snapshot
		if err == nil {
			return nil // the stream held until --timeout or an interrupt
		}
		if ctx.Err() != nil {
			return errRetriesExhausted
		}
		perm, isPerm := permanent(err, o.server)
		if o.fallbackPoll && (!connected || (isPerm && exitCode(perm) == ExitRejected)) {
			n.printf("streaming unavailable (%v); polling the status every %s", err, o.heartbeat)
			return pollLoop(ctx, src, emit, o.heartbeat, o.server)
		}
		if isPerm {
			return perm
		}
		if connected {
			backoff = o.retryBackoff
		}
		if !o.retry {
			return withCode(ExitUnavailable, fmt.Errorf("stream disconnected: %w (--retry=false)", err))
		}
		sleep := backoff/2 + rand.N(backoff/2+1) //nolint:gosec // G404: jitter, not a secret
		n.printf("stream disconnected: %v; reconnecting in %s (attempt %d)", err, sleep.Round(time.Millisecond), attempt+1)
		select {
		case <-ctx.Done():
			return errRetriesExhausted
		case <-time.After(sleep):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// pollLoop stands in for a stream: the one-shot status every interval, given as a snapshot
// and then deltas; a failed poll is given as an error event and polling goes on, unless
// retrying cannot help.
func pollLoop(ctx context.Context, src source, emit func(health.Event) error, every time.Duration, server string) error {
	var last []health.Item
	first := true
	for {
		snap, err := src.snapshot(ctx)
		switch {
		case err == nil && first:
			if err := emit(snap); err != nil {
				return stopIsOK(err)
			}
			first = false
			last = snap.Items
		case err == nil:
			if changes := health.Diff(last, snap.Items); len(changes) > 0 {
				if err := emit(health.Event{Type: health.Delta, GeneratedAt: snap.GeneratedAt, Items: changes}); err != nil {
					return stopIsOK(err)
				}
			}
			last = snap.Items
		case ctx.Err() != nil:
		default:
			if perm, ok := permanent(err, server); ok {
				return perm
			}
			if err := emit(health.Event{Type: health.ErrorEv, GeneratedAt: time.Now(), Message: "poll failed: " + err.Error()}); err != nil {
				return stopIsOK(err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

func stopIsOK(err error) error {
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

func newStatusWaitCommand(g *globalOptions) *cobra.Command {
	o := &statusOptions{}
	var forState string
	cmd := &cobra.Command{
		Use:   "wait",
		Short: "Wait until the control plane is healthy (for CI gates)",
		Long: `Follows the status stream until no component is degraded or in error, then prints the status
and exits 0. When --timeout passes first it prints the components still unhealthy and exits 3.
Errors retrying cannot fix end it at once with their own exit code.

` + exitCodesHelp,
		Example: `  agentctl status wait --for healthy --timeout 2m
  agentctl status wait --for healthy --timeout 5m --gateway 127.0.0.1:50051 --gateway-token-file token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if forState != "healthy" {
				return withCode(ExitUsage, fmt.Errorf("--for %q: only healthy can be waited for", forState))
			}
			if o.timeout <= 0 {
				return withCode(ExitUsage, errors.New("--timeout is required, e.g. --timeout 2m"))
			}
			p, src, err := prepare(cmd, g, o)
			if err != nil {
				return err
			}
			defer src.close()
			st := map[string]health.Item{}
			var order []string
			var snap health.Event
			emit := func(ev health.Event) error {
				for _, it := range ev.Items {
					if _, ok := st[it.Component]; !ok {
						order = append(order, it.Component)
					}
					st[it.Component] = it
				}
				if ev.Type == health.Snapshot || ev.Type == health.Delta {
					snap = health.Event{Type: health.Snapshot, GeneratedAt: ev.GeneratedAt, Cursor: ev.Cursor}
					for _, c := range order {
						snap.Items = append(snap.Items, st[c])
					}
					if len(st) > 0 && len(unhealthy(snap.Items)) == 0 {
						return errStop
					}
				}
				return nil
			}
			o.watch, o.followOnly = true, false
			err = watchLoop(cmd.Context(), src, emit, o, notifier(cmd.ErrOrStderr(), o))
			if errors.Is(err, errRetriesExhausted) || (err == nil && (len(st) == 0 || len(unhealthy(snap.Items)) > 0)) {
				if len(snap.Items) > 0 {
					_ = p.print(snap)
				}
				if len(st) == 0 {
					return withCode(ExitUnhealthy, fmt.Errorf("no status within %s", o.timeout))
				}
				return withCode(ExitUnhealthy, fmt.Errorf("not healthy after %s: %s", o.timeout, strings.Join(unhealthy(snap.Items), ", ")))
			}
			if err != nil {
				return err
			}
			return p.print(snap)
		},
	}
	addStatusFlags(cmd, o, "table")
	cmd.Flags().StringVar(&forState, "for", "healthy", "the state to wait for: healthy (no component degraded or in error)")
	_ = cmd.RegisterFlagCompletionFunc("for", fixedCompletion("healthy"))
	return cmd
}
