package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestRunExitsWithTheAskedCodeAfterTheAskedTime(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		wantCode int
		minTime  time.Duration
		wantLine string
	}{
		{"defaults", map[string]string{}, 0, defaultDuration, "working for 3s, then exiting 0"},
		{"duration and code", map[string]string{"AGENTPLANE_SIMULATE_DURATION": "200ms", "AGENTPLANE_SIMULATE_EXIT_CODE": "3"}, 3, 200 * time.Millisecond, "done after"},
		{"zero succeeds", map[string]string{"AGENTPLANE_SIMULATE_DURATION": "50ms", "AGENTPLANE_SIMULATE_EXIT_CODE": "0"}, 0, 50 * time.Millisecond, "exiting 0"},
		{"bad duration means the default", map[string]string{"AGENTPLANE_SIMULATE_DURATION": "soon"}, 0, defaultDuration, `simulate-duration "soon" is not a Go duration`},
		{"bad code fails with 1", map[string]string{"AGENTPLANE_SIMULATE_DURATION": "10ms", "AGENTPLANE_SIMULATE_EXIT_CODE": "boom"}, 1, 10 * time.Millisecond, `simulate-exit-code "boom" is not an exit code`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			start := time.Now()
			code := run(context.Background(), &out, tc.env, 20*time.Millisecond)
			if took := time.Since(start); took < tc.minTime {
				t.Errorf("returned after %s, before the %s asked", took, tc.minTime)
			}
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d\n%s", code, tc.wantCode, out.String())
			}
			if !strings.Contains(out.String(), tc.wantLine) {
				t.Errorf("output lacks %q:\n%s", tc.wantLine, out.String())
			}
		})
	}
}

func TestRunStopsAtOnceOnASignal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	var out bytes.Buffer
	start := time.Now()
	code := run(ctx, &out, map[string]string{"AGENTPLANE_SIMULATE_DURATION": "1h"}, 20*time.Millisecond)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s to stop", took)
	}
	if code != 143 || !strings.Contains(out.String(), "stopped by a signal") {
		t.Errorf("exit code %d, output:\n%s", code, out.String())
	}
}

func TestRunPrintsWhoItIsAndItsParameters(t *testing.T) {
	var out bytes.Buffer
	run(context.Background(), &out, map[string]string{
		"AGENT_NAME": "codex", "AGENT_PROVIDER": "codex-runner", "AGENTRUN_NAMESPACE": "agents", "AGENTRUN_NAME": "hello",
		"AGENTRUN_STEP": "plan", "AGENTRUN_ATTEMPT": "2", "PARAM_ISSUE": "42", "PARAM_MODE": "write",
		"AGENTPLANE_SIMULATE_DURATION": "10ms",
	}, time.Hour)
	for _, want := range []string{"agent codex (provider codex-runner): run agents/hello step plan attempt 2 starting", "parameter ISSUE=42\nparameter MODE=write\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
