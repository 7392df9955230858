package record

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Eyevinn/mp4ff/mp4"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/sfu"
	"github.com/petrel-sfu/petrel/sfu/order"
)

// A room track is recorded alone in its own segments (track 1, timescale 90
// kHz whatever the codec, so that the store's index, ranges and exports treat
// every track alike), as it was published: Opus, VP8, VP9 or H.264 payloads
// are reassembled into frames and written without transcoding. The segment
// and crash rules are the cameras' (segment.go): a fragment is written with
// one write as soon as it is complete, a segment is synced and indexed when
// it closes.

// frameAsm reassembles one codec's frames from RTP payloads and describes the
// codec in a segment's init.
type frameAsm interface {
	// push adds one packet's payload to the frame in progress.
	push(p []byte) error
	// frame is the finished frame (nil when damaged or empty) and whether it
	// is a keyframe; the data is the asm's until reset.
	frame() (data []byte, key bool)
	reset()
	// setup adds track 1 with the codec's sample entry to init; it fails
	// when the codec's configuration is not known yet.
	setup(init *mp4.InitSegment) error
	// audio tracks have no keyframes: every frame decodes alone.
	audio() bool
}

// asmFor is the assembler of a publication's codec, or an error naming a
// codec the recorder does not store.
func asmFor(c sfu.Codec) (frameAsm, error) {
	switch m := strings.ToLower(c.MimeType); m {
	case strings.ToLower(webrtc.MimeTypeOpus):
		return &opusAsm{}, nil
	case strings.ToLower(webrtc.MimeTypePCMU), strings.ToLower(webrtc.MimeTypePCMA):
		if c.ClockRate != 8000 {
			return nil, fmt.Errorf("codec %s at %d Hz is not recorded", c.MimeType, c.ClockRate)
		}
		name := "ulaw"
		if strings.EqualFold(c.MimeType, webrtc.MimeTypePCMA) {
			name = "alaw"
		}
		return &opusAsm{entry: name}, nil
	case strings.ToLower(webrtc.MimeTypeVP8):
		return &vpxAsm{vp9: false}, nil
	case strings.ToLower(webrtc.MimeTypeVP9):
		return &vpxAsm{vp9: true}, nil
	case strings.ToLower(webrtc.MimeTypeAV1):
		return &av1Asm{}, nil
	case strings.ToLower(webrtc.MimeTypeH264):
		a := &h264Asm{}
		a.a.sps, a.a.pps = spropParameterSets(c.SDPFmtpLine)
		return a, nil
	default:
		return nil, fmt.Errorf("codec %s is not recorded", c.MimeType)
	}
}

// opusAsm: one packet is one frame (Opus, or G.711 when entry names its
// sample entry, ulaw or alaw, as the cameras' audio.go writes them).
type opusAsm struct {
	buf   []byte
	entry string
}

func (a *opusAsm) push(p []byte) error {
	a.buf = append(a.buf[:0], p...)
	return nil
}
func (a *opusAsm) frame() ([]byte, bool) { return a.buf, len(a.buf) > 0 }
func (a *opusAsm) reset()                { a.buf = a.buf[:0] }
func (a *opusAsm) audio() bool           { return true }
func (a *opusAsm) setup(init *mp4.InitSegment) error {
	init.AddEmptyTrack(clock, "audio", "und")
	if a.entry != "" {
		init.Moov.Traks[0].Mdia.Minf.Stbl.Stsd.AddChild(mp4.CreateAudioSampleEntryBox(a.entry, 1, 16, 8000, nil))
		return nil
	}
	e, err := OpusSampleEntry()
	if err != nil {
		return err
	}
	init.Moov.Traks[0].Mdia.Minf.Stbl.Stsd.AddChild(e)
	return nil
}

// vpxAsm reassembles VP8 (RFC 7741) and VP9 (RFC 9628) frames.
type vpxAsm struct {
	vp9     bool
	buf     []byte
	started bool // the frame's first packet was seen
	key     bool
	w, h    uint16 // VP8: from the last keyframe
	p8      codecs.VP8Packet
	p9      codecs.VP9Packet
}

