//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// tiltUp is what `tilt up` does with the Tiltfile, done here without Tilt (it cannot be had on
// this machine): it executes the Tiltfile with implementations of the builtins it calls, runs
// each local_resource's command, builds each docker_build image and pushes it to the registry the
// cluster announces (its local-registry-hosting ConfigMap, as Tilt reads it), puts the built
// images into the objects k8s_yaml was given, and applies them: first what belongs to no
// resource (namespaces, CRDs, RBAC, Services), then each resource once the resources it depends
// on are ready, waiting for each to become ready.
type tiltUp struct {
	c         *kcluster
	docs      []map[string]any // the objects k8s_yaml was given, in order
	builds    []tiltBuild
	resources []tiltResource
	contexts  []string
}

type tiltBuild struct {
	ref, context, dockerfile string
	args                     map[string]string
	only                     []string
}

type tiltResource struct {
	name string
	deps []string
}

// tiltBlob is what helm() and blob() return: YAML.
type tiltBlob string

func (b tiltBlob) String() string        { return string(b) }
func (b tiltBlob) Type() string          { return "blob" }
func (b tiltBlob) Freeze()               {}
func (b tiltBlob) Truth() starlark.Bool  { return len(b) > 0 }
func (b tiltBlob) Hash() (uint32, error) { return starlark.String(b).Hash() }

func kwarg(kwargs []starlark.Tuple, name string) starlark.Value {
	for _, kv := range kwargs {
		if string(kv[0].(starlark.String)) == name {
			return kv[1]
		}
	}
	return nil
}

func strList(v starlark.Value) []string {
	var out []string
	if l, ok := v.(*starlark.List); ok {
		for i := range l.Len() {
			out = append(out, fmt.Sprint(goValue(l.Index(i))))
		}
	}
	return out
}

func strOf(v starlark.Value) string {
	if v == nil {
		return ""
	}
	if s, ok := v.(starlark.String); ok {
		return string(s)
	}
	return v.String()
}

