package camera

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bluenviron/mediacommon/pkg/codecs/mpeg4audio"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/sfu"
)

// AAC from RTSP cameras. Browsers cannot receive AAC over WebRTC, so the
// camera's audio track is Opus, made by an ffmpeg subprocess per camera: ADTS
// on its stdin, Opus RTP out to a loopback UDP port the gateway bound. ffmpeg
// runs only while the Opus track has a consumer (a WebRTC subscriber or a
// sink), is restarted with backoff when it fails, and stopped a few seconds
// after the last consumer left. Without ffmpeg the camera is video only, said
// once in the log and in the camera's status (AudioNote).
//
// Timing: ffmpeg's output timestamps count samples from its start. Each Opus
// packet is stamped with the AAC timestamp of the input sample it starts at,
// converted to 48 kHz: the first input access unit anchors the mapping, and
// every discontinuity in the AAC timestamps (a lost access unit, a camera
// restart) is a breakpoint that moves it. The camera's RTCP sender reports
// (NTP time for an AAC timestamp) are forwarded through the same conversion,
// so a browser lines the Opus up with the video as it would the camera's own
// audio.

const (
	aacQueue       = 64              // access units waiting for ffmpeg's stdin (about 1.3 s at 48 kHz)
	aacIdleStop    = 5 * time.Second // ffmpeg runs this long after its last consumer left
	aacBackoffMin  = time.Second
	aacBackoffMax  = 30 * time.Second
	aacBreakpoints = 64
	opusClock      = 48000
)

// ffmpegPath is the transcoder binary ("" if none is installed); tests may
// replace it.
var ffmpegPath = func() string { p, _ := exec.LookPath("ffmpeg"); return p }()

type aacAU struct {
	ts uint32 // AAC RTP timestamp (camera clock, sample rate)
	au []byte
}

type aacBreak struct {
	idx  int64  // input sample index (since ffmpeg started) where it applies
	ts48 uint32 // that sample's AAC timestamp on the 48 kHz clock
}

// aacTranscoder feeds one camera's AAC (or one playback session's recorded
// AAC: AACPlayer) to ffmpeg and its Opus to track.
type aacTranscoder struct {
	ctx   context.Context
	done  *sync.WaitGroup
	log   *slog.Logger
	bin   func() string // the ffmpeg binary
	want  func() bool   // ffmpeg runs while this holds
	idle  time.Duration // and this long after it stops holding
	track *sfu.LocalTrack
	ssrc  uint32
	in    chan aacAU

	mu   sync.Mutex
	cfg  mpeg4audio.AudioSpecificConfig // of the current upstream session
	rate uint32
	// AAC→48 kHz mapping: out(ts) = base48 + (ts - baseAAC) * 48000 / rate,
	// baseAAC unwrapped through ext (a running 64-bit AAC timestamp).
	anchored bool
	baseAAC  uint32
	base48   uint32
	lastAAC  uint32
	ext      int64
	newSess  bool
	// Per ffmpeg process:
	fed    int64 // samples written to stdin
	nextTS uint32
	breaks []aacBreak
	seq    uint16
	last48 uint32 // last timestamp sent
	sentAt time.Time
	note   string
	// Transcoding delay: when each of the last access units went to ffmpeg,
	// and the smoothed time from there to its Opus packet (ns).
	fedAt   [64]time.Time
	latency atomic.Int64
}

func newAACTranscoder(c *Camera, track *sfu.LocalTrack, ssrc uint32) *aacTranscoder {
	t := &aacTranscoder{ctx: c.ctx, done: &c.done, log: c.log, bin: c.transcoder, idle: aacIdleStop,
		track: track, ssrc: ssrc, in: make(chan aacAU, aacQueue), seq: uint16(randU32()), base48: randU32()}
	t.want = t.consumers
	c.done.Add(1)
	go t.run()
	return t
}

// newSession starts a new upstream session with config cfg: the AAC clock
// restarts, the 48 kHz one continues.
func (t *aacTranscoder) newSession(cfg mpeg4audio.AudioSpecificConfig) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cfg, t.rate, t.newSess = cfg, uint32(cfg.SampleRate), true
	if t.note == "" {
		t.note = idleNote
	}
}

