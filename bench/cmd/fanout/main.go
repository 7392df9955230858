// Command fanout measures Petrel's forwarding cost: one publisher (VP8-like video
// at about 500 kbit/s and Opus-like audio at 50 packets/s) and N subscribers, all
// Pion clients of the room protocol on 127.0.0.1, through a Petrel server running
// as a separate process (bench/cmd/benchserver, which is `petrel serve` plus a
// pprof port). Over a steady-state window it reads the server's CPU time
// (utime+stime from /proc/PID/stat) and its forwarded packets (/metrics
// petrel_packets_total{direction="out"}), and its RSS before the subscribers
// joined and after the window. Each run starts a fresh server; with -runs > 1 it
// prints the median of each figure.
//
//	go run ./bench/cmd/fanout -n 50 -duration 20s
//
// The output is one Markdown table row (-header prints the header first; see
// tableHeader). Packets forwarded are counted exactly by the server's DownTrack
// counters (admin API); /metrics petrel_packets_total{direction="out"} is logged
// beside them but moves in steps of 128 received packets per publication.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/petrel-sfu/petrel/bench/internal/benchkit"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/rtc"
)

const (
	apiKey    = benchkit.APIKey
	apiSecret = benchkit.APISecret
	clkTck    = 100 // USER_HZ on Linux
)

type result struct {
	n           int
	pps         float64 // packets forwarded per second
	cpuUsPerPkt float64
	rssPerSub   float64 // MiB
	serverCPU   float64 // % of one core
	driverCPU   float64 // % of one core
	delivered   float64 // packets received by subscribers / packets the server counted out
	bytesPerPkt float64
	mediaUs     float64 // CPU-µs per packet above the CPU with N participants joined but not subscribed
	pubCPU      float64 // % of one core with the publisher and no subscriber
	partUs      float64 // CPU-µs per second per joined, unsubscribed participant
}

func main() {
	n := flag.Int("n", 50, "subscribers")
	duration := flag.Duration("duration", 20*time.Second, "steady-state measurement window")
	warmup := flag.Duration("warmup", 3*time.Second, "wait after the last subscriber receives media, before measuring")
	runs := flag.Int("runs", 1, "independent runs (fresh server each); figures are medians")
	serverBin := flag.String("server", "", "benchserver binary (default: go build ./bench/cmd/benchserver)")
	floorNs := flag.Float64("floor-ns", 0, "forwarding floor in ns/packet (BenchmarkFloorSend) for the ratio column")
	cpuprofile := flag.String("cpuprofile", "", "write the server's CPU profile over the window of the last run to this file")
	idleprofile := flag.String("idleprofile", "", "write the server's CPU profile with N participants joined but not subscribed (the 10 s idle window) of the last run to this file")
	heapprofile := flag.String("heapprofile", "", "write the server's heap profile at the end of the window of the last run to this file")
	subPublish := flag.Bool("sub-publish", false, "give subscribers' tokens the publish grant too (by default they are viewers: subscribe and data only)")
	header := flag.Bool("header", false, "print the table header first")
	verbose := flag.Bool("v", false, "server log to stderr")
	headerOnly := flag.Bool("header-only", false, "print the table header and exit")
	flag.Parse()
	if *headerOnly {
		fmt.Println(tableHeader)
		return
	}
	log.SetFlags(log.Ltime)
	log.SetPrefix("fanout: ")

	bin := *serverBin
	if bin == "" {
		dir, err := os.MkdirTemp("", "fanout")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "benchserver")
		cmd := exec.Command("go", "build", "-o", bin, "github.com/petrel-sfu/petrel/bench/cmd/benchserver")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			log.Fatalf("build benchserver: %v", err)
		}
	}
	var rs []result
	for i := 0; i < *runs; i++ {
		var p profiles
		if i == *runs-1 {
			p = profiles{cpu: *cpuprofile, idle: *idleprofile, heap: *heapprofile}
		}
		r, err := run(bin, *n, *warmup, *duration, p, *subPublish, *verbose)
		if err != nil {
			log.Fatalf("run %d: %v", i+1, err)
		}
		log.Printf("run %d: N=%d %.0f pkt/s out, %.2f CPU-µs/packet (media path %.2f), publisher-only %.1f%% CPU, %.0f CPU-µs/s per idle participant, %.3f MiB RSS/subscriber, server %.1f%% CPU, driver %.1f%% CPU, delivered %.3f, %.0f B/packet",
			i+1, r.n, r.pps, r.cpuUsPerPkt, r.mediaUs, r.pubCPU, r.partUs, r.rssPerSub, r.serverCPU, r.driverCPU, r.delivered, r.bytesPerPkt)
		rs = append(rs, r)
	}
	m := median(rs)
	if *header {
		fmt.Println(tableHeader)
	}
	ratio := "–"
	if *floorNs > 0 {
		ratio = fmt.Sprintf("%.1f", m.cpuUsPerPkt*1000 / *floorNs)
	}
	mratio := "–"
	if *floorNs > 0 {
		mratio = fmt.Sprintf("%.1f", m.mediaUs*1000 / *floorNs)
	}
	fmt.Printf("| %d | %.0f | %.0f | %.2f | %s | %.2f | %s | %.0f | %.3f | %.1f | %.1f | %.1f | %.3f |\n",
		m.n, m.pps, m.bytesPerPkt, m.cpuUsPerPkt, ratio, m.mediaUs, mratio, m.partUs, m.rssPerSub, m.serverCPU, m.pubCPU, m.driverCPU, m.delivered)
}