// exec runs the Tiltfile with the builtins.
func (u *tiltUp) exec(t *testing.T) {
	t.Helper()
	root := u.c.root
	src, err := os.ReadFile(filepath.Join(root, "Tiltfile"))
	if err != nil {
		t.Fatal(err)
	}
	fn := func(name string, f func(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error)) *starlark.Builtin {
		return starlark.NewBuiltin(name, func(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			return f(args, kwargs)
		})
	}
	addYAML := func(y string) error {
		for _, doc := range docSeparator.Split(y, -1) {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				return err
			}
			if len(m) > 0 {
				u.docs = append(u.docs, m)
			}
		}
		return nil
	}
	predeclared := starlark.StringDict{
		"allow_k8s_contexts": fn("allow_k8s_contexts", func(args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
			u.contexts = append(u.contexts, strList(args[0])...)
			return starlark.None, nil
		}),
		"blob": fn("blob", func(args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
			return tiltBlob(strOf(args[0])), nil
		}),
		// Tilt's helm() is `helm template` with the CRDs included and the chart's test hooks
		// (helm test's pods) left out.
		"helm": fn("helm", func(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			a := []string{"template", strOf(kwarg(kwargs, "name")), strOf(args[0]), "--include-crds"}
			if ns := strOf(kwarg(kwargs, "namespace")); ns != "" {
				a = append(a, "--namespace", ns)
			}
			if v := strOf(kwarg(kwargs, "kube_version")); v != "" {
				a = append(a, "--kube-version", v)
			}
			for _, s := range strList(kwarg(kwargs, "set")) {
				a = append(a, "--set", s)
			}
			out, err := u.c.helmStdout(a...)
			if err != nil {
				return nil, fmt.Errorf("helm %v: %v\n%s", a, err, out)
			}
			var keep []string
			for _, doc := range docSeparator.Split(out, -1) {
				var m map[string]any
				if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
					return nil, err
				}
				if hook, _ := at(m, "metadata", "annotations", "helm.sh/hook").(string); strings.Contains(hook, "test") {
					continue
				}
				keep = append(keep, doc)
			}
			return tiltBlob(strings.Join(keep, "\n---\n")), nil
		}),
		"k8s_yaml": fn("k8s_yaml", func(args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
			var files []string
			switch v := args[0].(type) {
			case tiltBlob:
				return starlark.None, addYAML(string(v))
			case starlark.String:
				files = []string{string(v)}
			case *starlark.List:
				files = strList(v)
			}
			for _, f := range files {
				b, err := os.ReadFile(filepath.Join(root, f))
				if err != nil {
					return nil, err
				}
				if err := addYAML(string(b)); err != nil {
					return nil, err
				}
			}
			return starlark.None, nil
		}),
		// local runs its command as the Tiltfile loads, from the Tiltfile's folder, and returns
		// what it printed.
		"local": fn("local", func(args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", "-c", strOf(args[0]))
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err != nil {
				return nil, fmt.Errorf("local(%q): %v\n%s", strOf(args[0]), err, out)
			}
			return starlark.String(out), nil
		}),
		// A local_resource runs its command once at the start, from the Tiltfile's folder.
		"local_resource": fn("local_resource", func(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", strOf(kwarg(kwargs, "cmd")))
			cmd.Dir, cmd.Env = root, u.c.environ()
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("local_resource %s: %v\n%s", strOf(args[0]), err, out)
			}
			return starlark.None, nil
		}),
		"docker_build": fn("docker_build", func(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			b := tiltBuild{ref: strOf(args[0]), context: strOf(args[1]), dockerfile: strOf(kwarg(kwargs, "dockerfile")), args: map[string]string{},
				only: strList(kwarg(kwargs, "only"))}
			if d, ok := kwarg(kwargs, "build_args").(*starlark.Dict); ok {
				for _, k := range d.Keys() {
					v, _, _ := d.Get(k)
					b.args[strOf(k)] = strOf(v)
				}
			}
			u.builds = append(u.builds, b)
			return starlark.None, nil
		}),
		"k8s_resource": fn("k8s_resource", func(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			u.resources = append(u.resources, tiltResource{name: strOf(args[0]), deps: strList(kwarg(kwargs, "resource_deps"))})
			return starlark.None, nil
		}),
	}
	thread := &starlark.Thread{Name: "Tiltfile"}
	if _, err := starlark.ExecFileOptions(&syntax.FileOptions{TopLevelControl: true, GlobalReassign: true}, thread, "Tiltfile", src, predeclared); err != nil {
		t.Fatalf("the Tiltfile does not run: %v", err)
	}
}

