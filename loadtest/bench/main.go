// Command bench runs the same load against Petrel, LiveKit and Janus in one
// run and rewrites the "## Petrel vs Janus" and "## Load generator" sections
// of docs/benchmarks.md.
//
// The servers run, one at a time, in a network namespace this command creates
// (Janus 1.1.2 gathers no ICE candidates on loopback; Petrel and LiveKit run
// there too so all see the same veth path). The generator runs here and binds
// the host end of the veth pair. -mix runs only the audio-mixed room against
// Janus AudioBridge and prints its table (docs/benchmarks.md is not touched):
//
//	go run ./loadtest/bench -mix 50,20 -duration 20s Janus runs in its default mode (a thread per
//
// handle) and with event_loops = 2; LiveKit (livekit-server, found as
// loadtest.LiveKitBinary says or given by -livekit) with its defaults but for
// the addresses and ports.
//
//	go run ./loadtest/bench -n 25,50,100,200 -room 3x27 -duration 20s
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/petrel-sfu/petrel/bench/floor"
	"github.com/petrel-sfu/petrel/loadtest"
)

const (
	apiKey    = "loadbench"
	apiSecret = "loadbench-secret-loadbench-secret-0123456"
)

// liveKitBin is the livekit-server the livekit runs start.
var liveKitBin string

type run struct {
	server   string
	scenario string
	n        int // receiving peers (subscribers + publishers receiving)
	label    string
	res      *loadtest.Result
	threads  int
}

func main() {
	petrelBin := flag.String("petrel", "", "petrel binary (default: go build ./cmd/petrel)")
	sizes := flag.String("n", "25,50,100,200", "stream viewers per run")
	roomSpec := flag.String("room", "3x27", "room scenario: publishers x subscribers (the issue's 10x90 scaled to 2 cores); comma-separated sizes give the marginal RSS ratio, e.g. 3x12,3x27")
	servers := flag.String("servers", "petrel,livekit,janus,janus-loops", "servers to run: petrel (room protocol), petrel-whep (stream only: WHEP viewers), livekit (its own signalling), janus, janus-loops, janus-streaming, janus-streaming-loops")
	flag.StringVar(&liveKitBin, "livekit", loadtest.LiveKitBinary(), "livekit-server binary for the livekit runs (default: $PETREL_LIVEKIT_BIN or ../shared/peers/livekit/livekit-server beside the checkout)")
	duration := flag.Duration("duration", 20*time.Second, "steady window")
	warmup := flag.Duration("warmup", 3*time.Second, "after the ramp")
	rate := flag.Float64("rate", 25, "peers per second")
	out := flag.String("out", "loadtest/results", "JSON results and plots")
	docs := flag.String("docs", "docs/benchmarks.md", "file whose sections are rewritten ('' to skip)")
	hold := flag.Int("hold", 0, "also run a generator capacity run: this many audio-only receivers from Petrel")
	repeat := flag.Int("repeat", 1, "run everything this many times; the report takes, per server and size, the cleanest run (least loss)")
	mix := flag.String("mix", "", "only the mix scenario at these sizes (participants, e.g. 50,20): Petrel's audio-mixed room vs Janus AudioBridge; prints a table")
	talkers := flag.Int("talkers", 3, "with -mix: participants who speak (the others send Opus silence)")
	reportOnly := flag.Bool("report-only", false, "re-render from the JSON in -out")
	strip := flag.Bool("strip", false, "with -report-only: rewrite the JSON in -out without per-peer records")
	flag.Parse()
	log.SetFlags(log.Ltime)
	log.SetPrefix("loadbench: ")
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	ensure("gnuplot", "gnuplot-nox")
	if *mix != "" {
		ensure("janus", "janus")
		fmt.Print(mixRuns(*petrelBin, *mix, *talkers, *duration, *warmup, *rate))
		return
	}
	if !*reportOnly && strings.Contains(*servers, "janus") {
		ensure("janus", "janus")
	}
	if !*reportOnly && slices.Contains(strings.Split(*servers, ","), "livekit") && liveKitBin == "" {
		log.Printf("livekit-server not found (-livekit, $PETREL_LIVEKIT_BIN or ../shared/peers/livekit/ beside the checkout): no livekit runs")
		*servers = strings.Join(slices.DeleteFunc(strings.Split(*servers, ","), func(s string) bool { return s == "livekit" }), ",")
	}
	var runs []*run
	if *reportOnly {
		runs = load(*out)
		if *strip {
			for _, e := range mustGlob(filepath.Join(*out, "*.json")) {
				if res, err := loadtest.ReadJSON(e); err == nil {
					_ = save(res, e)
				}
			}
		}
	} else {
		for _, old := range mustGlob(filepath.Join(*out, "*.json")) {
			_ = os.Remove(old) // a new run replaces the previous results
		}
		// The floor before and after the runs: the machine's network stack
		// costs what it costs today (it has varied by 2× between days).
		_ = os.Remove(filepath.Join(*out, floorFile))
		measureFloor(*out)
		runs = measure(*petrelBin, *servers, *sizes, *roomSpec, *duration, *warmup, *rate, *out, *hold, *repeat)
		measureFloor(*out)
	}
	pv, lg := render(runs, *out)
	fmt.Println(pv)
	fmt.Println(lg)
	if *docs != "" {
		if err := rewrite(*docs, "## Petrel vs Janus", pv); err != nil {
			log.Fatal(err)
		}
		if err := rewrite(*docs, "## Load generator", lg); err != nil {
			log.Fatal(err)
		}
	}
}

