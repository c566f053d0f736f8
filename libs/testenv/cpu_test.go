package testenv

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// affinity is taskset's list of the CPUs pid may run on.
func affinity(t *testing.T, pid string) string {
	t.Helper()
	out, err := exec.Command("taskset", "-c", "-p", pid).Output()
	if err != nil {
		t.Fatalf("taskset -p %s: %v", pid, err)
	}
	_, list, _ := strings.Cut(strings.TrimSpace(string(out)), ": ")
	return list
}

func TestPinApartPutsThisProcessOnTheFirstCPUAndTheOthersOnTheRest(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil || runtime.NumCPU() < 2 {
		t.Skip("needs taskset and two CPUs")
	}
	t.Setenv("AGENTPLANE_BENCH_NOPIN", "")
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	self, pid := affinity(t, strconv.Itoa(os.Getpid())), strconv.Itoa(other.Process.Pid)
	all := affinity(t, pid)

	cpus, restore := PinApart(t, other.Process.Pid)
	if cpus == "" {
		t.Fatal("PinApart pinned nothing on a machine with taskset and two CPUs")
	}
	if got := affinity(t, strconv.Itoa(os.Getpid())); got != "0" {
		t.Errorf("this process may run on %q, want 0", got)
	}
	if got := affinity(t, pid); got != cpus || strings.HasPrefix(got, "0") {
		t.Errorf("the other process may run on %q, want %q, without CPU 0", got, cpus)
	}
	restore()
	if got := affinity(t, strconv.Itoa(os.Getpid())); got != self {
		t.Errorf("after restore this process may run on %q, want %q", got, self)
	}
	if got := affinity(t, pid); got != all {
		t.Errorf("after restore the other process may run on %q, want %q", got, all)
	}
}

func TestPinApartPinsNothingWhenAskedNotTo(t *testing.T) {
	t.Setenv("AGENTPLANE_BENCH_NOPIN", "1")
	before := ""
	if _, err := exec.LookPath("taskset"); err == nil {
		before = affinity(t, strconv.Itoa(os.Getpid()))
	}
	cpus, restore := PinApart(t)
	defer restore()
	if cpus != "" {
		t.Fatalf("PinApart pinned (others on %q) with AGENTPLANE_BENCH_NOPIN set", cpus)
	}
	if before != "" {
		if got := affinity(t, strconv.Itoa(os.Getpid())); got != before {
			t.Errorf("this process may run on %q, want %q as before", got, before)
		}
	}
}
