package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// reapOrphans kills etcd and kube-apiserver processes that a crashed test binary left behind:
// envtest processes started from binDir whose parent is no longer a Go test binary (they were
// re-parented to init or a subreaper). A panicking test skips TestMain's cleanup; without this
// every crash would leak a control plane.
func reapOrphans(binDir string) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv0 := string(bytes.SplitN(cmdline, []byte{0}, 2)[0])
		if filepath.Dir(argv0) != binDir || !bytes.Contains(cmdline, []byte("k8s_test_framework")) {
			continue
		}
		if !isTestBinary(parentPID(pid)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func parentPID(pid int) int {
	_, ppid, ok := procStat(pid)
	if !ok {
		return -1
	}
	return ppid
}

// ProcessRunning reports whether pid is alive; a zombie (exited, waiting for its parent to reap
// it) counts as gone.
func ProcessRunning(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != "Z"
}

// procStat reads a process's state and parent from /proc/<pid>/stat.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, false
	}
	// The command name in field 2 may hold spaces; the fields after its closing parenthesis do not.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return "", 0, false
	}
	ppid, _ = strconv.Atoi(fields[1])
	return fields[0], ppid, true
}

func isTestBinary(pid int) bool {
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	return strings.HasSuffix(string(bytes.SplitN(cmdline, []byte{0}, 2)[0]), ".test")
}