// floorFile holds the floors measured around the runs, CPU-ns per packet,
// one per line: "send N" (a server's forwarding floor) or "recv N" (the
// generator's receive floor).
const floorFile = "floor.txt"

// measureFloor appends three measurements of each floor to out/floorFile
// (bench/floor: one AES-256-GCM protect and one loopback sendto(2) of a
// 1200-byte packet; one recv(2) and one unprotect).
func measureFloor(out string) {
	f, err := os.OpenFile(filepath.Join(out, floorFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	for range 3 {
		s, err := floor.SendTo(200_000)
		if err != nil {
			log.Printf("floor: %v", err)
			return
		}
		r, err := floor.Receive(200_000)
		if err != nil {
			log.Printf("floor: %v", err)
			return
		}
		log.Printf("floor: send %.2f µs, receive %.2f µs per packet", float64(s.CPUPerPacket.Nanoseconds())/1000, float64(r.CPUPerPacket.Nanoseconds())/1000)
		fmt.Fprintf(f, "send %d\nrecv %d\n", s.CPUPerPacket.Nanoseconds(), r.CPUPerPacket.Nanoseconds())
	}
}

// readFloor is the median of one kind of floor ("send" or "recv") in
// out/floorFile, µs, and how many there were (0: none measured). A line with
// no kind is a send floor (results saved before the receive floor was).
func readFloor(out, kind string) (float64, int) {
	b, err := os.ReadFile(filepath.Join(out, floorFile))
	if err != nil {
		return 0, 0
	}
	var v []float64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 1 {
			f = []string{"send", f[0]}
		}
		if len(f) != 2 || f[0] != kind {
			continue
		}
		if ns, err := strconv.ParseFloat(f[1], 64); err == nil && ns > 0 {
			v = append(v, ns/1000)
		}
	}
	if len(v) == 0 {
		return 0, 0
	}
	slices.Sort(v)
	return v[len(v)/2], len(v)
}

// buildPetrel returns bin, or builds ./cmd/petrel into a temporary directory
// that cleanup removes.
func buildPetrel(bin string) (string, func()) {
	if bin != "" {
		return bin, func() {}
	}
	dir, err := os.MkdirTemp("", "loadbench")
	if err != nil {
		log.Fatal(err)
	}
	bin = filepath.Join(dir, "petrel")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/petrel")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		log.Fatalf("build petrel: %v", err)
	}
	return bin, func() { os.RemoveAll(dir) }
}

// mixRuns runs the mix scenario at each size against Petrel and Janus
// AudioBridge (default threading) and renders the comparison.
func mixRuns(bin, sizes string, talkers int, duration, warmup time.Duration, rate float64) string {
	bin, cleanup := buildPetrel(bin)
	defer cleanup()
	ns, err := loadtest.NewNetNS("petrel-load-bench", 50)
	if err != nil {
		log.Fatal(err)
	}
	defer ns.Close()
	var b strings.Builder
	b.WriteString("| participants (talking) | server | CPU, % of a core | CPU per participant, % of a core | ratio Petrel ÷ AudioBridge | RSS growth per participant | participants receiving a mix | mix packets/s per participant (50 sent) | loss |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, f := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			continue
		}
		var per [2]float64
		for i, srv := range []string{"petrel", "janus"} {
			r, err := one(bin, ns, srv, "mix", n, 0, duration, warmup, rate, loadtest.Config{Talkers: talkers})
			if err != nil {
				log.Printf("%s mix %d: %v", srv, n, err)
				continue
			}
			sm := r.res.Summary
			per[i] = sm.TargetCPU / float64(n)
			ratio := ""
			if i == 1 && per[1] > 0 && per[0] > 0 {
				ratio = fmt.Sprintf("%.2f", per[0]/per[1])
			}
			mixed := 0
			for _, p := range r.res.Peers {
				if len(p.Streams) == 1 && p.Streams[0].Kind == "audio" && p.Streams[0].Packets > 0 {
					mixed++
				}
			}
			name := map[string]string{"petrel": "Petrel", "janus": "Janus AudioBridge"}[srv]
			fmt.Fprintf(&b, "| %d (%d) | %s | %.1f | %.3f | %s | %.0f KiB | %d | %.1f | %.3f %% |\n", n, min(talkers, n), name, sm.TargetCPU, per[i], ratio,
				(sm.TargetRSSMiB-sm.TargetRSSStartMiB)*1024/float64(n), mixed, sm.PPS/float64(n), sm.LossPct)
		}
	}
	return b.String()
}

