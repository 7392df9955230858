// Package soak churns a running Petrel server (participants joining and
// leaving with media and data, WHEP viewers coming and going, an RTP-push
// camera whose sender stops and restarts) and samples the server's RSS,
// goroutines and open files, so that a leak shows as growth.
package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/client"
)

// Config says which server to churn and how hard.
type Config struct {
	URL    string // http://127.0.0.1:PORT of the server
	PID    int    // its process, for RSS and open files
	Keys   auth.Keys
	APIKey string

	// Camera is the id of an RTP-push camera declared on the server, listening
	// on CameraPort (127.0.0.1); "" runs no camera. Clip is the directory of
	// clip.h264 (loadtest/testdata) that the pusher sends.
	Camera     string
	CameraPort int
	Clip       string

	Duration time.Duration
	Every    time.Duration // sampling interval (default 5 s)

	Churners int           // participants joining and leaving at once (default 4)
	Viewers  int           // WHEP viewers coming and going at once (default 2)
	Stay     time.Duration // mean time a churner or viewer stays (default 10 s)
	// CameraOn and CameraOff are how long the pusher sends, then pauses
	// (default 30 s and 8 s: longer than the camera's 5 s owner timeout, so a
	// restart from a new socket is taken).
	CameraOn, CameraOff time.Duration

	// Logf, when set, gets a line per sample and per failure.
	Logf func(format string, args ...any)
	// OnSample, when set, gets each sample as it is taken.
	OnSample func(Sample)
}

func (c *Config) defaults() {
	if c.Every <= 0 {
		c.Every = 5 * time.Second
	}
	if c.Churners <= 0 {
		c.Churners = 4
	}
	if c.Viewers <= 0 {
		c.Viewers = 2
	}
	if c.Stay <= 0 {
		c.Stay = 10 * time.Second
	}
	if c.CameraOn <= 0 {
		c.CameraOn = 30 * time.Second
	}
	if c.CameraOff <= 0 {
		c.CameraOff = 8 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Sample is the server's state at one moment and the churn so far.
type Sample struct {
	At         time.Duration // since the start of the soak
	RSS        int64         // bytes
	Goroutines int
	OpenFiles  int

	Joins, WHEPSessions, CameraRestarts int64 // cumulative
	DataIn                              int64 // data messages the anchor received
	AnchorPackets                       int64 // video packets the anchor subscriber received
	Failures                            int64 // joins, WHEP sessions or camera views that failed
}

// CSVHeader is the first line WriteCSV writes.
const CSVHeader = "seconds,rss_mb,goroutines,open_files,joins,whep_sessions,camera_restarts,data_in,anchor_packets,failures"

// CSV is one sample as a CSVHeader row.
func (s Sample) CSV() string {
	return fmt.Sprintf("%.1f,%.2f,%d,%d,%d,%d,%d,%d,%d,%d", s.At.Seconds(), float64(s.RSS)/(1<<20), s.Goroutines, s.OpenFiles,
		s.Joins, s.WHEPSessions, s.CameraRestarts, s.DataIn, s.AnchorPackets, s.Failures)
}

type run struct {
	cfg   Config
	start time.Time
	clip  *emulator.Clip

	joins, wheps, restarts, dataIn, anchorPkts, failures atomic.Int64
}

// Run churns the server for cfg.Duration (or until ctx ends) and returns a
// sample every cfg.Every. It fails if the anchor (a publisher and a
// subscriber that stay for the whole soak) cannot join, or if the server
// stops answering.
func Run(ctx context.Context, cfg Config) ([]Sample, error) {
	cfg.defaults()
	r := &run{cfg: cfg, start: time.Now()}
	if cfg.Camera != "" {
		clip, err := emulator.LoadClip(cfg.Clip)
		if err != nil {
			return nil, err
		}
		r.clip = clip
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	stopAnchor, err := r.anchor(ctx)
	if err != nil {
		return nil, fmt.Errorf("anchor: %w", err)
	}
	defer stopAnchor()

	var wg sync.WaitGroup
	for i := 0; i < cfg.Churners; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); r.churn(ctx, i) }()
	}
	for i := 0; i < cfg.Viewers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); r.viewers(ctx, i) }()
	}
	if cfg.Camera != "" {
		wg.Add(1)
		go func() { defer wg.Done(); r.pushCamera(ctx) }()
	}

	var samples []Sample
	tick := time.NewTicker(cfg.Every)
	defer tick.Stop()
	for {
		s, err := r.sample()
		if err != nil {
			cancel()
			wg.Wait()
			return samples, err
		}
		samples = append(samples, s)
		if cfg.OnSample != nil {
			cfg.OnSample(s)
		}
		cfg.Logf("%s rss %.1f MB, %d goroutines, %d files; %d joins, %d WHEP, %d camera restarts, %d anchor packets, %d failures",
			s.At.Round(time.Second), float64(s.RSS)/(1<<20), s.Goroutines, s.OpenFiles, s.Joins, s.WHEPSessions, s.CameraRestarts, s.AnchorPackets, s.Failures)
		select {
		case <-ctx.Done():
			wg.Wait()
			return samples, nil
		case <-tick.C:
		}
	}
}

