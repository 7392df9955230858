// Package lab measures data channels against TCP between the two hosts of a
// netem lab: bulk throughput over a reliable ordered channel, and the
// latency of small messages sent alongside the bulk, with Petrel's Pion
// stack on both sides and one process per host.
package lab

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Result is what the receiving peer measured. It is printed as one JSON
// line on the receiver's stdout.
type Result struct {
	Stack      string    `json:"stack"`
	Probe      string    `json:"probe"`
	Bytes      int64     `json:"bytes"`       // bulk payload received in the window
	Seconds    float64   `json:"seconds"`     // length of the window
	Mbps       float64   `json:"mbps"`        // payload goodput
	Series     []float64 `json:"series"`      // Mbit/s per SeriesStep
	SeriesStep float64   `json:"series_step"` // seconds
	ProbeSent  int       `json:"probe_sent"`  // highest probe sequence seen + 1
	ProbeGot   int       `json:"probe_got"`   // probes received in the window
	P50Ms      float64   `json:"p50_ms"`      // one-way probe latency
	P99Ms      float64   `json:"p99_ms"`
	SetupMs    float64   `json:"setup_ms"` // connect to first bulk byte
	Error      string    `json:"error,omitempty"`
	// Procs is the Go peers' GOMAXPROCS (set by the harness; 0 in results
	// saved before it was: a P per CPU).
	Procs int `json:"procs,omitempty"`
}

const (
	probeSize     = 64
	probeInterval = 10 * time.Millisecond
	seriesStep    = 250 * time.Millisecond
)

// meter counts bulk bytes and probe delays within the measuring window,
// which opens with the first bulk byte and lasts for the run's duration.
type meter struct {
	dur     time.Duration
	start   atomic.Int64 // unix ns of the first bulk byte, 0 before
	bytes   atomic.Int64
	mu      sync.Mutex
	series  []int64
	delays  []float64
	maxSeq  int
	got     int
	done    chan struct{}
	once    sync.Once
	created time.Time
}

func newMeter(dur time.Duration) *meter {
	return &meter{dur: dur, done: make(chan struct{}), series: make([]int64, int(dur/seriesStep)+1), created: time.Now()}
}

func (m *meter) bulk(n int, _ []byte) {
	now := time.Now().UnixNano()
	s := m.start.Load()
	if s == 0 {
		if m.start.CompareAndSwap(0, now) {
			s = now
			time.AfterFunc(m.dur, func() { m.once.Do(func() { close(m.done) }) })
		} else {
			s = m.start.Load()
		}
	}
	el := time.Duration(now - s)
	if el >= m.dur {
		return
	}
	m.bytes.Add(int64(n))
	m.mu.Lock()
	m.series[int(el/seriesStep)] += int64(n)
	m.mu.Unlock()
}

// channel is how the receiver takes the messages of the sender's channel
// label ("bulk" or "probe"); nil for any other channel.
func (m *meter) channel(label string) func(n int, b []byte) {
	switch label {
	case "bulk":
		return m.bulk
	case "probe":
		return func(n int, b []byte) { m.probe(b[:n]) }
	}
	return nil
}

func (m *meter) probe(b []byte) {
	if len(b) < 16 {
		return
	}
	now := time.Now().UnixNano()
	s := m.start.Load()
	if s == 0 || now-s >= int64(m.dur) {
		return
	}
	seq := int(binary.BigEndian.Uint64(b))
	sent := int64(binary.BigEndian.Uint64(b[8:]))
	m.mu.Lock()
	m.delays = append(m.delays, float64(now-sent)/1e6)
	m.got++
	m.maxSeq = max(m.maxSeq, seq+1)
	m.mu.Unlock()
}

func (m *meter) result(stack, probe string) Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := Result{Stack: stack, Probe: probe, Bytes: m.bytes.Load(), Seconds: m.dur.Seconds(), SeriesStep: seriesStep.Seconds(),
		ProbeSent: m.maxSeq, ProbeGot: m.got}
	r.Mbps = float64(r.Bytes) * 8 / 1e6 / r.Seconds
	for _, b := range m.series[:len(m.series)-1] {
		r.Series = append(r.Series, float64(b)*8/1e6/seriesStep.Seconds())
	}
	if s := m.start.Load(); s > 0 {
		r.SetupMs = float64(s-m.created.UnixNano()) / 1e6
	}
	if len(m.delays) > 0 {
		d := append([]float64(nil), m.delays...)
		sort.Float64s(d)
		r.P50Ms = d[len(d)/2]
		r.P99Ms = d[min(len(d)-1, len(d)*99/100)]
	}
	return r
}

