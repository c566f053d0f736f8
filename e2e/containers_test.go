//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agentplane/agentplane/libs/archive"
	"github.com/agentplane/agentplane/libs/testenv"
)

// TestServiceImages runs every service as the container image its chart deploys, against a real
// kube-apiserver: it must serve gRPC health and /readyz, run as a non-root user, and exit 0 on
// SIGTERM. Containers use the host's network so they reach the loopback API server.
func TestServiceImages(t *testing.T) {
	needDocker(t)
	kube, err := testenv.StartKube()
	if err != nil {
		t.Fatal(err)
	}
	defer kube.Stop()
	for _, svc := range services {
		t.Run(svc, func(t *testing.T) {
			ctx := context.Background()
			grpcPort, err1 := testenv.FreePort()
			metricsPort, err2 := testenv.FreePort()
			httpPort, err3 := testenv.FreePort()
			if err1 != nil || err2 != nil || err3 != nil {
				t.Fatal(err1, err2, err3)
			}
			c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
				ContainerRequest: testcontainers.ContainerRequest{
					FromDockerfile: serviceImage(t, svc),
					Env: map[string]string{
						"JANGAR_GRPC_HOST": "127.0.0.1", "JANGAR_GRPC_PORT": strconv.Itoa(grpcPort),
						"JANGAR_METRICS_ADDR":     "127.0.0.1:" + strconv.Itoa(metricsPort),
						"JANGAR_SHUTDOWN_TIMEOUT": "10s", "KUBECONFIG": "/etc/agentplane/kubeconfig",
						"JANGAR_HTTP_ADDR": "127.0.0.1:" + strconv.Itoa(httpPort),
					},
					Files:              []testcontainers.ContainerFile{{HostFilePath: kube.Kubeconfig, ContainerFilePath: "/etc/agentplane/kubeconfig", FileMode: 0o444}},
					HostConfigModifier: func(hc *container.HostConfig) { hc.NetworkMode = "host" },
				},
				Started: true,
			})
			testcontainers.CleanupContainer(t, c)
			if err != nil {
				t.Fatalf("start %s: %v", svc, err)
			}
			defer func() {
				if t.Failed() {
					if logs, err := c.Logs(ctx); err == nil {
						b, _ := io.ReadAll(logs)
						t.Logf("%s logs:\n%s", svc, b)
					}
				}
			}()
			eventually(t, 60*time.Second, svc+" /readyz", func() error {
				resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", metricsPort))
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return errorf("status %d", resp.StatusCode)
				}
				return nil
			})
			info, err := c.Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.Config.User != "65532:65532" {
				t.Errorf("image runs as %q, want the non-root 65532:65532", info.Config.User)
			}
			for k, want := range map[string]string{"org.opencontainers.image.revision": "e2e-revision", "org.opencontainers.image.version": "e2e",
				"org.opencontainers.image.source": "https://github.com/agentplane/agentplane"} {
				if got := info.Config.Labels[k]; got != want {
					t.Errorf("label %s = %q, want %q", k, got, want)
				}
			}
			// The CA bundle is there, so OTLP over https and rediss:// can verify their servers.
			if rc, err := c.CopyFileFromContainer(ctx, "/etc/ssl/certs/ca-certificates.crt"); err != nil {
				t.Errorf("no CA bundle in the image: %v", err)
			} else {
				b, _ := io.ReadAll(rc)
				rc.Close()
				if !strings.Contains(string(b), "BEGIN CERTIFICATE") {
					t.Errorf("the image's CA bundle holds no certificate")
				}
			}
			conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			hr, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			cancel()
			if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("grpc health: %v %v", hr, err)
			}

			timeout := 20 * time.Second
			if err := c.Stop(ctx, &timeout); err != nil {
				t.Fatalf("stop: %v", err)
			}
			info, err = c.Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.ExitCode != 0 {
				t.Errorf("exit code after SIGTERM = %d, want 0", info.State.ExitCode)
			}
			logs, err := c.Logs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(logs)
			if !strings.Contains(string(b), `"msg":"stopped"`) {
				t.Errorf("no clean-stop log line:\n%s", b)
			}
		})
	}
}

// TestRedisImage checks the Redis image the e2e suites assemble from the machine's redis-server.
func TestRedisImage(t *testing.T) {
	needDocker(t)
	ctx := context.Background()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			FromDockerfile: redisImage(t),
			ExposedPorts:   []string{"6379/tcp"},
			WaitingFor:     wait.ForLog("Ready to accept connections").WithStartupTimeout(30 * time.Second),
		},
		Started: true,
	})
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("start redis: %v", err)
	}
	endpoint, err := c.PortEndpoint(ctx, "6379/tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := redisPing(ctx, endpoint); err != nil {
		t.Fatalf("PING %s: %v", endpoint, err)
	}
}

// TestPostgresImageHoldsTheArchive (#37): the PostgreSQL image the container suites assemble
// from the machine's Debian binaries starts as a non-root user and serves the run archive: the
// writer migrates it, a reader reads what was written.
func TestPostgresImageHoldsTheArchive(t *testing.T) {
	needDocker(t)
	ctx := context.Background()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			FromDockerfile: postgresImage(t),
			ExposedPorts:   []string{"5432/tcp"},
			WaitingFor:     wait.ForLog("database system is ready to accept connections").WithStartupTimeout(60 * time.Second),
		},
		Started: true,
	})
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	endpoint, err := c.PortEndpoint(ctx, "5432/tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := archive.Config{URL: "postgres://agentplane@" + endpoint + "/postgres?sslmode=disable"}
	w, err := archive.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("the writer on the image's database: %v", err)
	}
	defer w.Close()
	at := time.Now().UTC()
	if err := w.Put(ctx, archive.Record{Summary: archive.Summary{UID: "u-image", Kind: "AgentRun", Namespace: "agents", Name: "hello", Phase: "Succeeded",
		CreatedAt: at, FinishedAt: at}}); err != nil {
		t.Fatal(err)
	}
	r, err := archive.OpenReader(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if p, err := r.List(ctx, archive.Query{Namespace: "agents"}); err != nil || len(p.Runs) != 1 || p.Runs[0].Name != "hello" {
		t.Fatalf("the reader: %+v %v", p, err)
	}
	inspect, err := c.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u := inspect.Config.User; u != "65532:65532" {
		t.Errorf("the image runs as %q, want 65532:65532", u)
	}
}
