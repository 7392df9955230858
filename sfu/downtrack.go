package sfu

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/metrics"
)

// DownTrack is one publication as one subscriber receives it: the end of the
// packet path. It writes to the subscriber's session (writer.go), and it rewrites each packet's SSRC, payload type, sequence number, timestamp and
// (VP8) picture ID into the subscriber's stream, so that the subscriber sees one
// continuous stream across pauses and simulcast layer switches.
//
// writeRTP runs on the publication's layer readers; its lock is this DownTrack's
// own and is uncontended without simulcast. RTCP from the subscriber is handled by
// the DownTrack's own goroutine.
type DownTrack struct {
	pub *Publication
	sub *Participant

	bound atomic.Bool
	// paused: the subscriber hides the video (userPaused) or Last-N leaves this
	// publisher out (lastNPaused); either stops forwarding.
	paused      atomic.Bool
	userPaused  atomic.Bool
	lastNPaused atomic.Bool
	// target is the layer the subscriber should get; current switches to it at
	// the target's next keyframe.
	target   atomic.Int32
	maxLayer atomic.Int32 // what the subscriber asks for (tile size, quality)
	// allocLayer is what the bandwidth allocation grants (allocate.go), and
	// allocT the highest temporal layer of it (temporal.go; allTemporal: all).
	allocLayer atomic.Int32
	allocT     atomic.Int32
	// targetAt is when target last changed (for the switch delay metric).
	targetAt atomic.Int64
	needSync atomic.Bool
	// audioReplay: the track was just selected by audio Last-N; the next
	// packet is preceded by the recent ones (audiolastn.go).
	audioReplay atomic.Bool

	// Transport-wide congestion control: the negotiated extension id, and the
	// subscriber connection's estimator that numbers and records every packet.
	twccID  uint8
	twccBuf [2]byte

	mu      sync.Mutex
	writer  rtpWriter // the subscriber's session, or a local sink (writer.go)
	ssrc    uint32
	pt      uint8
	clock   uint32
	current int8 // -1 before the first packet
	started bool
	out     outState
	// segments map outgoing sequence ranges back to the layer and offsets they
	// came from, so NACKs are answered from the right cache.
	segs    [16]segment
	nsegs   int
	hdr     rtp.Header
	scratch []byte
	// svc filters the layers of a VP9/AV1 scalable stream (svc.go); ddID is the
	// subscriber's dependency descriptor extension id (0: not negotiated).
	svc  *svcDown
	ddID uint8
	// vp8t drops VP8 temporal layers above allocT (temporal.go); made at the
	// first keyframe that carries temporal layer indices.
	vp8t *vp8Temporal

	// For sender reports (read by the participant's report loop).
	lastOutTS atomic.Uint32
	lastOutAt atomic.Int64
	packets   atomic.Uint32
	octets    atomic.Uint32

	rtt         atomic.Int64 // ns
	nacks       atomic.Uint64
	retransmits atomic.Uint64
	plis        atomic.Uint64
	switches    atomic.Uint64
	lossFrac    atomic.Uint32 // fraction lost ×256 from the last receiver report

	closed chan struct{}
	once   sync.Once
}

// outState is what the subscriber last received, and the offsets that map the
// current layer's numbering onto it.
type outState struct {
	seqOffset, picOffset uint16
	tl0Offset            uint8
	tsOffset             uint32
	syncSeq              uint16 // first incoming sequence number of this segment
	lastSeq              uint16
	lastTS               uint32
	lastPic              uint16
	lastTL0              uint8
	lastAt               int64
	// lastMarker: the last packet sent ended a frame (padding may follow).
	lastMarker bool
}

type segment struct {
	startOut  uint16
	layer     int8
	seqOffset uint16
	tsOffset  uint32
	picOffset uint16
	tl0Offset uint8
}

