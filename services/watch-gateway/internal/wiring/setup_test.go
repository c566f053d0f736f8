package wiring

import (
	"strings"
	"testing"

	"github.com/agentplane/agentplane/libs/config"
)

func TestWithoutAuthOnlyLoopback(t *testing.T) {
	for _, vars := range []map[string]string{
		{"JANGAR_HTTP_ADDR": "0.0.0.0:8080"},
		{"JANGAR_HTTP_ADDR": ":8080"},
		{"JANGAR_GRPC_HOST": "0.0.0.0"},
	} {
		svc, err := config.LoadService(config.FromMap(vars), "watch-gateway", 50051, 9101)
		if err != nil {
			t.Fatal(err)
		}
		_, err = LoadConfig(config.FromMap(vars), svc)
		if err == nil || !strings.Contains(err.Error(), "loopback") || !strings.Contains(err.Error(), "JANGAR_WATCH_AUTH_MODE=token or mtls") {
			t.Fatalf("%v: %v, want a refusal naming loopback and the auth modes", vars, err)
		}
		vars["JANGAR_WATCH_AUTH_MODE"] = "token"
		if _, err := LoadConfig(config.FromMap(vars), svc); err != nil {
			t.Fatalf("%v: %v", vars, err)
		}
	}
	// The defaults are loopback and start.
	svc, _ := config.LoadService(config.FromMap(nil), "watch-gateway", 50051, 9101)
	if _, err := LoadConfig(config.FromMap(nil), svc); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(config.FromMap(map[string]string{"JANGAR_WATCH_AUTH_MODE": "open"}), svc); err == nil || !strings.Contains(err.Error(), "none, token or mtls") {
		t.Fatalf("unknown mode: %v", err)
	}
}

// TestHeartbeatBounds: the default heartbeat is refused at start outside 1s–5m (0s would panic
// the first watch's ticker), the same bounds as a client's ?heartbeat= and the chart's schema.
func TestHeartbeatBounds(t *testing.T) {
	svc, _ := config.LoadService(config.FromMap(nil), "watch-gateway", 50051, 9101)
	for hb, ok := range map[string]bool{"0s": false, "999ms": false, "1s": true, "5m": true, "301s": false} {
		_, err := LoadConfig(config.FromMap(map[string]string{"JANGAR_WATCH_HEARTBEAT": hb}), svc)
		if (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "JANGAR_WATCH_HEARTBEAT")) {
			t.Errorf("heartbeat %s: %v, want accepted=%v", hb, err, ok)
		}
	}
}

// TestTokenModeNeedsAnAudienceOfItsOwn (#31 item 4): by default tokens must be issued for
// agentplane-gateway; an empty audience list, which would accept the API server's tokens, is
// refused at start.
func TestTokenModeNeedsAnAudienceOfItsOwn(t *testing.T) {
	svc := config.Service{Name: "watch-gateway"}
	c, err := LoadConfig(config.FromMap(map[string]string{"JANGAR_WATCH_AUTH_MODE": "token"}), svc)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.AuthAudiences) != 1 || c.AuthAudiences[0] != "agentplane-gateway" {
		t.Errorf("default audiences %q, want [agentplane-gateway]", c.AuthAudiences)
	}
	_, err = LoadConfig(config.FromMap(map[string]string{"JANGAR_WATCH_AUTH_MODE": "token", "JANGAR_WATCH_AUTH_AUDIENCES": " , "}), svc)
	if err == nil || !strings.Contains(err.Error(), "JANGAR_WATCH_AUTH_AUDIENCES is empty") {
		t.Errorf("empty audiences in token mode: %v, want a refusal", err)
	}
	if _, err := LoadConfig(config.FromMap(map[string]string{"JANGAR_WATCH_AUTH_MODE": "mtls", "JANGAR_WATCH_AUTH_AUDIENCES": ""}), svc); err != nil && strings.Contains(err.Error(), "AUDIENCES") {
		t.Errorf("mtls mode needs no audience: %v", err)
	}
}
