package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Redis is a redis-server on a free loopback port, with no persistence. Stop and Start keep the
// port, so tests can take Redis away and bring it back under a running client.
type Redis struct {
	Addr string
	port int
	// busPort is a cluster node's bus port (chosen free, rather than Redis's port + 10000, which
	// may be taken or past 65535).
	busPort int
	dir     string
	cmd     *exec.Cmd
	// args returns the command line after redis-server (nil: a plain server on port).
	args func(r *Redis) []string
	// listening: only wait for the port to accept connections (a server that wants TLS or a
	// password does not answer a plain PING).
	listening bool
}

// StartRedis starts redis-server from PATH.
func StartRedis() (*Redis, error) { return startRedis(nil) }

func startRedis(args func(r *Redis) []string) (*Redis, error) { return startRedisWith(false, args) }

func startRedisWith(listening bool, args func(r *Redis) []string) (*Redis, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH: run `make deps` (apt-get install redis-server)")
	}
	// A port found free can be taken by another process before redis-server binds it (the
	// machine runs API servers and clients beside the tests): a server that does not come up is
	// started again on other ports, twice at most.
	var last error
	for range 3 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		bus, err := FreePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "agentplane-redis-")
		if err != nil {
			return nil, err
		}
		r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, busPort: bus, dir: dir, args: args, listening: listening}
		if last = r.Start(); last == nil {
			return r, nil
		}
		_ = os.RemoveAll(dir)
	}
	return nil, last
}

// PID is the running server's process id (0 when it is stopped).
func (r *Redis) PID() int {
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// Start (re)starts the server on its port and waits until it answers PING.
func (r *Redis) Start() error {
	if r.cmd != nil {
		return nil
	}
	args := []string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--protected-mode", "yes"}
	if r.args != nil {
		args = r.args(r)
	}
	cmd := exec.Command("redis-server", args...)
	// Its log, for the error below when it does not come up.
	logFile, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if r.listening {
			if c, err := net.DialTimeout("tcp", r.Addr, 200*time.Millisecond); err == nil {
				_ = c.Close()
				return nil
			}
		} else if ping(r.Addr) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = r.Stop()
	log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	return fmt.Errorf("redis-server on %s did not answer PING within 10s; its log:\n%s", r.Addr, tail(string(log), 2000))
}

// Stop kills the server; its data is gone.
func (r *Redis) Stop() error {
	if r.cmd == nil {
		return nil
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
	return nil
}

// Close stops the server and removes its directory.
func (r *Redis) Close() error {
	err := r.Stop()
	_ = os.RemoveAll(r.dir)
	return err
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
