package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// psql runs one statement against p with Debian's psql client and returns its unaligned output.
func psql(p *Postgres, sql string) (string, error) {
	out, err := exec.Command("psql", p.URL, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestPostgresKeepsItsDataAndPortAcrossStopAndStart(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatal("psql not found on PATH: run `make deps` (apt-get install postgresql)")
	}
	p, err := StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := psql(p, "CREATE TABLE runs (uid text PRIMARY KEY); INSERT INTO runs VALUES ('a')"); err != nil {
		t.Fatalf("write: %v", err)
	}
	// Password authentication over TCP: a wrong password is refused.
	bad := *p
	bad.URL = strings.Replace(p.URL, p.Password, "wrong", 1)
	if out, err := psql(&bad, "SELECT 1"); err == nil || !strings.Contains(out, "password authentication failed") {
		t.Fatalf("a wrong password was not refused: %v %s", err, out)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := psql(p, "SELECT 1"); err == nil {
		t.Fatal("the server still answers after Stop")
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	out, err := psql(p, "SELECT uid FROM runs")
	if err != nil || out != "a" {
		t.Fatalf("after Start: %q, %v; want the row written before Stop", out, err)
	}
}