func measure(bin, servers, sizes, roomSpec string, duration, warmup time.Duration, rate float64, out string, hold, repeat int) []*run {
	bin, cleanup := buildPetrel(bin)
	defer cleanup()
	ns, err := loadtest.NewNetNS("petrel-load-bench", 50)
	if err != nil {
		log.Fatal(err)
	}
	defer ns.Close()
	var ns_ []int
	for _, s := range strings.Split(sizes, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 {
			ns_ = append(ns_, n)
		}
	}
	type job struct {
		scenario string
		n, p     int
	}
	var jobs []job
	for _, n := range ns_ {
		jobs = append(jobs, job{"stream", n, 1})
	}
	for _, spec := range strings.Split(roomSpec, ",") {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		var pubs, subs int
		if _, err := fmt.Sscanf(spec, "%dx%d", &pubs, &subs); err != nil {
			log.Fatalf("-room %q: want PxS[,PxS...]", roomSpec)
		}
		if pubs > 0 {
			jobs = append(jobs, job{"room", subs, pubs})
		}
	}
	var runs []*run
	for rep := 1; rep <= max(repeat, 1); rep++ {
		for _, j := range jobs {
			for _, srv := range strings.Split(servers, ",") {
				if (strings.HasPrefix(srv, "janus-streaming") || srv == "petrel-whep") && j.scenario != "stream" {
					continue
				}
				r, err := one(bin, ns, srv, j.scenario, j.n, j.p, duration, warmup, rate, loadtest.Config{})
				if err != nil {
					log.Printf("%s %s n=%d: %v", srv, j.scenario, j.n, err)
					continue
				}
				runs = append(runs, r)
				if err := save(r.res, filepath.Join(out, fmt.Sprintf("%s-%s-%d-r%d.json", srv, j.scenario, j.n, rep))); err != nil {
					log.Fatal(err)
				}
			}
		}
	}
	if hold > 0 {
		r, err := one(bin, ns, "petrel", "stream", hold, 1, duration, warmup, rate, loadtest.Config{Video: "none", Proto: "whip"})
		if err != nil {
			log.Printf("hold %d: %v", hold, err)
		} else {
			r.label = "hold"
			runs = append(runs, r)
			_ = save(r.res, filepath.Join(out, fmt.Sprintf("hold-%d.json", hold)))
		}
	}
	return runs
}

func one(bin string, ns *loadtest.NetNS, srv, scenario string, n, p int, duration, warmup time.Duration, rate float64, extra loadtest.Config) (*run, error) {
	var s *loadtest.Server
	var err error
	cfg := loadtest.Config{Scenario: scenario, Peers: n, Publishers: p, Rate: rate, Duration: duration, Warmup: warmup,
		Bind: ns.HostAddr, Video: extra.Video, Audio: extra.Audio, Proto: extra.Proto, Talkers: extra.Talkers, Parallel: 8}
	switch srv {
	case "petrel", "petrel-whep":
		if srv == "petrel-whep" {
			cfg.Proto = "whip" // WHEP viewers (the generator's lean peers)
		}
		var args []string
		if scenario == "mix" {
			args = append(args, "--admin-allow-remote") // the generator creates the mixed room from the host side
		}
		s, err = loadtest.StartPetrel(bin, ns, apiKey, apiSecret, args...)
		cfg.Target, cfg.APIKey, cfg.Secret = "petrel", apiKey, apiSecret
	case "livekit":
		// Its default media path: a UDP socket per peer connection from a
		// port range (no single-port mux), no ICE-TCP, as Petrel's runs.
		s, err = loadtest.StartLiveKit(liveKitBin, loadtest.LiveKitOptions{Addr: ns.NSAddr, Port: 7880, UDPFrom: 50000, UDPTo: 60000,
			Key: apiKey, Secret: apiSecret, NS: ns})
		cfg.Target, cfg.APIKey, cfg.Secret = "livekit", apiKey, apiSecret
	case "janus":
		s, err = loadtest.StartJanus(ns, 0)
		cfg.Target = "janus"
	case "janus-loops":
		s, err = loadtest.StartJanus(ns, 2)
		cfg.Target = "janus"
	case "janus-streaming", "janus-streaming-loops":
		if scenario != "stream" {
			return nil, fmt.Errorf("%s: stream only", srv)
		}
		loops := 0
		if srv == "janus-streaming-loops" {
			loops = 2
		}
		s, err = loadtest.StartJanus(ns, loops)
		cfg.Target, cfg.JanusStreaming = "janus", true
	default:
		return nil, fmt.Errorf("unknown server %q", srv)
	}
	if err != nil {
		return nil, err
	}
	defer func() { s.Stop(); time.Sleep(time.Second) }()
	cfg.URL, cfg.TargetPID = s.URL, s.PID()
	debug.FreeOSMemory() // the previous run's peers should not count in this one's RSS
	cfg.Progress = os.Stderr
	log.Printf("%s: %s n=%d publishers=%d", srv, scenario, n, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	done := make(chan int, 1)
	var threads int
	go func() {
		// Janus's thread count at the end of the ramp shows its threading mode.
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				done <- threads
				return
			case <-t.C:
				threads = max(threads, loadtest.ProcThreads(s.PID()))
			}
		}
	}()
	res, err := loadtest.Run(ctx, cfg)
	cancel()
	th := <-done
	if err != nil {
		return nil, fmt.Errorf("%v\n%s", err, s.LogTail())
	}
	sm := res.Summary
	log.Printf("%s %s n=%d: connected %d failed %d, %.0f pkt/s, server %.1f%% CPU, %.2f µs/pkt, RSS %.1f→%.1f MiB, NACK %d/%d, loss %.3f%%, delay p50 %.2f p99 %.2f ms, gen %.2f µs/pkt",
		srv, scenario, n, sm.Connected, sm.Failed, sm.PPS, sm.TargetCPU, sm.TargetCPUusPerPkt, sm.TargetRSSStartMiB, sm.TargetRSSMiB, sm.NACKsSent, sm.NACKsRecv, sm.LossPct, sm.DelayMs.P50, sm.DelayMs.P99, sm.SelfCPUusPerPkt)
	return &run{server: srv, scenario: scenario, n: n, res: res, threads: th}, nil
}

