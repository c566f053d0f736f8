//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// tiltCall is one call of a Tilt builtin the Tiltfile made: its positional and keyword
// arguments as Go values.
type tiltCall struct {
	fn     string
	args   []any
	kwargs map[string]any
}

// goValue converts a Starlark value to Go (strings, ints, bools, lists, dicts).
func goValue(v starlark.Value) any {
	switch x := v.(type) {
	case starlark.String:
		return string(x)
	case starlark.Int:
		i, _ := x.Int64()
		return i
	case starlark.Bool:
		return bool(x)
	case *starlark.List:
		out := []any{}
		for i := range x.Len() {
			out = append(out, goValue(x.Index(i)))
		}
		return out
	case *starlark.Dict:
		out := map[string]any{}
		for _, k := range x.Keys() {
			val, _, _ := x.Get(k)
			out[fmt.Sprint(goValue(k))] = goValue(val)
		}
		return out
	case starlark.NoneType:
		return nil
	}
	return v.String()
}

// runTiltfile executes the Tiltfile with stand-ins that record each builtin call. helm and blob
// return a string naming what they were given, as a placeholder for the YAML Tilt would pass on.
func runTiltfile(t *testing.T) []tiltCall {
	t.Helper()
	root := repoRoot(t)
	src, err := os.ReadFile(filepath.Join(root, "Tiltfile"))
	if err != nil {
		t.Fatal(err)
	}
	var calls []tiltCall
	builtin := func(name string, result func(args starlark.Tuple) starlark.Value) *starlark.Builtin {
		return starlark.NewBuiltin(name, func(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			c := tiltCall{fn: name, kwargs: map[string]any{}}
			for _, a := range args {
				c.args = append(c.args, goValue(a))
			}
			for _, kv := range kwargs {
				c.kwargs[string(kv[0].(starlark.String))] = goValue(kv[1])
			}
			calls = append(calls, c)
			if result != nil {
				return result(args), nil
			}
			return starlark.None, nil
		})
	}
	placeholder := func(kind string) func(starlark.Tuple) starlark.Value {
		return func(args starlark.Tuple) starlark.Value {
			return starlark.String(kind + ":" + fmt.Sprint(goValue(args[0])))
		}
	}
	predeclared := starlark.StringDict{}
	for _, name := range []string{"allow_k8s_contexts", "k8s_yaml", "local_resource", "docker_build", "k8s_resource"} {
		predeclared[name] = builtin(name, nil)
	}
	predeclared["helm"] = builtin("helm", placeholder("helm"))
	predeclared["local"] = builtin("local", func(starlark.Tuple) starlark.Value { return starlark.String("") })
	predeclared["blob"] = builtin("blob", placeholder("blob"))
	thread := &starlark.Thread{Name: "Tiltfile"}
	if _, err := starlark.ExecFileOptions(&syntax.FileOptions{TopLevelControl: true, GlobalReassign: true}, thread, "Tiltfile", src, predeclared); err != nil {
		t.Fatalf("the Tiltfile does not run: %v", err)
	}
	return calls
}

// TestTiltfileGivesEachServiceItsBuildReleaseAndDependencies (#13 item 10): each service gets a
// binary build, an image build whose context holds what build/Dockerfile copies, a release of
// its own chart, and a resource that starts after its build (the controllers also after
// status-writer and event-emitter); the CRDs come first; the gateway's both ports and every
// metrics port are forwarded.
func asList(v any) []any { l, _ := v.([]any); return l }

