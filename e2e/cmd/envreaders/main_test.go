package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestReadsFollowsTheBinarysImports: a service reads the JANGAR_* literals of its main package and
// of every package of this repository it imports, transitively, but not those of a file behind a
// build tag it is not built with, nor of a package it does not import.
func TestReadsFollowsTheBinarysImports(t *testing.T) {
	root := t.TempDir()
	write := func(path, src string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("services/svc/cmd/svc/main.go", "package main\n\nimport _ \"github.com/agentplane/agentplane/libs/a\"\n\nconst x = \"JANGAR_MAIN\"\n")
	write("libs/a/a.go", "package a\n\nimport _ \"github.com/agentplane/agentplane/libs/b\"\n\nconst v = \"JANGAR_A\"\n")
	write("libs/a/a_test.go", "package a\n\nconst t = \"JANGAR_TEST_ONLY\"\n")
	write("libs/a/tagged.go", "//go:build integration\n\npackage a\n\nconst i = \"JANGAR_TAGGED\"\n")
	write("libs/b/b.go", "package b\n\nimport \"os\"\n\nvar _ = os.Getenv(\"JANGAR_B\")\n")
	write("libs/c/c.go", "package c\n\nconst c = \"JANGAR_NOT_IMPORTED\"\n")
	got, err := Reads(root, "svc")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"JANGAR_A", "JANGAR_B", "JANGAR_MAIN"}; !slices.Equal(got, want) {
		t.Fatalf("Reads = %v, want %v", got, want)
	}
}