var fileRE = regexp.MustCompile(`^(petrel-lean|petrel-whep|petrel|livekit|janus-streaming-loops|janus-streaming|janus-loops|janus|hold)-?(stream|room)?-(\d+)(-r\d+)?\.json$`)

func load(dir string) []*run {
	ents, _ := os.ReadDir(dir)
	var runs []*run
	for _, e := range ents {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		res, err := loadtest.ReadJSON(filepath.Join(dir, e.Name()))
		if err != nil {
			log.Printf("%s: %v", e.Name(), err)
			continue
		}
		n, _ := strconv.Atoi(m[3])
		r := &run{server: m[1], scenario: m[2], n: n, res: res}
		if m[1] == "hold" {
			r.server, r.scenario, r.label = "petrel", "stream", "hold"
		}
		runs = append(runs, r)
	}
	order := map[string]int{"petrel": 0, "petrel-whep": 1, "petrel-lean": 2, "livekit": 3, "janus": 4, "janus-loops": 5, "janus-streaming": 6, "janus-streaming-loops": 7}
	slices.SortFunc(runs, func(a, b *run) int {
		if a.scenario != b.scenario {
			return strings.Compare(b.scenario, a.scenario)
		}
		if a.n != b.n {
			return a.n - b.n
		}
		return order[a.server] - order[b.server]
	})
	return runs
}

// receivers is the number of peers that received media in a run (RSS is
// divided by it): subscribers, and in a room the publishers' receiving side
// (Petrel: their subscriber connection; Janus: a subscriber handle of their own).
func receivers(r *run) int {
	return max(r.res.Summary.Receiving, 1)
}