func (a *vpxAsm) push(p []byte) error {
	var payload []byte
	first := false
	if a.vp9 {
		if _, err := a.p9.Unmarshal(p); err != nil {
			return err
		}
		payload, first = a.p9.Payload, a.p9.B && !a.started
		if first {
			a.key = !a.p9.P
		}
	} else {
		if _, err := a.p8.Unmarshal(p); err != nil {
			return err
		}
		payload, first = a.p8.Payload, a.p8.S == 1 && a.p8.PID == 0 && !a.started
		if first && len(payload) > 0 {
			a.key = payload[0]&1 == 0
			if a.key && len(payload) >= 10 && payload[3] == 0x9d && payload[4] == 0x01 && payload[5] == 0x2a {
				a.w = uint16(payload[6]) | uint16(payload[7]&0x3f)<<8
				a.h = uint16(payload[8]) | uint16(payload[9]&0x3f)<<8
			}
		}
	}
	if first {
		a.started = true
	} else if !a.started {
		return errors.New("frame without its first packet")
	}
	if len(a.buf)+len(payload) > maxAccessUnit {
		return errAUTooLarge
	}
	a.buf = append(a.buf, payload...)
	return nil
}

func (a *vpxAsm) frame() ([]byte, bool) {
	if !a.started || len(a.buf) == 0 {
		return nil, false
	}
	return a.buf, a.key
}

func (a *vpxAsm) reset() { a.buf, a.started, a.key = a.buf[:0], false, false }

func (a *vpxAsm) audio() bool { return false }

func (a *vpxAsm) setup(init *mp4.InitSegment) error {
	init.AddEmptyTrack(clock, "video", "und")
	name, profile, level := "vp08", byte(0), byte(10)
	if a.vp9 {
		name, level = "vp09", 31
	}
	// VPCodecConfigurationBox ("VP Codec ISO Media File Format Binding" 2.2),
	// version 1: 8-bit 4:2:0, BT.709; mp4ff has no such box, so it is carried
	// as one it does not interpret.
	vpcc := []byte{0, 0, 0, 20, 'v', 'p', 'c', 'C', 1, 0, 0, 0,
		profile, level, 8<<4 | 1<<1, 1, 1, 1, 0, 0}
	box, err := mp4.DecodeBox(0, bytes.NewReader(vpcc))
	if err != nil {
		return fmt.Errorf("vpcC: %w", err)
	}
	init.Moov.Traks[0].Mdia.Minf.Stbl.Stsd.AddChild(mp4.CreateVisualSampleEntryBox(name, a.w, a.h, box))
	return nil
}

// av1Asm reassembles AV1 temporal units (RTP payload format for AV1) into the
// sample format of "AV1 Codec ISO Media File Format Binding": OBUs with size
// fields, temporal delimiters dropped. A temporal unit holding a sequence
// header (or starting a coded video sequence, the N bit) is a keyframe; the
// last sequence header is the av1C's configOBUs.
type av1Asm struct {
	d      codecs.AV1Depacketizer
	buf    []byte
	key    bool
	bad    bool
	seqHdr []byte
}

const (
	obuSequenceHeader    = 1
	obuTemporalDelimiter = 2
)

func (a *av1Asm) push(p []byte) error {
	out, err := a.d.Unmarshal(p)
	if err != nil {
		a.bad = true
		return err
	}
	if a.d.N {
		a.key = true
	}
	for len(out) > 0 {
		n, typ, ok := obuLen(out)
		if !ok {
			a.bad = true
			return errors.New("malformed AV1 OBU")
		}
		switch typ {
		case obuTemporalDelimiter:
		case obuSequenceHeader:
			a.key = true
			a.seqHdr = append(a.seqHdr[:0], out[:n]...)
			a.buf = append(a.buf, out[:n]...)
		default:
			a.buf = append(a.buf, out[:n]...)
		}
		out = out[n:]
	}
	if len(a.buf) > maxAccessUnit {
		return errAUTooLarge
	}
	return nil
}

// obuLen is the length of the OBU (with its size field) at the start of b.
func obuLen(b []byte) (n int, typ byte, ok bool) {
	if len(b) < 2 || b[0]&2 == 0 {
		return 0, 0, false
	}
	typ = b[0] >> 3 & 0xf
	h := 1
	if b[0]&4 != 0 {
		h = 2
	}
	var size uint64
	for i := 0; i < 8; i++ {
		if h >= len(b) {
			return 0, 0, false
		}
		c := b[h]
		h++
		size |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			break
		}
	}
	if size > uint64(len(b)-h) {
		return 0, 0, false
	}
	return h + int(size), typ, true
}

func (a *av1Asm) frame() ([]byte, bool) {
	if a.bad || len(a.buf) == 0 {
		return nil, false
	}
	return a.buf, a.key
}