const idleNote = "AAC transcoded to Opus by ffmpeg when a viewer listens (idle now)"

// push queues the access units of one RTP packet (RTSP reader's goroutine:
// never blocks; a full queue drops, which the breakpoints absorb).
func (t *aacTranscoder) push(ts uint32, aus [][]byte) {
	for i, au := range aus {
		select {
		case t.in <- aacAU{ts: ts + uint32(i*mpeg4audio.SamplesPerAccessUnit), au: au}:
		default:
		}
	}
}

// to48 converts an AAC timestamp to the Opus clock (t.mu held).
func (t *aacTranscoder) to48(ts uint32) uint32 {
	d := t.ext + int64(int32(ts-t.lastAAC))
	return t.base48 + uint32(d*opusClock/int64(t.rate))
}

// forwardSR sends the camera's sender report for its AAC as one for the Opus.
func (t *aacTranscoder) forwardSR(sr *rtcp.SenderReport) {
	ts, ok := t.srTime(sr.RTPTime)
	if !ok {
		return
	}
	out := rtcp.SenderReport{SSRC: t.ssrc, NTPTime: sr.NTPTime, RTPTime: ts, PacketCount: sr.PacketCount, OctetCount: sr.OctetCount}
	if b, err := out.Marshal(); err == nil {
		t.track.WriteRTCP(b)
	}
}

// srTime is the Opus timestamp of the camera's AAC timestamp ts, for its
// sender reports: the same conversion as the packets' (outTime).
func (t *aacTranscoder) srTime(ts uint32) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.anchored || t.newSess || t.rate == 0 {
		return 0, false
	}
	return t.to48(ts), true
}

// outTime is the timestamp of the Opus packet that starts off 48 kHz samples
// into ffmpeg's output: the AAC timestamp of the input sample it encodes, on
// the 48 kHz clock (t.mu held).
func (t *aacTranscoder) outTime(off int64) (uint32, bool) {
	if t.rate == 0 || len(t.breaks) == 0 {
		return 0, false
	}
	idx := off * int64(t.rate) / opusClock
	b := t.breaks[0]
	for _, x := range t.breaks[1:] {
		if x.idx > idx {
			break
		}
		b = x
	}
	return b.ts48 + uint32(off-b.idx*opusClock/int64(t.rate)), true
}

// consumers reports whether anyone takes the Opus.
func (t *aacTranscoder) consumers() bool {
	pub := t.track.Publication()
	return len(pub.Subscribers()) > 0 || pub.SinkCount() > 0
}

func (t *aacTranscoder) setNote(s string) {
	t.mu.Lock()
	t.note = s
	t.mu.Unlock()
}

// Note says what the transcoder does, with its delay while it runs.
func (t *aacTranscoder) Note() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.latency.Load(); l > 0 && strings.HasSuffix(t.note, ")") && strings.Contains(t.note, "(pid ") {
		return strings.TrimSuffix(t.note, ")") + fmt.Sprintf(", %.0f ms AAC to Opus)", float64(l)/1e6)
	}
	return t.note
}

// run starts ffmpeg while the track has consumers and restarts it with backoff.
func (t *aacTranscoder) run() {
	defer t.done.Done()
	backoff := aacBackoffMin
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		// Wait for a consumer, discarding audio meanwhile.
		for !t.want() {
			select {
			case <-t.ctx.Done():
				return
			case <-t.in:
			case <-tick.C:
			}
		}
		began := time.Now()
		err := t.transcode()
		if t.ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = aacBackoffMin
			t.setNote(idleNote)
			continue
		}
		if time.Since(began) > 10*time.Second {
			backoff = aacBackoffMin
		}
		t.log.Warn("AAC transcoder failed; restarting", "err", err, "in", backoff)
		t.setNote("AAC transcoder failed (" + err.Error() + "); restarting in " + backoff.String())
		select {
		case <-t.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, aacBackoffMax)
	}
}

