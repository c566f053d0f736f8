// Package chartyaml reads what the generators (chartschema, valuesdoc) need of a chart's
// Chart.yaml.
package chartyaml

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// LibraryImports lists the exports the chart whose Chart.yaml is at path imports from the
// library chart agentplane-lib (its import-values), and whether it depends on it at all.
func LibraryImports(path string) ([]string, bool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	var c struct {
		Dependencies []struct {
			Name         string   `json:"name"`
			ImportValues []string `json:"import-values"`
		} `json:"dependencies"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	for _, d := range c.Dependencies {
		if d.Name == "agentplane-lib" {
			return d.ImportValues, true, nil
		}
	}
	return nil, false, nil
}
