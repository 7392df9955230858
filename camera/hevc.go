package camera

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bluenviron/gortsplib/v4/pkg/format/rtph264"
	"github.com/bluenviron/gortsplib/v4/pkg/format/rtph265"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// H.265 cameras. No browser receives H.265 over WebRTC, and without hardware
// decoding none plays it through MSE either, so an H.265 camera's room holds a
// second video track, H.264, marked Alternate: WHEP gives it to an offer that
// lacks H.265, and live.mp4 serves it. An ffmpeg subprocess per camera makes it
// (H.265 Annex-B access units on stdin, libx264 ultrafast/zerolatency Annex-B
// on stdout) while the track has a subscriber or a sink, and stops hevcIdleStop
// after the last one left. It starts from the H.265 track's cached GOP, so the
// first H.264 frame does not wait for the camera's next keyframe. Output
// frames take the input frames' timestamps in order (no B-frames, no frame
// dropping: one out per one in).

const (
	hevcQueue      = 128 // access units waiting for ffmpeg's stdin (about 5 s at 25 fps)
	hevcIdleStop   = 3 * time.Second
	hevcBackoffMin = 500 * time.Millisecond
	hevcRestarts   = 4 // consecutive failures before waiting for a new viewer
	hevcStderrMax  = 5 // stderr lines logged per ffmpeg process; the rest counted
	hevcOutMax     = 8 << 20
)

type hevcAU struct {
	ts   uint32
	data []byte // Annex-B, with an access unit delimiter first
	idr  bool
}

// hevcTranscoder makes one H.265 camera's H.264 track.
type hevcTranscoder struct {
	c      *Camera
	track  *sfu.LocalTrack
	ssrc   uint32
	in     chan hevcAU
	active atomic.Bool // ffmpeg runs: the H.265 repack hands it access units

	mu       sync.Mutex
	note     string
	firstOut time.Duration // from the first frame fed to ffmpeg to its first H.264 frame, last run
	firstFed atomic.Int64  // unix ns, this run
	// interval is the camera's frame interval (90 kHz ticks), for ffmpeg's -r.
	interval atomic.Uint32
	lastTap  uint32
}

func newHEVCTranscoder(c *Camera, track *sfu.LocalTrack, ssrc uint32) *hevcTranscoder {
	t := &hevcTranscoder{c: c, track: track, ssrc: ssrc, in: make(chan hevcAU, hevcQueue), note: hevcIdleNote}
	c.done.Add(1)
	go t.run()
	return t
}

const hevcIdleNote = "H.265 camera: transcoded to H.264 by ffmpeg for viewers without H.265 (idle now)"

// Note says what the transcoder does (Status.VideoNote).
func (t *hevcTranscoder) Note() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.firstOut > 0 && t.active.Load() && strings.HasSuffix(t.note, ")") {
		return strings.TrimSuffix(t.note, ")") + fmt.Sprintf(", first frame out %.0f ms after the first in)", float64(t.firstOut)/1e6)
	}
	return t.note
}

func (t *hevcTranscoder) setNote(s string) {
	t.mu.Lock()
	t.note = s
	t.mu.Unlock()
}

// FirstFrameDelay is how long the last ffmpeg run took from its first input
// frame to its first H.264 frame (0 before any).
func (t *hevcTranscoder) FirstFrameDelay() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.firstOut
}

func (t *hevcTranscoder) consumers() bool {
	pub := t.track.Publication()
	return len(pub.Subscribers()) > 0 || pub.SinkCount() > 0
}

// tap takes one H.265 access unit as the repack sends it (parameter sets
// before each IDR). It runs on the RTSP reader's goroutine: it copies only
// while ffmpeg runs, and never blocks (a full queue drops the frame, and
// ffmpeg's decoder conceals it until the next IDR).
func (t *hevcTranscoder) tap(au [][]byte, ts uint32, idr bool) {
	if d := ts - t.lastTap; d > 0 && d < 90000 {
		t.interval.Store(d)
	}
	t.lastTap = ts
	if !t.active.Load() {
		return
	}
	select {
	case t.in <- hevcAU{ts: ts, data: annexB(au), idr: idr}:
	default:
	}
}

// hevcAUD is an H.265 access unit delimiter (type 35, any picture type): the
// raw H.265 demuxer splits frames at it.
var hevcAUD = []byte{0, 0, 0, 1, 0x46, 0x01, 0x50}