// medians keeps, per server, scenario and size, the run with the median
// server CPU per packet (repeated runs), and says how many runs there were.
func medians(runs []*run) ([]*run, int) {
	type key struct {
		server, scenario, label string
		n                       int
	}
	by := map[key][]*run{}
	var order []key
	for _, r := range runs {
		k := key{r.server, r.scenario, r.label, r.n}
		if by[k] == nil {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	reps := 1
	var out []*run
	for _, k := range order {
		rs := by[k]
		reps = max(reps, len(rs))
		// The machine is shared: a run disturbed by other work shows loss
		// (and a lower packet rate, so a flattering CPU per packet). Keep
		// the cleanest run: fewest failed setups, then least loss, then
		// the lower CPU per packet.
		slices.SortFunc(rs, func(a, b *run) int {
			x, y := a.res.Summary, b.res.Summary
			if x.Failed != y.Failed {
				return x.Failed - y.Failed
			}
			if d := cmpF(x.LossPct, y.LossPct, 0.05); d != 0 {
				return d
			}
			return cmpF(x.TargetCPUusPerPkt, y.TargetCPUusPerPkt, 0)
		})
		out = append(out, rs[0])
	}
	return out, reps
}

func render(all []*run, out string) (string, string) {
	runs, reps := medians(all)
	var b strings.Builder
	b.WriteString("## Petrel vs Janus\n\n")
	b.WriteString("Written by `go run ./loadtest/bench` (see its flags; `-report-only` re-renders from `loadtest/results/*.json`). " +
		"Each server runs alone, one after the other, in a network namespace the benchmark creates, reached over a veth pair " +
		"(Janus 1.1.2 gathers no ICE candidates on loopback); the generator (`petrel load`, lean Pion peers, same process for every run) " +
		"sends one synthetic 500 kbit/s VP8 stream at 30 fps plus 50 packets/s of Opus-shaped audio. Petrel is reached by its room protocol (`petrel`) " +
		"or, for stream, by WHEP with the generator's lean viewers (`petrel-whep`); either way every client is served by Petrel's own session server (ICE-lite, no PeerConnection in the server: docs/sessions.md); " +
		"LiveKit (`livekit`: livekit-server, the build in `../shared/peers/livekit/`, with its defaults but for its addresses, a UDP port range, no ICE-TCP and log level warn) by its own signalling, two peer connections per participant, every viewer subscribed explicitly at full quality with adaptive stream off; " +
		"Janus over its WebSocket API by VideoRoom (`janus`, `janus-loops`) or, for stream, by Streaming fed with plain RTP (`janus-streaming*`); " +
		"the SRTP profile is what Pion and each server negotiate. " +
		"Janus runs in its default mode (a thread per handle) and with `event_loops = 2` (`*-loops`). CPU is utime+stime of the server process " +
		"over the steady window, divided by the packets the subscribers received in it (≈ packets forwarded when nothing is lost); " +
		"the part in brackets is stime, the kernel's share: the system calls, and with them the network stack's work for each packet sent (over the veth pair, " +
		"the receiving side's too), which every server pays alike; the user-space ratio compares the rest (utime). " +
		"RSS per peer is (RSS at the end − RSS before the first peer) ÷ receiving peers. Delay is the one-way delay of the synthetic stamps " +
		"in the steady window (same host clock). Machine: 2 cores, shared with other sessions' builds and browser tests while this ran: read ratios, not absolutes.\n\n")
	if reps > 1 {
		fmt.Fprintf(&b, "Everything ran %d times, interleaved; each row is the cleanest of its runs (fewest failed setups, then least loss, then lowest server CPU per packet): the machine was shared, and a disturbed run loses packets and shows a flattering CPU per packet.\n\n", reps)
	}
	fl, nfl := readFloor(out, "send")
	if fl > 0 {
		fmt.Fprintf(&b, "The machine's forwarding floor around these runs (`bench/floor`: one AES-256-GCM SRTP protect and one `sendto(2)` of a 1200-byte packet on loopback "+
			"to a reading socket, measured %d times before and after them): median **%.2f µs** per packet. The × floor column divides a server's CPU per packet by it "+
			"(the issue's target for Petrel: within 2×).\n\n", nfl, fl)
	}
	b.WriteString("| server | scenario | receivers | connected / failed | packets/s received | server CPU % | server CPU-µs/packet (kernel) | RSS/peer MiB | threads | NACKed (receivers / server→publisher) | loss % | delay p50 / p99 ms | first frame p50 / p95 ms | generator CPU % |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	by := map[sizeKey]map[string]*run{}
	var keys []sizeKey
	for _, r := range runs {
		if r.label == "hold" {
			continue
		}
		s := r.res.Summary
		rssPer := (s.TargetRSSMiB - s.TargetRSSStartMiB) / float64(receivers(r))
		ff := s.SetupMs["firstFrame"]
		th := "–"
		if t := max(r.threads, s.TargetThreads); t > 0 {
			th = strconv.Itoa(t)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d / %d | %.0f | %.1f | %s | %.3f | %s | %d / %d | %.3f | %.2f / %.2f | %.0f / %.0f | %.1f |\n",
			r.server, r.scenario, r.n, s.Connected, s.Failed, s.PPS, s.TargetCPU, perPktSys(s), rssPer, th,
			s.NACKsSent, s.NACKsRecv, s.LossPct, s.DelayMs.P50, s.DelayMs.P99, ff.P50, ff.P95, s.SelfCPU)
		k := sizeKey{r.scenario, r.n}
		if by[k] == nil {
			by[k] = map[string]*run{}
			keys = append(keys, k)
		}
		by[k][r.server] = r
	}
	if slices.ContainsFunc(runs, func(r *run) bool { return strings.HasPrefix(r.server, "janus") }) {
		b.WriteString("\nRatios, Petrel ÷ Janus's better mode in the same run (below 1 is Petrel better; the targets are ≤ 0.5 for both):\n\n")
		b.WriteString("The marginal RSS ratio compares what one more receiver costs each server, from the next smaller size of the same run to this one ((growth here − growth there) ÷ added receivers).\n\n")
		b.WriteString("| scenario | receivers | Petrel | Janus best mode (CPU) | CPU-µs/packet ratio | user-space CPU ratio | Petrel × floor | RSS/peer ratio | marginal RSS/receiver ratio (Petrel / Janus) | delay p99 ratio |\n|---|---:|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, k := range keys {
			prev := smaller(keys, by, k)
			for _, mode := range []string{"petrel", "petrel-whep"} {
				ratioRow(&b, k.scenario, k.n, mode, by[k], prev, fl)
			}
		}
	}
	if slices.ContainsFunc(runs, func(r *run) bool { return r.server == "livekit" }) {
		b.WriteString("\nRatios, Petrel ÷ LiveKit in the same run (the goal: ≤ 0.5 for CPU per packet and RSS per peer at every size, with no more loss and no slower first frame; marginal RSS is (growth here − growth at the next smaller size) ÷ added receivers; first frame is the first complete video frame):\n\n")
		b.WriteString("| scenario | receivers | Petrel | CPU-µs/packet ratio | user-space CPU ratio | RSS/peer ratio | marginal RSS/receiver ratio (Petrel / LiveKit) | loss % (Petrel / LiveKit) | first frame p50 ms (Petrel / LiveKit) | delay p99 ratio |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, k := range keys {
			prev := smaller(keys, by, k)
			for _, mode := range []string{"petrel", "petrel-whep"} {
				liveKitRow(&b, k.scenario, k.n, mode, by[k], prev)
			}
		}
	}
	if notes, err := os.ReadFile(filepath.Join(out, "notes.md")); err == nil {
		// Hand-written reading of the figures, kept beside them.
		b.WriteString("\n")
		b.Write(notes)
	}
	if plot(runs, out) == nil {
		b.WriteString("\n![server CPU-µs per packet vs receivers](../loadtest/results/cpu-per-packet.png)\n\n![server RSS per peer vs receivers](../loadtest/results/rss-per-peer.png)\n")
	}

	var g strings.Builder
	g.WriteString("## Load generator\n\n")
	g.WriteString("The generator's own cost in the runs above (the same process drives every run; lean peers: no interceptors, received RTP counted " +
		"from its header inside Pion's SRTP session goroutine instead of a reader goroutine per track, 8 KiB RTCP buffers, one shared DTLS " +
		"certificate for the peer connections it creates itself). CPU-µs per received packet is the generator's utime+stime over the steady " +
		"window ÷ packets its peers received; it also pays for its publisher(s), its sources, the progress line and Go's runtime. " +
		"The floor to compare with is `bench/floor_test.go`'s BenchmarkFloorReceive (one UDP receive + one SRTP decrypt of a 1200-byte packet). " +
		"`petrel` runs use the room protocol (two peer connections and two data channels each); `petrel-whep` runs use the generator's lean WHEP viewers (`-peer lean`: a socket each, no PeerConnection); the capacity run uses WHEP viewers. " +
		"RSS growth per peer is (RSS at the end − RSS before the run's first peer) ÷ connected peers; the process returns memory to the OS between runs.\n\n")
	recorded, floorDesc := receiveFloor("bench/results/floor.txt")
	floor := recorded
	if rf, n := readFloor(out, "recv"); rf > 0 {
		floor = rf * 1000
		floorDesc = fmt.Sprintf("`bench/floor`'s receive floor measured %d times around these runs, median %.0f CPU-ns per packet (UDP receive + SRTP decrypt of 1200 bytes; "+
			"BenchmarkFloorReceive/AES256GCM in `bench/results/floor.txt`, recorded on another day, gives %.0f)", n, floor, recorded)
	}
	if floor > 0 {
		fmt.Fprintf(&g, "Floor used for the × column: %s.\n\n", floorDesc)
	}
	g.WriteString("| run | peers connected | packets/s received | generator CPU % | CPU-µs/received packet | × floor | RSS at end MiB | RSS growth/peer KiB | setup p50 / p95 (DTLS, ms) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		if !strings.HasPrefix(r.server, "petrel") {
			continue
		}
		s := r.res.Summary
		name := fmt.Sprintf("%s %d vs %s", r.scenario, r.n, r.server)
		if r.label == "hold" {
			name = fmt.Sprintf("capacity: %d audio-only WHEP viewers", r.n)
		}
		d := s.SetupMs["dtlsConnected"]
		x := "–"
		if floor > 0 && !stalled(s.PPS) {
			x = fmt.Sprintf("%.1f", s.SelfCPUusPerPkt*1000/floor)
		}
		per := "–"
		if s.SelfRSSStartMiB > 0 && s.Connected > 0 {
			per = fmt.Sprintf("%.0f", (s.SelfRSSMiB-s.SelfRSSStartMiB)*1024/float64(s.Connected))
		}
		fmt.Fprintf(&g, "| %s | %d | %.0f | %.1f | %s | %s | %.1f | %s | %.0f / %.0f |\n", name, s.Connected, s.PPS, s.SelfCPU, perPkt(s.SelfCPUusPerPkt, s.PPS), x, s.SelfRSSMiB, per, d.P50, d.P95)
	}
	return b.String(), g.String()
}

func plot(runs []*run, out string) error {
	if _, err := exec.LookPath("gnuplot"); err != nil {
		return err
	}
	var cmds []string
	var plotsCPU, plotsRSS []string
	for _, srv := range []string{"petrel", "petrel-whep", "livekit", "janus", "janus-loops", "janus-streaming", "janus-streaming-loops"} {
		var dat strings.Builder
		for _, r := range runs {
			if r.server != srv || r.scenario != "stream" || r.label == "hold" {
				continue
			}
			s := r.res.Summary
			fmt.Fprintf(&dat, "%d %.3f %.4f\n", receivers(r), s.TargetCPUusPerPkt, (s.TargetRSSMiB-s.TargetRSSStartMiB)/float64(receivers(r)))
		}
		if dat.Len() == 0 {
			continue
		}
		f := filepath.Join(out, srv+".dat")
		if err := os.WriteFile(f, []byte(dat.String()), 0o644); err != nil {
			return err
		}
		plotsCPU = append(plotsCPU, fmt.Sprintf("%q using 1:2 with linespoints title %q", f, srv))
		plotsRSS = append(plotsRSS, fmt.Sprintf("%q using 1:3 with linespoints title %q", f, srv))
	}
	if len(plotsCPU) == 0 {
		return fmt.Errorf("nothing to plot")
	}
	cmds = append(cmds, "set terminal png size 720,420", "set grid", "set key top right", "set xlabel 'receivers (stream 1→N)'",
		fmt.Sprintf("set output %q", filepath.Join(out, "cpu-per-packet.png")), "set ylabel 'server CPU-µs per packet'", "set yrange [0:*]",
		"plot "+strings.Join(plotsCPU, ", "),
		fmt.Sprintf("set output %q", filepath.Join(out, "rss-per-peer.png")), "set ylabel 'server RSS per receiver, MiB'",
		"plot "+strings.Join(plotsRSS, ", "))
	cmd := exec.Command("gnuplot")
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gnuplot: %v: %s", err, o)
	}
	return nil
}

// rewrite replaces the section that starts with heading (up to the next "## "
// heading) in file, or appends it, leaving every other section alone.
func rewrite(file, heading, body string) error {
	old, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	if s == "" {
		s = "# Benchmarks\n"
	}
	body = strings.TrimRight(body, "\n") + "\n"
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		s = strings.TrimRight(s, "\n") + "\n\n" + body
	} else {
		start := i + 1
		end := len(s)
		if j := strings.Index(s[start+len(heading):], "\n## "); j >= 0 {
			end = start + len(heading) + j + 1
		}
		body = keepSubsections(s[start:end], body)
		sep := ""
		if end < len(s) {
			sep = "\n"
		}
		s = s[:start] + body + sep + s[end:]
	}
	return os.WriteFile(file, []byte(s), 0o644)
}