func (r *run) sample() (Sample, error) {
	s := Sample{At: time.Since(r.start), Joins: r.joins.Load(), WHEPSessions: r.wheps.Load(), CameraRestarts: r.restarts.Load(),
		DataIn: r.dataIn.Load(), AnchorPackets: r.anchorPkts.Load(), Failures: r.failures.Load()}
	var err error
	if s.RSS, err = RSS(r.cfg.PID); err != nil {
		return s, err
	}
	if s.OpenFiles, err = OpenFiles(r.cfg.PID); err != nil {
		return s, err
	}
	if s.Goroutines, err = Goroutines(r.cfg.URL); err != nil {
		return s, err
	}
	return s, nil
}

func (r *run) token(room, identity string, g auth.Grants) string {
	c := auth.Claims{Room: room, Grants: g, RegisteredClaims: jwt.RegisteredClaims{Subject: identity}}
	tok, err := r.cfg.Keys.Sign(r.cfg.APIKey, c, 2*time.Hour+r.cfg.Duration)
	if err != nil {
		panic(err) // only a key the caller got wrong
	}
	return tok
}

func (r *run) wsURL() string { return "ws" + strings.TrimPrefix(r.cfg.URL, "http") + "/v1/rtc" }

func (r *run) stay() time.Duration {
	return r.cfg.Stay/2 + rand.N(r.cfg.Stay)
}

func (r *run) fail(what string, err error) {
	r.failures.Add(1)
	r.cfg.Logf("%s: %v", what, err)
}

var all = auth.Grants{Publish: true, Subscribe: true, PublishData: true}

const anchorRoom = "soak-0"

