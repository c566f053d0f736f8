// Command agent is the example agent the examples run: a small program in a FROM-scratch image
// (agentplane/agent) that does what the local control plane's kwok Stages make a simulated pod
// do, in a real container on a real node. It prints what it was asked to do, works for a while
// (a line a second), and exits with the asked code; SIGTERM (a cancel, a deleted Job) stops it
// at once with exit code 143.
//
// What it is asked comes from the pod: run-controller copies the run's
// agentplane.dev/simulate-duration and agentplane.dev/simulate-exit-code annotations onto the
// Job's pod template and hands them to the container through the downward API as
// AGENTPLANE_SIMULATE_DURATION and AGENTPLANE_SIMULATE_EXIT_CODE. They mean what they mean to
// the kwok Stages (hack/local/kwok-stages/README.md): a Go duration ("30s", "2m"; anything else,
// or none, means a few seconds), and an exit code ("" and "0" succeed).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// defaultDuration is how long the agent works without simulate-duration: within kwok's 1 to 5 s.
const defaultDuration = 3 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	os.Exit(run(ctx, os.Stdout, env, time.Second))
}

// plan is what the environment asks of one run.
type plan struct {
	duration time.Duration
	exitCode int
	notes    []string // what was asked but could not be honoured
}

func readPlan(env map[string]string) plan {
	p := plan{duration: defaultDuration}
	if v := strings.TrimSpace(env["AGENTPLANE_SIMULATE_DURATION"]); v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			p.notes = append(p.notes, fmt.Sprintf("simulate-duration %q is not a Go duration (e.g. 30s, 2m): working %s instead", v, defaultDuration))
		case d <= 0:
			p.notes = append(p.notes, fmt.Sprintf("simulate-duration %q is not positive: working %s instead", v, defaultDuration))
		default:
			p.duration = d
		}
	}
	if v := strings.TrimSpace(env["AGENTPLANE_SIMULATE_EXIT_CODE"]); v != "" {
		c, err := strconv.Atoi(v)
		switch {
		case err != nil || c < 0 || c > 255:
			// kwok's pod-fail Stage fails a pod for any value but "" and "0"; so does the agent.
			p.exitCode = 1
			p.notes = append(p.notes, fmt.Sprintf("simulate-exit-code %q is not an exit code (0-255): exiting 1", v))
		default:
			p.exitCode = c
		}
	}
	return p
}

// run does one run and returns the process's exit code. tick is how often it reports progress.
func run(ctx context.Context, out io.Writer, env map[string]string, tick time.Duration) int {
	p := readPlan(env)
	who := env["AGENTRUN_NAMESPACE"] + "/" + env["AGENTRUN_NAME"]
	if s := env["AGENTRUN_STEP"]; s != "" {
		who += " step " + s + " attempt " + env["AGENTRUN_ATTEMPT"]
	}
	fmt.Fprintf(out, "agent %s (provider %s): run %s starting\n", env["AGENT_NAME"], env["AGENT_PROVIDER"], who)
	for _, k := range paramNames(env) {
		fmt.Fprintf(out, "parameter %s=%s\n", strings.TrimPrefix(k, "PARAM_"), env[k])
	}
	for _, n := range p.notes {
		fmt.Fprintln(out, n)
	}
	fmt.Fprintf(out, "working for %s, then exiting %d\n", p.duration, p.exitCode)
	start := time.Now()
	done := time.NewTimer(p.duration)
	defer done.Stop()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintf(out, "stopped by a signal after %s: exiting 143\n", time.Since(start).Round(time.Millisecond))
			return 143
		case <-t.C:
			fmt.Fprintf(out, "working: %s of %s\n", time.Since(start).Round(time.Second), p.duration)
		case <-done.C:
			fmt.Fprintf(out, "done after %s: exiting %d\n", time.Since(start).Round(time.Millisecond), p.exitCode)
			return p.exitCode
		}
	}
}

// paramNames lists the PARAM_* variables run-controller sets from the run's parameters, sorted.
func paramNames(env map[string]string) []string {
	var names []string
	for k := range env {
		if strings.HasPrefix(k, "PARAM_") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}
