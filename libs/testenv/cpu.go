package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
)

// PinApart runs this process on the first CPU and the processes others on the rest (taskset(1),
// every thread), for a benchmark whose load generator or server should not compete with the code
// it measures, and whose round trips to that process should all cross CPUs alike rather than as
// the scheduler happens to place them. It returns the CPUs left to the others ("1-N", or "1"; "" when
// nothing was pinned: fewer than two CPUs, no taskset, or AGENTPLANE_BENCH_NOPIN set) and a
// function that gives this process and the others every CPU again.
func PinApart(tb testing.TB, others ...int) (otherCPUs string, restore func()) {
	tb.Helper()
	ncpu := runtime.NumCPU()
	if _, err := exec.LookPath("taskset"); err != nil || ncpu < 2 || os.Getenv("AGENTPLANE_BENCH_NOPIN") != "" {
		return "", func() {}
	}
	all, rest := fmt.Sprintf("0-%d", ncpu-1), fmt.Sprintf("1-%d", ncpu-1)
	if ncpu == 2 {
		rest = "1" // as taskset(1) lists it
	}
	pin := func(pid int, cpus string) error {
		out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("taskset %d to CPUs %s: %w: %s", pid, cpus, err, out)
		}
		return nil
	}
	undo := func() {
		_ = pin(os.Getpid(), all)
		for _, pid := range others {
			_ = pin(pid, all)
		}
	}
	if err := pin(os.Getpid(), "0"); err != nil {
		tb.Logf("not pinning: %v", err)
		return "", func() {}
	}
	for _, pid := range others {
		if err := pin(pid, rest); err != nil {
			tb.Logf("not pinning: %v", err)
			undo()
			return "", func() {}
		}
	}
	return rest, undo
}