func TestTiltfileGivesEachServiceItsBuildReleaseAndDependencies(t *testing.T) {
	calls := runTiltfile(t)
	root := repoRoot(t)
	dockerfile, err := os.ReadFile(filepath.Join(root, "build", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// What the Dockerfile copies from its context: the binary (ARG SERVICE) and fixed files.
	var copied []string
	for _, m := range regexp.MustCompile(`(?m)^COPY (\S+) `).FindAllStringSubmatch(string(dockerfile), -1) {
		copied = append(copied, m[1])
	}
	find := func(fn string, match func(tiltCall) bool) (int, tiltCall) {
		for i, c := range calls {
			if c.fn == fn && match(c) {
				return i, c
			}
		}
		return -1, tiltCall{}
	}
	crds, _ := find("k8s_yaml", func(c tiltCall) bool { return fmt.Sprint(c.args) == "[helm:charts/agentplane-crds]" })
	if crds < 0 {
		t.Fatal("the Tiltfile does not install charts/agentplane-crds")
	}
	// Redis and Jaeger run in the cluster from their manifests, Jaeger's UI forwarded.
	devYAML, _ := find("k8s_yaml", func(c tiltCall) bool { return strings.Contains(fmt.Sprint(c.args), "hack/tilt/redis.yaml") })
	if devYAML < 0 {
		t.Error("the Tiltfile does not run Redis and Jaeger (hack/tilt/)")
	}
	for _, dep := range []string{"redis", "jaeger"} {
		b, err := os.ReadFile(filepath.Join(root, "hack", "tilt", dep+".yaml"))
		if err != nil || !strings.Contains(string(b), "kind: Deployment") || !strings.Contains(string(b), "kind: Service") {
			t.Errorf("hack/tilt/%s.yaml lacks a Deployment and a Service: %v", dep, err)
		}
	}
	if _, j := find("k8s_resource", func(c tiltCall) bool { return c.args[0] == "jaeger" }); !slices.Contains(asList(j.kwargs["port_forwards"]), any("16686:16686")) {
		t.Errorf("Jaeger's UI is not forwarded: %+v", j)
	}
	services := []string{"status-writer", "event-emitter", "job-gc", "cancel-propagator", "run-controller", "watch-gateway"}
	ports := map[string]bool{"16686": true}
	for _, svc := range services {
		t.Run(svc, func(t *testing.T) {
			if i, c := find("local_resource", func(c tiltCall) bool { return c.args[0] == svc+"-binary" }); i < 0 ||
				!strings.Contains(fmt.Sprint(c.kwargs["cmd"]), "go build -o ../../bin/"+svc+" ./cmd/"+svc) {
				t.Errorf("no binary build for %s: %+v", svc, c)
			}
			_, img := find("docker_build", func(c tiltCall) bool { return c.args[0] == "agentplane/"+svc })
			if img.fn == "" || img.args[1] != "bin" || img.kwargs["dockerfile"] != "build/Dockerfile" {
				t.Fatalf("no image build for %s: %+v", svc, img)
			}
			only, _ := img.kwargs["only"].([]any)
			for _, f := range copied {
				if f == "${SERVICE}" {
					f = svc
				}
				if !slices.Contains(only, any(f)) {
					t.Errorf("build/Dockerfile copies %s, which the image build's context (only=%v) does not hold", f, only)
				}
			}
			if _, bin := find("local_resource", func(c tiltCall) bool { return c.args[0] == svc+"-binary" }); len(copied) > 1 &&
				!strings.Contains(fmt.Sprint(bin.kwargs["cmd"]), "ca-certificates.crt") {
				t.Errorf("the binary build does not put the CA bundle into bin/")
			}
			rel, _ := find("k8s_yaml", func(c tiltCall) bool { return fmt.Sprint(c.args) == "[helm:charts/"+svc+"]" })
			if rel < 0 {
				t.Fatalf("no release of charts/%s", svc)
			}
			if rel < crds {
				t.Errorf("charts/%s is installed before the CRDs", svc)
			}
			_, helmCall := find("helm", func(c tiltCall) bool { return c.args[0] == "charts/"+svc })
			if helmCall.kwargs["name"] != svc || helmCall.kwargs["namespace"] != "agents" || helmCall.kwargs["kube_version"] != renderKubeVersion {
				t.Errorf("helm release %+v: want name %s in agents, kube_version %s (the charts' kubeVersion needs one)", helmCall.kwargs, svc, renderKubeVersion)
			}
			set := fmt.Sprint(helmCall.kwargs["set"])
			if !strings.Contains(set, "otel.endpoint=http://jaeger:4318") {
				t.Errorf("%s does not send its spans to the Jaeger Tilt runs: set=%s", svc, set)
			}
			if (svc == "event-emitter" || svc == "watch-gateway") && !strings.Contains(set, "redis.url=redis://redis:6379/0") {
				t.Errorf("%s is not pointed at the Redis Tilt runs: set=%s", svc, set)
			}
			_, res := find("k8s_resource", func(c tiltCall) bool { return c.args[0] == svc })
			deps, _ := res.kwargs["resource_deps"].([]any)
			want := []any{svc + "-binary", "redis", "jaeger"}
			if svc == "job-gc" || svc == "cancel-propagator" || svc == "run-controller" {
				want = append(want, "status-writer", "event-emitter")
			}
			for _, w := range want {
				if !slices.Contains(deps, w) {
					t.Errorf("resource %s starts without waiting for %s (deps %v)", svc, w, deps)
				}
			}
			forwards, _ := res.kwargs["port_forwards"].([]any)
			metrics := false
			for _, f := range forwards {
				local, remote, _ := strings.Cut(fmt.Sprint(f), ":")
				if ports[local] {
					t.Errorf("local port %s forwarded twice", local)
				}
				ports[local] = true
				if remote == "9090" {
					metrics = true
				}
			}
			if !metrics {
				t.Errorf("%s's metrics port is not forwarded: %v", svc, forwards)
			}
			if svc == "watch-gateway" && (!slices.Contains(forwards, any("8080:8080")) || !slices.Contains(forwards, any("50051:50051"))) {
				t.Errorf("the gateway's SSE and gRPC ports are not both forwarded: %v", forwards)
			}
		})
	}
}
