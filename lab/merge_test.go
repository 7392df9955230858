package lab

import "testing"

// TestMergeRows: rows of the same profile, stack and probe from two saved
// benches become one, whose median is over all their runs; other rows keep
// their order.
func TestMergeRows(t *testing.T) {
	runs := func(ms ...float64) []Result {
		var rs []Result
		for _, m := range ms {
			rs = append(rs, Result{Mbps: m})
		}
		return rs
	}
	a := []Row{summarize("mobile", "tcp", "ordered", runs(200, 95)), summarize("mobile", "petrel", "ordered", runs(160, 186))}
	b := []Row{summarize("lan", "tcp", "ordered", runs(900)), summarize("mobile", "tcp", "ordered", runs(200, 131, 203))}
	got := MergeRows(append(a, b...))
	if len(got) != 3 {
		t.Fatalf("%d rows, want 3", len(got))
	}
	if got[0].Stack != "tcp" || got[0].Profile != "mobile" || len(got[0].Runs) != 5 || got[0].Mbps != 200 {
		t.Errorf("merged row %s/%s: %d runs, median %v; want 5 runs, median 200", got[0].Profile, got[0].Stack, len(got[0].Runs), got[0].Mbps)
	}
	if got[1].Stack != "petrel" || got[1].Mbps != 173 || got[2].Profile != "lan" {
		t.Errorf("other rows: %+v, %+v", got[1], got[2])
	}
	if len(a[0].Runs) != 2 {
		t.Errorf("merging changed an input row: %d runs", len(a[0].Runs))
	}
}

// TestReportProcs: the report says what GOMAXPROCS the peers of the runs
// had, and names the stacks whose runs were saved before it was recorded.
func TestReportProcs(t *testing.T) {
	r := Report{Rows: []Row{
		summarize("lan", "petrel", "ordered", []Result{{Mbps: 800, Procs: 1}, {Mbps: 820, Procs: 1}}),
		summarize("lan", "pion", "ordered", []Result{{Mbps: 250}}),
	}}
	procs, old := r.procs()
	if procs != "1" || len(old) != 1 || old[0] != "`pion`" {
		t.Fatalf("procs %q, stacks before %q; want \"1\" and [`pion`]", procs, old)
	}
}

// TestRunCount: rows merged from files with another number of runs are
// named, by stack where all of the stack's rows have that number.
func TestRunCount(t *testing.T) {
	row := func(profile, stack string, n int) Row {
		return summarize(profile, stack, "ordered", make([]Result, n))
	}
	r := Report{Repeat: 3, Rows: []Row{row("lan", "tcp", 3), row("lan", "pion", 2), row("long", "pion", 2), row("lan", "petrel", 2), row("long", "petrel", 3)}}
	if got, want := r.runCount(), "3 runs (2 for pion; 2 for petrel in lan)"; got != want {
		t.Fatalf("runCount %q, want %q", got, want)
	}
}
