package libs_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLibsNeverImportsServices keeps the shared module below the services: a service may use
// libs, never the other way round.
func TestLibsNeverImportsServices(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, "github.com/agentplane/agentplane/services/") || strings.HasPrefix(p, "github.com/agentplane/agentplane/e2e") {
				t.Errorf("%s imports %s: libs must not depend on services", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d files checked: the walk is broken", checked)
	}
}

// layers are libs' packages from the bottom up: a package may import its own layer and the ones
// below, never one above, so that the API types build without the service runtime and the
// runtime without any client. testenv is for tests only: no file but a _test.go imports it.
var layers = []struct {
	name     string
	packages []string
}{
	{"API types", []string{"api", "reasons", "status", "jobresult", "redact"}},
	{"service runtime", []string{"config", "logging", "telemetry", "metrics", "grpcx", "app", "leader"}},
	{"clients", []string{"kubeclient", "statusclient", "eventclient", "redisx", "archive"}},
	{"features", []string{"controller", "access", "health", "connect"}},
}

// layerOf is the index in layers of the libs package at dir ("api/agents/v1alpha1" is "api"),
// -1 for testenv and the module's root.
func layerOf(dir string) (int, bool) {
	top := strings.SplitN(dir, "/", 2)[0]
	if top == "testenv" || top == "." || top == "" {
		return -1, true
	}
	for i, l := range layers {
		for _, p := range l.packages {
			if p == top {
				return i, true
			}
		}
	}
	return 0, false
}

// TestLibsLayersImportOnlyDownward keeps the layers of libs as the comment on layers says.
// Moving a package's import up a layer (kubeclient importing controller, say) fails it.
func TestLibsLayersImportOnlyDownward(t *testing.T) {
	const prefix = "github.com/agentplane/agentplane/libs/"
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		from, ok := layerOf(dir)
		if !ok {
			t.Errorf("%s: package %s is in no layer: add it to layers in imports_test.go", path, dir)
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		isTest := strings.HasSuffix(path, "_test.go")
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, prefix) {
				continue
			}
			checked++
			target := strings.TrimPrefix(p, prefix)
			to, ok := layerOf(target)
			switch {
			case !ok:
				t.Errorf("%s imports %s, which is in no layer", path, p)
			case to == -1 && !isTest && from != -1:
				t.Errorf("%s imports %s: only tests may use the test harness", path, p)
			case to > from && from != -1 && !isTest:
				t.Errorf("%s (%s) imports %s (%s): a layer may import only its own and the ones below", path, layers[from].name, p, layers[to].name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("only %d imports of libs checked: the walk is broken", checked)
	}
}