// prober sends a stamped small message every probeInterval until stop.
func prober(send func([]byte) error, stop <-chan struct{}) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	msg := make([]byte, probeSize)
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		binary.BigEndian.PutUint64(msg, uint64(seq))
		binary.BigEndian.PutUint64(msg[8:], uint64(time.Now().UnixNano()))
		if send(msg) != nil {
			return
		}
	}
}

// PeerConfig is one side of a run.
type PeerConfig struct {
	Role     string        // tcp-recv, tcp-send, dc-answer, dc-offer
	Addr     string        // receiver's listen address (host b)
	Duration time.Duration // measuring window
	Probe    string        // probe channel: ordered, unordered, partial (unordered, no retransmits), none
	Tuned    bool          // apply TuneSCTP
	MsgSize  int           // bulk message size for data channels
	Tune     string        // tuning overrides, "mincwnd=262144,castep=12000"
}

// PeerMain runs one peer; it is `petrel lab peer` and the re-executed test
// binary. The receiver prints its Result as JSON on stdout.
func PeerMain(args []string) int {
	fs := flag.NewFlagSet("lab peer", flag.ContinueOnError)
	var c PeerConfig
	fs.StringVar(&c.Role, "role", "", "tcp-recv, tcp-send, dc-answer, dc-answer-lean, dc-offer, dc-offer-petrel, dc-answer-send, dc-answer-send-lean or ws-send")
	fs.StringVar(&c.Addr, "addr", "10.201.0.2:7000", "the listening peer's address (the receiver's; the sender's for a browser)")
	fs.DurationVar(&c.Duration, "duration", 5*time.Second, "measuring window")
	fs.StringVar(&c.Probe, "probe", "ordered", "latency probe channel: ordered, unordered, partial, none")
	fs.BoolVar(&c.Tuned, "tuned", false, "apply Petrel's SCTP tuning")
	fs.IntVar(&c.MsgSize, "msgsize", 0, "bulk message size (data channels; 0: the tuning's)")
	fs.StringVar(&c.Tune, "tune", "", "tuning overrides: rcvbuf, high, low, msgsize, sockbuf, replay, mincwnd, fastrtxwnd, castep (name=bytes,...); detach=1, nomux=1, procs=N (GOMAXPROCS), env.NAME=VALUE")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of this peer")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// The harness starts the peers itself; this environment variable gets
	// their profiles without a flag per run (one file per role, the last run's).
	if d := os.Getenv("PETREL_LAB_PROFILE"); *cpuprofile == "" && d != "" {
		*cpuprofile = filepath.Join(d, c.Role+".prof")
	}
	if *cpuprofile != "" {
		if f, err := os.Create(*cpuprofile); err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if n := tuneProcs(c.Tune); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	for _, kv := range strings.Split(c.Tune, ",") {
		// env.NAME=VALUE: for experiments with a patched library (a
		// `replace` in a scratch go.mod) that reads its knobs from the
		// environment, or PIONS_LOG_TRACE, per case of one bench.
		if kv, ok := strings.CutPrefix(kv, "env."); ok {
			if k, v, ok := strings.Cut(kv, "="); ok {
				os.Setenv(k, v)
			}
		}
	}
	// A peer that outlives its run by far is stuck: say where before the
	// harness kills it.
	watchdog := time.AfterFunc(2*c.Duration+90*time.Second, func() { dumpStacks(c.Role) })
	defer watchdog.Stop()
	var err error
	var res Result
	switch c.Role {
	case "tcp-recv":
		res, err = tcpRecv(c)
	case "tcp-send":
		err = tcpSend(c)
	case "dc-answer":
		res, err = dcAnswer(c)
	case "dc-answer-lean":
		res, err = dcAnswerLean(c)
	case "dc-offer":
		err = dcOffer(c)
	case "dc-offer-petrel":
		err = dcOfferPetrel(c)
	case "dc-answer-send":
		err = dcAnswerSend(c)
	case "dc-answer-send-lean":
		err = dcAnswerSendLean(c)
	case "ws-send":
		err = wsSend(c)
	default:
		err = fmt.Errorf("unknown role %q", c.Role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "lab peer %s: %v\n", c.Role, err)
		if c.Role == "tcp-recv" || c.Role == "dc-answer" || c.Role == "dc-answer-lean" {
			res.Error = err.Error()
			json.NewEncoder(os.Stdout).Encode(res)
		}
		return 1
	}
	if c.Role == "tcp-recv" || c.Role == "dc-answer" || c.Role == "dc-answer-lean" {
		json.NewEncoder(os.Stdout).Encode(res)
	}
	return 0
}

// TCP: the sender opens a bulk connection, then a probe connection; both
// are read by the receiver until the window closes. Probes are framed by
// their fixed size.
func tcpRecv(c PeerConfig) (Result, error) {
	ln, err := net.Listen("tcp4", c.Addr)
	if err != nil {
		return Result{}, err
	}
	defer ln.Close()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(c.Duration + 60*time.Second))
	m := newMeter(c.Duration)
	bulk, err := ln.Accept()
	if err != nil {
		return Result{}, err
	}
	defer bulk.Close()
	var probe net.Conn
	if c.Probe != "none" {
		if probe, err = ln.Accept(); err != nil {
			return Result{}, err
		}
		defer probe.Close()
		probe.(*net.TCPConn).SetNoDelay(true)
		go func() {
			buf := make([]byte, probeSize)
			for {
				if _, err := io.ReadFull(probe, buf); err != nil {
					return
				}
				m.probe(buf)
			}
		}()
	}
	go func() {
		buf := make([]byte, 256<<10)
		for {
			n, err := bulk.Read(buf)
			if n > 0 {
				m.bulk(n, nil)
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-m.done:
	case <-time.After(c.Duration + 30*time.Second):
		return m.result("tcp", c.Probe), errors.New("no bulk data within 30 s")
	}
	return m.result("tcp", c.Probe), nil
}

func tcpSend(c PeerConfig) error {
	bulk, err := dialRetry(c.Addr)
	if err != nil {
		return err
	}
	defer bulk.Close()
	stop := make(chan struct{})
	defer close(stop)
	if c.Probe != "none" {
		probe, err := net.Dial("tcp4", c.Addr)
		if err != nil {
			return err
		}
		defer probe.Close()
		probe.(*net.TCPConn).SetNoDelay(true)
		go prober(func(b []byte) error { _, err := probe.Write(b); return err }, stop)
	}
	buf := make([]byte, 256<<10)
	deadline := time.Now().Add(c.Duration + 60*time.Second)
	for time.Now().Before(deadline) {
		if _, err := bulk.Write(buf); err != nil {
			return nil // the receiver closed: the window is over
		}
	}
	return nil
}

// dialRetry connects to host b, trying for 5 s: its peer may still be
// starting.
func dialRetry(addr string) (net.Conn, error) {
	var conn net.Conn
	var err error
	for i := 0; i < 50; i++ {
		if conn, err = net.Dial("tcp4", addr); err == nil {
			return conn, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}

// readLine reads one newline-terminated JSON value from a signaling stream.
func readJSON(r *bufio.Reader, v any) error {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return err
	}
	return json.Unmarshal(line, v)
}

// dumpStacks writes every goroutine's stack to PETREL_LAB_PROFILE/<name>-stacks.txt,
// or to stderr.
func dumpStacks(name string) {
	w := io.Writer(os.Stderr)
	if d := os.Getenv("PETREL_LAB_PROFILE"); d != "" {
		if f, err := os.Create(filepath.Join(d, name+"-stacks.txt")); err == nil {
			defer f.Close()
			w = f
		}
	}
	pprof.Lookup("goroutine").WriteTo(w, 2)
}

// tuneProcs is the GOMAXPROCS a -tune string asks for (procs=N), 0 if none.
func tuneProcs(tune string) int {
	n := 0
	for _, kv := range strings.Split(tune, ",") {
		if v, ok := strings.CutPrefix(kv, "procs="); ok {
			if p, err := strconv.Atoi(v); err == nil && p > 0 {
				n = p
			}
		}
	}
	return n
}
