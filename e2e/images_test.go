//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/testcontainers/testcontainers-go"

	"github.com/agentplane/agentplane/libs/testenv"
)

// serviceImage returns the build of one service's image as `make images` builds it:
// build/Dockerfile over a context that holds the static binary from bin/ (`make build`) and the
// machine's CA bundle, with the version and revision labels.
func serviceImage(t *testing.T, svc string) testcontainers.FromDockerfile {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	copyFile(t, binPath(t, svc), filepath.Join(dir, svc), 0o755)
	copyFile(t, "/etc/ssl/certs/ca-certificates.crt", filepath.Join(dir, "ca-certificates.crt"), 0o644)
	copyFile(t, filepath.Join(root, "build", "Dockerfile"), filepath.Join(dir, "Dockerfile"), 0o644)
	arg, version, revision := svc, "e2e", "e2e-revision"
	return testcontainers.FromDockerfile{
		Context: dir, Dockerfile: "Dockerfile", BuildArgs: map[string]*string{"SERVICE": &arg, "VERSION": &version, "REVISION": &revision},
		Repo: "agentplane/" + svc, Tag: "e2e", KeepImage: true,
	}
}

// redisImage assembles a Redis image from this machine's own redis-server and the shared
// libraries ldd lists, since no image can be pulled here.
func redisImage(t *testing.T) testcontainers.FromDockerfile {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found: run `make deps`")
	}
	server, _ = filepath.EvalSymlinks(server)
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	copyFile(t, server, filepath.Join(rootfs, "usr/bin/redis-server"), 0o755)
	out, err := exec.Command("ldd", server).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", server, err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(f, "/") {
				real, err := filepath.EvalSymlinks(f)
				if err != nil {
					t.Fatal(err)
				}
				copyFile(t, real, filepath.Join(rootfs, f), 0o755)
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "data"), 0o777); err != nil {
		t.Fatal(err)
	}
	dockerfile := `FROM scratch
COPY rootfs/ /
USER 65532:65532
WORKDIR /data
ENTRYPOINT ["/usr/bin/redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
`
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	return testcontainers.FromDockerfile{Context: dir, Dockerfile: "Dockerfile", Repo: "agentplane/redis", Tag: "e2e", KeepImage: true}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// redisPing sends PING over a raw connection and expects PONG.
func redisPing(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errorf("reply %q", line)
	}
	return nil
}

// postgresImage assembles a PostgreSQL image from this machine's Debian binaries (the server,
// its modules, the share files and the time zones, the shared libraries ldd lists), as
// redisImage does, with a data directory initdb made here: user agentplane, trust over TCP (a
// test network's database), no Unix socket, no JIT. It listens on 5432 as uid 65532.
func postgresImage(t *testing.T) testcontainers.FromDockerfile {
	t.Helper()
	bin, err := testenv.PostgresBin()
	if err != nil {
		t.Fatal(err)
	}
	pgRoot := filepath.Dir(bin)                                            // /usr/lib/postgresql/15
	share := filepath.Join("/usr/share/postgresql", filepath.Base(pgRoot)) // /usr/share/postgresql/15
	dir, err := os.MkdirTemp("", "agentplane-pg-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { //nolint:gosec // G302: initdb, as the postgres user, goes through it
		t.Fatal(err)
	}
	rootfs := filepath.Join(dir, "rootfs")
	libs := map[string]bool{}
	addLibs := func(file string) {
		out, err := exec.Command("ldd", file).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", file, err)
		}
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") && !libs[f] {
				libs[f] = true
				real, err := filepath.EvalSymlinks(f)
				if err != nil {
					t.Fatal(err)
				}
				copyFile(t, real, filepath.Join(rootfs, f), 0o755)
			}
		}
	}
	server := filepath.Join(pgRoot, "bin", "postgres")
	copyFile(t, server, filepath.Join(rootfs, server), 0o755)
	addLibs(server)
	mods, _ := filepath.Glob(filepath.Join(pgRoot, "lib", "*.so"))
	for _, m := range mods {
		if strings.HasPrefix(filepath.Base(m), "llvmjit") { // LLVM alone is over 100 MB; jit is off
			continue
		}
		copyFile(t, m, filepath.Join(rootfs, m), 0o644)
		addLibs(m)
	}
	for _, tree := range []string{share, "/usr/share/zoneinfo"} {
		into := filepath.Join(rootfs, filepath.Dir(tree))
		if err := os.MkdirAll(into, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-R", "-L", tree, into).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v\n%s", tree, err, out)
		}
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "passwd"), []byte("postgres:x:65532:65532:PostgreSQL:/var/lib/postgresql:/nonexistent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The data directory, made by initdb as Debian's postgres user (PostgreSQL refuses root);
	// the image's COPY gives it to 65532.
	data := filepath.Join(dir, "pgdata", "data") // copied as a directory, so its 0700 stays
	if err := os.MkdirAll(filepath.Dir(data), 0o755); err != nil {
		t.Fatal(err)
	}
	initdb := exec.Command(filepath.Join(pgRoot, "bin", "initdb"), "-D", data, "-U", "agentplane", "--auth-host=trust", "--auth-local=trust",
		"--encoding=UTF8", "--no-locale", "--no-sync") // the image has no locales: C
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("no postgres user to run initdb as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(filepath.Dir(data), uid, gid); err != nil {
			t.Fatal(err)
		}
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}} //nolint:gosec // G115: uids fit
	}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = hba.WriteString("host all all 0.0.0.0/0 trust\n")
	_ = hba.Close()
	dockerfile := `FROM scratch
COPY rootfs/ /
COPY --chown=65532:65532 pgdata/ /var/lib/postgresql/
USER 65532:65532
ENTRYPOINT ["` + server + `", "-D", "/var/lib/postgresql/data", "-c", "listen_addresses=*", "-c", "unix_socket_directories=", "-c", "jit=off", "-c", "fsync=off"]
`
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	return testcontainers.FromDockerfile{Context: dir, Dockerfile: "Dockerfile", Repo: "agentplane/postgres", Tag: "e2e", KeepImage: true}
}