func (a *av1Asm) reset()      { a.buf, a.key, a.bad = a.buf[:0], false, false }
func (a *av1Asm) audio() bool { return false }

func (a *av1Asm) setup(init *mp4.InitSegment) error {
	if len(a.seqHdr) == 0 {
		return errors.New("no AV1 sequence header yet")
	}
	profile, level := av1ProfileLevel(a.seqHdr)
	// AV1CodecConfigurationRecord: marker and version 1, profile and level,
	// 8-bit 4:2:0, then the sequence header OBU.
	rec := []byte{0x81, profile<<5 | level, 0b0000_1100, 0}
	rec = append(rec, a.seqHdr...)
	box := append([]byte{0, 0, 0, 0, 'a', 'v', '1', 'C'}, rec...)
	n := len(box)
	box[0], box[1], box[2], box[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	b, err := mp4.DecodeBox(0, bytes.NewReader(box))
	if err != nil {
		return fmt.Errorf("av1C: %w", err)
	}
	init.AddEmptyTrack(clock, "video", "und")
	init.Moov.Traks[0].Mdia.Minf.Stbl.Stsd.AddChild(mp4.CreateVisualSampleEntryBox("av01", 0, 0, b))
	return nil
}

// av1ProfileLevel reads seq_profile and the first operating point's
// seq_level_idx from a sequence header OBU; a header whose level needs the
// timing info parsed gets 31 (no level constraint).
func av1ProfileLevel(obu []byte) (profile, level byte) {
	h := 1
	if obu[0]&4 != 0 {
		h = 2
	}
	for h < len(obu) && obu[h]&0x80 != 0 {
		h++
	}
	h++ // the last byte of the size field
	if h+2 >= len(obu) {
		return 0, 31
	}
	bits := uint32(obu[h])<<16 | uint32(obu[h+1])<<8 | uint32(obu[h+2])
	profile = byte(bits >> 21)
	if bits>>19&1 == 1 { // reduced_still_picture_header: seq_level_idx follows
		return profile, byte(bits >> 14 & 0x1f)
	}
	if bits>>18&1 == 1 { // timing_info_present_flag
		return profile, 31
	}
	// initial_display_delay_present(1), operating_points_cnt_minus_1(5),
	// operating_point_idc[0](12), seq_level_idx[0](5).
	if h+4 >= len(obu) {
		return profile, 31
	}
	v := uint64(obu[h])<<32 | uint64(obu[h+1])<<24 | uint64(obu[h+2])<<16 | uint64(obu[h+3])<<8 | uint64(obu[h+4])
	return profile, byte(v >> (40 - 5 - 24) & 0x1f)
}

// h264Asm is the cameras' assembler; keyframes get their parameter sets in
// band, so that any GOP decodes alone.
type h264Asm struct {
	a   assembler
	out []byte
}

func (h *h264Asm) push(p []byte) error { return h.a.push(p) }
func (h *h264Asm) audio() bool         { return false }
func (h *h264Asm) reset()              { h.a.reset() }

func (h *h264Asm) frame() ([]byte, bool) {
	a := &h.a
	if a.broke || len(a.buf) == 0 || a.inFU {
		return nil, false
	}
	if !a.key || hasParamSets(a.buf) {
		return a.buf, a.key
	}
	if len(a.sps) == 0 || len(a.pps) == 0 {
		return nil, false // a keyframe nothing can decode
	}
	h.out = appendNAL(h.out[:0], a.sps)
	h.out = appendNAL(h.out, a.pps)
	h.out = append(h.out, a.buf...)
	return h.out, true
}

func (h *h264Asm) setup(init *mp4.InitSegment) error {
	if len(h.a.sps) == 0 || len(h.a.pps) == 0 {
		return errors.New("no SPS/PPS yet")
	}
	init.AddEmptyTrack(clock, "video", "und")
	return init.Moov.Trak.SetAVCDescriptor("avc1", [][]byte{h.a.sps}, [][]byte{h.a.pps}, true)
}

// roomTrack records one publication of a recorded room. Its sink copies
// packets into a bounded queue on the forwarding goroutine; one goroutine
// reassembles frames, maps RTP time to wall-clock time and writes segments.
type roomTrack struct {
	cam    *camStore
	pub    *sfu.Publication
	segDur uint64
	log    *slog.Logger
	asm    frameAsm
	rate   uint64 // the codec's RTP clock

	q       chan *qpkt
	pool    sync.Pool
	ord     order.Buffer[qpkt] // owned by the run goroutine
	dropped atomic.Uint64
	// choice is the simulcast layer recorded: the highest one sent, so that
	// the recording is the best the publisher sends (a sink keeps every layer on).
	choice  sfu.LayerChoice
	done    chan struct{}
	stopped chan struct{}

	// Owned by the run goroutine.
	curLayer   int32
	curTS      uint32
	haveFrame  bool
	lastSeq    uint16
	haveSeq    bool
	broke      bool
	waitKey    bool
	clk        wallClock
	held       *sample
	frag       []sample
	seg        *segWriter
	lastKeyReq time.Time
	lastWrite  time.Time
}

func newRoomTrack(cam *camStore, pub *sfu.Publication, asm frameAsm, segDur time.Duration, log *slog.Logger) *roomTrack {
	rate := uint64(pub.Codec().ClockRate)
	if rate == 0 {
		rate = clock
	}
	r := &roomTrack{cam: cam, pub: pub, asm: asm, segDur: uint64(segDur.Seconds() * clock), log: log, rate: rate,
		q: make(chan *qpkt, recQueue), done: make(chan struct{}), stopped: make(chan struct{}),
		waitKey: !asm.audio(), clk: wallClock{rate: rate}}
	r.pool.New = func() any { return new(qpkt) }
	return r
}

// WriteRTP is the sink, on the forwarding goroutine: pick the layer, copy,
// queue, never block.
func (r *roomTrack) WriteRTP(pkt *sfu.Packet) {
	if len(pkt.Payload) > 1500 {
		return
	}
	// Padding (a browser's bandwidth probes) goes in too: it holds sequence
	// numbers, so that the sequence has no hole.
	if !r.choice.Take(pkt) {
		return
	}
	l := int32(pkt.Layer)
	q := r.pool.Get().(*qpkt)
	q.seq, q.ts, q.marker, q.layer = pkt.Header.SequenceNumber, pkt.Header.Timestamp, pkt.Header.Marker, l
	q.n = copy(q.buf[:], pkt.Payload)
	select {
	case r.q <- q:
	default:
		r.pool.Put(q)
		r.dropped.Add(1)
	}
}

func (r *roomTrack) stop() {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	<-r.stopped
}

func (r *roomTrack) run() {
	defer close(r.stopped)
	defer r.finish()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case q := <-r.q:
			r.packet(q)
		case <-tick.C:
			r.ord.Expire(time.Now(), r.process)
			// A track that stops sending (muted, DTX) leaves its last frames
			// in memory; after a few seconds they go to disk.
			if len(r.q) == 0 && r.held != nil && time.Since(r.clk.lastWall) > 3*time.Second {
				r.flushHeld()
			}
		case <-r.done:
			for {
				select {
				case q := <-r.q:
					r.packet(q)
				default:
					r.ord.Flush(r.process)
					return
				}
			}
		}
	}
}