func newDownTrack(pub *Publication, sub *Participant) *DownTrack {
	d := &DownTrack{
		pub:     pub,
		sub:     sub,
		closed:  make(chan struct{}),
		current: -1,
	}
	d.maxLayer.Store(maxLayers - 1)
	d.allocLayer.Store(maxLayers - 1)
	d.allocT.Store(allTemporal)
	d.target.Store(-1)
	d.needSync.Store(true)
	if pub.kind == Video && (pub.ck == codecVP9 || pub.ck == codecAV1) {
		d.svc = newSVCDown()
	}
	d.chooseLayer()
	return d
}

// Publication is the track d receives.
func (d *DownTrack) Publication() *Publication { return d.pub }
func (d *DownTrack) RTT() time.Duration        { return time.Duration(d.rtt.Load()) }

// CurrentLayer is the simulcast layer being forwarded, -1 if none yet.
func (d *DownTrack) CurrentLayer() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return int(d.current)
}

// resync makes the next forwarded packet a keyframe that continues the outgoing
// sequence and timestamp where they stopped.
func (d *DownTrack) resync() { d.needSync.Store(true) }

// SetMaxLayer limits the simulcast layer this subscriber receives (0 lowest).
func (d *DownTrack) SetMaxLayer(l int) {
	l = max(0, min(l, maxLayers-1))
	prev := int(d.maxLayer.Swap(int32(l)))
	// The allocation never grants more than was asked for, so a wish above the
	// grant needs a new allocation now: waiting for the next round cost a
	// switch up as much as its interval (500 ms) before the keyframe request.
	if l > int(d.allocLayer.Load()) && d.sub != nil && d.sub.bwe != nil {
		d.sub.allocate()
	}
	d.chooseLayer()
	// A layer the publisher was told to turn off must be turned on now.
	if l > prev && d.pub.owner != nil {
		d.pub.updateDemand()
	}
}

// SetPaused stops (or resumes) forwarding to this subscriber, as when its video
// element is hidden.
func (d *DownTrack) SetPaused(p bool) {
	d.userPaused.Store(p)
	d.updatePaused(true)
}

// setLastNPaused is SetPaused for Last-N selection. The caller requests the
// keyframe for all resumed subscribers at once.
func (d *DownTrack) setLastNPaused(p bool) (resumed bool) {
	d.lastNPaused.Store(p)
	return d.updatePaused(false)
}

func (d *DownTrack) updatePaused(askKeyframe bool) (resumed bool) {
	p := d.userPaused.Load() || d.lastNPaused.Load()
	if d.paused.Swap(p) && !p {
		d.resync()
		if askKeyframe {
			if l := d.pub.layer(int8(d.target.Load())); l != nil {
				l.requestKeyframe()
			}
		}
		return true
	}
	return false
}

// transportReady is called when the subscriber's connection comes up: what it
// waits for is a keyframe it can actually receive.
func (d *DownTrack) transportReady() {
	if d.pub.kind != Video {
		return
	}
	d.mu.Lock()
	started := d.started
	d.mu.Unlock()
	if !started {
		d.resync()
		if l := d.pub.layer(int8(d.target.Load())); l != nil {
			l.requestKeyframe()
			// A camera's reader starts it from the cached GOP now (gop.go).
			if w, ok := l.src.(waker); ok && d.pub.gopStart.Load() {
				w.Wake()
			}
		}
	}
}

// retryKeyframe asks again for the keyframe this subscriber still waits for (to
// start, resume or switch layers): a request or the keyframe itself may have
// been lost, and some encoders send keyframes only when asked.
func (d *DownTrack) retryKeyframe() {
	if d.pub.kind != Video || !d.bound.Load() || d.Paused() {
		return
	}
	target := int8(d.target.Load())
	d.mu.Lock()
	waiting := d.current != target || d.needSync.Load() || d.svc != nil && d.svc.asked >= 0
	d.mu.Unlock()
	if waiting {
		if l := d.pub.layer(target); l != nil {
			l.requestKeyframe()
		}
	}
}

// Paused reports whether nothing is forwarded to this subscriber.
func (d *DownTrack) Paused() bool { return d.paused.Load() }

