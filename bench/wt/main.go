// Command wt compares Petrel's three browser media paths — WebRTC, WebTransport
// datagrams, WebTransport streams — in the network lab: Petrel runs in host b,
// one Chromium with two clients (publisher and subscriber, bench/wt/peer.mjs)
// in host a, so media crosses the emulated link twice (a→b to the server,
// b→a to the viewer). The study's five experiments: bandwidth, one-way delay,
// random loss, a combined ladder, and a CPU limit on the client (a cgroup
// around the browser). It reports glass-to-glass latency read from the
// pixels, rendered and received frame rates, freezes, loss, bitrate, PSNR and
// session start, as medians over repetitions, into a Markdown section and
// PNG plots.
//
//	sudo go run ./bench/wt -grid reduced -repeat 2 -out docs/benchmarks.md
//	go run ./bench/wt -load bench/wt/results/x.json -out docs/benchmarks.md   (render again)
//
// Needs root (namespaces), node with playwright-core (test/browser), Chromium,
// gnuplot, and bin/petrel built with the web bundle (make build).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/petrel-sfu/petrel/netem"
)

// Cond is one lab condition of one experiment.
type Cond struct {
	Exp   string     `json:"exp"`   // bandwidth, delay, loss, ladder, cpu
	Name  string     `json:"name"`  // row label
	X     float64    `json:"x"`     // the varied quantity (Mbit/s, ms, %, step, cores)
	Spec  netem.Spec `json:"-"`     // both directions
	Desc  string     `json:"desc"`  // the spec as text
	Cores float64    `json:"cores"` // CPU limit for the browser (0: none)
}

// Result is what peer.mjs prints for one run.
type Result struct {
	Path             string   `json:"path"`
	Error            string   `json:"error,omitempty"`
	Seconds          float64  `json:"seconds"`
	RenderedFps      float64  `json:"renderedFps"`
	UniqueFps        float64  `json:"uniqueFps"`
	LatP50           *float64 `json:"latP50"`
	LatP95           *float64 `json:"latP95"`
	Psnr             *float64 `json:"psnr"`
	Freezes          int      `json:"freezes"`
	FreezeMs         float64  `json:"freezeMs"`
	Width            int      `json:"width"`
	Height           int      `json:"height"`
	Kbps             float64  `json:"kbps"`
	DecodedFps       float64  `json:"decodedFps"`
	ReceivedFps      float64  `json:"receivedFps"`
	Loss             float64  `json:"loss"`
	Nacks            int      `json:"nacks"`
	KeyframeRequests int      `json:"keyframeRequests"`
	TargetDelayMs    float64  `json:"targetDelayMs"`
	TransitMs        *float64 `json:"transitMs,omitempty"`
	JitterMs         *float64 `json:"jitterMs,omitempty"`
	RttMs            *float64 `json:"rttMs,omitempty"`
	Late             int      `json:"late"`
	Dropped          int      `json:"dropped"`
	Pub              any      `json:"pub,omitempty"`
	ConnectMs        float64  `json:"connectMs"`
	FirstFrameMs     float64  `json:"firstFrameMs"`
	// WebTransport: the start's steps (ms; see pages.mjs startSubscriber).
	StartDetail map[string]float64 `json:"startDetail,omitempty"`
	Log         []string           `json:"log,omitempty"` // the pages' last console lines, on an error
}

// Run is one measurement of one path in one condition.
type Run struct {
	Cond   Cond   `json:"cond"`
	Rep    int    `json:"rep"`
	Result Result `json:"result"`
}

// Saved is the raw output (-save, -load).
type Saved struct {
	Started  time.Time `json:"started"`
	Grid     string    `json:"grid"`
	Duration string    `json:"duration"`
	Repeat   int       `json:"repeat"`
	Runs     []Run     `json:"runs"`
	Note     string    `json:"-"` // what -load merged
}

var paths = []string{"webrtc", "wt-datagram", "wt-stream"}