// anchor joins a publisher and a subscriber in room soak-0 for the whole
// soak: the subscriber counts the publisher's video packets and the data
// messages the churners send.
func (r *run) anchor(ctx context.Context) (func(), error) {
	jctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	pub, err := client.Join(jctx, r.wsURL(), r.token(anchorRoom, "anchor-pub", all), client.Options{Name: "anchor-pub"})
	if err != nil {
		return nil, err
	}
	src, err := newVideo("anchor")
	if err != nil {
		pub.Close()
		return nil, err
	}
	if _, _, err := pub.Publish(jctx, src.track, "camera"); err != nil {
		pub.Close()
		return nil, err
	}
	auto := false
	sub, err := client.Join(jctx, r.wsURL(), r.token(anchorRoom, "anchor-sub", all), client.Options{Name: "anchor-sub", AutoSubscribe: &auto})
	if err != nil {
		pub.Close()
		return nil, err
	}
	actx, acancel := context.WithCancel(ctx)
	go src.run(actx)
	go drainEvents(actx, pub)
	go func() {
		for {
			select {
			case <-actx.Done():
				return
			case <-sub.DataIn:
				r.dataIn.Add(1)
			}
		}
	}()
	// Subscribe to the anchor publisher's video only: churners come and go.
	pubSid, _ := pub.Joined["participant"].(map[string]any)["sid"].(string)
	go func() {
		for {
			select {
			case <-actx.Done():
				return
			case m := <-sub.Events:
				if m["type"] != "trackPublished" && m["type"] != "joined" {
					continue
				}
				if m["participantSid"] != pubSid {
					continue
				}
				tr, _ := m["track"].(map[string]any)
				_, _ = sub.Request(actx, map[string]any{"type": "subscribe", "trackSids": []string{fmt.Sprint(tr["sid"])}, "subscribe": true})
			case tr := <-sub.Tracks:
				go countPackets(tr.Remote, &r.anchorPkts)
			}
		}
	}()
	// The publisher's track may have been published before the subscriber
	// joined: subscribe from the joined message.
	for _, p := range asList(sub.Joined["participants"]) {
		pm, _ := p.(map[string]any)
		if pm["sid"] != pubSid {
			continue
		}
		for _, t := range asList(pm["tracks"]) {
			tm, _ := t.(map[string]any)
			_, _ = sub.Request(jctx, map[string]any{"type": "subscribe", "trackSids": []string{fmt.Sprint(tm["sid"])}, "subscribe": true})
		}
	}
	stop := func() { acancel(); src.stop(); sub.Close(); pub.Close() }
	// WHEP viewers start once the anchor's video flows.
	for r.anchorPkts.Load() == 0 {
		if jctx.Err() != nil {
			stop()
			return nil, errors.New("the anchor subscriber received no video")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return stop, nil
}

func asList(v any) []any { l, _ := v.([]any); return l }

// churn joins a participant again and again: in room soak-<slot%2> it
// publishes video and sends data messages; every fourth time it views the
// camera's room instead.
func (r *run) churn(ctx context.Context, slot int) {
	for n := 0; ctx.Err() == nil; n++ {
		identity := fmt.Sprintf("churn-%d-%d", slot, n)
		camera := r.cfg.Camera != "" && n%4 == 1
		room := fmt.Sprintf("soak-%d", slot%2)
		g := all
		if camera {
			room, g = "camera/"+r.cfg.Camera, auth.Grants{Subscribe: true}
		}
		jctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		c, err := client.Join(jctx, r.wsURL(), r.token(room, identity, g), client.Options{Name: identity})
		if err != nil {
			cancel()
			if ctx.Err() == nil {
				r.fail("join "+identity, err)
				sleep(ctx, time.Second)
			}
			continue
		}
		r.joins.Add(1)
		var src *video
		if !camera {
			if src, err = newVideo(identity); err == nil {
				_, _, err = c.Publish(jctx, src.track, "camera")
			}
			if err != nil && ctx.Err() == nil {
				r.fail("publish "+identity, err)
			}
		}
		cancel()
		pctx, pcancel := context.WithTimeout(ctx, r.stay())
		if src != nil {
			go src.run(pctx)
		}
		go drainEvents(pctx, c)
		var got atomic.Int64
		go func() {
			for {
				select {
				case <-pctx.Done():
					return
				case tr := <-c.Tracks:
					go countPackets(tr.Remote, &got)
				case <-c.DataIn:
				}
			}
		}()
		tick := time.NewTicker(500 * time.Millisecond)
	loop:
		for i := 0; ; i++ {
			select {
			case <-pctx.Done():
				break loop
			case <-tick.C:
				if !camera {
					_ = c.SendData([]byte(fmt.Sprintf("hello %d from %s", i, identity)), true, true)
				}
			}
		}
		tick.Stop()
		pcancel()
		if camera && got.Load() == 0 && ctx.Err() == nil {
			r.cfg.Logf("%s saw no camera packets in its stay (the camera may be between pushes)", identity)
		}
		if src != nil {
			src.stop()
		}
		c.Close()
	}
}

// viewers opens WHEP sessions on the anchor publisher one after another,
// reads media for a while and ends each with DELETE on its Location.
func (r *run) viewers(ctx context.Context, slot int) {
	for n := 0; ctx.Err() == nil; n++ {
		if err := r.whep(ctx, fmt.Sprintf("whep-%d-%d", slot, n)); err != nil && ctx.Err() == nil {
			r.fail("WHEP", err)
			sleep(ctx, time.Second)
		}
	}
}

func (r *run) whep(ctx context.Context, identity string) error {
	pc, err := client.LoopbackAPI().NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return err
	}
	defer pc.Close()
	var got atomic.Int64
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { countPackets(tr, &got) })
	for _, k := range []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo, webrtc.RTPCodecTypeAudio} {
		if _, err := pc.AddTransceiverFromKind(k, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
			return err
		}
	}
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		return err
	}
	<-gathered
	tok := r.token(anchorRoom, identity, auth.Grants{Subscribe: true})
	status, loc, answer, err := httpDo(ctx, http.MethodPost, r.cfg.URL+"/whep/"+anchorRoom+"?participant=anchor-pub", "application/sdp", tok, pc.LocalDescription().SDP)
	if err != nil {
		return err
	}
	if status != http.StatusCreated {
		return fmt.Errorf("POST /whep: %d %s", status, answer)
	}
	r.wheps.Add(1)
	del := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if s, _, b, err := httpDo(dctx, http.MethodDelete, r.cfg.URL+loc, "", tok, ""); err != nil || s != http.StatusOK {
			r.fail("WHEP DELETE "+loc, fmt.Errorf("%d %s %v", s, b, err))
		}
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		del()
		return err
	}
	sleep(ctx, r.stay())
	del()
	if got.Load() == 0 && ctx.Err() == nil {
		return errors.New("WHEP viewer received no packets")
	}
	return nil
}