// chooseLayer picks the best layer that is sending and within the subscriber's
// limit (the lowest sending layer if none is), and asks for a keyframe on it when
// it changes.
func (d *DownTrack) chooseLayer() {
	exists, active := d.pub.activeLayers()
	limit := int(min(d.maxLayer.Load(), d.allocLayer.Load()))
	best := -1
	for i := 0; i <= limit; i++ {
		if active[i] || (best == -1 && exists[i]) {
			best = i
		}
	}
	if best == -1 {
		for i := 0; i < maxLayers; i++ {
			if active[i] || exists[i] {
				best = i
				break
			}
		}
	}
	if best == -1 {
		best = 0
	}
	if int(d.target.Swap(int32(best))) != best {
		d.targetAt.Store(now())
		if d.bound.Load() {
			if l := d.pub.layer(int8(best)); l != nil {
				l.requestKeyframe()
			}
		}
	}
}

// writeRTP forwards one packet. It returns whether the packet was sent.
func (d *DownTrack) writeRTP(p *Packet) bool { return d.writeRTPBatch(p, nil) }

// writeRTPBatch is writeRTP that queues the packet in fb when the writer
// can batch (fb nil: written at once); the caller flushes fb.
func (d *DownTrack) writeRTPBatch(p *Packet, fb *fanBatch) bool {
	if !d.bound.Load() || d.paused.Load() {
		return false
	}
	if d.audioReplay.Load() {
		d.replayAudio(p)
	}
	if d.needSync.Load() && !p.Keyframe {
		d.replayGOP(p) // gop.go: a new subscriber of a camera starts from the cached GOP
	}
	target := int8(d.target.Load())
	d.mu.Lock()
	defer d.mu.Unlock()
	if p.Layer != d.current && p.Layer != target {
		return false
	}
	switch {
	case p.Layer != d.current || d.needSync.Load():
		// A switch (or a start) happens only at a keyframe of the target layer.
		if p.Layer != target || (d.pub.kind == Video && !p.Keyframe) {
			return false
		}
		if d.current != -1 && d.current != p.Layer {
			d.switches.Add(1)
			if at := d.targetAt.Load(); at != 0 {
				metrics.LayerSwitch.Observe(float64(p.Arrival-at) / 1e9)
			}
		}
		d.current = p.Layer
		d.sync(p)
		if d.svc != nil {
			d.svc.restart(p, d.out.seqOffset, d.svcWant())
		}
		if d.vp8t == nil && p.VP8.hasTID && d.pub.ck == codecVP8 {
			d.vp8t = &vp8Temporal{}
		}
		if d.vp8t != nil {
			d.vp8t.restart(p, d.out.seqOffset, d.temporalTarget())
		}
	case int16(p.Header.SequenceNumber-d.out.syncSeq) < 0:
		return false // older than this segment
	}
	o := &d.out
	if int16(p.Header.SequenceNumber-o.syncSeq) > segmentHorizon {
		d.trailSegment(p.Header.SequenceNumber)
	}
	h := &d.hdr
	h.SequenceNumber = p.Header.SequenceNumber + o.seqOffset
	h.Marker = p.Header.Marker
	payload := p.Payload
	h.Padding = p.Header.Padding
	h.PaddingSize = p.Header.PaddingSize
	picOffset := o.picOffset
	if d.svc != nil && p.SVC.layered {
		var ok, pad bool
		if h.SequenceNumber, h.Marker, ok, pad = d.svcFilter(p); pad {
			payload, h.Padding, h.PaddingSize = nil, true, 1
		} else if !ok {
			return false
		}
	}
	if d.vp8t != nil {
		var ok, pad bool
		if h.SequenceNumber, picOffset, ok, pad = d.vp8Filter(p); pad {
			payload, h.Padding, h.PaddingSize, h.Marker = nil, true, 1, false
		} else if !ok {
			return false
		}
	}
	h.Version = 2
	h.PayloadType = d.pt
	h.Timestamp = p.Header.Timestamp + o.tsOffset
	h.SSRC = d.ssrc
	h.CSRC = h.CSRC[:0]
	h.Extension = false
	h.Extensions = h.Extensions[:0]
	if d.ddID != 0 && p.SVC.hasDD && payload != nil {
		// Before transport-cc: a descriptor with a structure needs the
		// two-byte header form, which Pion picks from the first extension.
		_ = h.SetExtension(d.ddID, d.svc.descriptor(&p.SVC))
	}
	var twSeq uint16
	if d.twccID != 0 {
		twSeq = d.stampTWCC(h, d.twccBuf[:])
	}
	if (picOffset != 0 || o.tl0Offset != 0) && (p.VP8.picOff != 0 || p.VP8.tl0Off != 0) && payload != nil {
		// The payload is shared by every subscriber: rewrite a private copy.
		if d.scratch == nil {
			d.scratch = make([]byte, maxPacket) // once, and only for video that needs it
		}
		payload = d.scratch[:copy(d.scratch, p.Payload)]
		p.VP8.rewrite(payload, picOffset, o.tl0Offset)
	}
	var n int
	var err error
	if bw, ok := d.writer.(batchWriter); ok && fb != nil {
		n, err = bw.QueueRTP(fb.get(bw), h, payload)
	} else {
		n, err = d.writer.WriteRTP(h, payload)
	}
	if err != nil || n == 0 {
		// n == 0 without an error: the subscriber's DTLS-SRTP is not up yet and
		// the session dropped the packet. A stream must not start with a keyframe the
		// subscriber never got: wait for the next one.
		if !d.started {
			d.needSync.Store(true)
		}
		return false
	}
	if d.twccID != 0 {
		d.sub.bwe.OnSent(twSeq, now(), h.MarshalSize()+len(payload)+int(h.PaddingSize))
	}
	if int16(h.SequenceNumber-o.lastSeq) > 0 || !d.started {
		o.lastSeq = h.SequenceNumber
		o.lastTS = h.Timestamp
		o.lastMarker = h.Marker
		o.lastAt = p.Arrival
		if p.VP8.picOff != 0 && payload != nil {
			o.lastPic = p.VP8.picID + picOffset
		}
		if p.VP8.tl0Off != 0 {
			o.lastTL0 = p.VP8.tl0 + o.tl0Offset
		}
		d.lastOutTS.Store(h.Timestamp)
		d.lastOutAt.Store(p.Arrival)
	}
	if !d.started {
		d.markFirstRTP() // timing.go
	}
	d.started = true
	d.packets.Add(1)
	d.octets.Add(uint32(len(payload)))
	return true
}