// receiveFloor is the median of BenchmarkFloorReceive/AES256GCM in the floor
// benchmark's saved output: its CPU-ns per packet when recorded, else ns/op.
func receiveFloor(file string) (float64, string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, ""
	}
	var ns, cpu []float64
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "BenchmarkFloorReceive/AES256GCM") {
			continue
		}
		f := strings.Fields(l)
		for i := 1; i < len(f); i++ {
			v, err := strconv.ParseFloat(f[i-1], 64)
			if err != nil {
				continue
			}
			switch f[i] {
			case "ns/op":
				ns = append(ns, v)
			case "cpu-ns/op":
				cpu = append(cpu, v)
			}
		}
	}
	med := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	if len(cpu) > 0 {
		m := med(cpu)
		return m, fmt.Sprintf("BenchmarkFloorReceive/AES256GCM in `bench/results/floor.txt`, median %.0f CPU-ns per packet (UDP receive + SRTP decrypt of 1200 bytes)", m)
	}
	if len(ns) > 0 {
		m := med(ns)
		return m, fmt.Sprintf("BenchmarkFloorReceive/AES256GCM in `bench/results/floor.txt`, median %.0f ns per packet", m)
	}
	return 0, ""
}

// save keeps the summary and the samples of a run (what the report needs), not
// its per-peer records, so that results stay small enough to commit.
func save(res *loadtest.Result, file string) error {
	c := *res
	c.Peers = nil
	return loadtest.WriteJSON(&c, file)
}