// Columns: total server CPU over packets forwarded, and its ratio to the floor;
// the media path alone (CPU above the same N participants joined but not
// subscribed) and its ratio; the idle cost of one joined participant; RSS per
// subscriber; server CPU in the window and with the publisher alone; the
// driver's own CPU (it shares the two cores); subscriber-received over
// server-sent packets.
const tableHeader = `| N | packets/s out | bytes/packet | CPU-µs/packet | × floor | media-path CPU-µs/packet | × floor | idle CPU-µs/s per participant | RSS/subscriber MiB | server CPU % | publisher-only CPU % | driver CPU % | delivered |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|`

func median(rs []result) result {
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return result{
		n:           rs[0].n,
		pps:         pick(func(r result) float64 { return r.pps }),
		cpuUsPerPkt: pick(func(r result) float64 { return r.cpuUsPerPkt }),
		rssPerSub:   pick(func(r result) float64 { return r.rssPerSub }),
		serverCPU:   pick(func(r result) float64 { return r.serverCPU }),
		driverCPU:   pick(func(r result) float64 { return r.driverCPU }),
		delivered:   pick(func(r result) float64 { return r.delivered }),
		bytesPerPkt: pick(func(r result) float64 { return r.bytesPerPkt }),
		mediaUs:     pick(func(r result) float64 { return r.mediaUs }),
		pubCPU:      pick(func(r result) float64 { return r.pubCPU }),
		partUs:      pick(func(r result) float64 { return r.partUs }),
	}
}

// server is the Petrel process under test.
type server struct {
	cmd   *exec.Cmd
	http  string
	pprof string
	logf  *os.File
}

func startServer(bin string, n int, verbose bool) (*server, error) {
	logf, err := os.CreateTemp("", "benchserver-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--loopback", "--http", "127.0.0.1:0", "--rtc-udp-port", "0", "--rtc-tcp-port", "0",
		"--turn=false", "--api-key", apiKey, "--log-level", "warn",
		"--max-participants", strconv.Itoa(n+10), "--joins-per-second", "1000", "--joins-per-ip", "0", "--max-conns-per-ip", "0", "--messages-per-second", "1000")
	cmd.Env = append(os.Environ(), "PETREL_API_SECRET="+apiSecret)
	if verbose {
		cmd.Stderr = io.MultiWriter(logf, os.Stderr)
	} else {
		cmd.Stderr = logf
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, logf: logf}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				for _, f := range strings.Fields(rest) {
					if v, ok := strings.CutPrefix(f, "http="); ok {
						s.http = v
					}
					if v, ok := strings.CutPrefix(f, "pprof="); ok {
						s.pprof = v
					}
				}
				ready <- nil
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		ready <- errors.New("benchserver exited before READY")
	}()
	select {
	case err := <-ready:
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("%w: %s", err, s.logTail())
		}
	case <-time.After(20 * time.Second):
		s.stop()
		return nil, errors.New("benchserver not ready in 20s")
	}
	return s, nil
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(8 * time.Second):
		log.Printf("benchserver did not exit within 8 s of SIGTERM; killed")
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.logf.Close()
	os.Remove(s.logf.Name())
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(s.logf.Name())
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// cpuTicks is the process's utime+stime in clock ticks.
func (s *server) cpuTicks() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	return ut + st, errors.Join(err1, err2)
}