// pushCamera sends the clip as RTP to the camera's port for CameraOn, stops
// for CameraOff, and starts again from a new socket, as a camera that reboots.
func (r *run) pushCamera(ctx context.Context) {
	dst := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: r.cfg.CameraPort}
	for n := 0; ctx.Err() == nil; n++ {
		if n > 0 {
			r.restarts.Add(1)
		}
		conn, err := net.DialUDP("udp", nil, dst)
		if err != nil {
			r.fail("camera socket", err)
			sleep(ctx, time.Second)
			continue
		}
		on, cancel := context.WithTimeout(ctx, r.cfg.CameraOn)
		pushClip(on, conn, r.clip)
		cancel()
		conn.Close()
		sleep(ctx, r.cfg.CameraOff)
	}
}

// frames cuts the clip's NAL units into access units at each slice whose
// first_mb_in_slice is 0: loadtest's clip has no delimiters and two slices
// a frame.
func frames(clip *emulator.Clip) (aus [][][]byte, idr []bool) {
	for _, au := range clip.AUs {
		for _, n := range au {
			t := n[0] & 0x1f
			if (t == 1 || t == 5) && len(n) > 1 && n[1]&0x80 != 0 || len(aus) == 0 {
				aus, idr = append(aus, nil), append(idr, false)
			}
			aus[len(aus)-1] = append(aus[len(aus)-1], n)
			if t == 5 {
				idr[len(idr)-1] = true
			}
		}
	}
	return aus, idr
}

// clipFPS is the frame rate loadtest/testdata/make-clip.sh encodes clip.h264 at.
const clipFPS = 30

// pushClip sends the clip's access units at its frame rate, parameter sets
// in-band before each IDR, until ctx ends.
func pushClip(ctx context.Context, conn *net.UDPConn, clip *emulator.Clip) {
	aus, idr := frames(clip)
	pk := rtp.NewPacketizer(1200, 96, rand.Uint32(), &codecs.H264Payloader{}, rtp.NewRandomSequencer(), 90000)
	tick := time.NewTicker(time.Second / clipFPS)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k := i % len(aus)
		nalus := aus[k]
		if idr[k] {
			nalus = append([][]byte{clip.SPS, clip.PPS}, nalus...)
		}
		var au []byte
		for _, n := range nalus {
			au = append(au, 0, 0, 0, 1)
			au = append(au, n...)
		}
		for _, p := range pk.Packetize(au, 90000/clipFPS) {
			b, err := p.Marshal()
			if err != nil {
				continue
			}
			_, _ = conn.Write(b)
		}
	}
}

// video is a synthetic VP8 source: 15 frames a second, a keyframe every 30.
type video struct {
	track *webrtc.TrackLocalStaticSample
	done  chan struct{}
	once  sync.Once
}

func newVideo(id string) (*video, error) {
	tr, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, id, "stream-"+id)
	if err != nil {
		return nil, err
	}
	return &video{track: tr, done: make(chan struct{})}, nil
}

