package webtransport

import (
	"errors"
	"strings"

	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
)

// The bridge between frames (MoQT objects) and RTP. A frame is one encoded video
// frame (VP8 frame, H.264 access unit in Annex B) or one Opus packet.

// rtpMTU is the RTP payload budget: below a 1200-byte path MTU after SRTP and
// header extensions the SFU adds.
const rtpMTU = 1100

// codecKind is the codec family of a MIME type or a WebCodecs codec string.
func codecKind(s string) string {
	s = strings.ToLower(s)
	switch {
	case strings.Contains(s, "vp8"):
		return "vp8"
	case strings.Contains(s, "h264"), strings.HasPrefix(s, "avc1"), strings.HasPrefix(s, "avc3"):
		return "h264"
	case strings.Contains(s, "opus"):
		return "opus"
	}
	return ""
}

// Packetizer turns frames into RTP packets of one stream.
type Packetizer struct {
	kind      string
	clock     uint32
	pt        uint8
	ssrc      uint32
	seq       uint16
	payloader rtp.Payloader
	pkt       rtp.Packet
}

// NewPacketizer packetizes codec ("vp8", "h264", "opus") at clock rate clock.
func NewPacketizer(kind string, clock uint32, pt uint8, ssrc uint32, seq uint16) (*Packetizer, error) {
	p := &Packetizer{kind: kind, clock: clock, pt: pt, ssrc: ssrc, seq: seq}
	switch kind {
	case "vp8":
		// Picture IDs let subscribers' decoders and the SFU's layer switching
		// find frame boundaries after loss.
		p.payloader = &codecs.VP8Payloader{EnablePictureID: true}
	case "h264":
		p.payloader = &codecs.H264Payloader{}
	case "opus":
		p.payloader = &codecs.OpusPayloader{}
	default:
		return nil, errors.New("unsupported codec " + kind)
	}
	return p, nil
}

// RTPTime converts a media timestamp in microseconds to RTP time.
func RTPTime(us uint64, clock uint32) uint32 { return uint32(us * uint64(clock) / 1_000_000) }

// Packetize emits frame's packets; the packet passed to emit is reused.
func (p *Packetizer) Packetize(tsUs uint64, frame []byte, emit func(*rtp.Packet)) {
	payloads := p.payloader.Payload(rtpMTU, frame)
	ts := RTPTime(tsUs, p.clock)
	for i, pl := range payloads {
		p.pkt.Header = rtp.Header{Version: 2, PayloadType: p.pt, SequenceNumber: p.seq, Timestamp: ts, SSRC: p.ssrc,
			Marker: i == len(payloads)-1}
		p.pkt.Payload = pl
		p.seq++
		emit(&p.pkt)
	}
}

// Depacketizer rebuilds frames from RTP packets that may arrive lost, duplicated
// or reordered. A video frame is emitted only whole and only after every earlier
// frame was emitted or the stream was resynchronized on a keyframe: a frame with a
// missing packet is dropped, the frames after it until the next keyframe too (a
// decoder cannot use them), and NeedKeyframe reports that a keyframe is wanted.
type Depacketizer struct {
	kind  string
	clock uint32

	pkts    [reorderWindow]slot
	started bool
	next    uint16 // the sequence number the next frame starts at
	highest uint16 // the newest sequence number seen
	broken  bool   // lost sync: wait for a keyframe
	needKey bool

	tsBase   uint32
	tsHigh   uint64 // unwrapped RTP time of the last frame
	lastTS   uint32
	haveBase bool

	h264 codecs.H264Packet
	vp8  codecs.VP8Packet
	buf  []byte

	Frames, Dropped int
}

// reorderWindow is how many packets may wait for a missing one.
const reorderWindow = 512

type slot struct {
	used     bool
	seq      uint16
	ts       uint32
	marker   bool
	keyframe bool
	// pad: a padding-only packet (no payload), which a sender's bandwidth
	// probe puts between frames: it holds a sequence number and no media.
	pad     bool
	payload []byte
}

// NewDepacketizer depacketizes kind ("vp8", "h264", "opus") at clock.
func NewDepacketizer(kind string, clock uint32) (*Depacketizer, error) {
	if kind != "vp8" && kind != "h264" && kind != "opus" {
		return nil, errors.New("unsupported codec " + kind)
	}
	return &Depacketizer{kind: kind, clock: clock}, nil
}