// rss is the process's resident set in bytes.
func (s *server) rss() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// metric reads name{direction="dir"} from /metrics.
func (s *server) metric(name, dir string) (float64, error) {
	return benchkit.Metric(s.http, name, dir)
}

func (s *server) token(room, identity string, publish bool) string {
	return benchkit.Token(room, identity, publish)
}

// forwarded is the exact number of packets the server has written to the
// subscribers so far: the sum of every DownTrack's packet counter, from the admin
// API. The /metrics counter is not precise enough for a window of seconds: each
// publication adds to it once per 128 packets received, that is about every 2 s
// here, so a 20 s window could be off by ±10%.
func (s *server) forwarded(room string, ids []string) (float64, error) {
	tok := benchkit.AdminToken()
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			req, _ := http.NewRequest("GET", "http://"+s.http+"/v1/admin/rooms/"+room+"/participants/"+id, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var v struct {
				Stats struct {
					Subscribed []struct {
						Packets int64 `json:"packets"`
					} `json:"subscribed"`
				} `json:"stats"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
				errs <- fmt.Errorf("participant %s stats: %s: %w", id, resp.Status, err)
				return
			}
			for _, t := range v.Stats.Subscribed {
				total.Add(t.Packets)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(total.Load()), nil
}

// published is the number of packets the server received from identity.
func (s *server) published(room, identity string) (float64, error) {
	tok := benchkit.AdminToken()
	req, _ := http.NewRequest("GET", "http://"+s.http+"/v1/admin/rooms/"+room+"/participants/"+identity, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var v struct {
		Stats struct {
			Published []struct {
				Packets float64 `json:"packets"`
			} `json:"published"`
		} `json:"stats"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, err
	}
	var n float64
	for _, t := range v.Stats.Published {
		n += t.Packets
	}
	return n, nil
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// leanAPI is what a subscriber needs and no more: loopback ICE, Petrel's codecs,
// no interceptors (no NACK generation, reports or TWCC), so that the driver's
// CPU, which shares the machine with the server, stays small.
func leanAPI() *webrtc.API {
	var se webrtc.SettingEngine
	rtc.OnlyAddress(&se, net.IPv4(127, 0, 0, 1))
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	m := &webrtc.MediaEngine{}
	if err := rtc.RegisterCodecs(m); err != nil {
		panic(err)
	}
	return webrtc.NewAPI(webrtc.WithSettingEngine(se), webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(&interceptor.Registry{}))
}

// counters are the subscribers' totals.
type counters struct {
	packets atomic.Int64
	bytes   atomic.Int64
}

// profiles are the files to write profiles to; empty means none.
type profiles struct{ cpu, idle, heap string }

func run(bin string, n int, warmup, window time.Duration, prof profiles, subPublish, verbose bool) (result, error) {
	cpuprofile, idleprofile := prof.cpu, prof.idle
	s, err := startServer(bin, n, verbose)
	if err != nil {
		return result{}, err
	}
	defer s.stop()
	ws := "ws://" + s.http + "/v1/rtc"
	room := "fanout"

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := client.Join(ctx, ws, s.token(room, "publisher", true), client.Options{Name: "publisher"})
	if err != nil {
		return result{}, fmt.Errorf("publisher join: %w", err)
	}
	defer pub.Close()
	stop := make(chan struct{})
	defer close(stop)
	var sids []string
	for _, src := range []*source{newVideo(), newAudio()} {
		sid, _, err := pub.Publish(ctx, src.track, src.name)
		if err != nil {
			return result{}, fmt.Errorf("publish %s: %w", src.name, err)
		}
		sids = append(sids, sid)
		go src.run(stop)
	}
	// Phase 1, publisher only: the fixed cost of receiving the stream.
	time.Sleep(2 * time.Second)
	pubCPU, err := s.cpuOver(10 * time.Second)
	if err != nil {
		return result{}, err
	}
	rss0, err := s.rss()
	if err != nil {
		return result{}, err
	}

	// Phase 2: N participants join, a few at a time as a room fills, without
	// subscribing. What this costs is per participant, not per packet: every
	// participant has two peer connections with their ICE, DTLS and SCTP
	// timers, and Petrel's publisher-side interceptors, whether it publishes
	// or not.
	var cnt counters
	subs := make([]*client.Client, n)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("sub%03d", i)
	}
	ready := make([]chan struct{}, n)
	api := leanAPI()
	no := false
	defer func() {
		for _, c := range subs {
			if c != nil {
				c.Close()
			}
		}
	}()
	// Subscribing after Join rather than by autoSubscribe also avoids a race
	// in client.Join: a server offer that arrives before the client's
	// subscriber connection exists panics (nil PeerConnection in
	// answerSubscriber).
	if err := benchkit.Parallel(n, func(i int) error {
		jctx, jcancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer jcancel()
		c, err := client.Join(jctx, ws, s.token(room, ids[i], subPublish), client.Options{Name: ids[i], API: api, AutoSubscribe: &no})
		if err != nil {
			return fmt.Errorf("%s join: %w", ids[i], err)
		}
		subs[i] = c
		ready[i] = make(chan struct{})
		go receive(c, &cnt, ready[i])
		return nil
	}); err != nil {
		return result{}, err
	}
	time.Sleep(3 * time.Second) // let handshakes and negotiation settle
	idleWindow := 10 * time.Second
	var idleProf chan error
	if idleprofile != "" {
		idleProf = make(chan error, 1)
		go func() { idleProf <- fetchProfile(s.pprof, idleWindow, idleprofile) }()
	}
	joinedCPU, err := s.cpuOver(idleWindow)
	if err != nil {
		return result{}, err
	}
	if idleProf != nil {
		if err := <-idleProf; err != nil {
			return result{}, fmt.Errorf("idle cpu profile: %w", err)
		}
	}

	// Phase 3: everyone subscribes to the video and the audio.
	if err := benchkit.Parallel(n, func(i int) error {
		jctx, jcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer jcancel()
		yes := true
		_, err := subs[i].Request(jctx, protocol.Subscribe{TrackSids: sids, Subscribe: &yes})
		if err != nil {
			return fmt.Errorf("%s subscribe: %w", ids[i], err)
		}
		return nil
	}); err != nil {
		return result{}, err
	}
	deadline := time.After(60 * time.Second)
	for i := range ready {
		select {
		case <-ready[i]:
		case <-deadline:
			return result{}, fmt.Errorf("subscriber %d received no video and audio within 60s", i)
		}
	}
	time.Sleep(warmup)

	var profile chan error
	if cpuprofile != "" {
		profile = make(chan error, 1)
		go func() { profile <- fetchProfile(s.pprof, window, cpuprofile) }()
	}
	// The same order at both ends, so that the time the reads take shifts both
	// ends of the window alike.
	c0, err := s.cpuTicks()
	if err != nil {
		return result{}, err
	}
	t0 := time.Now()
	f0, err := s.forwarded(room, ids)
	if err != nil {
		return result{}, err
	}
	i0, _ := s.published(room, "publisher")
	m0, _ := s.metric("petrel_packets_total", "out")
	r0, rb0 := cnt.packets.Load(), cnt.bytes.Load()
	d0 := selfCPU()
	time.Sleep(window)
	c1, err := s.cpuTicks()
	if err != nil {
		return result{}, err
	}
	el := time.Since(t0)
	f1, err := s.forwarded(room, ids)
	if err != nil {
		return result{}, err
	}
	i1, _ := s.published(room, "publisher")
	m1, _ := s.metric("petrel_packets_total", "out")
	r1, rb1 := cnt.packets.Load(), cnt.bytes.Load()
	d1 := selfCPU()
	rss1, err := s.rss()
	if err != nil {
		return result{}, err
	}
	if profile != nil {
		if err := <-profile; err != nil {
			return result{}, fmt.Errorf("cpu profile: %w", err)
		}
	}
	if prof.heap != "" {
		if err := fetch(s.pprof, "/debug/pprof/heap?gc=1", prof.heap); err != nil {
			return result{}, fmt.Errorf("heap profile: %w", err)
		}
	}
	out := f1 - f0
	if out <= 0 {
		return result{}, errors.New("server forwarded nothing in the window")
	}
	cpu := float64(c1-c0) / clkTck // seconds
	pps := out / el.Seconds()
	log.Printf("N=%d: publisher in %.1f packets/s; out %.1f per subscriber", n, (i1-i0)/el.Seconds(), pps/float64(n))
	log.Printf("N=%d: /metrics out delta %.0f vs DownTrack counters %.0f (batched by 128 packets per publication)", n, m1-m0, out)
	return result{
		n:           n,
		pps:         pps,
		cpuUsPerPkt: cpu * 1e6 / out,
		mediaUs:     (cpu/el.Seconds() - joinedCPU) * 1e6 / pps,
		pubCPU:      100 * pubCPU,
		partUs:      (joinedCPU - pubCPU) * 1e6 / float64(n),
		rssPerSub:   (rss1 - rss0) / float64(n) / (1 << 20),
		serverCPU:   100 * cpu / el.Seconds(),
		driverCPU:   100 * (d1 - d0).Seconds() / el.Seconds(),
		delivered:   float64(r1-r0) / out,
		bytesPerPkt: float64(rb1-rb0) / float64(max(r1-r0, 1)), // RTP header and payload, as received
	}, nil
}

// cpuOver is the server's CPU use, in cores, over d from now.
func (s *server) cpuOver(d time.Duration) (float64, error) {
	c0, err := s.cpuTicks()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	time.Sleep(d)
	c1, err := s.cpuTicks()
	if err != nil {
		return 0, err
	}
	return float64(c1-c0) / clkTck / time.Since(t0).Seconds(), nil
}

func fetchProfile(addr string, d time.Duration, file string) error {
	return fetch(addr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())), file)
}

