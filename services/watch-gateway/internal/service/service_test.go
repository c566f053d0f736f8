package service

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
