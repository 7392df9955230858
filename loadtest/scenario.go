package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pion/webrtc/v4"
)

// Config describes one run.
type Config struct {
	Scenario string `json:"scenario"` // echo, room, stream, whip, whep, mix
	Target   string `json:"target"`   // petrel, whip (any WHIP/WHEP server), janus, livekit
	URL      string `json:"url"`      // petrel, livekit: http://host:port; janus: ws://host:8188 or http://host:8088/janus
	WHIPURL  string `json:"whipUrl,omitempty"`
	WHEPURL  string `json:"whepUrl,omitempty"`
	Token    string `json:"-"`
	APIKey   string `json:"-"`
	Secret   string `json:"-"`
	Room     string `json:"room"`
	// Proto is how Petrel is reached for stream/room/echo: "ws" (room protocol)
	// or "whip" (publish over WHIP, view over WHEP).
	Proto      string        `json:"proto"`
	Peers      int           `json:"peers"`      // viewers, subscribers, echo peers or WHIP publishers
	Publishers int           `json:"publishers"` // room scenario
	Rate       float64       `json:"rate"`       // new peers per second
	Parallel   int           `json:"parallel"`   // setups in flight at once
	Duration   time.Duration `json:"duration"`   // steady state after the ramp
	Warmup     time.Duration `json:"warmup"`     // after the ramp, before the steady window
	Video      string        `json:"video"`      // synthetic, a file (.ivf/.h264), rtp:ADDR, none
	Audio      string        `json:"audio"`      // synthetic, a file (.ogg), rtp:ADDR, none
	Kbps       int           `json:"kbps"`
	TargetPID  int           `json:"targetPid"`
	Bind       string        `json:"bind"`
	PionRead   bool          `json:"pionRead,omitempty"` // receive through Pion's track reader (see APIOptions)
	// Peer is how WHEP viewers are built: "lean" (own socket, ICE, DTLS and
	// SRTP without a Pion PeerConnection; see leanPeer) or "pion".
	Peer string `json:"peer"`
	// LeanPoll > 0 puts lean viewers on one shared loopback socket drained
	// by one goroutine at this interval (see leanShared); 0 (or a bind off
	// loopback) gives each its own socket and reader goroutine.
	LeanPoll time.Duration `json:"leanPoll,omitempty"`
	// JanusStreaming makes stream use Janus's Streaming plugin (an RTP
	// mountpoint fed by the generator) instead of VideoRoom.
	JanusStreaming bool `json:"janusStreaming,omitempty"`
	// Talkers is how many mix peers speak (the audio source); the others
	// publish Opus silence.
	Talkers int `json:"talkers,omitempty"`

	Progress io.Writer `json:"-"`
}

func (c *Config) defaults() {
	if c.Scenario == "" {
		c.Scenario = "stream"
	}
	if c.Target == "" {
		c.Target = "petrel"
	}
	if c.Room == "" {
		c.Room = "load"
	}
	if c.Proto == "" {
		c.Proto = "ws"
	}
	if c.Peer == "" {
		c.Peer = "lean"
	}
	if c.Rate <= 0 {
		c.Rate = 20
	}
	if c.Parallel <= 0 {
		c.Parallel = 16
	}
	if c.Video == "" {
		c.Video = "synthetic"
	}
	if c.Audio == "" {
		c.Audio = "synthetic"
	}
	if c.Kbps <= 0 {
		c.Kbps = 500
	}
	if c.Publishers <= 0 {
		c.Publishers = 1
	}
	if c.Scenario == "mix" {
		c.Video = "none" // an audio-mixed room: audio only
		if c.Talkers <= 0 {
			c.Talkers = 3
		}
	}
	if c.Target == "livekit" && c.APIKey == "" {
		c.APIKey, c.Secret = LiveKitDevKey, LiveKitDevSecret
	}
}

// OpenSource parses a source spec: synthetic, none, rtp:ADDR or a file path.
func OpenSource(spec string, audio bool, kbps int) (*Source, error) {
	kind, codec := webrtc.RTPCodecTypeVideo, CodecVP8
	if audio {
		kind, codec = webrtc.RTPCodecTypeAudio, CodecOpus
	}
	switch {
	case spec == "none" || spec == "":
		return nil, nil
	case spec == "synthetic":
		return Synthetic(audio, kbps, 30, 30), nil
	case strings.HasPrefix(spec, "rtp:"):
		return ListenRTP(strings.TrimPrefix(spec, "rtp:"), kind, codec)
	case strings.HasPrefix(spec, "rtp-h264:"):
		return ListenRTP(strings.TrimPrefix(spec, "rtp-h264:"), kind, CodecH264)
	}
	return OpenFile(spec, 30)
}