// stampTWCC gives h the next transport-wide sequence number of the subscriber's
// connection, in buf (which must stay untouched until h is written).
func (d *DownTrack) stampTWCC(h *rtp.Header, buf []byte) uint16 {
	seq := d.sub.bwe.NextSeq()
	buf[0], buf[1] = byte(seq>>8), byte(seq)
	_ = h.SetExtension(d.twccID, buf)
	return seq
}

// sync sets the offsets so that p follows the last packet sent, or keeps the
// publisher's numbering for the very first packet.
func (d *DownTrack) sync(p *Packet) {
	d.needSync.Store(false)
	o := &d.out
	o.syncSeq = p.Header.SequenceNumber
	if d.started {
		o.seqOffset = o.lastSeq + 1 - p.Header.SequenceNumber
		elapsed := uint32(uint64(max(p.Arrival-o.lastAt, 1)) * uint64(d.clock) / uint64(time.Second))
		o.tsOffset = o.lastTS + max(elapsed, 1) - p.Header.Timestamp
		if p.VP8.picOff != 0 {
			o.picOffset = o.lastPic + 1 - p.VP8.picID
			if !p.VP8.pic15 {
				o.picOffset &= 0x7f
			}
		}
		if p.VP8.tl0Off != 0 {
			o.tl0Offset = o.lastTL0 + 1 - p.VP8.tl0
		}
	}
	d.pushSegment(segment{startOut: p.Header.SequenceNumber + o.seqOffset, layer: p.Layer, seqOffset: o.seqOffset,
		tsOffset: o.tsOffset, picOffset: o.picOffset, tl0Offset: o.tl0Offset})
}