// transcode runs one ffmpeg process until it fails (error) or nobody has
// listened for aacIdleStop (nil).
func (t *aacTranscoder) transcode() error {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	defer conn.Close()
	port := conn.LocalAddr().(*net.UDPAddr).Port
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.bin(), "-hide_banner", "-loglevel", "error",
		"-fflags", "nobuffer", "-probesize", "32", "-analyzeduration", "0", "-f", "aac", "-i", "pipe:0",
		"-vn", "-c:a", "libopus", "-application", "lowdelay", "-frame_duration", "20", "-b:a", "48k", "-ar", "48000",
		"-f", "rtp", "-payload_type", "111", "rtp://127.0.0.1:"+strconv.Itoa(port)+"?pkt_size=1200")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start ffmpeg: %w", err)
	}
	t.log.Info("AAC transcoder started", "pid", cmd.Process.Pid)
	t.setNote("AAC transcoded to Opus by ffmpeg (pid " + strconv.Itoa(cmd.Process.Pid) + ")")
	var lastErr strings.Builder
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if lastErr.Len() < 512 {
				lastErr.WriteString(sc.Text() + "; ")
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { <-errDone; exited <- cmd.Wait() }()

	// Audio queued while nobody listened is stale: start with what comes next.
	for len(t.in) > 0 {
		<-t.in
	}
	t.mu.Lock()
	t.fed, t.breaks, t.nextTS = 0, t.breaks[:0], 0
	t.fedAt = [64]time.Time{}
	t.mu.Unlock()
	t.latency.Store(0)
	readDone := make(chan struct{})
	go func() { defer close(readDone); t.readOpus(conn) }()

	idleSince := time.Time{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	w := bufio.NewWriterSize(stdin, 4096)
	stop := func() {
		_ = stdin.Close()
		cancel()
		conn.Close()
		<-readDone
	}
	for {
		select {
		case <-t.ctx.Done():
			stop()
			<-exited
			return nil
		case err := <-exited:
			conn.Close()
			<-readDone
			msg := strings.TrimSuffix(lastErr.String(), "; ")
			if err == nil {
				err = errors.New("ffmpeg exited")
			}
			if msg != "" {
				err = fmt.Errorf("%w: %s", err, msg)
			}
			return err
		case a := <-t.in:
			if err := t.feed(w, a); err != nil {
				stop()
				<-exited
				return fmt.Errorf("ffmpeg stdin: %w", err)
			}
		case <-tick.C:
			if t.want() {
				idleSince = time.Time{}
			} else if idleSince.IsZero() {
				idleSince = time.Now()
			} else if time.Since(idleSince) >= t.idle {
				t.log.Info("AAC transcoder stopped: nobody listens")
				stop()
				<-exited
				return nil
			}
		}
	}
}

// feed writes one access unit as ADTS and notes where the AAC clock jumps.
func (t *aacTranscoder) feed(w *bufio.Writer, a aacAU) error {
	t.mu.Lock()
	if t.rate == 0 {
		t.mu.Unlock()
		return nil
	}
	if !t.anchored {
		t.anchored, t.baseAAC, t.lastAAC, t.ext = true, a.ts, a.ts, 0
		t.newSess = false
	} else if t.newSess {
		// A new upstream session: its AAC clock starts anywhere; carry on the
		// 48 kHz clock from where the last one left off plus the pause.
		pause := 20 * time.Millisecond
		if !t.sentAt.IsZero() {
			pause = min(max(time.Since(t.sentAt), pause), 10*time.Second)
		}
		gap := int64(pause) * int64(t.rate) / int64(time.Second)
		cur := t.to48(t.lastAAC + uint32(mpeg4audio.SamplesPerAccessUnit))
		t.base48 = cur + uint32(gap*opusClock/int64(t.rate))
		t.baseAAC, t.lastAAC, t.ext, t.newSess = a.ts, a.ts, 0, false
		t.nextTS = a.ts + 1 // force a breakpoint
	} else {
		t.ext += int64(int32(a.ts - t.lastAAC))
		t.lastAAC = a.ts
	}
	if t.fed == 0 || a.ts != t.nextTS {
		if len(t.breaks) >= aacBreakpoints {
			t.breaks = append(t.breaks[:0], t.breaks[len(t.breaks)-aacBreakpoints/2:]...)
		}
		if n := len(t.breaks); n == 0 || t.breaks[n-1].idx != t.fed {
			t.breaks = append(t.breaks, aacBreak{idx: t.fed, ts48: t.to48(a.ts)})
		} else {
			t.breaks[n-1].ts48 = t.to48(a.ts)
		}
	}
	t.nextTS = a.ts + mpeg4audio.SamplesPerAccessUnit
	t.fedAt[(t.fed/mpeg4audio.SamplesPerAccessUnit)%int64(len(t.fedAt))] = time.Now()
	t.fed += mpeg4audio.SamplesPerAccessUnit
	cfg := t.cfg
	t.mu.Unlock()
	b, err := mpeg4audio.ADTSPackets{{Type: cfg.Type, SampleRate: cfg.SampleRate, ChannelCount: cfg.ChannelCount, AU: a.au}}.Marshal()
	if err != nil {
		return nil // an access unit ADTS cannot carry: skip it
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	return w.Flush()
}

// readOpus relays ffmpeg's Opus RTP to the track with the camera's SSRC, our
// numbering and timestamps mapped from the AAC input.
func (t *aacTranscoder) readOpus(conn *net.UDPConn) {
	buf := make([]byte, 1500)
	var pkt rtp.Packet
	var first uint32
	started := false
	for {
		n, _, err := conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if pkt.Unmarshal(buf[:n]) != nil || pkt.PayloadType != 111 || len(pkt.Payload) == 0 {
			continue // ffmpeg's RTCP, or garbage from another local process
		}
		if !started {
			started, first = true, pkt.Timestamp
		}
		off := int64(pkt.Timestamp - first) // 48 kHz samples since ffmpeg's first packet
		t.mu.Lock()
		ts, ok := t.outTime(off)
		if !ok {
			t.mu.Unlock()
			continue
		}
		// The delay from the access unit this packet starts in to now.
		if k := off * int64(t.rate) / opusClock / mpeg4audio.SamplesPerAccessUnit; k >= 0 && t.fed/mpeg4audio.SamplesPerAccessUnit-k <= int64(len(t.fedAt)) && k < t.fed/mpeg4audio.SamplesPerAccessUnit {
			if at := t.fedAt[k%int64(len(t.fedAt))]; !at.IsZero() {
				d := int64(time.Since(at))
				if prev := t.latency.Load(); prev > 0 {
					d = prev + (d-prev)/8
				}
				t.latency.Store(d)
			}
		}
		t.seq++
		h := rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: t.seq, Timestamp: ts, SSRC: t.ssrc, Marker: pkt.Marker}
		t.last48, t.sentAt = ts, time.Now()
		t.mu.Unlock()
		out := rtp.Packet{Header: h, Payload: pkt.Payload}
		_ = t.track.WritePacket(&out)
	}
}

// aacTap receives a camera's AAC access units as they come (the recorder).
type aacTap struct{ fn func(ts uint32, au []byte) }

// tapAAC hands the access units of one packet to the taps (RTSP reader's goroutine).
func (c *Camera) tapAAC(ts uint32, aus [][]byte) {
	taps := c.aacTaps.Load()
	if taps == nil {
		return
	}
	for _, t := range *taps {
		for i, au := range aus {
			t.fn(ts+uint32(i*mpeg4audio.SamplesPerAccessUnit), au)
		}
	}
}

// AACSource gives camera id's AAC access units to deliver (RTP timestamp at
// the sample rate; deliver runs on the camera's goroutine, must not block and
// must copy what it keeps) until stop. ok is false unless the camera sends
// AAC. The recorder records AAC with it, as the camera sent it.
func (g *Gateway) AACSource(id string, deliver func(ts uint32, au []byte)) (rate, channels int, asc []byte, stop func(), ok bool) {
	c := g.Camera(id)
	if c == nil {
		return 0, 0, nil, nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aacConf == nil {
		return 0, 0, nil, nil, false
	}
	asc, err := c.aacConf.Marshal()
	if err != nil {
		return 0, 0, nil, nil, false
	}
	t := &aacTap{fn: deliver}
	update := func(f func([]*aacTap) []*aacTap) {
		var cur []*aacTap
		if p := c.aacTaps.Load(); p != nil {
			cur = *p
		}
		next := f(append([]*aacTap(nil), cur...))
		c.aacTaps.Store(&next)
	}
	update(func(ts []*aacTap) []*aacTap { return append(ts, t) })
	stop = func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		update(func(ts []*aacTap) []*aacTap {
			for i, x := range ts {
				if x == t {
					return append(ts[:i], ts[i+1:]...)
				}
			}
			return ts
		})
	}
	return c.aacConf.SampleRate, c.aacConf.ChannelCount, asc, stop, true
}

// AACPlayer transcodes one playback session's recorded AAC to Opus on the
// session's audio track (record's AAC playback): the same transcoder as a
// camera's, ffmpeg running while the session plays at 1x (SetActive) and
// stopped within half a second of a pause or a rate change (at once on Close).
type AACPlayer struct {
	t      *aacTranscoder
	active atomic.Bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewAACPlayer starts a transcoder for recorded AAC with AudioSpecificConfig
// asc, writing Opus (payload type 111, SSRC ssrc) to track. It fails without
// ffmpeg or with an AudioSpecificConfig ADTS cannot carry.
func (g *Gateway) NewAACPlayer(asc []byte, track *sfu.LocalTrack, ssrc uint32) (*AACPlayer, error) {
	cfg, err := transcodable(asc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &AACPlayer{cancel: cancel}
	p.t = &aacTranscoder{ctx: ctx, done: &p.wg, log: g.log.With("playback", true), bin: func() string { return ffmpegPath },
		want: p.active.Load, idle: 0, track: track, ssrc: ssrc, in: make(chan aacAU, aacQueue),
		seq: uint16(randU32()), base48: randU32()}
	p.start(cfg)
	return p, nil
}

// NewAACLive is NewAACPlayer for a live source (RTMP ingest): ffmpeg runs
// while the Opus track has a consumer and stops aacIdleStop after the last
// one left, as a camera's does; SetActive is not used.
func (g *Gateway) NewAACLive(asc []byte, track *sfu.LocalTrack, ssrc uint32, log *slog.Logger) (*AACPlayer, error) {
	cfg, err := transcodable(asc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &AACPlayer{cancel: cancel}
	p.t = &aacTranscoder{ctx: ctx, done: &p.wg, log: log, bin: func() string { return ffmpegPath },
		idle: aacIdleStop, track: track, ssrc: ssrc, in: make(chan aacAU, aacQueue),
		seq: uint16(randU32()), base48: randU32()}
	p.t.want = p.t.consumers
	p.start(cfg)
	return p, nil
}

// transcodable parses asc, failing without ffmpeg or for a config ADTS cannot carry.
func transcodable(asc []byte) (mpeg4audio.AudioSpecificConfig, error) {
	var cfg mpeg4audio.AudioSpecificConfig
	if ffmpegPath == "" {
		return cfg, errors.New("ffmpeg is not installed")
	}
	if err := cfg.Unmarshal(asc); err != nil {
		return cfg, fmt.Errorf("AudioSpecificConfig: %w", err)
	}
	if cfg.SampleRate <= 0 {
		return cfg, errors.New("AudioSpecificConfig without a sample rate")
	}
	return cfg, nil
}

func (p *AACPlayer) start(cfg mpeg4audio.AudioSpecificConfig) {
	p.t.newSession(cfg)
	p.wg.Add(1)
	go p.t.run()
}

// Push queues one access unit with its AAC timestamp (never blocks; dropped
// while ffmpeg is not running).
func (p *AACPlayer) Push(ts uint32, au []byte) {
	select {
	case p.t.in <- aacAU{ts: ts, au: au}:
	default:
	}
}

// SetActive starts (true) or stops (false) ffmpeg.
func (p *AACPlayer) SetActive(on bool) { p.active.Store(on) }

// Close stops the transcoder and waits for ffmpeg to exit.
func (p *AACPlayer) Close() {
	p.cancel()
	p.wg.Wait()
}
