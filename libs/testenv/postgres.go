package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Postgres is a PostgreSQL server from Debian's postgresql package on a free loopback port, its
// data in a temporary directory. PostgreSQL refuses to run as root: run as root, the server and
// initdb run as the package's postgres user, on a directory that user owns. Stop and Start keep
// the port and the data, so tests can take the database away and bring it back under a running
// client.
type Postgres struct {
	// URL connects as User with Password to the database "postgres" (sslmode=disable).
	URL      string
	User     string
	Password string
	Addr     string
	port     int
	dir      string
	bin      string
	cred     *syscall.Credential
	cmd      *exec.Cmd
	// starts counts the times the log said the server was ready (the log is appended to).
	starts int
	// tls are the server's settings for TLS (ServeTLS), none for plaintext only.
	tls []string
}

// PostgresBin is the folder of PostgreSQL's server programs (and psql beside them): that of
// postgres on PATH, followed through symbolic links (a link in /usr/local/bin to Debian's), or the
// newest of Debian's /usr/lib/postgresql/<version>/bin.
func PostgresBin() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return filepath.Dir(p), nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(found) == 0 {
		return "", fmt.Errorf("PostgreSQL's server (postgres) is not installed: run `make deps` (apt-get install postgresql)")
	}
	sort.Slice(found, func(i, j int) bool { return pgMajor(found[i]) < pgMajor(found[j]) })
	return filepath.Dir(found[len(found)-1]), nil
}

// pgMajor is the major version in a Debian path /usr/lib/postgresql/<major>/bin/postgres.
func pgMajor(bin string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bin))))
	return n
}

// StartPostgres initializes a database directory and starts PostgreSQL on a free port, with
// password (SCRAM) authentication over TCP. fsync is off: a stopped server's writes stay in the
// page cache, which outlives the process (a machine crash is not what tests simulate); commits
// are still written to the WAL before they return, so Stop loses no committed row.
func StartPostgres() (*Postgres, error) {
	bin, err := PostgresBin()
	if err != nil {
		return nil, err
	}
	p := &Postgres{User: "agentplane", Password: "test-" + strconv.FormatInt(time.Now().UnixNano(), 36), bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user to run it as (Debian's postgresql package makes one): %w", err)
		}
		uid, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("the postgres user's uid %q: %w", u.Uid, err)
		}
		gid, err := strconv.ParseUint(u.Gid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("the postgres user's gid %q: %w", u.Gid, err)
		}
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if p.dir, err = os.MkdirTemp("", "agentplane-postgres-"); err != nil {
		return nil, err
	}
	if p.cred != nil {
		if err := os.Chown(p.dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			_ = p.Close()
			return nil, err
		}
	}
	pwfile := filepath.Join(p.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(p.Password+"\n"), 0o600); err != nil {
		_ = p.Close()
		return nil, err
	}
	if p.cred != nil {
		_ = os.Chown(pwfile, int(p.cred.Uid), int(p.cred.Gid))
	}
	initdb := p.command(filepath.Join(bin, "initdb"), "-D", p.data(), "-U", p.User, "--pwfile", pwfile,
		"--auth-host=scram-sha-256", "--auth-local=trust", "--encoding=UTF8", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("initdb: %w\n%s", err, tail(string(out), 2000))
	}
	_ = os.Remove(pwfile)
	// A port found free can be taken before the server binds it: try other ports, twice at most.
	var last error
	for range 3 {
		if p.port, err = FreePort(); err != nil {
			_ = p.Close()
			return nil, err
		}
		p.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
		u := url.URL{Scheme: "postgres", User: url.UserPassword(p.User, p.Password), Host: p.Addr, Path: "/postgres", RawQuery: "sslmode=disable"}
		p.URL = u.String()
		if last = p.Start(); last == nil {
			return p, nil
		}
	}
	_ = p.Close()
	return nil, last
}

func (p *Postgres) data() string { return filepath.Join(p.dir, "data") }

func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = p.dir
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

// Start (re)starts the server on its port and waits until it accepts connections.
func (p *Postgres) Start() error {
	if p.cmd != nil {
		return nil
	}
	logPath := filepath.Join(p.dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := p.command(filepath.Join(p.bin, "postgres"), "-D", p.data(), "-p", strconv.Itoa(p.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+p.dir,
		"-c", "fsync=off")
	cmd.Args = append(cmd.Args, p.tls...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	p.cmd = cmd
	// Ready when the log says so (after any crash recovery) and the port accepts connections.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		log, _ := os.ReadFile(logPath)
		if bytes.Count(log, []byte("ready to accept connections")) > p.starts {
			if c, err := net.DialTimeout("tcp", p.Addr, 200*time.Millisecond); err == nil {
				_ = c.Close()
				p.starts++
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = p.Stop()
	log, _ := os.ReadFile(logPath)
	return fmt.Errorf("postgres on %s did not accept connections within 30s; its log:\n%s", p.Addr, tail(string(log), 2000))
}

// Stop shuts the server down at once (SIGQUIT, PostgreSQL's immediate shutdown: no checkpoint,
// as after a crash): clients see their connections fail. Its data stays for Start.
func (p *Postgres) Stop() error {
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
	// Start must find the port free.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", p.Addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		_ = c.Close()
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// ServeTLS restarts the server with TLS on, presenting the certificate and key in certFile and
// keyFile (PEM; copied into the server's directory, readable by its user only). Plaintext
// connections are still accepted: what a client asks for (sslmode) decides.
func (p *Postgres) ServeTLS(certFile, keyFile string) error {
	for _, f := range []struct{ from, to string }{{certFile, "server.crt"}, {keyFile, "server.key"}} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			return err
		}
		to := filepath.Join(p.dir, f.to)
		if err := os.WriteFile(to, b, 0o600); err != nil {
			return err
		}
		if p.cred != nil {
			if err := os.Chown(to, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
				return err
			}
		}
	}
	p.tls = []string{"-c", "ssl=on", "-c", "ssl_cert_file=" + filepath.Join(p.dir, "server.crt"), "-c", "ssl_key_file=" + filepath.Join(p.dir, "server.key")}
	if err := p.Stop(); err != nil {
		return err
	}
	return p.Start()
}

// Close stops the server and removes its directory.
func (p *Postgres) Close() error {
	err := p.Stop()
	_ = os.RemoveAll(p.dir)
	return err
}

// Query runs one SQL statement on the database "postgres" with psql and returns its rows, one
// per line, columns separated by |: for tests of modules that do not import a PostgreSQL driver.
func (p *Postgres) Query(ctx context.Context, statement string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-U", p.User, "-d", "postgres", "-c", statement)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+p.Password, "PGCONNECT_TIMEOUT=10")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("psql %q: %w: %s", statement, err, tail(string(ee.Stderr), 2000))
		}
		return "", fmt.Errorf("psql %q: %w", statement, err)
	}
	return strings.TrimRight(string(out), "\n"), nil
}
