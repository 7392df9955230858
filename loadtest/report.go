package loadtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// WriteJSON writes res to path.
func WriteJSON(res *Result, path string) error {
	b, err := json.MarshalIndent(res, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadJSON reads a result written by WriteJSON.
func ReadJSON(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	return &r, json.Unmarshal(b, &r)
}

// SummaryTable is a Markdown table of the run's aggregate figures.
func SummaryTable(res *Result) string {
	s := res.Summary
	c := res.Config
	var b strings.Builder
	fmt.Fprintf(&b, "Scenario `%s` against `%s` (%s), %d peers requested, ramp %.0f/s, steady window %.0f s.\n\n", c.Scenario, c.Target, c.Proto, s.Peers, c.Rate, s.WindowS)
	b.WriteString("| figure | value |\n|---|---:|\n")
	row := func(k string, f string, v ...any) { fmt.Fprintf(&b, "| %s | "+f+" |\n", append([]any{k}, v...)...) }
	row("peers connected / failed", "%d / %d", s.Connected, s.Failed)
	row("peers receiving media", "%d", s.Receiving)
	for _, k := range []string{"iceConnected", "dtlsConnected", "firstRtp", "firstFrame"} {
		p := s.SetupMs[k]
		row("time to "+k+" p50 / p95 / max (ms)", "%.0f / %.0f / %.0f", p.P50, p.P95, p.Max)
	}
	row("packets received (steady pkt/s)", "%d (%.0f)", s.Packets, s.PPS)
	row("kbit/s per receiving peer", "%.0f", s.KbpsPerPeer)
	row("lost packets (%)", "%d (%.3f %%)", s.Lost, s.LossPct)
	row("NACKed packets sent by receivers / received by publishers", "%d / %d", s.NACKsSent, s.NACKsRecv)
	row("PLI/FIR received by publishers", "%d", s.PLIsRecv)
	row("jitter mean (ms)", "%.2f", s.JitterMs)
	row("one-way delay, steady window, p50 / p95 / p99 (ms)", "%.2f / %.2f / %.2f", s.DelayMs.P50, s.DelayMs.P95, s.DelayMs.P99)
	row("one-way delay, whole run, p50 / p99 / max (ms)", "%.2f / %.2f / %.2f", s.DelayAllMs.P50, s.DelayAllMs.P99, s.DelayAllMs.Max)
	if c.TargetPID > 0 {
		row("target CPU (% of a core) / RSS (MiB)", "%.1f / %.1f", s.TargetCPU, s.TargetRSSMiB)
		row("target CPU-µs per received packet (of which in the kernel)", "%.2f (%.2f)", s.TargetCPUusPerPkt, s.TargetSysUsPerPkt)
	}
	row("generator CPU (% of a core) / RSS (MiB)", "%.1f / %.1f", s.SelfCPU, s.SelfRSSMiB)
	row("generator CPU-µs per received packet", "%.2f", s.SelfCPUusPerPkt)
	row("generator RSS growth per connected peer (KiB)", "%.0f", s.SelfRSSPerPeerKiB)
	if len(s.Errors) > 0 {
		keys := make([]string, 0, len(s.Errors))
		for k := range s.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("\nSetup errors:\n\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "- %d × %s\n", s.Errors[k], k)
		}
	}
	return b.String()
}

// WriteReport writes dir/report.md and, when gnuplot is installed, PNG plots of
// CPU, RSS and NACKs against connected peers and of delay over time.
func WriteReport(res *Result, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var dat bytes.Buffer
	dat.WriteString("# t peers targetCpu targetRss selfCpu selfRss nacksSent nacksRecv delayP50 delayP99 pps\n")
	for _, s := range res.Samples {
		fmt.Fprintf(&dat, "%.1f %d %.2f %.2f %.2f %.2f %d %d %.3f %.3f %.0f\n", s.T, s.Peers, s.TargetCPU, s.TargetRSSMiB, s.SelfCPU, s.SelfRSSMiB, s.NACKsSent, s.NACKsRecv, s.DelayP50Ms, s.DelayP99Ms, s.PPS)
	}
	datPath := filepath.Join(dir, "samples.dat")
	if err := os.WriteFile(datPath, dat.Bytes(), 0o644); err != nil {
		return err
	}
	var md strings.Builder
	md.WriteString("# petrel load report\n\n")
	md.WriteString(SummaryTable(res))
	plots := []struct{ file, title, ylabel, cols string }{
		{"cpu.png", "CPU vs connected peers", "% of one core", `using 2:3 with points title "target", "" using 2:5 with points title "generator"`},
		{"rss.png", "RSS vs connected peers", "MiB", `using 2:4 with points title "target", "" using 2:6 with points title "generator"`},
		{"nacks.png", "NACKed packets vs connected peers", "packets (cumulative)", `using 2:7 with points title "sent by receivers", "" using 2:8 with points title "received by publishers"`},
		{"delay.png", "one-way delay percentiles over time", "ms", `using 1:9 with lines title "p50", "" using 1:10 with lines title "p99"`},
	}
	if _, err := exec.LookPath("gnuplot"); err == nil && len(res.Samples) > 1 {
		var gp strings.Builder
		gp.WriteString("set terminal png size 720,420\nset grid\nset key top left\n")
		for _, p := range plots {
			xl := "connected peers"
			if p.file == "delay.png" {
				xl = "seconds"
			}
			fmt.Fprintf(&gp, "set output %q\nset title %q\nset xlabel %q\nset ylabel %q\nplot %q %s\n", filepath.Join(dir, p.file), p.title, xl, p.ylabel, datPath, p.cols)
		}
		cmd := exec.Command("gnuplot")
		cmd.Stdin = strings.NewReader(gp.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("gnuplot: %v: %s", err, out)
		}
		md.WriteString("\n")
		for _, p := range plots {
			fmt.Fprintf(&md, "![%s](%s)\n\n", p.title, p.file)
		}
	} else {
		md.WriteString("\n(gnuplot not installed: no plots; samples are in samples.dat)\n")
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644)
}