// reportPaths orders the table's rows; wt-datagram-floor is the datagram
// receiver with its earlier retransmission hold (a raised playout floor for 5 s
// after each NACK), measured only in A/B runs (-paths).
var reportPaths = []string{"webrtc", "wt-datagram", "wt-datagram-floor", "wt-stream"}

func sym(p netem.Params) netem.Spec { return netem.Spec{AB: p, BA: p} }

// grid returns the conditions. "full" is the study's grid; "reduced" keeps the
// ends and a middle of each dimension; "smoke" is one clean condition.
func grid(name string) []Cond {
	var out []Cond
	add := func(exp, label string, x float64, p netem.Params, cores float64) {
		out = append(out, Cond{Exp: exp, Name: label, X: x, Spec: sym(p), Desc: p.String(), Cores: cores})
	}
	bw := []float64{0.1, 0.5, 1, 2, 5, 10, 20, 50, 100}
	delay := []float64{0, 10, 25, 50, 100, 150, 200, 250}
	loss := []float64{0, 0.1, 0.5, 1, 2, 5, 10, 20}
	ladder := fullLadder
	cores := []float64{1, 0.5, 0.25}
	switch name {
	case "smoke":
		add("delay", "0 ms", 0, netem.Params{}, 0)
		return out
	case "lean":
		// What fits half an hour on a shared 2-core machine: ends and middle of each dimension.
		bw = []float64{0.5, 2, 20}
		delay = []float64{0, 100, 250}
		loss = []float64{2, 10}
		ladder = []step{ladder[1], ladder[3]}
		cores = []float64{0.5}
	case "reduced":
		bw = []float64{0.5, 1, 2, 5, 20}
		delay = []float64{0, 50, 150, 250}
		loss = []float64{1, 5, 20}
		ladder = ladder[1:4]
		cores = []float64{1, 0.5}
	}
	for _, r := range bw {
		add("bandwidth", fmt.Sprintf("%g Mbit/s", r), r, netem.Params{Rate: int64(r * 1e6)}, 0)
	}
	for _, d := range delay {
		add("delay", fmt.Sprintf("%g ms", d), d, netem.Params{Delay: time.Duration(d) * time.Millisecond}, 0)
	}
	for _, l := range loss {
		if l == 0 {
			continue // the 0 ms delay row is the clean baseline
		}
		add("loss", fmt.Sprintf("%g%%", l), l, netem.Params{Loss: l / 100}, 0)
	}
	for _, s := range ladder {
		add("ladder", s.label(), float64(s.n),
			netem.Params{Rate: int64(s.rate * 1e6), Delay: time.Duration(s.delay) * time.Millisecond, Loss: s.loss / 100}, 0)
	}
	for _, c := range cores {
		add("cpu", fmt.Sprintf("%g CPU", c), c, netem.Params{}, c)
	}
	return out
}

// step is one step of the combined ladder; n is its place in the full ladder,
// so a step has one label in every grid.
type step struct {
	n                 int
	rate, delay, loss float64
}

var fullLadder = []step{{1, 20, 10, 0.1}, {2, 5, 25, 0.5}, {3, 2, 50, 1}, {4, 1, 100, 2}, {5, 0.5, 150, 5}}

func (s step) label() string {
	return fmt.Sprintf("L%d: %g Mbit/s, %g ms, %g%%", s.n, s.rate, s.delay, s.loss)
}

// relabel gives a ladder step saved by an older harness, numbered within its
// own grid (the lean grid's L1 and L2), the full ladder's label and place.
func relabel(c *Cond) {
	if c.Exp != "ladder" {
		return
	}
	_, rest, ok := strings.Cut(c.Name, ": ")
	if !ok {
		return
	}
	for _, s := range fullLadder {
		if strings.HasSuffix(s.label(), ": "+rest) {
			c.Name, c.X = s.label(), float64(s.n)
		}
	}
}