// segmentHorizon is how far the current segment's start may trail the newest
// packet. Sequence numbers compare only within half their space: a start left
// 32768 packets behind makes every new packet look older than the segment,
// and NACKs of new packets map to an older segment.
const segmentHorizon = 1 << 14

// trailSegment moves the current segment's start, in and out, up to half the
// horizon behind the newest packet (in: seq; out: the last one sent, which
// temporal-layer filtering may keep behind) and forgets the older segments,
// whose packets are far out of any cache.
func (d *DownTrack) trailSegment(seq uint16) {
	o := &d.out
	o.syncSeq = seq - segmentHorizon/2
	if d.nsegs == 0 {
		return
	}
	cur := d.segs[d.nsegs-1]
	if start := o.lastSeq + 1 - segmentHorizon/2; int16(start-cur.startOut) > 0 {
		cur.startOut = start
	}
	d.segs[0], d.nsegs = cur, 1
}

func (d *DownTrack) pushSegment(seg segment) {
	if d.nsegs < len(d.segs) {
		d.segs[d.nsegs] = seg
		d.nsegs++
	} else {
		copy(d.segs[:], d.segs[1:])
		d.segs[len(d.segs)-1] = seg
	}
}

// source maps an outgoing sequence number to where it came from.
func (d *DownTrack) source(outSeq uint16) (segment, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := d.nsegs - 1; i >= 0; i-- {
		if int16(outSeq-d.segs[i].startOut) >= 0 {
			return d.segs[i], true
		}
	}
	return segment{}, false
}

// onRTCP handles one feedback packet; rtx and hdr are the caller's scratch
// for a retransmission.
func (d *DownTrack) onRTCP(pkt rtcp.Packet, rtx []byte, hdr *rtp.Header) {
	switch p := pkt.(type) {
	case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
		d.plis.Add(1)
		metrics.PLIsIn.Inc()
		if l := d.pub.layer(int8(d.target.Load())); l != nil {
			l.requestKeyframe()
		}
	case *rtcp.TransportLayerNack:
		for _, pair := range p.Nacks {
			pair.Range(func(seq uint16) bool {
				d.retransmit(seq, rtx, hdr)
				return true
			})
		}
	case *rtcp.TransportLayerCC:
		if d.sub != nil && d.sub.bwe != nil {
			d.sub.bwe.OnFeedback(p, now())
		}
	case *rtcp.ReceiverReport:
		d.onReports(p.Reports)
	case *rtcp.SenderReport:
		d.onReports(p.Reports)
	}
}