// packet puts q in sequence order; each packet of another simulcast layer
// (another sequence) first releases what the last one left held.
func (r *roomTrack) packet(q *qpkt) {
	if q.layer != r.curLayer {
		r.ord.Flush(r.process)
	}
	r.ord.Push(q, q.seq, time.Now(), r.process, r.release)
}

func (r *roomTrack) release(q *qpkt) { r.pool.Put(q) }

// process takes the packets in sequence order and builds frames.
func (r *roomTrack) process(q *qpkt) {
	defer r.release(q)
	if q.layer != r.curLayer && r.haveSeq {
		// Another simulcast layer: another SSRC, clock and picture size, so
		// a new segment from its first keyframe.
		r.flushHeld()
		r.asm.reset()
		r.haveSeq, r.haveFrame, r.clk = false, false, wallClock{rate: r.rate}
		r.pub.RequestLayerKeyframe(int8(q.layer))
	}
	r.curLayer = q.layer
	if r.haveSeq && q.seq != r.lastSeq+1 && !r.asm.audio() {
		// Lost (waited for in vain): the frame in progress is damaged and
		// the ones after it reference it; wait for the next keyframe.
		r.broke, r.waitKey = true, true
		r.requestKey()
	}
	r.lastSeq, r.haveSeq = q.seq, true
	if q.n == 0 {
		return // padding
	}
	if r.haveFrame && q.ts != r.curTS {
		r.endFrame() // a marker bit was lost
	}
	r.curTS, r.haveFrame = q.ts, true
	if err := r.asm.push(q.buf[:q.n]); err != nil {
		r.broke = true
	}
	if q.marker || r.asm.audio() {
		r.endFrame()
	}
}

