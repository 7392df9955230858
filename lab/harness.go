package lab

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/petrel-sfu/petrel/netem"
	"github.com/petrel-sfu/petrel/rtc/sctptune"
)

// Harness starts peers in the hosts of a lab.
type Harness struct {
	// Argv starts a peer; PeerMain's flags are appended. Default: this
	// executable with "lab peer".
	Argv []string
	// Env is added to the peers' environment.
	Env []string
	// Stderr receives the peers' diagnostics (default: discarded).
	Stderr io.Writer
	// BrowserScript is lab/browser/dcpeer.mjs, the sender for the chromium
	// and firefox stacks (run with node; default: found from the working
	// directory, i.e. the repository root).
	BrowserScript string
	// PeerScripts is the directory of the aiortc and gstreamer stacks'
	// peers (default: lab/peers from the working directory).
	PeerScripts string
}

// scriptPeers are the stacks whose other end is another WebRTC
// implementation in Python, sending to Petrel or (to-) receiving from it:
// the interpreter (an environment variable overrides it, as for
// test/interop) and the script in lab/peers. aiortc runs under the Python
// that has it, webrtcbin under Debian's, which has its GObject bindings.
var scriptPeers = map[string]scriptPeer{
	"aiortc":    {"PYTHON", "python3", "aiortc_dc.py"},
	"gstreamer": {"GST_PYTHON", "/usr/bin/python3", "gst_dc.py"},
}

type scriptPeer struct{ env, python, script string }

// interpreter is the Python that runs the script.
func (p scriptPeer) interpreter() string { return cmp.Or(os.Getenv(p.env), p.python) }

// PeerProcs is the GOMAXPROCS of a Go peer (TCP's, Pion's, Petrel's; a
// variant's procs=N overrides it): its host's share of the machine's CPUs,
// which the two hosts and the emulator between them share. With a P for
// every CPU, a peer that hands each packet from one goroutine to another
// wakes an idle thread on a CPU the other host needs (lab/notes.md).
// The browsers run as they are.
func PeerProcs() int { return max(1, runtime.NumCPU()/2) }

// IsBrowser reports whether a stack is a browser sending to Petrel.
// A "-lean" suffix ("chromium-lean") has Petrel's end be a lean data
// session (Petrel's own SCTP, rtc/datachan) instead of a Pion PeerConnection.
func IsBrowser(stack string) bool {
	b := strings.TrimSuffix(stack, "-lean")
	return b == "chromium" || b == "firefox"
}

// isOther reports whether a stack is another implementation sending to
// Petrel: a browser, aiortc or GStreamer's webrtcbin (with "-lean" too).
func isOther(stack string) bool {
	_, script := scriptPeers[strings.TrimSuffix(stack, "-lean")]
	return script || IsBrowser(stack)
}

// IsToBrowser reports whether a stack is Petrel sending to a browser
// ("to-chromium", "to-firefox"), or with "-ws" TCP sending to it, the
// reference for those (lab/ws.go); or sending to aiortc or webrtcbin
// ("to-aiortc", "to-gstreamer"), which measure as the browser does.
func IsToBrowser(stack string) bool {
	if b, ok := strings.CutPrefix(strings.TrimSuffix(stack, "-lean"), "to-"); ok && isOther(b) {
		return true
	}
	b := strings.TrimSuffix(stack, "-ws")
	return b == "to-chromium" || b == "to-firefox"
}

// RunSpec is one measurement.
type RunSpec struct {
	Stack    string // tcp, pion, pion-tuned, petrel-lean (Pion → a lean data session), petrel (Petrel's own data channels both ends), chromium, firefox (browser → Petrel), aiortc, gstreamer (webrtcbin → Petrel), to-chromium, to-firefox, to-chromium-ws, to-firefox-ws (TCP → browser)
	Probe    string // ordered, unordered, partial, none
	Duration time.Duration
	MsgSize  int // 0: the tuning's default
}

