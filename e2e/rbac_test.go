//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentplane/agentplane/libs/statusclient"
	"github.com/agentplane/agentplane/libs/testenv"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
)

// TestStatusWriterChartRBACIsEnoughAndNoMore installs the status-writer chart's RBAC on a real
// API server and runs the status-writer binary as its ServiceAccount (impersonated): it can write
// the status of a run in the namespace it is given, and nothing else: not a run elsewhere, not a
// run's spec.
func TestStatusWriterChartRBACIsEnoughAndNoMore(t *testing.T) {
	root := repoRoot(t)
	helm := mustExist(t, filepath.Join(root, "bin", "tools", "helm", "v3.22.0", "helm"), "tools")
	kube, err := testenv.StartKube()
	if err != nil {
		t.Fatal(err)
	}
	defer kube.Stop()
	ctx := context.Background()
	kubectl := func(args ...string) (string, error) {
		out, errOut, err := kube.RunKubectl(ctx, args...)
		return out + errOut, err
	}
	for _, ns := range []string{"granted", "elsewhere"} {
		if out, err := kubectl("create", "namespace", ns); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		if out, err := kubectl("apply", "-n", ns, "-f", filepath.Join(root, "examples", "agentrun.yaml")); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	manifest, err := exec.Command(helm, "template", "status-writer", filepath.Join(root, "charts", "status-writer"),
		"-n", "granted", "--set", "controller.namespaces={granted}").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	chart := filepath.Join(t.TempDir(), "chart.yaml")
	if err := os.WriteFile(chart, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl("apply", "-n", "granted", "-f", chart); err != nil {
		t.Fatalf("apply chart: %v %s", err, out)
	}

	// A kubeconfig that acts as the chart's ServiceAccount.
	const sa = "system:serviceaccount:granted:status-writer"
	cfg, err := clientcmd.LoadFromFile(kube.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		u.Impersonate = sa
	}
	asSA := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, asSA); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl("--as", sa, "-n", "granted", "patch", "agentrun", "hello", "--type=merge", "-p", `{"spec":{"parameters":{"x":"y"}}}`); err == nil || !strings.Contains(out, "forbidden") {
		t.Fatalf("the ServiceAccount may edit a run's spec: %v %s", err, out)
	}

	grpcPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath(t, "status-writer"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+asSA, "JANGAR_GRPC_PORT="+strconv.Itoa(grpcPort),
		fmt.Sprintf("JANGAR_METRICS_ADDR=127.0.0.1:%d", metricsPort))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sw, err := statusclient.New(fmt.Sprintf("127.0.0.1:%d", grpcPort), "rbac-test", statusclient.Options{RetryFor: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	write := func(ns string) error {
		_, err := sw.Write(ctx, &pb.WriteStatusRequest{Object: &pb.ObjectRef{Kind: "AgentRun", Namespace: ns, Name: "hello"}, ObservedGeneration: 1, Phase: "Running"})
		return err
	}
	if err := write("granted"); err != nil {
		t.Fatalf("write in the granted namespace: %v", err)
	}
	if out, _ := kubectl("-n", "granted", "get", "agentrun", "hello", "-o", "jsonpath={.status.phase}"); out != "Running" {
		t.Fatalf("phase = %q", out)
	}
	if err := write("elsewhere"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("write outside the granted namespace: %v, want PermissionDenied", err)
	}
}