func (r *roomTrack) requestKey() {
	if time.Since(r.lastKeyReq) > time.Second {
		r.lastKeyReq = time.Now()
		if l := r.curLayer; l > 0 {
			r.pub.RequestLayerKeyframe(int8(l))
		} else {
			r.pub.RequestKeyframe()
		}
	}
}

func (r *roomTrack) endFrame() {
	r.haveFrame = false
	defer func() { r.asm.reset(); r.broke = false }()
	data, key := r.asm.frame()
	if r.broke || data == nil {
		return
	}
	audio := r.asm.audio()
	if audio {
		key = true
	}
	if key {
		r.waitKey = false
	} else if r.waitKey {
		r.requestKey()
		return
	}
	t := r.clk.at(r.curTS, time.Now())
	if r.rate != clock {
		t = t/r.rate*clock + t%r.rate*clock/r.rate
	}
	s := &sample{t: t, key: key, data: append([]byte(nil), data...)}
	if r.held != nil {
		if t <= r.held.t {
			t = r.held.t + 1
			s.t = t
		}
		r.held.dur = uint32(min(t-r.held.t, 10*clock))
		r.addToFragment(*r.held, s)
	}
	r.held = s
	if r.seg == nil && key {
		// The codec's configuration (H.264's parameter sets) comes with the
		// keyframe: open the segment now, so that a crash finds it.
		r.openSegment(s.t)
	}
}

// addToFragment appends a finished sample; next is the one after it. Video
// fragments start on keyframes and last at most a second; audio fragments
// last a second. A segment closes at the first keyframe after its duration.
func (r *roomTrack) addToFragment(s sample, next *sample) {
	if r.seg == nil {
		if !s.key || !r.openSegment(s.t) {
			return
		}
	}
	r.frag = append(r.frag, s)
	audio := r.asm.audio()
	if (next.key && !audio) || next.t-r.frag[0].t >= clock {
		r.writeFragment()
		if next.key && r.seg != nil && next.t-r.seg.seg.Start >= r.segDur {
			r.closeSegment()
		}
	}
	if r.seg != nil && next.t-r.seg.seg.Start >= r.segDur && !next.key {
		r.requestKey()
	}
}

func (r *roomTrack) openSegment(t uint64) bool {
	if r.seg != nil {
		return true
	}
	if err := makeDirDurable(r.cam.dir); err != nil {
		r.log.Error("room recording: track directory", "err", err)
		return false
	}
	init := mp4.CreateEmptyInit()
	if err := r.asm.setup(init); err != nil {
		r.requestKey()
		return false
	}
	w, err := writeInit(r.cam.dir, t, init, "")
	if err != nil {
		r.log.Error("room recording: open segment", "err", err)
		return false
	}
	r.seg = w
	r.cam.add(w.seg)
	return true
}

func (r *roomTrack) writeFragment() {
	if len(r.frag) == 0 || r.seg == nil {
		r.frag = r.frag[:0]
		return
	}
	fr, err := r.seg.writeFragment(r.frag)
	r.frag = r.frag[:0]
	if err != nil {
		r.log.Error("room recording: write fragment", "err", err, "path", r.seg.seg.Path)
		r.closeSegment()
		return
	}
	r.cam.appendFrag(r.seg.seg, fr)
}

func (r *roomTrack) closeSegment() {
	if r.seg == nil {
		return
	}
	r.writeFragment()
	if err := r.seg.close(); err != nil {
		r.log.Error("room recording: close segment", "err", err, "path", r.seg.seg.Path)
	}
	r.cam.closeSeg(r.seg.seg)
	if len(r.seg.seg.Frags) == 0 {
		// Opened on a keyframe that never got its fragment written.
		r.cam.remove(r.seg.seg)
		removeSegmentFiles(r.seg.seg.Path)
	}
	r.seg = nil
}

// flushHeld writes the last frame (with its predecessor's duration, or 20 ms)
// and closes the segment: the track stopped sending or ended.
func (r *roomTrack) flushHeld() {
	if r.held != nil {
		h := *r.held
		r.held = nil
		h.dur = clock / 50
		if len(r.frag) > 0 {
			h.dur = r.frag[len(r.frag)-1].dur
		}
		if r.seg != nil {
			r.frag = append(r.frag, h)
		}
	}
	r.closeSegment()
	r.waitKey = !r.asm.audio()
}

func (r *roomTrack) finish() { r.flushHeld() }
