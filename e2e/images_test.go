//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/testcontainers/testcontainers-go"
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
