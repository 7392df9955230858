package lab

import (
	"bytes"
	"cmp"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/petrel-sfu/petrel/netem"
)

// Study holds the figures of the published GStreamer/usrsctp study for
// comparison: data channel and TCP Mbit/s before its fixes.
var Study = map[string]struct{ DC, TCP string }{
	"lan":    {"≈100", "≈300"},
	"long":   {"8–55", "≈90"},
	"mobile": {"≈0.6", "≈13"},
}

//go:embed notes.md
var tuningNotes string

// col is a stack in the report's table and bar chart.
type col struct{ stack, title string }

// extraCols are the stacks after Pion's, shown when they ran.
var extraCols = []col{{"petrel-lean", "Pion → Petrel data session"}, {"petrel", "Petrel → Petrel (own SCTP)"},
	{"chromium", "Chromium → Petrel"}, {"firefox", "Firefox → Petrel"},
	{"aiortc", "aiortc → Petrel"}, {"gstreamer", "GStreamer webrtcbin → Petrel"},
	{"to-chromium", "Petrel → Chromium"}, {"to-firefox", "Petrel → Firefox"},
	{"chromium-lean", "Chromium → Petrel data session"}, {"firefox-lean", "Firefox → Petrel data session"},
	{"aiortc-lean", "aiortc → Petrel data session"}, {"gstreamer-lean", "GStreamer webrtcbin → Petrel data session"},
	{"to-chromium-lean", "Petrel data session → Chromium"}, {"to-firefox-lean", "Petrel data session → Firefox"},
	{"to-aiortc", "Petrel → aiortc"}, {"to-gstreamer", "Petrel → GStreamer webrtcbin"},
	{"to-aiortc-lean", "Petrel data session → aiortc"}, {"to-gstreamer-lean", "Petrel data session → GStreamer webrtcbin"},
	{"to-chromium-ws", "TCP → Chromium (WebSocket)"}, {"to-firefox-ws", "TCP → Firefox (WebSocket)"}}

// Report renders benchmark rows as Markdown with PNG plots.
type Report struct {
	Rows     []Row
	Duration time.Duration
	Repeat   int
	PlotDir  string // where PNGs go; "" for none
	// LinkDir is how the Markdown refers to PlotDir (default: relative
	// to docs/).
	LinkDir string
	// Pion names the Pion versions the runs used (PionVersions() of the
	// binary that measured; saved with the results).
	Pion string
}

// PionVersions names the webrtc and sctp modules this binary was built
// with, for reports.
func PionVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown versions)"
	}
	var webrtc, sctp string
	for _, d := range bi.Deps {
		v := d.Version
		if d.Replace != nil {
			v = d.Replace.Version
		}
		switch d.Path {
		case "github.com/pion/webrtc/v4":
			webrtc = v
		case "github.com/pion/sctp":
			sctp = v
		}
	}
	return fmt.Sprintf("webrtc/v4 %s, sctp %s", webrtc, sctp)
}

func (r *Report) find(profile, stack, probe string) *Row {
	for i := range r.Rows {
		x := &r.Rows[i]
		if x.Profile == profile && x.Stack == stack && x.Probe == probe {
			return x
		}
	}
	return nil
}

func (r *Report) hasStack(stack string) bool {
	for _, x := range r.Rows {
		if x.Stack == stack && len(x.Runs) > 0 {
			return true
		}
	}
	return false
}

func (r *Report) profiles() []string {
	var ps []string
	seen := map[string]bool{}
	for _, x := range r.Rows {
		if !seen[x.Profile] {
			seen[x.Profile] = true
			ps = append(ps, x.Profile)
		}
	}
	return ps
}

func pctOf(x, ref float64) string {
	if ref <= 0 || x <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*x/ref)
}

