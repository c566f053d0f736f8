package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildService builds services/<name>/cmd/<name> from the checkout into dir and returns the
// binary's path. The Go build cache makes a second build of the same code take a moment. Under
// the race detector (go test -race) the service is built with it too.
func BuildService(dir, name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out}
	if raceBuild {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/"+name)...)
	cmd.Dir = filepath.Join(root, "services", name)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", name, err, b)
	}
	return out, nil
}

// Service is an agentplane service binary running as a child process on free loopback ports.
type Service struct {
	Name        string
	GRPCAddr    string
	MetricsAddr string
	// LogPath is the file that holds its stdout and stderr.
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// StartService runs bin with env (added to this process's environment, after the ports) and
// waits until /readyz answers 200. The service's log goes to a file in logDir.
func StartService(bin, logDir string, env ...string) (*Service, error) {
	gp, err := FreePort()
	if err != nil {
		return nil, err
	}
	mp, err := FreePort()
	if err != nil {
		return nil, err
	}
	name := filepath.Base(bin)
	s := &Service{Name: name, GRPCAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(gp)),
		MetricsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(mp)), done: make(chan struct{})}
	f, err := os.CreateTemp(logDir, name+"-*.log")
	if err != nil {
		return nil, err
	}
	s.LogPath = f.Name()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "JANGAR_GRPC_HOST=127.0.0.1", "JANGAR_GRPC_PORT="+strconv.Itoa(gp),
		"JANGAR_METRICS_ADDR="+s.MetricsAddr, "JANGAR_LOG_FORMAT=text")
	cmd.Env = append(cmd.Env, env...)
	if raceBuild {
		// A data race stops the service at once with exit code 66; see below.
		cmd.Env = append(cmd.Env, "GORACE=halt_on_error=1 exitcode=66")
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s.cmd = cmd
	go func() {
		err := cmd.Wait()
		f.Close()
		var exit *exec.ExitError
		if raceBuild && errors.As(err, &exit) && exit.ExitCode() == 66 {
			// A race in a service the tests started fails the whole test binary, with the report.
			b, _ := os.ReadFile(s.LogPath)
			fmt.Fprintf(os.Stderr, "DATA RACE in %s (its log, %s):\n%s\n", name, s.LogPath, b)
			os.Exit(66)
		}
		close(s.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.MetricsAddr+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			b, _ := os.ReadFile(s.LogPath)
			return nil, fmt.Errorf("%s exited before it was ready:\n%s", name, b)
		case <-ctx.Done():
			s.Kill()
			b, _ := os.ReadFile(s.LogPath)
			return nil, fmt.Errorf("%s not ready within 60s:\n%s", name, b)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM and waits for the process to exit (SIGKILL after 20 s).
func (s *Service) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.Kill()
	}
}

// Kill ends the process at once, as a crash or a lost node would: no lease is released, no
// request drained.
func (s *Service) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Exited reports whether the process has ended.
func (s *Service) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Log returns what the service has written so far.
func (s *Service) Log() string {
	b, _ := os.ReadFile(s.LogPath)
	return string(b)
}

// Eventually calls cond every 50 ms until it returns nil, and fails the test with what and
// cond's last error when timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %v", what, timeout, err)
}

// Parallel runs fn for 0..n-1, width at a time, and fails tb with the errors once all are done.
func Parallel(tb testing.TB, n, width int, fn func(i int) error) {
	tb.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, width)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}
