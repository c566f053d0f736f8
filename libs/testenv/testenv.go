// Package testenv starts the real parts integration tests run against: a kube-apiserver and etcd
// (through controller-runtime's envtest, pointed at the binaries `make tools` builds) with the
// agentplane CRDs installed, and a redis-server on a free port. When a part is missing it fails
// with the command that provides it.
package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RepoRoot returns the directory that holds go.work, searching up from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found above the working directory: run tests from inside the agentplane checkout")
		}
		dir = parent
	}
}

// BinDir is where envtest finds etcd, kube-apiserver and kubectl: $AGENTPLANE_ENVTEST_BIN, or
// bin/envtest in the checkout, which `make tools` fills.
func BinDir() (string, error) {
	if d := os.Getenv("AGENTPLANE_ENVTEST_BIN"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin", "envtest"), nil
}

// Kube is a running kube-apiserver with the agentplane CRDs installed.
type Kube struct {
	Config *rest.Config
	Client kubernetes.Interface
	// Kubeconfig is a file with an admin (system:masters) user, for kubectl and the services.
	Kubeconfig string
	// Kubectl is the path of the pinned kubectl.
	Kubectl string
	// FrontProxy is how the API server identifies itself to aggregated API servers, which it
	// serves as a cluster does (--requestheader-*, --proxy-client-*, and
	// --enable-aggregator-routing: it dials a Service's endpoints, not its cluster IP).
	FrontProxy *FrontProxy

	env *envtest.Environment
	dir string
}

// StartKube starts etcd and kube-apiserver and installs every CRD under charts/agentplane-crds/files/crds and
// the chart's admission policies (hack/local/admission-policies.yaml).
func StartKube() (*Kube, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run `make tools` to build it", name, bin)
		}
	}
	reapOrphans(bin)
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(root, "charts", "agentplane-crds", "files", "crds")},
		ErrorIfCRDPathMissing: true,
	}
	k := &Kube{Kubectl: filepath.Join(bin, "kubectl"), env: env}
	if k.dir, err = os.MkdirTemp("", "agentplane-testenv-"); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = k.Stop()
		}
	}()
	if k.FrontProxy, err = newFrontProxy(k.dir); err != nil {
		return nil, fmt.Errorf("front-proxy certificates: %w", err)
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	// As strict as the strictest clusters agentplane supports (OpenShift enables it): setting
	// blockOwnerDeletion on an object needs the right to update its owner's finalizers.
	args.Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	args.Set("requestheader-client-ca-file", k.FrontProxy.CAFile)
	args.Set("requestheader-allowed-names", FrontProxyClientName)
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", k.FrontProxy.CertFile)
	args.Set("proxy-client-key-file", k.FrontProxy.KeyFile)
	args.Set("enable-aggregator-routing", "true")
	if k.Config, err = env.Start(); err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", bin, err)
	}
	if k.Client, err = kubernetes.NewForConfig(k.Config); err != nil {
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: "agentplane-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("add admin user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	k.Kubeconfig = filepath.Join(k.dir, "kubeconfig")
	if err := os.WriteFile(k.Kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	// The admission policies agentplane-crds installs (generated from its chart by make generate),
	// so that every run is recorded and checked as on a cluster.
	policies := filepath.Join(root, "hack", "local", "admission-policies.yaml")
	if _, stderr, err := k.RunKubectl(context.Background(), "apply", "--server-side", "-f", policies); err != nil {
		return nil, fmt.Errorf("apply %s: %w: %s", policies, err, stderr)
	}
	// Cancel on, cluster-wide, as cancel-propagator's chart turns it on (TurnCancelOff undoes it).
	if err := k.TurnCancelOn(context.Background()); err != nil {
		return nil, err
	}
	// The policies are in force only once kube-apiserver has loaded them (it rereads policies about
	// every second) and, for the recording policy (a MutatingAdmissionPolicy), once it has the
	// CRD's OpenAPI schema, published a few seconds after the CRD is established (until then every
	// AgentRun is refused: "Resource kind ... not found"). A dry run proves neither: admitted before
	// the policies load, it passes. Wait until policiesInForce says both hold.
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := k.policiesInForce(context.Background())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the admission policies are still not in force a minute after the CRDs and policies were installed: %w", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	ok = true
	return k, nil
}

// TurnCancelOn turns the cancel switch on cluster-wide (hack/local/cancel-switch.yaml, what
// cancel-propagator's chart grants with rbac.clusterScoped and cancel.enabled): the admission policy
// agentplane-cancel-switch then accepts a new spec.cancel. StartKube turns it on.
func (k *Kube) TurnCancelOn(ctx context.Context) error {
	return k.cancelSwitch(ctx, "apply", "--server-side", "--force-conflicts")
}

// TurnCancelOff removes the cancel switch, as uninstalling cancel-propagator (or installing it
// with cancel.enabled=false) does: every new spec.cancel is refused.
func (k *Kube) TurnCancelOff(ctx context.Context) error {
	return k.cancelSwitch(ctx, "delete", "--ignore-not-found")
}

func (k *Kube) cancelSwitch(ctx context.Context, args ...string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	path := filepath.Join(root, "hack", "local", "cancel-switch.yaml")
	if _, stderr, err := k.RunKubectl(ctx, append(args, "-f", path)...); err != nil {
		return fmt.Errorf("kubectl %s %s: %w: %s", args[0], path, err, stderr)
	}
	return nil
}

// policiesInForce creates a probe AgentRun, requires the created-by record the recording policy
// writes, requires a change of that record to be refused (the validating policies), and deletes
// the probe.
func (k *Kube) policiesInForce(ctx context.Context) error {
	const path = "/apis/agents.proompteng.ai/v1alpha1/namespaces/default/agentruns"
	rc := k.Client.CoreV1().RESTClient()
	probe := []byte(`{"apiVersion":"agents.proompteng.ai/v1alpha1","kind":"AgentRun","metadata":{"name":"testenv-probe","namespace":"default"},"spec":{"agentRef":{"name":"x"},"runtime":{"type":"job"}}}`)
	raw, err := rc.Post().AbsPath(path).SetHeader("Content-Type", "application/json").Body(probe).Do(ctx).Raw()
	defer func() { _ = rc.Delete().AbsPath(path, "testenv-probe").Do(ctx).Error() }()
	if err != nil {
		return fmt.Errorf("create a probe AgentRun: %w", err)
	}
	var made struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &made); err != nil {
		return fmt.Errorf("read the probe AgentRun: %w", err)
	}
	if made.Metadata.Annotations["agents.proompteng.ai/created-by"] == "" {
		return fmt.Errorf("the probe AgentRun has no agents.proompteng.ai/created-by record: the recording policy is not in force yet")
	}
	err = rc.Patch(types.MergePatchType).AbsPath(path, "testenv-probe").Param("dryRun", "All").
		Body([]byte(`{"metadata":{"annotations":{"agents.proompteng.ai/created-by":"someone-else"}}}`)).Do(ctx).Error()
	if err == nil {
		return errors.New("changing the probe's created-by record was admitted: the validating policies are not in force yet")
	}
	if !strings.Contains(err.Error(), "cannot change") {
		return fmt.Errorf("changing the probe's created-by record was refused for another reason: %w", err)
	}
	return nil
}

// Stop stops kube-apiserver and etcd and removes their data.
func (k *Kube) Stop() error {
	var err error
	if k.Config != nil {
		err = k.env.Stop()
	}
	if k.dir != "" {
		_ = os.RemoveAll(k.dir)
	}
	return err
}

// RunKubectl runs the pinned kubectl against this API server and returns stdout and stderr.
func (k *Kube) RunKubectl(ctx context.Context, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.Kubectl, append([]string{"--kubeconfig", k.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}