func main() {
	gridName := flag.String("grid", "reduced", "smoke, lean, reduced or full")
	pathsFlag := flag.String("paths", strings.Join(paths, ","), "paths to measure")
	exps := flag.String("exp", "", "only these experiments (comma-separated: bandwidth,delay,loss,ladder,cpu)")
	only := flag.String("cond", "", "only conditions whose name is one of these (comma-separated, e.g. \"1 Mbit/s,5%\")")
	dur := flag.Duration("duration", 12*time.Second, "measuring window per run")
	warm := flag.Duration("warmup", 4*time.Second, "after the first frame, before the window")
	repeat := flag.Int("repeat", 2, "repetitions (medians are reported)")
	bin := flag.String("petrel", "bin/petrel", "the petrel binary (with the web bundle)")
	save := flag.String("save", "", "save raw results as JSON (default bench/wt/results/<time>.json)")
	load := flag.String("load", "", "render saved results instead of measuring (comma-separated files merge; a later file's cells replace an earlier one's)")
	out := flag.String("out", "", "write the report section into this Markdown file (between the wt-bench markers)")
	plots := flag.String("plots", "docs/img", "directory for PNG plots")
	verbose := flag.Bool("v", false, "server and browser logs on stderr")
	flag.Parse()

	var saved Saved
	if *load != "" {
		for _, f := range strings.Split(*load, ",") {
			b, err := os.ReadFile(f)
			if err != nil {
				fatal(err)
			}
			var one Saved
			if err := json.Unmarshal(b, &one); err != nil {
				fatal(fmt.Errorf("%s: %w", f, err))
			}
			for i := range one.Runs {
				relabel(&one.Runs[i].Cond)
			}
			if saved.Runs == nil {
				saved = one
				continue
			}
			if !slices.Contains(strings.Split(saved.Grid, "+"), one.Grid) {
				saved.Grid += "+" + one.Grid
			}
			// A re-run of some cells and paths (an A/B run after a change)
			// replaces those of the earlier file rather than mixing with them.
			redone, cells := map[string]bool{}, map[string]bool{}
			for _, r := range one.Runs {
				redone[r.Cond.Exp+"|"+r.Cond.Name+"|"+r.Result.Path] = true
				cells[r.Cond.Name] = true
			}
			saved.Runs = slices.DeleteFunc(saved.Runs, func(r Run) bool { return redone[r.Cond.Exp+"|"+r.Cond.Name+"|"+r.Result.Path] })
			saved.Runs = append(saved.Runs, one.Runs...)
			saved.Note += fmt.Sprintf("; %s re-run %s (%d repetitions)", strings.Join(slices.Sorted(maps.Keys(cells)), "; "), one.Started.Format("2006-01-02 15:04 UTC"), one.Repeat)
		}
	} else {
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer cancel()
		saved = Saved{Started: time.Now().UTC(), Grid: *gridName, Duration: dur.String(), Repeat: *repeat}
		if *save == "" {
			*save = filepath.Join("bench/wt/results", saved.Started.Format("2006-01-02T15-04")+"-"+*gridName+".json")
		}
		conds := grid(*gridName)
		if *exps != "" {
			var keep []Cond
			for _, c := range conds {
				if strings.Contains(","+*exps+",", ","+c.Exp+",") {
					keep = append(keep, c)
				}
			}
			conds = keep
		}
		if *only != "" {
			var keep []Cond
			for _, c := range conds {
				if strings.Contains(","+*only+",", ","+c.Name+",") {
					keep = append(keep, c)
				}
			}
			conds = keep
		}
		b := &bench{bin: *bin, dur: *dur, warm: *warm, verbose: *verbose}
		// Repetition outermost: a run cut short still has every cell once.
		for rep := 0; rep < *repeat; rep++ {
			for i, c := range conds {
				for _, p := range strings.Split(*pathsFlag, ",") {
					if ctx.Err() != nil {
						break
					}
					fmt.Fprintf(os.Stderr, "[%d/%d] %s / %s rep %d … ", i+1, len(conds), c.Name, p, rep+1)
					r, err := b.run(ctx, c, p, fmt.Sprintf("c%dr%d%s", i, rep, p[:4]))
					if err != nil {
						r = Result{Path: p, Error: err.Error()}
					}
					if r.Error != "" {
						fmt.Fprintf(os.Stderr, "error: %s\n", r.Error)
					} else {
						fmt.Fprintf(os.Stderr, "%.1f fps, p50 %s ms, PSNR %s, %.0f kbit/s, start %.0f ms %s\n", r.UniqueFps, fmtp(r.LatP50, 0), fmtp(r.Psnr, 1), r.Kbps, r.FirstFrameMs, startSteps(r.StartDetail))
					}
					saved.Runs = append(saved.Runs, Run{Cond: c, Rep: rep, Result: r})
					// Save as we go: a long run interrupted still leaves its rows.
					if err := writeJSON(*save, saved); err != nil {
						fatal(err)
					}
				}
			}
		}
		fmt.Fprintf(os.Stderr, "raw results: %s\n", *save)
	}
	rep := report(saved, *plots)
	if *out == "" {
		fmt.Print(rep)
		return
	}
	if err := splice(*out, rep); err != nil {
		fatal(err)
	}
}