// Runner holds a run's state.
type Runner struct {
	cfg     Config
	lean    *Lean
	leanRx  *LeanRx // lean WHEP viewers' shared state (Peer "lean")
	tot     Counters
	srcs    []*Source
	silent  *Source // the mix scenario's listeners' audio
	mu      sync.Mutex
	peers   []*Peer
	samples []Sample
	started time.Time
	phase   string
	closers []func()
	threads int // most threads of the target seen (sampler goroutine only)
}

// onClose adds a step to run after every peer is closed.
func (r *Runner) onClose(f func()) {
	r.mu.Lock()
	r.closers = append(r.closers, f)
	r.mu.Unlock()
}

// Run executes cfg and returns its results.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	if err := checkURL(cfg.URL, cfg.WHIPURL, cfg.WHEPURL); err != nil {
		return nil, err
	}
	lean, err := NewLean(APIOptions{Bind: cfg.Bind, PionRead: cfg.PionRead})
	if err != nil {
		return nil, err
	}
	defer lean.Close()
	r := &Runner{cfg: cfg, lean: lean, started: time.Now(), phase: "setup"}
	switch cfg.Peer {
	case "lean":
		if r.leanRx, err = NewLeanRx(cfg.Bind, cfg.LeanPoll); err != nil {
			return nil, err
		}
		// Deferred before the peers' close (below): runs after it.
		defer r.leanRx.Close()
	case "pion":
	default:
		return nil, fmt.Errorf("peer %q: want lean or pion", cfg.Peer)
	}
	for _, spec := range []struct {
		s     string
		audio bool
	}{{cfg.Video, false}, {cfg.Audio, true}} {
		s, err := OpenSource(spec.s, spec.audio, cfg.Kbps)
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", spec.s, err)
		}
		if s != nil {
			s.Start()
			defer s.Stop()
			r.srcs = append(r.srcs, s)
		}
	}
	if len(r.srcs) == 0 {
		return nil, errors.New("no media source (video and audio are both none)")
	}
	if cfg.Scenario == "mix" {
		r.silent = SilentAudio()
		r.silent.Start()
		defer r.silent.Stop()
	}
	defer r.closeAll()

	sctx, stopSampler := context.WithCancel(context.Background())
	samplerDone := make(chan struct{})
	go func() { defer close(samplerDone); r.sample(sctx) }()
	defer func() { stopSampler(); <-samplerDone }()

	var rss0 int64
	self0, _ := ReadProc(0)
	if cfg.TargetPID > 0 {
		if s, err := ReadProc(cfg.TargetPID); err == nil {
			rss0 = s.RSS
		}
	}
	var runErr error
	switch cfg.Target {
	case "petrel":
		runErr = r.runPetrel(ctx)
	case "whip":
		runErr = r.runWHIP(ctx)
	case "janus":
		runErr = r.runJanus(ctx)
	case "livekit":
		runErr = r.runLiveKit(ctx)
	default:
		runErr = fmt.Errorf("unknown target %q (petrel, whip, janus, livekit)", cfg.Target)
	}
	if runErr != nil && len(r.allPeers()) == 0 {
		return nil, runErr
	}
	rampEnd := time.Now()
	r.setPhase("warmup")
	if !sleepCtx(ctx, cfg.Warmup) {
		return r.result(rampEnd, rampEnd, runErr), nil
	}
	r.setPhase("steady")
	w0 := r.mark()
	r.tot.Steady.Store(true)
	sleepCtx(ctx, cfg.Duration)
	r.tot.Steady.Store(false)
	w1 := r.mark()
	r.setPhase("done")
	stopSampler()
	<-samplerDone
	res := r.result(w0.at, w1.at, runErr)
	res.Summary.window(w0, w1, cfg.TargetPID > 0)
	res.Summary.TargetRSSStartMiB = float64(rss0) / (1 << 20)
	res.Summary.SelfRSSStartMiB = float64(self0.RSS) / (1 << 20)
	if c := res.Summary.Connected; c > 0 {
		res.Summary.SelfRSSPerPeerKiB = (res.Summary.SelfRSSMiB - res.Summary.SelfRSSStartMiB) * 1024 / float64(c)
	}
	return res, nil
}

// checkURL keeps the generator's traffic on this host or a namespace the
// caller set up: loopback and private addresses only.
func checkURL(us ...string) error {
	for _, u := range us {
		if u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil {
			return fmt.Errorf("url %q: %w", u, err)
		}
		h := p.Hostname()
		if h == "localhost" || strings.HasPrefix(h, "127.") || strings.HasPrefix(h, "10.") || strings.HasPrefix(h, "192.168.") || strings.HasPrefix(h, "172.") {
			continue
		}
		return fmt.Errorf("url %q: only loopback or private (namespace) hosts are allowed", u)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *Runner) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}