func (h *Harness) argv() ([]string, error) {
	if len(h.Argv) > 0 {
		return h.Argv, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return []string{exe, "lab", "peer"}, nil
}

// Run measures one RunSpec between host a (sender) and host b (receiver).
// Its Go peers run with GOMAXPROCS PeerProcs, or what a variant's procs=N
// says, and the result records which.
func (h *Harness) Run(ctx context.Context, l *netem.Lab, rs RunSpec) (Result, error) {
	_, tune, _ := strings.Cut(rs.Stack, ":")
	procs := PeerProcs()
	if n := tuneProcs(strings.ReplaceAll(tune, "+", ",")); n > 0 {
		procs = n
	}
	res, err := h.run(ctx, l, rs, procs)
	res.Procs = procs
	return res, err
}

func (h *Harness) run(ctx context.Context, l *netem.Lab, rs RunSpec, procs int) (Result, error) {
	argv, err := h.argv()
	if err != nil {
		return Result{}, err
	}
	if rs.Probe == "" {
		rs.Probe = "ordered"
	}
	// A variant of a stack ("pion-tuned:detach=1+procs=1") runs the
	// stack's peers with those -tune overrides.
	stack, tune, _ := strings.Cut(rs.Stack, ":")
	recvRole, sendRole := "dc-answer", "dc-offer"
	switch stack {
	case "tcp":
		recvRole, sendRole = "tcp-recv", "tcp-send"
	case "petrel-lean":
		recvRole = "dc-answer-lean" // lab/lean.go
	case "petrel":
		recvRole, sendRole = "dc-answer-lean", "dc-offer-petrel" // lab/petrel.go
	}
	if isOther(stack) && strings.HasSuffix(stack, "-lean") {
		recvRole = "dc-answer-lean"
	}
	// The bulk data goes from host a to host b, as TCP's does: the sender
	// of a to-browser stack listens in a, and the browser measures in b,
	// so that it receives on the path mobile's jitter reorders.
	listen, browserHost := netem.AddrB, l.A
	if IsToBrowser(stack) {
		listen, browserHost = netem.AddrA, l.B
	}
	common := []string{"-addr", listen.String() + ":7000", "-duration", rs.Duration.String(), "-probe", rs.Probe,
		// Petrel (tuned Pion) also receives what a browser sends.
		"-tuned=" + strconv.FormatBool(stack == "pion-tuned" || stack == "petrel-lean" || stack == "petrel" || isOther(stack) || IsToBrowser(stack))}
	impl := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(stack, "to-"), "-lean"), "-ws")
	if tune != "" {
		common = append(common, "-tune", strings.ReplaceAll(tune, "+", ","))
	}
	if rs.MsgSize > 0 {
		common = append(common, "-msgsize", strconv.Itoa(rs.MsgSize))
	}
	// Longer than the peers' own limits, so that they report first.
	ctx, cancel := context.WithTimeout(ctx, 2*rs.Duration+120*time.Second)
	defer cancel()
	// Keep the peers' diagnostics for the error of a failed run.
	var diag tailBuffer
	stderr := io.Writer(&diag)
	if h.Stderr != nil {
		stderr = io.MultiWriter(h.Stderr, &diag)
	}
	start := func(host *netem.Host, role string) *execCmd {
		args := append(append([]string{}, argv[1:]...), append([]string{"-role", role}, common...)...)
		cmd := host.Command(ctx, argv[0], args...)
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(procs))
		cmd.Env = append(cmd.Env, h.Env...)
		cmd.Stderr = stderr
		return &execCmd{cmd}
	}
	// otherCmd starts another implementation's peer in browserHost: a
	// browser through lab/browser/dcpeer.mjs, or a script of lab/peers.
	otherCmd := func(impl string, extra ...string) *execCmd {
		var line []string
		if ss, ok := scriptPeers[impl]; ok {
			dir := cmp.Or(h.PeerScripts, "lab/peers")
			line = []string{ss.interpreter(), filepath.Join(dir, ss.script)}
		} else {
			line = []string{"node", cmp.Or(h.BrowserScript, "lab/browser/dcpeer.mjs"), "--browser", impl}
		}
		if abs, err := filepath.Abs(line[1]); err == nil {
			line[1] = abs
		}
		args := append(append(line[1:len(line):len(line)], "--addr", listen.String()+":7000",
			"--probe", rs.Probe, "--duration", strconv.Itoa(int(rs.Duration.Seconds())),
			"--high", strconv.FormatUint(sctptune.Petrel.SendHigh, 10), "--low", strconv.FormatUint(sctptune.Petrel.SendLow, 10)), extra...)
		cmd := browserHost.Command(ctx, line[0], args...)
		cmd.Stderr = stderr
		return &execCmd{cmd}
	}
	if IsToBrowser(stack) {
		// Petrel in a sends; the browser in b measures and prints the Result.
		role, transport := "dc-answer-send", "dc"
		switch {
		case strings.HasSuffix(stack, "-lean"):
			role = "dc-answer-send-lean" // lab/lean.go
		case strings.HasSuffix(stack, "-ws"):
			role, transport = "ws-send", "ws" // lab/ws.go
		}
		send := start(l.A, role)
		if err := send.Start(); err != nil {
			return Result{}, err
		}
		extra := []string{"--reverse", "true"}
		if transport != "dc" {
			extra = append(extra, "--transport", transport)
		}
		recv := otherCmd(impl, extra...)
		var out bytes.Buffer
		recv.Stdout = &out
		if err := recv.Start(); err != nil {
			send.Cancel()
			send.Wait()
			return Result{}, err
		}
		recvErr := recv.Wait()
		go func() { time.Sleep(5 * time.Second); send.Cancel() }()
		send.Wait()
		var res Result
		line := bytes.TrimSpace(out.Bytes())
		if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
			line = line[i+1:]
		}
		if err := json.Unmarshal(line, &res); err != nil {
			return Result{}, fmt.Errorf("%s: %v (output %q, exit %v; peers said: %s)", rs.Stack, err, line, recvErr, diag.String())
		}
		res.Stack = rs.Stack
		return res, nil
	}
	recv := start(l.B, recvRole)
	var out bytes.Buffer
	recv.Stdout = &out
	if err := recv.Start(); err != nil {
		return Result{}, err
	}
	var send *execCmd
	if isOther(stack) {
		send = otherCmd(impl)
	} else {
		send = start(l.A, sendRole)
	}
	if err := send.Start(); err != nil {
		recv.Cancel()
		recv.Wait()
		return Result{}, err
	}
	recvErr := recv.Wait()
	// The sender ends when the receiver closes; do not wait long for it.
	go func() { time.Sleep(5 * time.Second); send.Cancel() }()
	send.Wait()
	var res Result
	line := bytes.TrimSpace(out.Bytes())
	if err := json.Unmarshal(line, &res); err != nil {
		return Result{}, fmt.Errorf("%s receiver: %v (output %q, exit %v; peers said: %s)", rs.Stack, err, line, recvErr, diag.String())
	}
	res.Stack = rs.Stack
	if res.Error != "" {
		return res, fmt.Errorf("%s receiver: %s (peers said: %s)", rs.Stack, res.Error, diag.String())
	}
	return res, nil
}

