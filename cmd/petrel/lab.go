package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/petrel-sfu/petrel/lab"
)

func init() { register("lab", "data channels vs TCP in a netem lab", labMain) }

func labMain(args []string) int {
	if len(args) > 0 && args[0] == "peer" {
		return lab.PeerMain(args[1:])
	}
	if len(args) == 0 || (args[0] != "bench" && args[0] != "report") {
		fmt.Fprintln(os.Stderr, `usage: petrel lab bench [flags]   measure data channels against TCP
       petrel lab report [flags]  render saved results (-load) again
       petrel lab peer [flags]    one side of a run (started by bench)`)
		return 2
	}
	fs := flag.NewFlagSet("lab bench", flag.ExitOnError)
	profiles := fs.String("profiles", "lan,long,mobile", "netem profiles")
	cases := fs.String("cases", "tcp/ordered,pion/ordered,pion-tuned/ordered,pion-tuned/unordered,pion-tuned/partial", "stack/probe pairs")
	dur := fs.Duration("duration", 10*time.Second, "measuring window per run")
	repeat := fs.Int("repeat", 3, "repetitions (medians are reported)")
	out := fs.String("out", "", "write the report section into this Markdown file (e.g. docs/benchmarks.md)")
	plots := fs.String("plots", "docs/img", "directory for PNG plots (needs gnuplot)")
	verbose := fs.Bool("v", false, "show the peers' stderr")
	save := fs.String("save", "", "save the raw results as JSON (bench)")
	load := fs.String("load", "", "render results saved by -save instead of measuring (report; comma-separated files are merged)")
	fs.Parse(args[1:])
	if args[0] == "report" || *load != "" {
		// bench -load renders too, rather than measuring anew with the
		// default cases and overwriting the report with them.
		// Several files (comma-separated) are merged: e.g. a run of the
		// browser directions added to the main run.
		var saved savedBench
		for i, f := range strings.Split(*load, ",") {
			b, err := os.ReadFile(f)
			if err != nil {
				fmt.Fprintln(os.Stderr, "petrel lab report: -load:", err)
				return 2
			}
			var one savedBench
			if err := json.Unmarshal(b, &one); err != nil {
				fmt.Fprintln(os.Stderr, "petrel lab report:", f, err)
				return 1
			}
			if i == 0 {
				saved.Duration, saved.Repeat, saved.Pion = one.Duration, one.Repeat, cmp.Or(one.Pion, "(versions not recorded in "+f+")")
			}
			saved.Rows = append(saved.Rows, one.Rows...)
		}
		saved.Rows = lab.MergeRows(saved.Rows)
		return labReport(saved, *plots, *out)
	}
	cs, err := lab.ParseCases(*cases)
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel lab:", err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	h := &lab.Harness{}
	if *verbose {
		h.Stderr = os.Stderr
	}
	rows, err := h.Bench(ctx, lab.BenchConfig{
		Profiles: strings.Split(*profiles, ","), Cases: cs, Duration: *dur, Repeat: *repeat,
		Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel lab:", err)
		return 1
	}
	saved := savedBench{Rows: rows, Duration: *dur, Repeat: *repeat, Pion: lab.PionVersions()}
	if *save != "" {
		b, _ := json.MarshalIndent(saved, "", " ")
		if err := os.WriteFile(*save, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "petrel lab:", err)
		}
	}
	return labReport(saved, *plots, *out)
}

type savedBench struct {
	Rows     []lab.Row
	Duration time.Duration
	Repeat   int
	Pion     string // versions that measured (older files: none)
}

func labReport(saved savedBench, plots, out string) int {
	rep := lab.Report{Rows: saved.Rows, Duration: saved.Duration, Repeat: saved.Repeat, PlotDir: plots, Pion: saved.Pion}
	md, err := rep.Markdown()
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel lab: plots:", err)
	}
	fmt.Print(md)
	if out != "" {
		if err := lab.WriteSection(out, "## Data channels vs TCP", md); err != nil {
			fmt.Fprintln(os.Stderr, "petrel lab:", err)
			return 1
		}
	}
	return 0
}