// buildAndPush builds every docker_build image (its context cut down to `only`) and pushes it to
// the registry the cluster announces; it returns each ref's pushed name.
func (u *tiltUp) buildAndPush(t *testing.T) map[string]string {
	t.Helper()
	cm, err := u.c.kube.CoreV1().ConfigMaps("kube-public").Get(context.Background(), "local-registry-hosting", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the cluster announces no registry (kube-public/local-registry-hosting), which Tilt needs: %v", err)
	}
	var hosting struct {
		Host                     string `json:"host"`
		HostFromContainerRuntime string `json:"hostFromContainerRuntime"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["localRegistryHosting.v1"]), &hosting); err != nil || hosting.Host == "" {
		t.Fatalf("local-registry-hosting: %v %q", err, cm.Data)
	}
	images := map[string]string{}
	for _, b := range u.builds {
		ctxDir := t.TempDir()
		src := filepath.Join(u.c.root, b.context)
		only := b.only
		if len(only) == 0 {
			only = []string{"."}
		}
		for _, f := range only {
			if out, err := exec.Command("cp", "-a", filepath.Join(src, f), filepath.Join(ctxDir, f)).CombinedOutput(); err != nil {
				t.Fatalf("docker_build %s: context %s: %v %s", b.ref, f, err, out)
			}
		}
		h := sha256.New()
		_ = filepath.Walk(ctxDir, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				data, _ := os.ReadFile(p)
				h.Write(data)
			}
			return nil
		})
		tag := "tilt-" + hex.EncodeToString(h.Sum(nil))[:16]
		pushed := hosting.Host + "/" + b.ref + ":" + tag
		args := []string{"build", "-q", "-f", filepath.Join(u.c.root, b.dockerfile), "-t", pushed}
		for k, v := range b.args {
			args = append(args, "--build-arg", k+"="+v)
		}
		if out, err := exec.Command("docker", append(args, ctxDir)...).CombinedOutput(); err != nil {
			t.Fatalf("docker_build %s: %v\n%s", b.ref, err, out)
		}
		if out, err := exec.Command("docker", "push", "-q", pushed).CombinedOutput(); err != nil {
			t.Fatalf("push %s: %v\n%s", pushed, err, out)
		}
		images[b.ref] = hosting.HostFromContainerRuntime + "/" + b.ref + ":" + tag
	}
	return images
}

// inject replaces each built image in the objects' containers, as Tilt does; it returns how many.
func (u *tiltUp) inject(images map[string]string) int {
	n := 0
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if img, ok := x["image"].(string); ok {
				repo := img
				if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
					repo = repo[:i]
				}
				if to, ok := images[repo]; ok {
					x["image"] = to
					n++
				}
			}
			for _, vv := range x {
				walk(vv)
			}
		case []any:
			for _, vv := range x {
				walk(vv)
			}
		}
	}
	for _, d := range u.docs {
		walk(d)
	}
	return n
}

var workloadKinds = []string{"Deployment", "StatefulSet", "DaemonSet", "Job"}

// apply applies the objects: those of no resource first (CRDs and namespaces before the rest),
// then each resource in the order its dependencies allow, waiting for it to be ready.
func (u *tiltUp) apply(t *testing.T) {
	t.Helper()
	byResource := map[string][]map[string]any{}
	var rest []map[string]any
	for _, d := range u.docs {
		kind, _ := d["kind"].(string)
		name, _ := at(d, "metadata", "name").(string)
		if slices.Contains(workloadKinds, kind) {
			byResource[name] = append(byResource[name], d)
			continue
		}
		rest = append(rest, d)
	}
	slices.SortStableFunc(rest, func(a, b map[string]any) int {
		rank := func(m map[string]any) int {
			switch m["kind"] {
			case "Namespace":
				return 0
			case "CustomResourceDefinition":
				return 1
			}
			return 2
		}
		return rank(a) - rank(b)
	})
	u.kubectlApply(t, "objects of no resource", rest)
	if out, err := u.c.cmd(context.Background(), "kubectl", "wait", "--for", "condition=Established", "crd", "--all", "--timeout", "60s"); err != nil {
		t.Fatalf("CRDs: %v\n%s", err, out)
	}
	ready := map[string]bool{}
	for _, r := range u.resources {
		if _, ok := byResource[r.name]; !ok {
			t.Errorf("k8s_resource %q names no workload the Tiltfile deploys", r.name)
		}
	}
	for len(ready) < len(u.resources) {
		progressed := false
		for _, r := range u.resources {
			if ready[r.name] {
				continue
			}
			waiting := false
			for _, d := range r.deps {
				if slices.ContainsFunc(u.resources, func(x tiltResource) bool { return x.name == d }) && !ready[d] {
					waiting = true
				}
			}
			if waiting {
				continue
			}
			start := time.Now()
			u.kubectlApply(t, r.name, byResource[r.name])
			if out, err := u.c.kubectl("rollout", "status", "deployment/"+r.name, "--timeout", "3m"); err != nil {
				pods, _ := u.c.kubectl("get", "pods", "-o", "wide")
				desc, _ := u.c.kubectl("describe", "pods", "-l", "app.kubernetes.io/name="+r.name)
				t.Fatalf("resource %s not ready: %v\n%s\n%s\n%s", r.name, err, out, pods, desc)
			}
			t.Logf("resource %s ready after %s (after %v)", r.name, time.Since(start).Round(time.Second), r.deps)
			ready[r.name] = true
			progressed = true
		}
		if !progressed {
			t.Fatalf("resources wait on each other: %+v", u.resources)
		}
	}
}

func (u *tiltUp) kubectlApply(t *testing.T, what string, docs []map[string]any) {
	t.Helper()
	var parts []string
	for _, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, string(b))
	}
	if out, err := u.c.kubectlIn(strings.Join(parts, "---\n"), "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("apply %s: %v\n%s", what, err, out)
	}
}

// TestTiltfileOnTheRealNode (#30 item 7): what the Tiltfile declares is built, pushed and applied
// to `make cluster-up`'s real node as `tilt up` would, and every resource it names becomes ready.
// Redis and Jaeger come from their Docker Hub names, which the node looks up in the local
// registry first: the test pushes images of this machine's redis-server and of the Jaeger build
// (make tools-jaeger) under those names.
func TestTiltfileOnTheRealNode(t *testing.T) {
	c := startCluster(t)
	ctxName, err := c.cmd(context.Background(), "kubectl", "config", "current-context")
	if err != nil {
		t.Fatal(err, ctxName)
	}
	u := &tiltUp{c: c}
	u.exec(t)
	if !slices.Contains(u.contexts, strings.TrimSpace(ctxName)) {
		t.Fatalf("Tilt would refuse context %q: the Tiltfile allows %v", strings.TrimSpace(ctxName), u.contexts)
	}
	c.pushDockerHubMirror(t)
	images := u.buildAndPush(t)
	if len(images) != 6 {
		t.Errorf("%d image builds, want one per service: %v", len(images), images)
	}
	if n := u.inject(images); n < len(images) {
		t.Errorf("only %d containers got a built image", n)
	}
	u.apply(t)
	pods, err := c.kube.CoreV1().Pods(clusterNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != c.nodeName || !podReady(&p) {
			t.Errorf("pod %s on %s, ready %v", p.Name, p.Spec.NodeName, podReady(&p))
		}
	}
	t.Run("make cluster-down leaves nothing behind", c.stop)
}

// pushDockerHubMirror pushes what the Tiltfile's Redis and Jaeger pull from Docker Hub to the
// local registry under the same names (library/redis, jaegertracing/jaeger), built here.
func (c *kcluster) pushDockerHubMirror(t *testing.T) {
	t.Helper()
	refs := map[string]string{}
	for _, f := range []string{"redis.yaml", "jaeger.yaml"} {
		b, err := os.ReadFile(filepath.Join(c.root, "hack", "tilt", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "image: ") {
				refs[f] = strings.TrimPrefix(l, "image: ")
			}
		}
	}
	redis := redisImage(t)
	// The upstream image's entrypoint turns protected mode off when it has no config file.
	df := filepath.Join(redis.Context, "Dockerfile")
	b, _ := os.ReadFile(df)
	if err := os.WriteFile(df, []byte(strings.Replace(string(b), `"--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"`, `"--protected-mode", "no"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	jaegerDir := t.TempDir()
	copyFile(t, mustExist(t, filepath.Join(c.root, "bin", "tools", "jaeger", jaegerVersion(t), "jaeger"), "tools-jaeger"), filepath.Join(jaegerDir, "jaeger"), 0o755)
	// As the upstream image: all-in-one on every interface, as user 10001.
	if err := os.WriteFile(filepath.Join(jaegerDir, "Dockerfile"), []byte("FROM scratch\nCOPY jaeger /jaeger\nENV JAEGER_LISTEN_HOST=0.0.0.0\nUSER 10001\nENTRYPOINT [\"/jaeger\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for f, dir := range map[string]string{"redis.yaml": redis.Context, "jaeger.yaml": jaegerDir} {
		// Docker Hub's official images live under library/.
		ref := refs[f]
		if !strings.Contains(ref, "/") {
			ref = "library/" + ref
		}
		pushed := c.registry + "/" + ref
		if out, err := exec.Command("docker", "build", "-q", "-t", pushed, dir).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pushed, err, out)
		}
		if out, err := exec.Command("docker", "push", "-q", pushed).CombinedOutput(); err != nil {
			t.Fatalf("push %s: %v\n%s", pushed, err, out)
		}
	}
}

// helmStdout runs helm and returns its standard output only (helm template's YAML).
func (c *kcluster) helmStdout(args ...string) (string, error) {
	cmd := exec.Command(c.lookPath("helm"), args...)
	cmd.Dir, cmd.Env = c.root, c.environ()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return stderr.String(), err
	}
	return string(out), nil
}