func (v *video) stop() { v.once.Do(func() { close(v.done) }) }

func (v *video) run(ctx context.Context) {
	const d = 66 * time.Millisecond
	tick := time.NewTicker(d)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-v.done:
			return
		case <-tick.C:
		}
		frame := make([]byte, 1500)
		frame[0] = 0x01
		if n%30 == 0 {
			frame[0] = 0x00 // keyframe: VP8 frame tag bit 0 clear
		}
		_ = v.track.WriteSample(media.Sample{Data: frame, Duration: d})
	}
}

func countPackets(tr *webrtc.TrackRemote, n *atomic.Int64) {
	buf := make([]byte, 1600)
	for {
		if _, _, err := tr.Read(buf); err != nil {
			return
		}
		n.Add(1)
	}
}

func drainEvents(ctx context.Context, c *client.Client) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.Done():
			return
		case <-c.Events:
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func httpDo(ctx context.Context, method, u, ctype, token, body string) (status int, location, respBody string, err error) {
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return 0, "", "", err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	loc := resp.Header.Get("Location")
	if u, err := url.Parse(loc); err == nil && u.IsAbs() {
		loc = u.RequestURI()
	}
	return resp.StatusCode, loc, string(b), nil
}

var httpClient = &http.Client{Timeout: 15 * time.Second}

// RSS is a process's resident set size in bytes.
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// OpenFiles counts a process's open file descriptors.
func OpenFiles(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents), err
}

// Goroutines reads go_goroutines from the server's /metrics.
func Goroutines(base string) (int, error) {
	resp, err := httpClient.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, errors.New("no go_goroutines in /metrics")
}

// Growth is how one metric moved over a span of a soak.
type Growth struct {
	Name        string
	First, Last float64 // medians of the first and last sixth of the span
	// Rel is (Last-First)/First; Slope the least-squares slope over the span
	// times its length, relative to the mean.
	Rel, Slope float64
}

// Metrics are the sampled values a verdict looks at.
var Metrics = []struct {
	Name string
	Get  func(Sample) float64
}{
	{"rss", func(s Sample) float64 { return float64(s.RSS) }},
	{"goroutines", func(s Sample) float64 { return float64(s.Goroutines) }},
	{"open_files", func(s Sample) float64 { return float64(s.OpenFiles) }},
}

// Growths measures each of Metrics over the samples taken at or after from.
func Growths(samples []Sample, from time.Duration) []Growth {
	var span []Sample
	for _, s := range samples {
		if s.At >= from {
			span = append(span, s)
		}
	}
	var out []Growth
	for _, m := range Metrics {
		g := Growth{Name: m.Name}
		if len(span) < 6 {
			out = append(out, g)
			continue
		}
		w := len(span) / 6
		vals := func(ss []Sample) []float64 {
			v := make([]float64, len(ss))
			for i, s := range ss {
				v[i] = m.Get(s)
			}
			return v
		}
		g.First, g.Last = median(vals(span[:w])), median(vals(span[len(span)-w:]))
		if g.First > 0 {
			g.Rel = (g.Last - g.First) / g.First
		}
		var sx, sy, sxx, sxy float64
		n := float64(len(span))
		for _, s := range span {
			x, y := s.At.Seconds(), m.Get(s)
			sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
		}
		if d := n*sxx - sx*sx; d != 0 && sy != 0 {
			slope := (n*sxy - sx*sy) / d
			length := span[len(span)-1].At.Seconds() - span[0].At.Seconds()
			g.Slope = slope * length / (sy / n)
		}
		out = append(out, g)
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// FreeUDPPair is an even loopback UDP port p with p+1 free too, for an
// RTP-push camera (RTCP goes to p+1).
func FreeUDPPair() (int, error) {
	for i := 0; i < 50; i++ {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return 0, err
		}
		p := c.LocalAddr().(*net.UDPAddr).Port &^ 1
		c.Close()
		a, err1 := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
		b, err2 := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p + 1})
		if a != nil {
			a.Close()
		}
		if b != nil {
			b.Close()
		}
		if err1 == nil && err2 == nil {
			return p, nil
		}
	}
	return 0, errors.New("no free UDP port pair")
}