func (r *Runner) addPeer(p *Peer) {
	r.mu.Lock()
	r.peers = append(r.peers, p)
	r.mu.Unlock()
}

func (r *Runner) allPeers() []*Peer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.peers)
}

func (r *Runner) closeAll() {
	ps := r.allPeers()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, p := range ps {
		wg.Add(1)
		sem <- struct{}{}
		go func() { defer wg.Done(); defer func() { <-sem }(); p.Close() }()
	}
	wg.Wait()
	r.mu.Lock()
	cs := r.closers
	r.closers = nil
	r.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// ramp starts n peers at cfg.Rate per second, cfg.Parallel setups at a time,
// and waits for the setups to finish. A failed setup is recorded on its peer.
func (r *Runner) ramp(ctx context.Context, n int, mk func(ctx context.Context, i int) (*Peer, error)) {
	r.setPhase("ramp")
	interval := time.Duration(float64(time.Second) / r.cfg.Rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	sem := make(chan struct{}, r.cfg.Parallel)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		if i > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
				wg.Wait()
				return
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			p, err := mk(sctx, i)
			if p != nil {
				p.Fail(err)
			}
		}()
	}
	wg.Wait()
}

func (r *Runner) video() *Source {
	for _, s := range r.srcs {
		if s.Kind == webrtc.RTPCodecTypeVideo {
			return s
		}
	}
	return nil
}

// mixSource is what mix peer i publishes: the audio source for the first
// Talkers peers, silence for the others.
func (r *Runner) mixSource(i int) (*Source, error) {
	if i >= r.cfg.Talkers {
		return r.silent, nil
	}
	for _, s := range r.srcs {
		if s.Kind == webrtc.RTPCodecTypeAudio {
			return s, nil
		}
	}
	return nil, errors.New("mix: no audio source (-audio none)")
}

func (r *Runner) newPeer(id, role string) *Peer {
	p := NewPeer(id, role, &r.tot)
	r.addPeer(p)
	return p
}

func (r *Runner) petrel() *Petrel {
	return &Petrel{Base: strings.TrimSuffix(r.cfg.URL, "/"), APIKey: r.cfg.APIKey, APISecret: r.cfg.Secret, Lean: r.lean}
}

func (r *Runner) runPetrel(ctx context.Context) error {
	t := r.petrel()
	c := r.cfg
	switch c.Scenario {
	case "stream", "whep":
		var sids []string
		if c.Proto == "whip" || c.Scenario == "whep" {
			tok, err := t.Token(ctx, c.Room, "publisher", true)
			if err != nil {
				return err
			}
			p := r.newPeer("publisher", "publisher")
			if err := WHIP(ctx, r.lean, t.Base+"/whip/"+c.Room, tok, p, r.srcs...); err != nil {
				return fmt.Errorf("publisher: %w", err)
			}
			if err := waitMedia(ctx, p); err != nil {
				return err
			}
		} else {
			p := r.newPeer("publisher", "publisher")
			pp, err := t.Join(ctx, c.Room, p, true)
			if err != nil {
				return err
			}
			pp.CountPublisherRTCP(r.srcs...)
			if sids, err = pp.Publish(ctx, r.srcs...); err != nil {
				return err
			}
		}
		r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("viewer%04d", i), "subscriber")
			if c.Proto == "whip" || c.Scenario == "whep" {
				tok, err := t.Token(ctx, c.Room, p.ID, false)
				if err != nil {
					return p, err
				}
				return p, r.whep(ctx, t.Base+"/whep/"+c.Room+"?participant=publisher", tok, p)
			}
			pp, err := t.Join(ctx, c.Room, p, false)
			if err != nil {
				return p, err
			}
			return p, pp.Subscribe(ctx, sids)
		})
		return nil
	case "room":
		pubs := make([]*Participant, c.Publishers)
		var all []string
		var mu sync.Mutex
		r.ramp(ctx, c.Publishers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("pub%03d", i), "publisher")
			pp, err := t.Join(ctx, c.Room, p, false)
			if err != nil {
				return p, err
			}
			pp.CountPublisherRTCP(r.srcs...)
			sids, err := pp.Publish(ctx, r.srcs...)
			if err != nil {
				return p, err
			}
			mu.Lock()
			pubs[i] = pp
			all = append(all, sids...)
			mu.Unlock()
			return p, nil
		})
		// Every publisher receives every other publisher (its own sids are
		// ignored by the server).
		for _, pp := range pubs {
			if pp != nil {
				pp.Peer.Fail(pp.Subscribe(ctx, all))
			}
		}
		r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("sub%04d", i), "subscriber")
			pp, err := t.Join(ctx, c.Room, p, false)
			if err != nil {
				return p, err
			}
			return p, pp.Subscribe(ctx, all)
		})
		return nil
	case "echo":
		// Petrel does not send a participant its own tracks, so an echo peer is
		// a pair in a room of its own: it publishes, and its receiving half
		// subscribes. The pair is one peer in the results.
		r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("echo%04d", i), "echo")
			room := fmt.Sprintf("%s-echo%04d", c.Room, i)
			pub := NewPeer(p.ID+"-tx", "publisher", &r.tot)
			pub.ID = p.ID + "-tx"
			tx, err := t.Join(ctx, room, pub, true)
			p.OnClose(pub.Close)
			if err != nil {
				return p, err
			}
			tx.Peer = p // count the server's NACKs and PLIs on the echo peer
			tx.CountPublisherRTCP(r.srcs...)
			sids, err := tx.Publish(ctx, r.srcs...)
			if err != nil {
				return p, err
			}
			rx, err := t.Join(ctx, room, p, false)
			if err != nil {
				return p, err
			}
			return p, rx.Subscribe(ctx, sids)
		})
		return nil
	case "mix":
		// Every peer publishes audio and is subscribed automatically to its
		// one mixed track (everyone but itself).
		if err := t.MixRoom(ctx, c.Room); err != nil {
			return err
		}
		r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("mix%04d", i), "participant")
			src, err := r.mixSource(i)
			if err != nil {
				return p, err
			}
			pp, err := t.join(ctx, c.Room, p, false, true)
			if err != nil {
				return p, err
			}
			pp.CountPublisherRTCP(src)
			_, err = pp.Publish(ctx, src)
			return p, err
		})
		return nil
	case "whip":
		r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("whip%04d", i), "publisher")
			room := fmt.Sprintf("%s-%04d", c.Room, i)
			tok, err := t.Token(ctx, room, p.ID, true)
			if err != nil {
				return p, err
			}
			return p, WHIP(ctx, r.lean, t.Base+"/whip/"+room, tok, p, r.srcs...)
		})
		return nil
	}
	return fmt.Errorf("unknown scenario %q (echo, room, stream, whip, whep, mix)", c.Scenario)
}