func mbps(x *Row) string {
	if x == nil || len(x.Runs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", x.Mbps)
}

// runCount says how many runs each median is of: Repeat, or, where rows
// merged from several files have another count, which (by stack where all
// of a stack's rows have it).
func (r *Report) runCount() string {
	type key struct {
		stack string
		n     int
	}
	var keys []key
	profiles := map[key][]string{}
	rows := map[string]int{}
	for _, row := range r.Rows {
		rows[row.Stack]++
		if n := len(row.Runs); n != r.Repeat {
			k := key{row.Stack, n}
			if profiles[k] == nil {
				keys = append(keys, k)
			}
			profiles[k] = append(profiles[k], row.Profile)
		}
	}
	if len(keys) == 0 {
		return fmt.Sprintf("%d runs", r.Repeat)
	}
	var other []string
	for _, k := range keys {
		if len(profiles[k]) == rows[k.stack] {
			other = append(other, fmt.Sprintf("%d for %s", k.n, k.stack))
		} else {
			other = append(other, fmt.Sprintf("%d for %s in %s", k.n, k.stack, strings.Join(profiles[k], ", ")))
		}
	}
	return fmt.Sprintf("%d runs (%s)", r.Repeat, strings.Join(other, "; "))
}

// procs says what GOMAXPROCS the Go peers of the runs had (a list if they
// differ), and lists the stacks with runs saved before the harness set it.
func (r *Report) procs() (procs string, allCPU []string) {
	var ps []string
	for _, row := range r.Rows {
		for _, x := range row.Runs {
			if x.Procs == 0 {
				if s := "`" + row.Stack + "`"; !slices.Contains(allCPU, s) {
					allCPU = append(allCPU, s)
				}
			} else if s := strconv.Itoa(x.Procs); !slices.Contains(ps, s) {
				ps = append(ps, s)
			}
		}
	}
	return strings.Join(ps, " or "), allCPU
}

// Markdown renders the section body (without its heading). Plot errors
// are returned after the text is complete.
func (r *Report) Markdown() (string, error) {
	var b strings.Builder
	host, _ := os.Hostname()
	ncpu := strings.TrimSpace(run("nproc"))
	cc := strings.TrimSpace(run("sysctl", "-n", "net.ipv4.tcp_congestion_control"))
	fmt.Fprintf(&b, "\nGenerated by `petrel lab bench` on %s (%s, %s CPUs, TCP congestion control %s): "+
		"bulk transfer from host a to host b of a `petrel netem` lab, %v window per run, median of %s, "+
		"cases interleaved within each repetition. Data channels (one process per namespace, DTLS+SCTP over "+
		"UDP, signaling over TCP across the emulated link, a reliable ordered channel of 64 KiB messages): "+
		"`pion` and `pion-tuned` are Pion (%s) PeerConnections at both ends; `petrel` is Petrel's own SCTP "+
		"(`rtc/datachan`) at both ends, a lean data session in b and a client of it (Pion's ICE agent, a DTLS "+
		"client, datachan) in a; `petrel-lean` is the tuned Pion PeerConnection sending to a data session; "+
		"`chromium`/`firefox` are the browser sending to the tuned Pion PeerConnection, `aiortc` and `gstreamer` "+
		"aiortc and GStreamer's `webrtcbin` (usrsctp, the study's stack) sending to it (`lab/peers`), each with "+
		"`-lean` sending to a data session instead (`to-aiortc`, `to-gstreamer`: the other way); `to-chromium-lean`/"+
		"`to-firefox-lean` a data session sending to the browser (which measures), and `to-chromium-ws`/"+
		"`to-firefox-ws` TCP sending to the same page over a WebSocket, the browser's own reference. Goodput is payload bytes at "+
		"the receiver.\n\n",
		time.Now().UTC().Format("2006-01-02"), host, ncpu, cc, r.Duration, r.runCount(), cmp.Or(r.Pion, PionVersions()))
	if procs, allCPU := r.procs(); procs != "" {
		fmt.Fprintf(&b, "Go peers (TCP's, Pion's, Petrel's) ran with GOMAXPROCS=%s, their host's share of the CPUs the two "+
			"hosts and the emulator share (`lab.PeerProcs`)", procs)
		if len(allCPU) > 0 {
			fmt.Fprintf(&b, "; the rows of %s come from runs before that, with a P per CPU", strings.Join(allCPU, ", "))
		}
		b.WriteString(".\n\n")
	}
	b.WriteString("Profiles:\n\n")
	for _, p := range r.profiles() {
		if pr, err := netem.LookupProfile(p); err == nil {
			fmt.Fprintf(&b, "- `%s`: %s (%s)\n", p, pr.Note, pr.Spec)
		}
	}
	b.WriteString("\n### Throughput (Mbit/s, % of TCP)\n\n")
	// Columns: the reference, Pion, and whichever other stacks ran.
	cols := []col{{"pion", "Pion default"}, {"pion-tuned", "Pion tuned (Petrel)"}}
	for _, c := range extraCols {
		if r.hasStack(c.stack) {
			cols = append(cols, c)
		}
	}
	b.WriteString("| profile | TCP |")
	for _, c := range cols {
		b.WriteString(" " + c.title + " |")
	}
	b.WriteString(" study: usrsctp DC / TCP |\n|---|---:|" + strings.Repeat("---:|", len(cols)) + "---:|\n")
	for _, p := range r.profiles() {
		tcp := r.find(p, "tcp", "ordered")
		ref := 0.0
		if tcp != nil {
			ref = tcp.Mbps
		}
		fmt.Fprintf(&b, "| %s | %s |", p, mbps(tcp))
		for _, c := range cols {
			x := r.find(p, c.stack, "ordered")
			if x == nil || len(x.Runs) == 0 {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(&b, " %s (%s) |", mbps(x), pctOf(x.Mbps, ref))
		}
		study := "–"
		if st := Study[p]; st.DC != "" {
			study = st.DC + " / " + st.TCP
		}
		fmt.Fprintf(&b, " %s |\n", study)
	}
	b.WriteString("\n### Small-message latency under bulk load (one-way, ms)\n\n")
	b.WriteString("64-byte messages every 10 ms on a second channel (a second TCP connection with TCP_NODELAY " +
		"for TCP) while the bulk transfer runs; p50 / p99 of the one-way delay, median over runs; loss is the " +
		"share of probes that never arrived.\n\n")
	b.WriteString("| profile | stack | probe channel | p50 | p99 | probe loss | bulk Mbit/s |\n|---|---|---|---:|---:|---:|---:|\n")
	for _, p := range r.profiles() {
		for _, x := range r.Rows {
			if x.Profile != p || len(x.Runs) == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %.1f | %.1f%% | %.1f |\n", p, x.Stack, probeName(x.Probe), x.P50Ms, x.P99Ms, 100*x.Lost, x.Mbps)
		}
	}
	b.WriteString(tuningNotes)
	var perr error
	if r.PlotDir != "" {
		imgs, err := r.plots()
		perr = err
		if len(imgs) > 0 {
			b.WriteString("\n### Plots\n\n")
			link := r.LinkDir
			if link == "" {
				link = relToDocs(r.PlotDir)
			}
			for _, img := range imgs {
				fmt.Fprintf(&b, "![%s](%s)\n", strings.TrimSuffix(img, ".png"), filepath.ToSlash(filepath.Join(link, img)))
			}
		}
	}
	return b.String(), perr
}

func probeName(p string) string {
	switch p {
	case "ordered":
		return "reliable ordered"
	case "unordered":
		return "reliable unordered"
	case "partial":
		return "unordered, maxRetransmits 0"
	}
	return p
}

func relToDocs(dir string) string {
	if rel, err := filepath.Rel("docs", dir); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	abs, _ := filepath.Abs(dir)
	return abs
}

func run(name string, args ...string) string {
	out, _ := exec.Command(name, args...).Output()
	return string(out)
}

// plots writes one goodput-over-time PNG per profile and a bar chart of
// % of TCP, with gnuplot.
func (r *Report) plots() ([]string, error) {
	if _, err := exec.LookPath("gnuplot"); err != nil {
		return nil, fmt.Errorf("gnuplot not found (apt-get install gnuplot-nox): no plots")
	}
	if err := os.MkdirAll(r.PlotDir, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "petrel-plot")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var imgs []string
	for _, p := range r.profiles() {
		var plots []string
		for _, c := range append([]col{{stack: "tcp"}, {stack: "pion"}, {stack: "pion-tuned"}}, extraCols...) {
			st := c.stack
			x := r.find(p, st, "ordered")
			if x == nil || len(x.Series) == 0 {
				continue
			}
			f := filepath.Join(tmp, p+"-"+st+".dat")
			var d bytes.Buffer
			step := x.Runs[0].SeriesStep
			for i, v := range x.Series {
				fmt.Fprintf(&d, "%.3f %.3f\n", float64(i+1)*step, v)
			}
			os.WriteFile(f, d.Bytes(), 0o644)
			plots = append(plots, fmt.Sprintf("'%s' with lines lw 2 title '%s'", f, st))
		}
		if len(plots) == 0 {
			continue
		}
		img := "dc-vs-tcp-" + p + ".png"
		script := fmt.Sprintf(palette+`set terminal pngcairo size 1100,450
set output '%s'
set title 'Goodput over time, profile %s (run closest to the median)'
set xlabel 'seconds since first byte'
set ylabel 'Mbit/s'
set yrange [0:*]
set key outside right top font ',9'
set grid
plot %s
`, filepath.Join(r.PlotDir, img), p, strings.Join(plots, ", "))
		if err := gnuplot(script); err != nil {
			return imgs, err
		}
		imgs = append(imgs, img)
	}
	// Bar chart: % of TCP per profile, for the stacks that ran.
	var bars []col
	for _, c := range append([]col{{"pion", "Pion default"}, {"pion-tuned", "Pion tuned"}}, extraCols...) {
		if r.hasStack(c.stack) {
			bars = append(bars, c)
		}
	}
	var d bytes.Buffer
	for _, p := range r.profiles() {
		tcp := r.find(p, "tcp", "ordered")
		if tcp == nil || tcp.Mbps <= 0 {
			continue
		}
		d.WriteString(p)
		for _, c := range bars {
			v := 0.0
			if x := r.find(p, c.stack, "ordered"); x != nil {
				v = 100 * x.Mbps / tcp.Mbps
			}
			fmt.Fprintf(&d, " %.1f", v)
		}
		d.WriteString("\n")
	}
	f := filepath.Join(tmp, "pct.dat")
	os.WriteFile(f, d.Bytes(), 0o644)
	var using []string
	for i, c := range bars {
		if i == 0 {
			using = append(using, fmt.Sprintf("'%s' using 2:xtic(1) title '%s'", f, c.title))
		} else {
			using = append(using, fmt.Sprintf("'' using %d title '%s'", i+2, c.title))
		}
	}
	img := "dc-vs-tcp-percent.png"
	script := fmt.Sprintf(palette+`set terminal pngcairo size 1300,450
set output '%s'
set title 'Data-channel goodput as %% of TCP'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel '%% of TCP'
set yrange [0:*]
set key outside right top font ',9'
set grid ytics
set arrow from graph 0, first 90 to graph 1, first 90 nohead dt 2 lw 2
plot %s
`, filepath.Join(r.PlotDir, img), strings.Join(using, ", "))
	if err := gnuplot(script); err != nil {
		return imgs, err
	}
	return append(imgs, img), nil
}

// palette gives the plots' lines and bars 20 colours, in the order they
// are plotted (gnuplot's own repeat after 8, and a report can have 20
// stacks).
var palette = func() string {
	var b strings.Builder
	for i, c := range []string{"#9400d3", "#009e73", "#56b4e9", "#e69f00", "#f0e442", "#0072b2", "#e51e10", "#000000",
		"#8c564b", "#17becf", "#7f7f7f", "#bcbd22", "#ff7f0e", "#2ca02c", "#d62728", "#aec7e8",
		"#ff9896", "#c5b0d5", "#393b79", "#637939"} {
		fmt.Fprintf(&b, "set linetype %d lc rgb '%s'\n", i+1, c)
	}
	return b.String()
}()

func gnuplot(script string) error {
	cmd := exec.Command("gnuplot")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("gnuplot: %v: %s", err, out)
	}
	return nil
}

// WriteSection replaces the section that starts with heading (up to the
// next heading of the same level) in a Markdown file, or appends it; the
// rest of the file, written by others, is kept.
func WriteSection(path, heading, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	text := string(old)
	if text == "" {
		text = "# Benchmarks\n"
	}
	level := strings.Repeat("#", strings.Count(strings.Fields(heading)[0], "#"))
	section := heading + "\n" + body
	if !strings.HasSuffix(section, "\n") {
		section += "\n"
	}
	lines := strings.SplitAfter(text, "\n")
	start, end := -1, len(lines)
	for i, ln := range lines {
		t := strings.TrimRight(ln, "\n")
		if start < 0 && t == heading {
			start = i
			continue
		}
		if start >= 0 && strings.HasPrefix(t, level+" ") {
			end = i
			break
		}
	}
	var out string
	if start < 0 {
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		out = text + "\n" + section
	} else {
		out = strings.Join(lines[:start], "") + section
		if end < len(lines) {
			out += "\n" + strings.Join(lines[end:], "")
		}
	}
	return os.WriteFile(path, []byte(out), 0o644)
}