func (d *DownTrack) retransmit(outSeq uint16, buf []byte, hdr *rtp.Header) {
	d.nacks.Add(1)
	metrics.NACKsIn.Inc()
	seg, ok := d.source(outSeq)
	if !ok {
		return
	}
	l := d.pub.layer(seg.layer)
	if l == nil {
		return
	}
	inSeq, marker, picOffset := outSeq-seg.seqOffset, false, seg.picOffset
	if d.vp8t != nil {
		// Dropped temporal layers moved the numbering and the picture IDs.
		d.mu.Lock()
		in, _, ok := d.vp8t.source(outSeq)
		picOffset = d.vp8t.out[outSeq%svcRing].pic
		d.mu.Unlock()
		if !ok {
			return
		}
		inSeq = in
	}
	if d.svc != nil {
		// Layers dropped for this subscriber moved its numbering: the ring knows.
		d.mu.Lock()
		in, m, ok := d.svc.source(outSeq)
		d.mu.Unlock()
		if !ok {
			return
		}
		inSeq, marker = in, m
	}
	n := l.cache.Get(inSeq, buf)
	if n == 0 {
		metrics.CacheMiss.Inc()
		return
	}
	metrics.CacheHit.Inc()
	payload, ok := splitRTP(hdr, buf[:n])
	if !ok {
		return
	}
	if d.pub.ck == codecVP8 && (picOffset != 0 || seg.tl0Offset != 0) {
		desc := parseVP8(payload)
		desc.rewrite(payload, picOffset, seg.tl0Offset)
	}
	d.mu.Lock()
	w, ssrc, pt := d.writer, d.ssrc, d.pt
	d.mu.Unlock()
	if w == nil {
		return
	}
	hdr.SSRC = ssrc
	hdr.PayloadType = pt
	hdr.SequenceNumber = outSeq
	hdr.Timestamp += seg.tsOffset
	var ddb [64]byte
	var desc []byte
	if d.svc != nil {
		hdr.Marker = hdr.Marker || marker
		desc = d.svcRetransmitDD(l, hdr, ddb[:0])
	}
	hdr.Extension = false
	hdr.Extensions = hdr.Extensions[:0]
	hdr.CSRC = hdr.CSRC[:0]
	if desc != nil {
		_ = hdr.SetExtension(d.ddID, desc)
	}
	var tw [2]byte
	var twSeq uint16
	if d.twccID != 0 {
		twSeq = d.stampTWCC(hdr, tw[:])
	}
	if n, err := w.WriteRTP(hdr, payload); err == nil && n > 0 {
		d.retransmits.Add(1)
		if d.twccID != 0 {
			d.sub.bwe.OnSent(twSeq, now(), n)
		}
	}
}

func (d *DownTrack) onReports(reports []rtcp.ReceptionReport) {
	d.mu.Lock()
	ssrc := d.ssrc
	d.mu.Unlock()
	for _, r := range reports {
		if r.SSRC != ssrc {
			continue
		}
		d.lossFrac.Store(uint32(r.FractionLost))
		if r.LastSenderReport == 0 {
			continue
		}
		// RTT = arrival − LSR − DLSR, in 1/65536 s (RFC 3550 §6.4.1).
		nowMid := uint32(ntpTime(time.Now()) >> 16)
		rtt := nowMid - r.LastSenderReport - r.Delay
		if rtt < 1<<31 {
			ns := int64(rtt) * int64(time.Second) >> 16
			d.rtt.Store(ns)
			metrics.RTT.Observe(float64(ns) / 1e9)
		}
	}
}

// senderReport describes what this DownTrack sent, in the publisher's media clock
// shifted into the subscriber's stream, for audio/video sync at the receiver.
func (d *DownTrack) senderReport(wall time.Time) *rtcp.SenderReport {
	if !d.bound.Load() {
		return nil
	}
	d.mu.Lock()
	started, cur, tsOff, ssrc, clock := d.started, d.current, d.out.tsOffset, d.ssrc, d.clock
	d.mu.Unlock()
	if !started {
		return nil
	}
	n := now()
	var rtpTS uint32
	if l := d.pub.layer(cur); l != nil && l.srAt.Load() != 0 {
		rtpTS = l.srRTP.Load() + tsOff + uint32(uint64(n-l.srAt.Load())*uint64(clock)/uint64(time.Second))
	} else {
		rtpTS = d.lastOutTS.Load() + uint32(uint64(max(n-d.lastOutAt.Load(), 0))*uint64(clock)/uint64(time.Second))
	}
	return &rtcp.SenderReport{
		SSRC:        ssrc,
		NTPTime:     ntpTime(wall),
		RTPTime:     rtpTS,
		PacketCount: d.packets.Load(),
		OctetCount:  d.octets.Load(),
	}
}

func ntpTime(t time.Time) uint64 {
	const ntpEpochOffset = 2208988800
	s := uint64(t.Unix()) + ntpEpochOffset
	f := uint64(t.Nanosecond()) << 32 / uint64(time.Second)
	return s<<32 | f
}

func (d *DownTrack) close() {
	d.once.Do(func() {
		close(d.closed)
		d.bound.Store(false)
	})
}
