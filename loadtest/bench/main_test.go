package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRewrite replaces only the named section, keeps the others, and appends a
// missing one.
func TestRewrite(t *testing.T) {
	f := filepath.Join(t.TempDir(), "b.md")
	orig := "# Benchmarks\n\n## A\n\na text\n\n## Petrel vs Janus\n\nold\n\n## C\n\nc text\n"
	if err := os.WriteFile(f, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(f, "## Petrel vs Janus", "## Petrel vs Janus\n\nnew\n"); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(f, "## Load generator", "## Load generator\n\ngen\n"); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(f, "## Load generator", "## Load generator\n\ngen2\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(f)
	want := "# Benchmarks\n\n## A\n\na text\n\n## Petrel vs Janus\n\nnew\n\n## C\n\nc text\n\n## Load generator\n\ngen2\n"
	if string(b) != want {
		t.Fatalf("got\n%q\nwant\n%q", b, want)
	}
}
