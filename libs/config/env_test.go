package config

import (
	"strings"
	"testing"
	"time"
)

func TestEnvParsesAndCollectsErrors(t *testing.T) {
	env := FromMap(map[string]string{
		"A_INT": "42", "A_BOOL": "off", "A_DUR": "1m30s", "A_MS": "250", "A_LIST": " x, ,y ",
		"BAD_INT": "forty", "BAD_BOOL": "maybe", "BAD_DUR": "-1s",
	})
	if got := env.Int("A_INT", 0); got != 42 {
		t.Errorf("Int = %d, want 42", got)
	}
	if got := env.Bool("A_BOOL", true); got {
		t.Errorf("Bool(off) = true")
	}
	if got := env.Duration("A_DUR", 0); got != 90*time.Second {
		t.Errorf("Duration = %s", got)
	}
	if got := env.Millis("A_MS", 0); got != 250*time.Millisecond {
		t.Errorf("Millis = %s", got)
	}
	if got := env.List("A_LIST", nil); strings.Join(got, "|") != "x|y" {
		t.Errorf("List = %q", got)
	}
	if got := env.String("UNSET", "def"); got != "def" {
		t.Errorf("String default = %q", got)
	}
	if err := env.Err(); err != nil {
		t.Fatalf("unexpected error before bad reads: %v", err)
	}
	env.Int("BAD_INT", 1)
	env.Bool("BAD_BOOL", false)
	env.Duration("BAD_DUR", time.Second)
	err := env.Err()
	if err == nil {
		t.Fatal("want an error for bad values")
	}
	for _, name := range []string{"BAD_INT", "BAD_BOOL", "BAD_DUR"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
}

func TestLoadServiceDefaultsAndValidation(t *testing.T) {
	s, err := LoadService(FromMap(nil), "status-writer", 50052, 9102)
	if err != nil {
		t.Fatal(err)
	}
	if s.GRPCAddr != "127.0.0.1:50052" || s.MetricsAddr != "127.0.0.1:9102" {
		t.Errorf("addresses = %s %s", s.GRPCAddr, s.MetricsAddr)
	}
	_, err = LoadService(FromMap(map[string]string{"JANGAR_LOG_LEVEL": "loud", "JANGAR_GRPC_PORT": "70000"}), "x", 1, 2)
	if err == nil || !strings.Contains(err.Error(), "JANGAR_LOG_LEVEL") || !strings.Contains(err.Error(), "JANGAR_GRPC_PORT") {
		t.Fatalf("want errors naming both variables, got %v", err)
	}
}