func mustGlob(p string) []string {
	m, _ := filepath.Glob(p)
	return m
}

// ensure installs Debian package pkg when command is missing (the benchmark
// installs what it needs; tests skip instead).
func ensure(command, pkg string) {
	if _, err := exec.LookPath(command); err == nil || os.Geteuid() != 0 {
		return
	}
	log.Printf("installing %s", pkg)
	cmd := exec.Command("apt-get", "install", "-y", "-q", "--no-install-recommends", pkg)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		log.Printf("apt-get install %s: %v: %s", pkg, err, out)
	}
}

// cmpF compares with a tolerance.
func cmpF(x, y, tol float64) int {
	switch {
	case x < y-tol:
		return -1
	case x > y+tol:
		return 1
	}
	return 0
}

// stalled says a run's window saw (almost) no media: per-packet figures
// would divide by nothing.
func stalled(pps float64) bool { return pps < 100 }

// perPktSys is the server's CPU per packet with its kernel part, when the
// results have it (results saved before it was measured do not).
func perPktSys(s loadtest.Summary) string {
	v := perPkt(s.TargetCPUusPerPkt, s.PPS)
	if s.TargetSysUsPerPkt > 0 && !stalled(s.PPS) {
		v += fmt.Sprintf(" (%.2f)", s.TargetSysUsPerPkt)
	}
	return v
}

func perPkt(v, pps float64) string {
	if stalled(pps) {
		return "stalled"
	}
	return fmt.Sprintf("%.2f", v)
}

// ratioRow writes the ratios of one Petrel mode against Janus's best mode
// (lowest CPU per packet) at one size, if both ran. prev holds the runs of
// the next smaller size of the scenario (nil: none), for the marginal RSS.
// sizeKey is one size of one scenario in a report.
type sizeKey struct {
	scenario string
	n        int
}

// smaller is the runs of the next smaller size of k's scenario, nil if none:
// the base of the marginal cost per added receiver.
func smaller(keys []sizeKey, by map[sizeKey]map[string]*run, k sizeKey) map[string]*run {
	var prev map[string]*run
	prevN := 0
	for _, o := range keys {
		if o.scenario == k.scenario && o.n < k.n && (prev == nil || o.n > prevN) {
			prev, prevN = by[o], o.n
		}
	}
	return prev
}

