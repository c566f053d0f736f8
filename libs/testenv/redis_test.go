package testenv

import (
	"os/exec"
	"testing"
)

func TestRedisStopsAndStartsOnTheSamePort(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found on PATH: run `make deps`")
	}
	r, err := StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := ping(r.Addr); err != nil {
		t.Fatalf("ping after start: %v", err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := ping(r.Addr); err == nil {
		t.Fatal("redis still answers after Stop")
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if err := ping(r.Addr); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
}