// NeedKeyframe reports (once) that a frame was lost and a keyframe is wanted.
func (d *Depacketizer) NeedKeyframe() bool {
	n := d.needKey
	d.needKey = false
	return n
}

// timestampUs unwraps ts and converts it to microseconds since the first frame.
func (d *Depacketizer) timestampUs(ts uint32) uint64 {
	if !d.haveBase {
		d.haveBase, d.tsBase, d.lastTS = true, ts, ts
	}
	d.tsHigh += uint64(int64(int32(ts - d.lastTS)))
	d.lastTS = ts
	return d.tsHigh * 1_000_000 / uint64(d.clock)
}

// Push takes one packet (payload is copied) and calls emit for each frame it
// completes. emit's payload is valid during the call.
func (d *Depacketizer) Push(h *rtp.Header, payload []byte, keyframe bool, emit func(tsUs uint64, keyframe bool, frame []byte)) {
	if d.kind == "opus" {
		if len(payload) == 0 {
			return // padding
		}
		// Each packet is a frame; a late packet is useless to a live decoder.
		if d.started && int16(h.SequenceNumber-d.next) < 0 {
			return
		}
		d.started, d.next = true, h.SequenceNumber+1
		d.Frames++
		emit(d.timestampUs(h.Timestamp), false, payload)
		return
	}
	if len(payload) == 0 && !d.started {
		return // padding before the first keyframe: nothing to wait for
	}
	if !d.started {
		// Keep packets until the head of a keyframe arrives: reordering may
		// bring the rest of the keyframe before its first packet.
		d.store(h, payload, keyframe)
		if !keyframe || !d.isHead(payload) {
			if !keyframe {
				d.needKey = true
			}
			return
		}
		d.started = true
		d.next, d.highest = h.SequenceNumber, h.SequenceNumber
		for i := 1; i < 64; i++ {
			if p := &d.pkts[(h.SequenceNumber+uint16(i))%reorderWindow]; p.used && p.seq == h.SequenceNumber+uint16(i) {
				d.highest = p.seq
			}
		}
		d.drain(emit)
		return
	}
	diff := int16(h.SequenceNumber - d.next)
	if diff < 0 {
		first := &d.pkts[d.next%reorderWindow]
		if d.Frames > 0 || d.Dropped > 0 || diff < -16 || !first.used || first.seq != d.next || first.ts != h.Timestamp {
			return // late or duplicate of something already emitted
		}
		// The first keyframe began earlier than the head we started on (H.264:
		// parameter sets reordered behind the IDR's first fragment).
		d.next = h.SequenceNumber
	}
	if int16(h.SequenceNumber-d.highest) > 0 {
		d.highest = h.SequenceNumber
	}
	if int(diff) >= reorderWindow {
		// Too far ahead: everything buffered is hopeless.
		d.reset(h.SequenceNumber)
	}
	if !d.store(h, payload, keyframe) {
		return
	}
	d.drain(emit)
}

// store puts a packet in its slot; false for a duplicate.
func (d *Depacketizer) store(h *rtp.Header, payload []byte, keyframe bool) bool {
	s := &d.pkts[h.SequenceNumber%reorderWindow]
	if s.used && s.seq == h.SequenceNumber {
		return false
	}
	s.used, s.seq, s.ts, s.marker, s.keyframe = true, h.SequenceNumber, h.Timestamp, h.Marker, keyframe
	s.pad = len(payload) == 0
	s.payload = append(s.payload[:0], payload...)
	return true
}

func (d *Depacketizer) reset(seq uint16) {
	for i := range d.pkts {
		d.pkts[i].used = false
	}
	d.next = seq
	d.Dropped++
	d.broken, d.needKey = true, true
}

