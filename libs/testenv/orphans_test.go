package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReapOrphansKillsOnlyOrphans runs a stand-in "etcd" (a shell under that name, carrying
// envtest's marker) twice from a bin dir: once as this test binary's child, which must survive,
// and once orphaned through a double fork, which must be killed.
func TestReapOrphansKillsOnlyOrphans(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	fake := filepath.Join(bin, "etcd")
	if err := os.Symlink(sh, fake); err != nil {
		t.Fatal(err)
	}
	child := exec.Command(fake, "-c", "sleep 30; true", "k8s_test_framework_child")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()

	out, err := exec.Command(sh, "-c", `"$0" -c "sleep 30; true" k8s_test_framework_orphan >/dev/null 2>&1 & echo $!`, fake).Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(orphan, syscall.SIGKILL)
	if isTestBinary(parentPID(orphan)) {
		t.Fatalf("orphan %d still has a test binary as parent", orphan)
	}

	reapOrphans(bin)
	Eventually(t, 30*time.Second, "the orphan killed", func() error {
		if ProcessRunning(orphan) {
			return fmt.Errorf("orphan %d still running", orphan)
		}
		return nil
	})
	if !ProcessRunning(child.Process.Pid) {
		t.Fatal("the live test's own child was killed")
	}
}