func annexB(au [][]byte) []byte {
	n := len(hevcAUD)
	for _, x := range au {
		n += 4 + len(x)
	}
	b := make([]byte, 0, n)
	b = append(b, hevcAUD...)
	for _, x := range au {
		if len(x) > 0 && (x[0]>>1)&0x3f == 35 {
			continue // the camera's own delimiter
		}
		b = append(b, 0, 0, 0, 1)
		b = append(b, x...)
	}
	return b
}

// run starts ffmpeg while the H.264 track has consumers, restarting a failed
// one with backoff at most hevcRestarts times in a row; then it waits until
// the consumers have all gone and a new one comes.
func (t *hevcTranscoder) run() {
	defer t.c.done.Done()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	failures := 0
	backoff := hevcBackoffMin
	for {
		for !t.consumers() {
			failures, backoff = 0, hevcBackoffMin
			select {
			case <-t.c.ctx.Done():
				return
			case <-tick.C:
			}
		}
		if failures >= hevcRestarts {
			select {
			case <-t.c.ctx.Done():
				return
			case <-tick.C:
			}
			continue
		}
		began := time.Now()
		err := t.transcode()
		if t.c.ctx.Err() != nil {
			return
		}
		if err == nil {
			failures, backoff = 0, hevcBackoffMin
			t.setNote(hevcIdleNote)
			continue
		}
		if time.Since(began) > 10*time.Second {
			failures, backoff = 0, hevcBackoffMin
		}
		failures++
		if failures >= hevcRestarts {
			t.c.log.Warn("H.265 transcoder failed; giving up until the next viewer", "err", err, "failures", failures)
			t.setNote("H.265 camera: the H.264 transcoder failed " + strconv.Itoa(failures) + " times (" + err.Error() + ")")
			continue
		}
		t.c.log.Warn("H.265 transcoder failed; restarting", "err", err, "in", backoff)
		t.setNote("H.265 camera: the H.264 transcoder failed (" + err.Error() + "); restarting in " + backoff.String())
		select {
		case <-t.c.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// args is ffmpeg's command line: one decoding thread (frame threads would hold
// frames back), no B-frames, keyframes where the camera's are (GOP matched;
// ten seconds at most), the camera's bitrate (1 Mbit/s before it is known).
func (t *hevcTranscoder) args() []string {
	fps := 25
	if d := t.interval.Load(); d > 0 {
		fps = min(max(int((90000+d/2)/d), 1), 120)
	}
	br := t.c.bitrate.Load()
	if br < 200_000 {
		br = 1_000_000
	}
	b := strconv.FormatInt(br, 10)
	return []string{"-hide_banner", "-loglevel", "error",
		"-fflags", "nobuffer", "-flags", "low_delay", "-probesize", "32", "-analyzeduration", "0",
		"-threads", "1", "-f", "hevc", "-r", strconv.Itoa(fps), "-i", "pipe:0",
		"-an", "-fps_mode", "passthrough", "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency",
		"-profile:v", "baseline", "-pix_fmt", "yuv420p", "-bf", "0", "-sc_threshold", "0",
		"-force_key_frames", "source", "-g", strconv.Itoa(10 * fps),
		"-b:v", b, "-maxrate", b, "-bufsize", b,
		"-x264-params", "aud=1:repeat-headers=1",
		"-flush_packets", "1", "-f", "h264", "pipe:1"}
}

// transcode runs one ffmpeg process until it fails (error) or nobody has
// watched for hevcIdleStop (nil).
func (t *hevcTranscoder) transcode() error {
	bin := t.c.transcoder()
	if bin == "" {
		return errors.New("ffmpeg is not installed")
	}
	ctx, cancel := context.WithCancel(t.c.ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, t.args()...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
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
	pid := cmd.Process.Pid
	t.mu.Lock()
	t.firstOut = 0
	t.mu.Unlock()
	t.firstFed.Store(0)
	t.c.log.Info("H.265 transcoder started", "pid", pid)
	t.setNote("H.265 camera: transcoded to H.264 by ffmpeg for viewers without H.265 (pid " + strconv.Itoa(pid) + ")")

	// stderr: kept (the end of it) for the error, the first lines logged.
	var lastErr bytes.Buffer
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		sc := bufio.NewScanner(stderr)
		n := 0
		for sc.Scan() {
			n++
			if n <= hevcStderrMax {
				t.c.log.Info("ffmpeg (H.265 transcoder)", "pid", pid, "line", sc.Text())
			}
			if lastErr.Len() > 512 {
				lastErr.Reset()
			}
			lastErr.WriteString(sc.Text() + "; ")
		}
		if n > hevcStderrMax {
			t.c.log.Info("ffmpeg (H.265 transcoder) stderr lines not logged", "pid", pid, "count", n-hevcStderrMax)
		}
	}()

	// Timestamps of the frames fed, in order: each output frame takes the next.
	tsq := make(chan uint32, hevcQueue+64)
	outDone := make(chan error, 1)
	go func() { outDone <- t.readH264(stdout, tsq) }()
	exited := make(chan error, 1)
	go func() {
		err := <-outDone
		<-errDone
		werr := cmd.Wait()
		if err == nil {
			err = werr
		}
		exited <- err
	}()

	// Live access units queue from here on; the cached GOP goes first.
	for len(t.in) > 0 {
		<-t.in
	}
	t.active.Store(true)
	defer t.active.Store(false)
	w := bufio.NewWriterSize(stdin, 64<<10)
	var last uint32
	fedAny := false
	feed := func(a hevcAU) error {
		if !fedAny && !a.idr {
			return nil // an H.265 decoder needs parameter sets and an IDR first
		}
		if fedAny && int32(a.ts-last) <= 0 {
			return nil // already fed from the cache
		}
		select {
		case tsq <- a.ts:
		default:
			return nil // ffmpeg is that far behind: drop rather than misalign
		}
		if !fedAny {
			t.firstFed.Store(time.Now().UnixNano())
		}
		fedAny, last = true, a.ts
		if _, err := w.Write(a.data); err != nil {
			return err
		}
		return w.Flush()
	}
	for _, a := range t.cachedGOP() {
		if err := feed(a); err != nil {
			break // ffmpeg died: its exit says why
		}
	}
	stop := func() {
		_ = stdin.Close()
		cancel()
		<-exited
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var idleSince time.Time
	for {
		select {
		case <-t.c.ctx.Done():
			stop()
			return nil
		case err := <-exited:
			msg := bytes.TrimSuffix(lastErr.Bytes(), []byte("; "))
			if err == nil {
				err = errors.New("ffmpeg exited")
			}
			if len(msg) > 0 {
				err = fmt.Errorf("%w: %s", err, msg)
			}
			return err
		case a := <-t.in:
			if err := feed(a); err != nil {
				stop()
				return fmt.Errorf("ffmpeg stdin: %w", err)
			}
		case <-tick.C:
			if t.consumers() {
				idleSince = time.Time{}
			} else if idleSince.IsZero() {
				idleSince = time.Now()
			} else if time.Since(idleSince) > hevcIdleStop {
				stop()
				t.c.log.Info("H.265 transcoder stopped: no viewer", "pid", pid)
				return nil
			}
		}
	}
}

// cachedGOP is the H.265 track's frames from its last keyframe on, as access
// units for ffmpeg.
func (t *hevcTranscoder) cachedGOP() []hevcAU {
	t.c.mu.Lock()
	v := t.c.video
	t.c.mu.Unlock()
	if v == nil {
		return nil
	}
	var dec rtph265.Decoder
	if dec.Init() != nil {
		return nil
	}
	var out []hevcAU
	v.Publication().CachedGOP(func(p *sfu.Packet) {
		au, err := dec.Decode(&rtp.Packet{Header: p.Header, Payload: append([]byte(nil), p.Payload...)})
		if err != nil {
			return
		}
		idr := false
		for _, n := range au {
			if len(n) > 0 {
				if typ := (n[0] >> 1) & 0x3f; typ >= 16 && typ <= 21 {
					idr = true
				}
			}
		}
		out = append(out, hevcAU{ts: p.Header.Timestamp, data: annexB(au), idr: idr})
	})
	return out
}

// readH264 cuts ffmpeg's Annex-B output into access units (each starts with
// an access unit delimiter) and sends them on the H.264 track.
func (t *hevcTranscoder) readH264(r io.Reader, tsq chan uint32) error {
	seq := uint16(randU32())
	enc := &rtph264.Encoder{PayloadType: 103, SSRC: &t.ssrc, InitialSequenceNumber: &seq, PayloadMaxSize: payloadMax, PacketizationMode: 1}
	if err := enc.Init(); err != nil {
		return err
	}
	first := true
	var lastTS uint32
	send := func(au [][]byte) {
		var ts uint32
		select {
		case ts = <-tsq:
		default:
			ts = lastTS + 3600 // more out than in: should not happen
		}
		lastTS = ts
		if first {
			first = false
			if at := t.firstFed.Load(); at != 0 {
				t.mu.Lock()
				t.firstOut = time.Since(time.Unix(0, at))
				t.mu.Unlock()
			}
		}
		pkts, err := enc.Encode(au)
		if err != nil {
			return
		}
		for _, p := range pkts {
			p.Timestamp = ts
			_ = t.track.WritePacket(p)
		}
	}
	buf := make([]byte, 0, 256<<10)
	chunk := make([]byte, 64<<10)
	var au [][]byte
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		// Every NAL unit but the last is complete; a delimiter ends the
		// access unit before it.
		nals := splitNALs(buf)
		for i := 0; i < len(nals)-1; i++ {
			nal := buf[nals[i][0]:nals[i][1]]
			if len(nal) == 0 {
				continue
			}
			if nal[0]&0x1f == 9 {
				if len(au) > 0 {
					send(au)
				}
				au = nil
				continue
			}
			au = append(au, append([]byte(nil), nal...))
		}
		if len(nals) > 0 {
			rest := buf[nals[len(nals)-1][2]:]
			buf = append(buf[:0], rest...)
		}
		if len(buf) > hevcOutMax {
			return errors.New("ffmpeg output: an access unit too large")
		}
		if err != nil {
			if len(au) > 0 {
				send(au)
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// splitNALs finds the NAL units of an Annex-B buffer: [start, end, startcode
// offset] each, the last one possibly incomplete.
func splitNALs(b []byte) [][3]int {
	var out [][3]int
	sc := -1
	for i := 0; i+2 < len(b); i++ {
		if b[i] == 0 && b[i+1] == 0 && b[i+2] == 1 {
			at := i
			if at > 0 && b[at-1] == 0 {
				at--
			}
			if sc >= 0 {
				out[len(out)-1][1] = at
			}
			out = append(out, [3]int{i + 3, len(b), at})
			sc = at
			i += 2
		}
	}
	return out
}

// h264AltCodec is the transcoded track's codec: constrained baseline, which
// every browser with H.264 receives.
var h264AltCodec = webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
	SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"}, PayloadType: 103}

// publishHEVCAlternate publishes an H.265 camera's H.264 track (once) and
// starts its transcoder; without ffmpeg it says so in the status and log.
func (c *Camera) publishHEVCAlternate(w, h int) *hevcTranscoder {
	c.mu.Lock()
	tc := c.hevc
	c.mu.Unlock()
	if tc != nil {
		return tc
	}
	if c.transcoder() == "" {
		why := "H.265 camera: browsers without H.265 cannot play it, since ffmpeg (to transcode it to H.264) is not installed"
		if c.cfg.Transcode == "off" {
			why = "H.265 camera: not transcoded to H.264 (transcode: off), so browsers without H.265 cannot play it"
		}
		c.warnOnce("hevc", why)
		c.mu.Lock()
		c.videoNote = why
		c.mu.Unlock()
		return nil
	}
	ssrc := randU32()
	c.mu.Lock()
	defer c.mu.Unlock()
	lt, err := c.part.PublishLocal(sfu.LocalTrackOptions{
		Info: protocol.TrackInfo{Kind: "video", Source: "camera", Name: c.cfg.ID + " camera (H.264 from H.265)", SSRC: ssrc, Width: w, Height: h},
		Codec: sfu.Codec{MimeType: h264AltCodec.MimeType, ClockRate: h264AltCodec.ClockRate,
			SDPFmtpLine: h264AltCodec.SDPFmtpLine, PayloadType: uint8(h264AltCodec.PayloadType)},
		Alternate: true,
	})
	if err != nil {
		c.log.Warn("H.265 camera: cannot publish the H.264 track", "err", err)
		return nil
	}
	lt.Publication().SetGOPStart(true)
	lt.OnKeyframeRequest(c.wake)
	c.hevc = newHEVCTranscoder(c, lt, ssrc)
	return c.hevc
}
