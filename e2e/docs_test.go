//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocsNameOnlyTestsThatExist: docs/*.md, docs/*/*.md and README.md cite tests by name as the proof of what
// they say (docs/security.md's threat model above all); every name cited is a test function in
// the repository, so a renamed or deleted test cannot leave a claim without its proof.
func TestDocsNameOnlyTestsThatExist(t *testing.T) {
	root := repoRoot(t)
	defined := map[string]bool{}
	funcs := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Z]\w*)\(`)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || d.Name() == ".git" || d.Name() == ".cluster" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range funcs.FindAllStringSubmatch(string(b), -1) {
				defined[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cited := regexp.MustCompile("`((?:Test|Fuzz)[A-Z][A-Za-z0-9_]*)`")
	n := 0
	for _, doc := range docPages(root) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		var missing []string
		for _, m := range cited.FindAllStringSubmatch(string(b), -1) {
			n++
			if !defined[m[1]] && !slices.Contains(missing, m[1]) {
				missing = append(missing, m[1])
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s cites tests that do not exist: %s", filepath.Base(doc), strings.Join(missing, ", "))
		}
	}
	if n < 20 {
		t.Fatalf("only %d test names cited in the docs: the pattern no longer reads them", n)
	}
}

// TestDocsCiteRawFilesThatExist: a figure in README.md or docs/ names the raw file of the run it
// came from (docs/measurements/, docs/bench-*/); every such path cited exists, so a figure cannot
// point at output that was never committed or has since been removed.
func TestDocsCiteRawFilesThatExist(t *testing.T) {
	root := repoRoot(t)
	cited := regexp.MustCompile("`(docs/(?:measurements|bench-[a-z]+)/[^`*<> ]+)`")
	n := 0
	for _, doc := range docPages(root) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range cited.FindAllStringSubmatch(string(b), -1) {
			n++
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("%s cites %s, which is not in the repository", strings.TrimPrefix(doc, root+"/"), m[1])
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d raw files cited in the docs: the pattern no longer reads them", n)
	}
}

// docPages are the pages the docs tests read: docs/*.md, docs/*/*.md (docs/services/ and the
// like) and README.md.
func docPages(root string) []string {
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*", "*.md"))
	return append(append(docs, pages...), filepath.Join(root, "README.md"))
}