// Row is the median of repeated runs of one (profile, stack, probe).
type Row struct {
	Profile string
	Stack   string
	Probe   string
	Runs    []Result
	Mbps    float64 // median
	P50Ms   float64 // median of the runs' p50
	P99Ms   float64 // median of the runs' p99
	Lost    float64 // probe loss fraction, median
	Series  []float64
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

func summarize(profile, stack, probe string, runs []Result) Row {
	r := Row{Profile: profile, Stack: stack, Probe: probe, Runs: runs}
	var mb, p50, p99, lost []float64
	for _, x := range runs {
		mb = append(mb, x.Mbps)
		p50 = append(p50, x.P50Ms)
		p99 = append(p99, x.P99Ms)
		if x.ProbeSent > 0 {
			lost = append(lost, 1-float64(x.ProbeGot)/float64(x.ProbeSent))
		}
	}
	r.Mbps, r.P50Ms, r.P99Ms, r.Lost = median(mb), median(p50), median(p99), median(lost)
	// The series of the run closest to the median, for plots.
	best := -1
	for i, x := range runs {
		if best < 0 || abs(x.Mbps-r.Mbps) < abs(runs[best].Mbps-r.Mbps) {
			best = i
		}
	}
	if best >= 0 {
		r.Series = runs[best].Series
	}
	return r
}

// MergeRows joins rows of the same profile, stack and probe (from results
// saved by several runs of the bench) into one with all their runs, in the
// order the rows first came.
func MergeRows(rows []Row) []Row {
	type key struct{ profile, stack, probe string }
	at := map[key]int{}
	var out []Row
	for _, r := range rows {
		k := key{r.Profile, r.Stack, r.Probe}
		i, ok := at[k]
		if !ok {
			at[k] = len(out)
			out = append(out, summarize(r.Profile, r.Stack, r.Probe, slices.Clone(r.Runs)))
			continue
		}
		out[i] = summarize(r.Profile, r.Stack, r.Probe, append(out[i].Runs, r.Runs...))
	}
	return out
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// BenchConfig is a full benchmark.
type BenchConfig struct {
	Profiles []string
	// Cases are (stack, probe) pairs; all run in every profile, interleaved
	// within each repetition so that the host's noise hits them alike.
	Cases    [][2]string
	Duration time.Duration
	Repeat   int
	Log      func(format string, args ...any)
}

// DefaultCases: throughput of every stack with an ordered probe, and the
// probe variants for the tuned stack.
var DefaultCases = [][2]string{
	{"tcp", "ordered"}, {"pion", "ordered"}, {"pion-tuned", "ordered"},
	{"pion-tuned", "unordered"}, {"pion-tuned", "partial"},
}

// Bench runs the matrix and returns one Row per (profile, case).
func (h *Harness) Bench(ctx context.Context, bc BenchConfig) ([]Row, error) {
	logf := bc.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	release, err := netem.Exclusive(0)
	if err != nil {
		return nil, err
	}
	defer release()
	var rows []Row
	for _, prof := range bc.Profiles {
		p, err := netem.LookupProfile(prof)
		if err != nil {
			return rows, err
		}
		l, err := netem.NewLab(netem.Options{Spec: p.Spec})
		if err != nil {
			return rows, err
		}
		runs := make([][]Result, len(bc.Cases))
		for rep := 0; rep < bc.Repeat; rep++ {
			for i, cs := range bc.Cases {
				res, err := h.Run(ctx, l, RunSpec{Stack: cs[0], Probe: cs[1], Duration: bc.Duration})
				if err != nil {
					logf("%s %s/%s run %d: %v", prof, cs[0], cs[1], rep+1, err)
					continue
				}
				logf("%s %s/%s run %d: %.1f Mbit/s, probe p50 %.1f ms p99 %.1f ms (%d/%d)", prof, cs[0], cs[1], rep+1,
					res.Mbps, res.P50Ms, res.P99Ms, res.ProbeGot, res.ProbeSent)
				runs[i] = append(runs[i], res)
			}
		}
		l.Close()
		for i, cs := range bc.Cases {
			rows = append(rows, summarize(prof, cs[0], cs[1], runs[i]))
		}
	}
	return rows, nil
}

// ParseCases reads "tcp/ordered,pion-tuned/partial".
func ParseCases(s string) ([][2]string, error) {
	var out [][2]string
	for _, c := range strings.Split(s, ",") {
		st, pr, ok := strings.Cut(strings.TrimSpace(c), "/")
		if !ok {
			pr = "ordered"
		}
		base, _, _ := strings.Cut(st, ":") // a variant: "pion-tuned:detach=1+procs=1"
		switch base {
		case "tcp", "pion", "pion-tuned", "petrel-lean", "petrel":
		default:
			if !isOther(base) && !IsToBrowser(base) {
				return nil, fmt.Errorf("unknown stack %q (tcp, pion, pion-tuned, petrel-lean, petrel, chromium, firefox, aiortc, gstreamer, to-chromium, to-firefox, to-aiortc, to-gstreamer, all of those but the first five with -lean, and to-chromium-ws, to-firefox-ws)", st)
			}
		}
		switch pr {
		case "ordered", "unordered", "partial", "none":
		default:
			return nil, fmt.Errorf("unknown probe %q (ordered, unordered, partial, none)", pr)
		}
		out = append(out, [2]string{st, pr})
	}
	return out, nil
}

// tailBuffer keeps the last 2 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2048 {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-2048:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) == 0 {
		return "nothing"
	}
	return strings.TrimSpace(string(t.buf))
}