// drain emits every complete frame starting at d.next; when a later frame is
// complete while the one at d.next is not, the gap is a loss: skip to it.
func (d *Depacketizer) drain(emit func(uint64, bool, []byte)) {
	for {
		if d.padAt(d.next) {
			d.pkts[d.next%reorderWindow].used = false
			d.next++
			continue
		}
		end, ok := d.frameAt(d.next)
		if ok {
			d.emitFrame(d.next, end, emit)
			continue
		}
		// A gap is a loss once the stream moved well past it: several complete
		// frames after it, or many packets (reordering and retransmission
		// get that long to fill it).
		start, end2, found := d.completeAfterGap()
		if !found {
			return
		}
		dist := int16(d.highest - d.next)
		if dist < lossDistance && (dist < lossReorder || d.completeFramesFrom(start) < lossFrames) {
			return
		}
		for s := d.next; s != start; s++ {
			d.pkts[s%reorderWindow].used = false
		}
		d.Dropped++
		d.broken, d.needKey = true, true
		d.next = start
		_ = end2
	}
}

// A gap counts as lost after lossFrames complete frames lossReorder packets
// beyond it, or lossDistance packets in any case.
const (
	lossFrames   = 3
	lossReorder  = 16
	lossDistance = 64
)

// completeFramesFrom counts complete frames back to back from seq.
func (d *Depacketizer) completeFramesFrom(seq uint16) int {
	n := 0
	for n < lossFrames {
		for d.padAt(seq) {
			seq++
		}
		end, ok := d.frameAt(seq)
		if !ok {
			break
		}
		n++
		seq = end + 1
	}
	return n
}

// padAt reports whether the packet seq is here and padding.
func (d *Depacketizer) padAt(seq uint16) bool {
	p := &d.pkts[seq%reorderWindow]
	return p.used && p.seq == seq && p.pad
}

// frameAt finds the marker packet of the frame starting at seq, with every packet
// in between present and of one timestamp (padding aside).
func (d *Depacketizer) frameAt(seq uint16) (uint16, bool) {
	first := &d.pkts[seq%reorderWindow]
	if !first.used || first.seq != seq || first.pad {
		return 0, false
	}
	for i := 0; i < reorderWindow; i++ {
		s := seq + uint16(i)
		p := &d.pkts[s%reorderWindow]
		if !p.used || p.seq != s {
			return 0, false
		}
		if p.pad {
			continue
		}
		if p.ts != first.ts {
			return 0, false
		}
		if p.marker {
			return s, true
		}
	}
	return 0, false
}

// completeAfterGap looks for a frame start after d.next (a packet whose
// predecessor is a marker packet, or that begins a codec partition) that is
// complete.
func (d *Depacketizer) completeAfterGap() (uint16, uint16, bool) {
	for i := 1; i < reorderWindow; i++ {
		s := d.next + uint16(i)
		p := &d.pkts[s%reorderWindow]
		if !p.used || p.seq != s || p.pad {
			continue
		}
		prev := &d.pkts[(s-1)%reorderWindow]
		head := (prev.used && prev.seq == s-1 && (prev.marker || prev.pad)) || d.isHead(p.payload)
		if !head {
			continue
		}
		if end, ok := d.frameAt(s); ok {
			return s, end, true
		}
	}
	return 0, 0, false
}

func (d *Depacketizer) isHead(payload []byte) bool {
	switch d.kind {
	case "vp8":
		return d.vp8.IsPartitionHead(payload)
	case "h264":
		return d.h264.IsPartitionHead(payload)
	}
	return false
}

func (d *Depacketizer) emitFrame(start, end uint16, emit func(uint64, bool, []byte)) {
	d.buf = d.buf[:0]
	key := false
	var ts uint32
	bad := false
	for s := start; ; s++ {
		p := &d.pkts[s%reorderWindow]
		if p.pad {
			p.used = false
			continue // never the end: that is the marker packet
		}
		key = key || p.keyframe
		ts = p.ts
		var out []byte
		var err error
		switch d.kind {
		case "vp8":
			out, err = d.vp8.Unmarshal(p.payload)
		case "h264":
			out, err = d.h264.Unmarshal(p.payload)
		}
		if err != nil {
			bad = true
		}
		d.buf = append(d.buf, out...)
		p.used = false
		if s == end {
			break
		}
	}
	d.next = end + 1
	if bad || len(d.buf) == 0 {
		d.Dropped++
		d.broken, d.needKey = true, true
		return
	}
	if d.broken && !key {
		d.Dropped++
		return
	}
	d.broken = false
	d.Frames++
	emit(d.timestampUs(ts), key, d.buf)
}