// startSteps prints a WebTransport start's steps in their order.
func startSteps(d map[string]float64) string {
	if d == nil {
		return ""
	}
	var b strings.Builder
	for _, k := range []string{"trackMs", "datagram", "object", "keyframe", "decoded", "keyRequests", "early"} {
		if v, ok := d[k]; ok {
			fmt.Fprintf(&b, " %s=%.0f", k, v)
		}
	}
	return "(" + strings.TrimSpace(b.String()) + ")"
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench/wt:", err)
	os.Exit(1)
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

type bench struct {
	bin        string
	dur, warm  time.Duration
	verbose    bool
	cgroupSeq  int
	serverLogs string
}

const (
	httpPort = 7880
	labName  = "wt"
)

// run measures one path in one condition: a fresh lab and server each time, so
// no state (estimates, caches) carries over between runs.
func (b *bench) run(ctx context.Context, c Cond, path, room string) (Result, error) {
	// Other lab measurements (netem timing tests, the data channel bench) must
	// not share the CPU with this one.
	release, err := netem.Exclusive(10 * time.Minute)
	if err != nil {
		return Result{}, err
	}
	defer release()
	// The link is impaired once the pages are loaded (peer.mjs --ready): the
	// app's 260 KB are no part of the measurement, and at 0.1 Mbit/s they
	// took longer than the page-load timeout.
	l, err := netem.NewLab(netem.Options{Name: fmt.Sprintf("%s%d", labName, os.Getpid()%100000)})
	if err != nil {
		return Result{}, fmt.Errorf("lab: %w", err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(ctx, b.dur+b.warm+3*time.Minute)
	defer cancel()

	bin, err := filepath.Abs(b.bin)
	if err != nil {
		return Result{}, err
	}
	addr := netem.AddrB.String()
	srv := l.B.Command(ctx, bin, "serve", "--http", fmt.Sprintf("%s:%d", addr, httpPort),
		"--rtc-udp-port", strconv.Itoa(httpPort+2), "--rtc-tcp-port", strconv.Itoa(httpPort+3), "--turn-port", strconv.Itoa(httpPort+4))
	// A fresh API key per run; the runner signs the pages' tokens with it (the
	// server hands out development tokens to loopback clients only).
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return Result{}, err
	}
	keyEnv := []string{"PETREL_API_KEY=wtbench", "PETREL_API_SECRET=" + hex.EncodeToString(secret)}
	srv.Env = append(filterEnv(srv.Env, "PETREL_API_KEY", "PETREL_API_SECRET"), keyEnv...)
	token := func(identity string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, "token", "--room", room, "--identity", identity, "--publish", "--subscribe")
		cmd.Env = append(filterEnv(nil, "PETREL_API_KEY", "PETREL_API_SECRET"), keyEnv...)
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("petrel token: %w", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return strings.TrimSpace(lines[len(lines)-1]), nil
	}
	pubTok, err := token("pub")
	if err != nil {
		return Result{}, err
	}
	subTok, err := token("sub")
	if err != nil {
		return Result{}, err
	}
	var srvLog bytes.Buffer
	srv.Stdout, srv.Stderr = &srvLog, &srvLog
	if b.verbose {
		srv.Stdout, srv.Stderr = io.MultiWriter(&srvLog, os.Stderr), io.MultiWriter(&srvLog, os.Stderr)
	}
	if err := srv.Start(); err != nil {
		return Result{}, fmt.Errorf("petrel serve: %w", err)
	}
	defer func() {
		srv.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			srv.Cancel()
			<-done
		}
	}()

	args := []string{"bench/wt/peer.mjs", "--base", fmt.Sprintf("http://%s:%d", addr, httpPort), "--path", path,
		"--duration", strconv.Itoa(int(b.dur.Seconds())), "--warmup", strconv.Itoa(int(b.warm.Seconds())), "--room", room,
		"--pubtoken", pubTok, "--subtoken", subTok, "--ready", "1"}
	var cg string
	if c.Cores > 0 {
		if cg, err = b.cgroup(c.Cores); err != nil {
			return Result{}, err
		}
		defer os.Remove(cg)
	}
	peer := l.A.Command(ctx, "node", args...)
	var stdout, stderr bytes.Buffer
	peer.Stderr = &stderr
	stdin, err := peer.StdinPipe()
	if err != nil {
		return Result{}, err
	}
	defer stdin.Close()
	out, err := peer.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if sc.Text() == "ready" {
				l.Set(c.Spec)
				io.WriteString(stdin, "go\n")
				continue
			}
			stdout.Write(sc.Bytes())
			stdout.WriteByte('\n')
		}
		io.Copy(io.Discard, out)
	}()
	if b.verbose {
		peer.Stderr = io.MultiWriter(&stderr, os.Stderr)
	}
	// Chromium runs in its own session and inherits stdout: without a bound,
	// Wait would wait for it after node is gone.
	peer.WaitDelay = 10 * time.Second
	if cg != "" {
		// A shell joins the cgroup, then becomes `ip netns exec … node`: node
		// and Chromium inherit it. (Inside the namespace /sys is the
		// namespace's own, without the cgroup tree; and moving the started
		// `ip` from outside failed with EINVAL on this kernel.)
		sh, err := exec.LookPath("sh")
		if err != nil {
			return Result{}, err
		}
		peer.Args = append([]string{"sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg}, peer.Args...)
		peer.Path = sh
	}
	runErr := peer.Start()
	if runErr == nil {
		<-read // before Wait, which closes the pipe
		runErr = peer.Wait()
	}
	var r Result
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) > 0 && line[0] == '{' && json.Unmarshal(line, &r) == nil {
			found = true
		}
	}
	if !found {
		tail := srvLog.String()
		if len(tail) > 1500 {
			tail = tail[len(tail)-1500:]
		}
		return Result{}, fmt.Errorf("peer: %v; stderr: %s; server log tail: %s", runErr, lastN(stderr.String(), 800), tail)
	}
	return r, nil
}