func ratioRow(b *strings.Builder, scenario string, n int, mode string, m, prev map[string]*run, floorUs float64) {
	p := m[mode]
	var best *run
	for _, srv := range []string{"janus", "janus-loops", "janus-streaming", "janus-streaming-loops"} {
		if r := m[srv]; r != nil && r.res.Summary.TargetCPUusPerPkt > 0 && (best == nil || r.res.Summary.TargetCPUusPerPkt < best.res.Summary.TargetCPUusPerPkt) {
			best = r
		}
	}
	if p == nil || best == nil {
		return
	}
	ps, js := p.res.Summary, best.res.Summary
	rss := func(r *run) float64 {
		s := r.res.Summary
		return (s.TargetRSSMiB - s.TargetRSSStartMiB) / float64(receivers(r))
	}
	ratio := func(a, b float64) string {
		if b <= 0 || stalled(ps.PPS) || stalled(js.PPS) {
			return "–"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	marginal := "–"
	if pp, pb := prev[mode], prev[best.server]; pp != nil && pb != nil {
		if mp, mb := marginalRSS(pp, p), marginalRSS(pb, best); mp > 0 && mb > 0 {
			marginal = fmt.Sprintf("%.2f (%.0f / %.0f KiB)", mp/mb, mp*1024, mb*1024)
		}
	}
	user := "–"
	if ps.TargetSysUsPerPkt > 0 && js.TargetSysUsPerPkt > 0 {
		user = ratio(ps.TargetCPUusPerPkt-ps.TargetSysUsPerPkt, js.TargetCPUusPerPkt-js.TargetSysUsPerPkt)
	}
	xFloor := "–"
	if floorUs > 0 && !stalled(ps.PPS) {
		xFloor = fmt.Sprintf("%.1f", ps.TargetCPUusPerPkt/floorUs)
	}
	fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", scenario, n, mode, best.server, ratio(ps.TargetCPUusPerPkt, js.TargetCPUusPerPkt), user, xFloor, ratio(rss(p), rss(best)), marginal, ratio(ps.DelayMs.P99, js.DelayMs.P99))
}

// liveKitRow writes the ratios of one Petrel mode against LiveKit at one size,
// if both ran.
func liveKitRow(b *strings.Builder, scenario string, n int, mode string, m, prev map[string]*run) {
	p, lk := m[mode], m["livekit"]
	if p == nil || lk == nil {
		return
	}
	ps, ls := p.res.Summary, lk.res.Summary
	ratio := func(a, b float64) string {
		if b <= 0 || stalled(ps.PPS) || stalled(ls.PPS) {
			return "–"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	rss := func(r *run) float64 {
		s := r.res.Summary
		return (s.TargetRSSMiB - s.TargetRSSStartMiB) / float64(receivers(r))
	}
	user := "–"
	if ps.TargetSysUsPerPkt > 0 && ls.TargetSysUsPerPkt > 0 {
		user = ratio(ps.TargetCPUusPerPkt-ps.TargetSysUsPerPkt, ls.TargetCPUusPerPkt-ls.TargetSysUsPerPkt)
	}
	marginal := "–"
	if pp, pl := prev[mode], prev["livekit"]; pp != nil && pl != nil {
		if mp, ml := marginalRSS(pp, p), marginalRSS(pl, lk); mp > 0 && ml > 0 {
			marginal = fmt.Sprintf("%.2f (%.0f / %.0f KiB)", mp/ml, mp*1024, ml*1024)
		}
	}
	fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %.3f / %.3f | %.0f / %.0f | %s |\n", scenario, n, mode,
		ratio(ps.TargetCPUusPerPkt, ls.TargetCPUusPerPkt), user, ratio(rss(p), rss(lk)), marginal,
		ps.LossPct, ls.LossPct, ps.SetupMs["firstFrame"].P50, ls.SetupMs["firstFrame"].P50, ratio(ps.DelayMs.P99, ls.DelayMs.P99))
}

// marginalRSS is what one more receiver costs a server, MiB: the growth of
// its RSS from a smaller run a to a larger run b, per added receiver. Unlike
// RSS per peer it leaves out what the server spends once whatever the number
// of viewers (the publisher's connection, the packet cache, the runtime).
func marginalRSS(a, b *run) float64 {
	sa, sb := a.res.Summary, b.res.Summary
	d := receivers(b) - receivers(a)
	if d <= 0 {
		return 0
	}
	return ((sb.TargetRSSMiB - sb.TargetRSSStartMiB) - (sa.TargetRSSMiB - sa.TargetRSSStartMiB)) / float64(d)
}

// keepSubsections appends to body the "### " subsections of the old section
// that body does not write itself: hand-written parts of a generated section
// (the "Lean WHEP viewers" measurements under "Load generator") survive a
// new run.
func keepSubsections(old, body string) string {
	parts := strings.Split(old, "\n### ")
	for _, p := range parts[1:] {
		head, _, _ := strings.Cut(p, "\n")
		if strings.Contains(body, "\n### "+head+"\n") {
			continue
		}
		body = strings.TrimRight(body, "\n") + "\n\n### " + strings.TrimRight(p, "\n") + "\n"
	}
	return body
}
