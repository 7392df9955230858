package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/petrel-sfu/petrel/loadtest"
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

// TestRenderLiveKitRatios: with livekit runs beside petrel's, the report has
// a Petrel ÷ LiveKit table whose ratios come from the two runs of one size.
func TestRenderLiveKitRatios(t *testing.T) {
	mk := func(srv string, n int, cpu, rss, loss, ff float64) *run {
		s := loadtest.Summary{Connected: n + 1, Receiving: n, PPS: 1000 * float64(n), TargetCPUusPerPkt: cpu,
			TargetRSSStartMiB: 20, TargetRSSMiB: 20 + rss*float64(n), LossPct: loss,
			SetupMs: map[string]loadtest.Percentiles{"firstFrame": {P50: ff}}, DelayMs: loadtest.Percentiles{P99: 2}}
		return &run{server: srv, scenario: "stream", n: n, res: &loadtest.Result{Summary: s}}
	}
	runs := []*run{mk("petrel", 100, 3, 0.1, 0, 200), mk("livekit", 100, 12, 0.5, 0.01, 600)}
	pv, _ := render(runs, t.TempDir())
	if !strings.Contains(pv, "Ratios, Petrel ÷ LiveKit") {
		t.Fatalf("no LiveKit ratio table:\n%s", pv)
	}
	want := "| stream | 100 | petrel | 0.25 | – | 0.20 | – | 0.000 / 0.010 | 200 / 600 | 1.00 |"
	if !strings.Contains(pv, want) {
		t.Errorf("want the row\n%s\nin\n%s", want, pv)
	}
	if pv, _ = render(runs[:1], t.TempDir()); strings.Contains(pv, "LiveKit in the same run") {
		t.Errorf("a LiveKit table without livekit runs:\n%s", pv)
	}
}