// whep starts a WHEP viewer of the configured kind.
func (r *Runner) whep(ctx context.Context, endpoint, token string, p *Peer) error {
	if r.leanRx != nil {
		return LeanWHEP(ctx, r.leanRx, endpoint, token, p)
	}
	return WHEP(ctx, r.lean, endpoint, token, p)
}

// runWHIP drives any server that speaks WHIP and WHEP.
func (r *Runner) runWHIP(ctx context.Context) error {
	c := r.cfg
	switch c.Scenario {
	case "whip":
		if c.WHIPURL == "" {
			return errors.New("whip scenario: -whip URL needed")
		}
		r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("whip%04d", i), "publisher")
			return p, WHIP(ctx, r.lean, c.WHIPURL, c.Token, p, r.srcs...)
		})
		return nil
	case "whep", "stream":
		if c.WHEPURL == "" {
			return errors.New("whep scenario: -whep URL needed")
		}
		if c.WHIPURL != "" {
			p := r.newPeer("publisher", "publisher")
			if err := WHIP(ctx, r.lean, c.WHIPURL, c.Token, p, r.srcs...); err != nil {
				return fmt.Errorf("publisher: %w", err)
			}
			if err := waitMedia(ctx, p); err != nil {
				return err
			}
		}
		r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("viewer%04d", i), "subscriber")
			return p, r.whep(ctx, c.WHEPURL, c.Token, p)
		})
		return nil
	}
	return fmt.Errorf("target whip supports the whip and whep scenarios, not %q", c.Scenario)
}

// waitMedia returns once a WHIP publisher's connection is up and its first
// frames have had time to reach the server: a WHEP server only offers tracks
// whose media it has seen.
func waitMedia(ctx context.Context, p *Peer) error {
	deadline := time.Now().Add(15 * time.Second)
	for !p.Up() {
		if p.Failed() != "" || time.Now().After(deadline) {
			return fmt.Errorf("publisher did not connect: %s", p.Failed())
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
	sleepCtx(ctx, 300*time.Millisecond)
	return nil
}

// windowMark is the state at one end of the steady window, read directly so
// that the window's figures do not depend on where the 1 s samples fall.
type windowMark struct {
	at      time.Time
	packets uint64
	bytes   uint64
	target  ProcSample
	self    ProcSample
}

func (r *Runner) mark() windowMark {
	m := windowMark{at: time.Now(), packets: r.tot.Packets.Load(), bytes: r.tot.Bytes.Load()}
	if r.cfg.TargetPID > 0 {
		m.target, _ = ReadProc(r.cfg.TargetPID)
	}
	m.self, _ = ReadProc(0)
	return m
}
