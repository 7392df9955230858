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

// TestRewriteKeepsHandWrittenSubsections: a "### " subsection the generator
// does not write (the hand-written lean viewer measurements under "Load
// generator") survives a new run; one it writes is replaced.
func TestRewriteKeepsHandWrittenSubsections(t *testing.T) {
	f := filepath.Join(t.TempDir(), "b.md")
	orig := "# Benchmarks\n\n## Load generator\n\nold table\n\n### Generated\n\nold gen\n\n### Lean WHEP viewers\n\nhand figures\n\n## C\n\nc text\n"
	if err := os.WriteFile(f, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(f, "## Load generator", "## Load generator\n\nnew table\n\n### Generated\n\nnew gen\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(f)
	want := "# Benchmarks\n\n## Load generator\n\nnew table\n\n### Generated\n\nnew gen\n\n### Lean WHEP viewers\n\nhand figures\n\n## C\n\nc text\n"
	if string(b) != want {
		t.Fatalf("got\n%q\nwant\n%q", b, want)
	}
}

// TestReadFloor: the median of each kind of floor, with lines of no kind (saved
// before the receive floor was measured) read as send floors.
func TestReadFloor(t *testing.T) {
	dir := t.TempDir()
	if v, n := readFloor(dir, "send"); v != 0 || n != 0 {
		t.Fatalf("no file: %v %d", v, n)
	}
	body := "7000\nsend 9000\nrecv 2000\nsend 8000\nrecv 3000\nrecv 2500\njunk\n"
	if err := os.WriteFile(filepath.Join(dir, floorFile), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, n := readFloor(dir, "send"); v != 8 || n != 3 {
		t.Fatalf("send: %v µs of %d", v, n)
	}
	if v, n := readFloor(dir, "recv"); v != 2.5 || n != 3 {
		t.Fatalf("recv: %v µs of %d", v, n)
	}
}
