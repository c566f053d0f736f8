//go:build e2e

package e2e

import (
	"slices"
	"testing"
)

// TestAVariableNoServiceHereReadsIsRefused (#34 item 3): a JANGAR_* variable given to a chart whose
// binary does not read it (env.vars, controllers.env.vars, extraEnv) is refused at render time,
// naming the charts that do read it; at the agentplane chart, a service's own block is refused the
// same way, and a global one that no installed service reads too. A global variable reaches only
// the services that read it. Names the code reads come from charts/agentplane-lib's _readers.tpl,
// generated from the code by make generate (make verify-gen, in CI, keeps it current).
func TestAVariableNoServiceHereReadsIsRefused(t *testing.T) {
	h := newHelmEnv(t)
	// event-emitter alone reads the events rate.
	const rate = "JANGAR_CONTROLLER_EVENTS_RATE_LIMIT_PER_MIN"
	for _, flags := range [][]string{{"--set", "env.vars." + rate + "=30"}, {"--set", "controllers.env.vars." + rate + "=30"},
		{"--set", "extraEnv[0].name=" + rate, "--set-string", "extraEnv[0].value=30"}} {
		wantRefused(t, h, "run-controller", "it is read by event-emitter", flags...)
	}
	wantRefused(t, h, "status-writer", "read by no agentplane service", "--set", "env.vars.JANGAR_NO_SUCH_SETTING=1")
	// Read: taken, and as given.
	if got, _ := envOf(t, h.template(t, "event-emitter", "--set", "env.vars."+rate+"=30"), rate); got != "30" {
		t.Errorf("event-emitter's own %s=%q, want 30", rate, got)
	}
	// Not agentplane's own (OTEL_*, the Go runtime's, proxies): passed on.
	if got, _ := envOf(t, h.template(t, "run-controller", "--set", "env.vars.GOMAXPROCS=2"), "GOMAXPROCS"); got != "2" {
		t.Errorf("GOMAXPROCS=%q, want 2", got)
	}

	redis := umbrellaRedis
	wantRefused(t, h, "agentplane", "it is read by event-emitter", append(slices.Clone(redis), "--set", "run-controller.env.vars."+rate+"=30")...)
	wantRefused(t, h, "agentplane", "read by no agentplane service", append(slices.Clone(redis), "--set", "global.env.vars.JANGAR_NO_SUCH_SETTING=1")...)
	// The heartbeat is watch-gateway's: not on the controller side, and left out with it.
	wantRefused(t, h, "agentplane", "read by no installed service it applies to", append(slices.Clone(redis), "--set", "global.controllers.env.vars.JANGAR_WATCH_HEARTBEAT=5s")...)
	wantRefused(t, h, "agentplane", "read by no installed service it applies to", append(slices.Clone(redis), "--set", "global.env.vars.JANGAR_WATCH_HEARTBEAT=5s", "--set", "watch-gateway.enabled=false")...)
	objs := umbrellaObjects(t, h, "agentplane", append(slices.Clone(redis), "--set", "global.env.vars."+rate+"=30",
		"--set", "global.extraEnv[0].name=OTEL_EXPORTER_OTLP_HEADERS", "--set", "global.extraEnv[0].valueFrom.secretKeyRef.name=otlp",
		"--set", "global.extraEnv[0].valueFrom.secretKeyRef.key=headers")...)
	for _, svc := range services {
		env := containerEnv(t, objs, "agentplane-"+svc)
		if _, ok := env[rate]; ok != (svc == "event-emitter") {
			t.Errorf("%s has %s: %v, want it only where it is read (event-emitter)", svc, rate, ok)
		}
		if env["OTEL_EXPORTER_OTLP_HEADERS"] != "<from>" {
			t.Errorf("%s: global.extraEnv's OTEL_EXPORTER_OTLP_HEADERS (valueFrom) = %q", svc, env["OTEL_EXPORTER_OTLP_HEADERS"])
		}
	}
}
