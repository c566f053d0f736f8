package main

import (
	"strings"
	"testing"
)

func TestTableRowsCarryPathsDefaultsAndComments(t *testing.T) {
	src := []byte(`# How many.
replicaCount: 1
image:
  # Where images come from.
  registry: ""
  tag: "1.0" # the tag
# Section comment.
auth:
  # Mode | none.
  mode: token
  audiences: [agentplane]
extra: {}
`)
	got, err := Table(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `replicaCount` | `1` | How many. |",
		"| `image.registry` | `\"\"` | Where images come from. |",
		"| `image.tag` | `\"1.0\"` | the tag |",
		"| `auth.mode` | `\"token\"` | Section comment. Mode \\| none. |",
		"| `auth.audiences` | `[\"agentplane\"]` |  |",
		"| `extra` | `{}` |  |",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("missing row %s in:\n%s", want, got)
		}
	}
	if _, err := Table([]byte("a: [")); err == nil {
		t.Error("a broken values file gave no error")
	}
}

func TestSharedTableRendersTheImportedExports(t *testing.T) {
	lib := []byte(`exports:
  defaults:
    # How many.
    replicaCount: 1
  server:
    auth:
      # Who may call.
      mode: token
  unused:
    other: 1
`)
	got, err := SharedTable(lib, []string{"defaults", "server"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| `replicaCount` | `1` | How many. |", "| `auth.mode` | `\"token\"` | Who may call. |"} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("missing row %s in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "other") {
		t.Errorf("a group the chart does not import is in its table:\n%s", got)
	}
	if _, err := SharedTable(lib, []string{"nope"}); err == nil {
		t.Error("an export the library does not have gave no error")
	}
}