func lastN(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// cgroup makes a cgroup (v1 cpu controller, or v2) limited to `cores` CPUs.
func (b *bench) cgroup(cores float64) (string, error) {
	b.cgroupSeq++
	name := fmt.Sprintf("petrel-wt-%d-%d", os.Getpid(), b.cgroupSeq)
	period := 100000
	quota := int(cores * float64(period))
	if _, err := os.Stat("/sys/fs/cgroup/cpu"); err == nil {
		dir := filepath.Join("/sys/fs/cgroup/cpu", name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", fmt.Errorf("cgroup: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(period)), 0o644); err != nil {
			return "", err
		}
		return dir, os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(quota)), 0o644)
	}
	dir := filepath.Join("/sys/fs/cgroup", name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	return dir, os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, period)), 0o644)
}

func filterEnv(env []string, drop ...string) []string {
	if env == nil {
		env = os.Environ()
	}
	var out []string
	for _, e := range env {
		keep := true
		for _, d := range drop {
			if strings.HasPrefix(e, d+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, e)
		}
	}
	return out
}

// ---- report ----------------------------------------------------------------

// Agg is the median over the repetitions of one path in one condition.
type Agg struct {
	N, Failed                           int
	Lat50, Lat95, Fps, Rendered, Recv   float64
	Psnr, Freezes, FreezeMs, Loss, Kbps float64
	Start                               float64
	Err                                 string
	HasLat, HasPsnr                     bool
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func aggregate(runs []Run) (conds []Cond, aggs map[string]map[string]*Agg) {
	aggs = map[string]map[string]*Agg{}
	type acc struct{ lat50, lat95, fps, rend, recv, psnr, frz, frzMs, loss, kbps, start []float64 }
	accs := map[string]map[string]*acc{}
	for _, r := range runs {
		key := r.Cond.Exp + "|" + r.Cond.Name
		if _, ok := aggs[key]; !ok {
			aggs[key] = map[string]*Agg{}
			accs[key] = map[string]*acc{}
			conds = append(conds, r.Cond)
		}
		p := r.Result.Path
		if aggs[key][p] == nil {
			aggs[key][p] = &Agg{}
			accs[key][p] = &acc{}
		}
		a, ac := aggs[key][p], accs[key][p]
		if r.Result.Error != "" {
			a.Failed++
			a.Err = r.Result.Error
			continue
		}
		a.N++
		x := r.Result
		if x.LatP50 != nil {
			ac.lat50 = append(ac.lat50, *x.LatP50)
			ac.lat95 = append(ac.lat95, *x.LatP95)
		}
		if x.Psnr != nil {
			ac.psnr = append(ac.psnr, *x.Psnr)
		}
		ac.fps = append(ac.fps, x.UniqueFps)
		ac.rend = append(ac.rend, x.RenderedFps)
		ac.recv = append(ac.recv, x.ReceivedFps)
		ac.frz = append(ac.frz, float64(x.Freezes))
		ac.frzMs = append(ac.frzMs, x.FreezeMs)
		ac.loss = append(ac.loss, x.Loss)
		ac.kbps = append(ac.kbps, x.Kbps)
		ac.start = append(ac.start, x.FirstFrameMs)
	}
	for k, m := range accs {
		for p, ac := range m {
			a := aggs[k][p]
			a.Lat50, a.Lat95, a.HasLat = median(ac.lat50), median(ac.lat95), len(ac.lat50) > 0
			a.Psnr, a.HasPsnr = median(ac.psnr), len(ac.psnr) > 0
			a.Fps, a.Rendered, a.Recv = median(ac.fps), median(ac.rend), median(ac.recv)
			a.Freezes, a.FreezeMs, a.Loss, a.Kbps, a.Start = median(ac.frz), median(ac.frzMs), median(ac.loss), median(ac.kbps), median(ac.start)
		}
	}
	order := map[string]int{"bandwidth": 0, "delay": 1, "loss": 2, "ladder": 3, "cpu": 4}
	sort.SliceStable(conds, func(i, j int) bool {
		if order[conds[i].Exp] != order[conds[j].Exp] {
			return order[conds[i].Exp] < order[conds[j].Exp]
		}
		if conds[i].Exp == "cpu" {
			return conds[i].X > conds[j].X
		}
		return conds[i].X < conds[j].X
	})
	return conds, aggs
}

func fmtp(v *float64, prec int) string {
	if v == nil {
		return "—"
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}

// works: WebRTC "keeps working" when it shows at least 5 distinct frames/s.
func works(a *Agg) bool { return a != nil && a.N > 0 && a.Fps >= 5 && a.HasLat }

func report(s Saved, plotDir string) string {
	conds, aggs := aggregate(s.Runs)
	var w strings.Builder
	fmt.Fprintf(&w, "Run %s, grid `%s`, %s window after a warm-up, %d repetition(s) per cell (medians). Raw results in `bench/wt/results/`; `go run ./bench/wt -load FILE -out docs/benchmarks.md` renders them again.\n\n",
		s.Started.Format("2006-01-02 15:04 UTC")+s.Note, s.Grid, s.Duration, s.Repeat)
	w.WriteString("Latency is glass to glass (p50 / p95 ms, from the stamp drawn into the source canvas to the subscriber's rendered frame); fps counts distinct source frames rendered; freezes per window (WebRTC's definition); loss is packets (WebRTC) or frames (WebTransport) lost before the jitter buffer; start is subscriber connect → first rendered frame. **Bold ratio**: a target missed (WT-datagrams latency > 1.2× WebRTC's or fps < 0.9× WebRTC's where WebRTC works).\n\n")
	w.WriteString("| experiment | condition | path | latency p50 / p95 | fps (rendered) | freezes | loss | kbit/s | PSNR dB | start ms | vs WebRTC (lat, fps) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	var missed []string
	for _, c := range conds {
		key := c.Exp + "|" + c.Name
		base := aggs[key]["webrtc"]
		for _, p := range reportPaths {
			a := aggs[key][p]
			if a == nil {
				continue
			}
			if a.N == 0 {
				fmt.Fprintf(&w, "| %s | %s | %s | failed: %s |  |  |  |  |  |  |  |\n", c.Exp, c.Name, p, mdEsc(lastN(a.Err, 120)))
				if p == "wt-datagram" && works(base) {
					missed = append(missed, fmt.Sprintf("%s %s: no frames over WT datagrams (%d runs failed)", c.Exp, c.Name, a.Failed))
				}
				continue
			}
			lat := "—"
			if a.HasLat {
				lat = fmt.Sprintf("%.0f / %.0f", a.Lat50, a.Lat95)
			}
			ps := "—"
			if a.HasPsnr {
				ps = fmt.Sprintf("%.1f", a.Psnr)
			}
			cmp := ""
			if p != "webrtc" && works(base) && a.HasLat {
				rl, rf := a.Lat50/base.Lat50, a.Fps/base.Fps
				ls, fs := fmt.Sprintf("%.2f×", rl), fmt.Sprintf("%.2f×", rf)
				if p == "wt-datagram" {
					if rl > 1.2 {
						ls = "**" + ls + "**"
						missed = append(missed, fmt.Sprintf("%s %s: latency %.2f× WebRTC's", c.Exp, c.Name, rl))
					}
					if rf < 0.9 {
						fs = "**" + fs + "**"
						missed = append(missed, fmt.Sprintf("%s %s: fps %.2f× WebRTC's", c.Exp, c.Name, rf))
					}
				}
				cmp = ls + ", " + fs
			} else if p == "wt-datagram" && works(base) && !a.HasLat {
				missed = append(missed, fmt.Sprintf("%s %s: no frames over WT datagrams", c.Exp, c.Name))
			}
			fail := ""
			if a.Failed > 0 {
				fail = fmt.Sprintf(" (%d failed)", a.Failed)
			}
			fmt.Fprintf(&w, "| %s | %s | %s%s | %s | %.1f (%.1f) | %.0f | %.1f%% | %.0f | %s | %.0f | %s |\n",
				c.Exp, c.Name, p, fail, lat, a.Fps, a.Rendered, a.Freezes, 100*a.Loss, a.Kbps, ps, a.Start, cmp)
		}
	}
	w.WriteString("\n")
	if len(missed) > 0 {
		w.WriteString("Targets missed in this run (WT-datagrams against WebRTC): " + strings.Join(missed, "; ") + ".\n\n")
	} else {
		w.WriteString("No WT-datagram target missed in the cells measured.\n\n")
	}
	imgs, err := plots(conds, aggs, plotDir)
	if err != nil {
		fmt.Fprintf(&w, "(plots: %v)\n\n", err)
	}
	for _, img := range imgs {
		fmt.Fprintf(&w, "![%s](img/%s)\n", strings.TrimSuffix(img, ".png"), img)
	}
	return w.String()
}

func mdEsc(s string) string { return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s) }

// plots draws, per experiment, latency p50 and fps against the varied quantity.
func plots(conds []Cond, aggs map[string]map[string]*Agg, dir string) ([]string, error) {
	if _, err := exec.LookPath("gnuplot"); err != nil {
		return nil, errors.New("gnuplot not found (apt-get install gnuplot-nox)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "petrel-wt-plot")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	xlabel := map[string]string{"bandwidth": "bandwidth each way (Mbit/s)", "delay": "one-way delay each way (ms)", "loss": "random loss each way (%)", "ladder": "ladder step", "cpu": "CPU limit on the browser (cores)"}
	var imgs []string
	for _, exp := range []string{"bandwidth", "delay", "loss", "ladder", "cpu"} {
		var lat, fps []string
		for _, p := range paths {
			var d bytes.Buffer
			n := 0
			for _, c := range conds {
				a := aggs[c.Exp+"|"+c.Name][p]
				// The clean baseline (0 ms) is also the 0% loss point.
				if c.Exp != exp && !(exp == "loss" && c.Exp == "delay" && c.X == 0) {
					continue
				}
				if a == nil || a.N == 0 {
					continue
				}
				x := c.X
				if exp == "loss" && c.Exp == "delay" {
					x = 0
				}
				fmt.Fprintf(&d, "%g %.1f %.2f\n", x, a.Lat50, a.Fps)
				n++
			}
			if n == 0 {
				continue
			}
			f := filepath.Join(tmp, exp+"-"+p+".dat")
			if err := os.WriteFile(f, sortedLines(d.String()), 0o644); err != nil {
				return imgs, err
			}
			lat = append(lat, fmt.Sprintf("'%s' using 1:2 with linespoints lw 2 title '%s'", f, p))
			fps = append(fps, fmt.Sprintf("'%s' using 1:3 with linespoints lw 2 title '%s'", f, p))
		}
		if len(lat) == 0 {
			continue
		}
		img := "wt-" + exp + ".png"
		logx := ""
		if exp == "bandwidth" {
			logx = "set logscale x"
		}
		script := fmt.Sprintf(`set terminal pngcairo size 1000,380
set output '%s'
set multiplot layout 1,2 title 'WebRTC vs WebTransport: %s'
set grid
%s
set xlabel '%s'
set ylabel 'glass-to-glass p50 (ms)'
set key top left
plot %s
set ylabel 'distinct frames rendered per s'
set yrange [0:*]
plot %s
unset multiplot
`, filepath.Join(dir, img), exp, logx, xlabel[exp], strings.Join(lat, ", "), strings.Join(fps, ", "))
		cmd := exec.Command("gnuplot")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			return imgs, fmt.Errorf("gnuplot: %v: %s", err, out)
		}
		imgs = append(imgs, img)
	}
	return imgs, nil
}

func sortedLines(s string) []byte {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	sort.Slice(lines, func(i, j int) bool {
		a, _ := strconv.ParseFloat(strings.Fields(lines[i])[0], 64)
		b, _ := strconv.ParseFloat(strings.Fields(lines[j])[0], 64)
		return a < b
	})
	return []byte(strings.Join(lines, "\n") + "\n")
}

// splice replaces the text between the wt-bench markers in a Markdown file.
func splice(file, section string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	const start, end = "<!-- wt-bench:start -->", "<!-- wt-bench:end -->"
	s := string(b)
	i, j := strings.Index(s, start), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %s … %s markers (add them in the WebTransport section)", file, start, end)
	}
	s = s[:i+len(start)] + "\n" + section + s[j:]
	return os.WriteFile(file, []byte(s), 0o644)
}