func fetch(addr, path, file string) error {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof: %s", resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// receive reads every subscribed track of c and counts its packets; ready closes
// once both a video and an audio packet arrived.
func receive(c *client.Client, cnt *counters, ready chan struct{}) {
	var video, audio atomic.Bool
	var once sync.Once
	check := func() {
		if video.Load() && audio.Load() {
			once.Do(func() { close(ready) })
		}
	}
	for {
		select {
		case tr := <-c.Tracks:
			go func() {
				// RTCP from the server (sender reports) is read and dropped.
				go func() {
					buf := make([]byte, 1500)
					for {
						if _, _, err := tr.Receiver.Read(buf); err != nil {
							return
						}
					}
				}()
				seen := &audio
				if tr.Remote.Kind() == webrtc.RTPCodecTypeVideo {
					seen = &video
				}
				buf := make([]byte, 1500)
				for {
					k, _, err := tr.Remote.Read(buf)
					if err != nil {
						return
					}
					cnt.packets.Add(1)
					cnt.bytes.Add(int64(k))
					if !seen.Load() {
						seen.Store(true)
						check()
					}
				}
			}()
		case <-c.Done():
			return
		}
	}
}

// source is a synthetic publisher track: VP8-like video at 30 fps with 1800-byte
// inter frames and an 8000-byte keyframe every second (about 480 kbit/s of
// payload, 65 packets/s at Pion's 1200-byte MTU), or Opus-like audio with
// 80-byte frames every 20 ms (50 packets/s).
type source struct {
	name  string
	track *webrtc.TrackLocalStaticSample
	audio bool
}

func newVideo() *source {
	tr, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, "cam", "stream-pub")
	if err != nil {
		panic(err)
	}
	return &source{name: "camera", track: tr}
}

func newAudio() *source {
	tr, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "mic", "stream-pub")
	if err != nil {
		panic(err)
	}
	return &source{name: "microphone", track: tr, audio: true}
}

func (s *source) run(stop chan struct{}) {
	d := time.Second / 30
	if s.audio {
		d = 20 * time.Millisecond
	}
	tick := time.NewTicker(d)
	defer tick.Stop()
	key := make([]byte, 8000)
	inter := make([]byte, 1800)
	audio := make([]byte, 80)
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		var frame []byte
		switch {
		case s.audio:
			frame = audio
		case n%30 == 0:
			frame = key
			frame[0] = 0x00 // VP8 frame tag bit 0 clear: keyframe
		default:
			frame = inter
			frame[0] = 0x01
		}
		frame[len(frame)-1] = byte(n)
		_ = s.track.WriteSample(media.Sample{Data: frame, Duration: d})
	}
}
