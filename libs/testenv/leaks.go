package testenv

import (
	"fmt"
	"os"

	"go.uber.org/goleak"
)

// leakIgnores are goroutines that libraries start once per process and never stop, by design:
// they are not a test's doing.
var leakIgnores = []goleak.Option{
	// klog's flush daemon, started by the first import of klog (client-go logs through it).
	goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
}

// NoLeaks is for a TestMain that starts shared parts (an API server, a gRPC server, informers):
// call it with m.Run's exit code after every shared part has been stopped, as in
//
//	os.Exit(testenv.NoLeaks(func() int { ...start...; defer ...stop...; return m.Run() }()))
//
// It returns code unchanged, or 1 when the tests passed but left goroutines running (printing
// them), as goleak.VerifyTestMain does for packages without shared parts.
func NoLeaks(code int) int {
	if code != 0 {
		return code
	}
	if err := goleak.Find(leakIgnores...); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: the package's tests left goroutines running after everything was stopped: %v\n", err)
		return 1
	}
	return 0
}

// VerifyNoLeaks is goleak.VerifyTestMain with the ignores above, for the unit-test TestMain of a
// package whose integration TestMain uses NoLeaks.
func VerifyNoLeaks(m interface{ Run() int }) {
	goleak.VerifyTestMain(m, leakIgnores...)
}
