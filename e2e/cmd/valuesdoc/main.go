// Command valuesdoc writes the values table of each chart's README.md from the comments in its
// values.yaml: every key with its path, default and the comment above it. `make generate` runs it
// over charts/*/ (and `make verify-gen` fails when a table is stale); the text between the
// README's "<!-- values:begin -->" and "<!-- values:end -->" markers is replaced, a README without
// them gets them appended. It lives in the e2e module, which already has the YAML library.
//
//	go run ./cmd/valuesdoc CHART_DIR...
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentplane/agentplane/e2e/cmd/internal/chartyaml"
)

const (
	begin = "<!-- values:begin -->"
	end   = "<!-- values:end -->"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: valuesdoc CHART_DIR...")
		os.Exit(2)
	}
	for _, dir := range os.Args[1:] {
		if err := chart(dir); err != nil {
			fmt.Fprintf(os.Stderr, "valuesdoc %s: %v\n", dir, err)
			os.Exit(1)
		}
	}
}

func chart(dir string) error {
	src, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return err
	}
	table, err := Table(src)
	if err != nil {
		return err
	}
	groups, _, err := chartyaml.LibraryImports(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return err
	}
	if len(groups) > 0 {
		lib, err := os.ReadFile(filepath.Join(dir, "..", "agentplane-lib", "values.yaml"))
		if err != nil {
			return err
		}
		shared, err := SharedTable(lib, groups)
		if err != nil {
			return err
		}
		table += "\nThe values every service chart shares (charts/agentplane-lib, its exports " + strings.Join(groups, ", ") +
			"), the same in each chart:\n\n" + shared
	}
	readme := filepath.Join(dir, "README.md")
	old, err := os.ReadFile(readme)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if len(old) == 0 {
		old = []byte(fmt.Sprintf("# %s\n\n`helm install %s charts/%s`; the values below are its settings.\n", filepath.Base(dir), filepath.Base(dir), filepath.Base(dir)))
	}
	block := begin + "\n<!-- Generated from values.yaml by `make generate`: edit the comments there. -->\n\n" + table + end
	var out string
	i, j := bytes.Index(old, []byte(begin)), bytes.Index(old, []byte(end))
	if i >= 0 && j > i {
		out = string(old[:i]) + block + string(old[j+len(end):])
	} else {
		out = strings.TrimRight(string(old), "\n") + "\n\n## Values\n\n" + block + "\n"
	}
	return os.WriteFile(readme, []byte(out), 0o644)
}

// Table renders the values file as a Markdown table: one row per leaf key (a scalar, a list or
// an empty map), with the comments above it and above the maps that hold it.
func Table(src []byte) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return "", err
	}
	if len(doc.Content) == 0 {
		return "", nil
	}
	var b strings.Builder
	b.WriteString("| Key | Default | Description |\n|---|---|---|\n")
	var pending []string
	walk(&b, doc.Content[0], "", &pending)
	return b.String(), nil
}

// SharedTable renders the library chart's exports.<group> of each group (their keys, at the top
// level of the charts that import them) as a Markdown table.
func SharedTable(lib []byte, groups []string) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(lib, &doc); err != nil {
		return "", err
	}
	if len(doc.Content) == 0 {
		return "", fmt.Errorf("the library chart's values.yaml is empty")
	}
	exports := child(doc.Content[0], "exports")
	if exports == nil {
		return "", fmt.Errorf("the library chart's values.yaml has no exports")
	}
	var b strings.Builder
	b.WriteString("| Key | Default | Description |\n|---|---|---|\n")
	for _, g := range groups {
		n := child(exports, g)
		if n == nil {
			return "", fmt.Errorf("the library chart exports no %s", g)
		}
		var pending []string
		walk(&b, n, "", &pending)
	}
	return b.String(), nil
}

func child(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// walk writes a row per leaf under n. pending holds the comments of the maps being entered; they
// go on the first row written under them, so each comment appears once.
func walk(b *strings.Builder, n *yaml.Node, prefix string, pending *[]string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		doc := comment(k.HeadComment)
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
			*pending = appendNonEmpty(*pending, doc)
			walk(b, v, path, pending)
			continue
		}
		parts := appendNonEmpty(appendNonEmpty(*pending, doc), comment(v.LineComment))
		*pending = nil
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", path, value(v), cell(strings.Join(parts, " ")))
	}
}

func appendNonEmpty(l []string, s string) []string {
	if s == "" {
		return l
	}
	return append(append([]string(nil), l...), s)
}

// comment turns "# a\n# b" into "a b".
func comment(c string) string {
	var parts []string
	for _, l := range strings.Split(c, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
		if l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

func value(v *yaml.Node) string {
	var x any
	if err := v.Decode(&x); err != nil {
		return "`?`"
	}
	if x == nil {
		return "`null`"
	}
	j, err := json.Marshal(x)
	if err != nil {
		return "`?`"
	}
	return "`" + strings.ReplaceAll(string(j), "|", "\\|") + "`"
}

func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
