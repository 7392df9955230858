package sfu

import (
	"sync/atomic"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"

	"github.com/petrel-sfu/petrel/sfu/dd"
)

// Scalable video (SVC): one stream (one SSRC) that carries spatial and temporal
// layers, as Chromium sends VP9 and AV1 with a scalabilityMode such as L3T3_KEY.
// The layer of each packet is read once when it arrives (the VP9 payload
// descriptor's SID/TID/U/Z/B/E, or the AV1 dependency descriptor); each
// subscriber's svcDown then keeps the layers its target allows, switching up
// spatially only where the stream allows it (a keyframe, a DD switch
// indication), renumbering sequence numbers over what it drops, setting the
// marker at the end of the last kept spatial layer of a picture and, for AV1,
// rewriting the active decode targets.
//
// A subscriber's spatial target is its simulcast layer (maxLayer, allocLayer):
// layer i of an SVC track is spatial layer i.

// svcInfo is what a packet says about its layer.
type svcInfo struct {
	layered           bool
	spatial, temporal uint8
	start, end        bool // first / last packet of this layer's frame
	up                bool // VP9 U: a temporal switching-up point
	interRef          bool // upper spatial layers of the picture predict from it
	hasDD             bool
	padding           bool // no payload
	dd                dd.Descriptor
	ddRaw             []byte // the extension's bytes (in the packet cache slot)
}

// svcPub is a publication's SVC record: per spatial layer byte counters and
// rates for the allocation, and when each spatial layer was last seen (an
// encoder drops its top layers when short of CPU or bandwidth).
type svcPub struct {
	seen          [maxLayers]atomic.Int64
	bytes         [maxLayers]atomic.Uint64
	refBytes      [maxLayers]atomic.Uint64 // of frames upper layers predict from
	bps, refBps   [maxLayers]atomic.Int64
	prev, prevRef [maxLayers]uint64 // room loop only
	trates        temporalRates     // per temporal layer, all spatial layers
}

// svcLayer is a layer reader's parsing state.
type svcLayer struct {
	vp9     codecs.VP9Packet
	ddExt   uint8
	ddStr   atomic.Pointer[dd.Structure]
	lastBad atomic.Int64 // when a malformed descriptor was last logged
}

// parseSVC fills pkt.SVC; it returns false for a packet whose descriptor is
// malformed (dropped, logged at most once a second per layer).
func (l *layer) parseSVC(pkt *Packet) bool {
	info := &pkt.SVC
	info.layered, info.hasDD, info.ddRaw, info.padding = false, false, nil, false
	if len(pkt.Payload) == 0 {
		// The publisher's padding (bandwidth probes): nothing a subscriber
		// needs, and its sequence numbers are renumbered away like a dropped layer's.
		info.layered, info.padding = true, true
		return true
	}
	var raw []byte
	if l.svc.ddExt != 0 {
		// Negotiated is not sent: Chromium sends it with AV1, not with VP9,
		// whose payload descriptor then says the layers.
		raw = pkt.Header.GetExtension(l.svc.ddExt)
	}
	switch {
	case raw != nil:
		if err := dd.Parse(&info.dd, raw, l.svc.ddStr.Load()); err != nil {
			l.badDescriptor("dependency descriptor", err)
			return false
		}
		if info.dd.NewStructure {
			l.svc.ddStr.Store(info.dd.Structure)
		}
		s := info.dd.Structure
		info.layered, info.hasDD, info.ddRaw = true, true, raw
		info.spatial, info.temporal = info.dd.Spatial, info.dd.Temporal
		info.start, info.end = info.dd.StartOfFrame, info.dd.EndOfFrame
		info.interRef = false
		for i := 0; i < s.DTCount; i++ {
			if s.DecodeTargetSpatial[i] > info.spatial && info.dd.DTI[i] != dd.DTINotPresent {
				info.interRef = true
				break
			}
		}
		if info.dd.NewStructure {
			l.pub.svc.structure(s.MaxSpatial, pkt.Arrival)
		}
		l.pub.svc.sawSpatial(info.spatial, pkt.Arrival)
	case l.pub.ck == codecVP9:
		v := &l.svc.vp9
		v.PDiff = v.PDiff[:0]
		if _, err := v.Unmarshal(pkt.Payload); err != nil {
			l.badDescriptor("VP9 payload descriptor", err)
			return false
		}
		if !v.L {
			break
		}
		info.layered = true
		info.spatial, info.temporal = v.SID, v.TID
		info.start, info.end, info.up, info.interRef = v.B, v.E, v.U, !v.Z
		if v.V { // the scalability structure on a key picture: N_S+1 layers follow
			l.pub.svc.structure(v.NS, pkt.Arrival)
		}
		l.pub.svc.sawSpatial(v.SID, pkt.Arrival)
	}
	if info.layered && int(info.spatial) < maxLayers {
		n := uint64(len(pkt.Payload))
		l.pub.svc.bytes[info.spatial].Add(n)
		l.pub.svc.trates.add(info.temporal, int(n))
		if info.interRef {
			l.pub.svc.refBytes[info.spatial].Add(n)
		}
	}
	return true
}

func (l *layer) badDescriptor(what string, err error) {
	n := now()
	if last := l.svc.lastBad.Load(); n-last > int64(time.Second) && l.svc.lastBad.CompareAndSwap(last, n) {
		l.pub.owner.log.Warn("malformed "+what+": packet dropped", "track", l.pub.sid, "err", err)
	}
}

// sawSpatial marks spatial layers up to sid as sent at time at.
func (s *svcPub) sawSpatial(sid uint8, at int64) {
	for i := min(int(sid), maxLayers-1); i >= 0; i-- {
		if s.seen[i].Load() >= at {
			return
		}
		s.seen[i].Store(at)
	}
}

// structure records a key picture's structure: layers up to top from now on,
// none above (an encoder short of CPU reconfigures with fewer layers, and the
// subscribers that had the top one must move down at this very keyframe).
func (s *svcPub) structure(top uint8, at int64) {
	for i := range s.seen {
		if i <= int(top) {
			s.seen[i].Store(at)
		} else {
			s.seen[i].Store(0)
		}
	}
}

// spatialLayers is how many spatial layers the stream sent in the last second
// (0 without layer information).
func (s *svcPub) spatialLayers() int {
	n := now()
	for i := maxLayers - 1; i >= 0; i-- {
		if at := s.seen[i].Load(); at != 0 && n-at < int64(time.Second) {
			return i + 1
		}
	}
	return 0
}

// isSVC reports whether the publication sends several spatial layers in one stream.
func (t *Publication) isSVC() bool { return t.svc.spatialLayers() > 1 }

// measure updates the per spatial layer rates (room loop).
func (s *svcPub) measure(dt time.Duration) {
	for i := range s.bytes {
		s.bps[i].Store(smoothRate(s.bps[i].Load(), s.bytes[i].Load(), &s.prev[i], dt))
		s.refBps[i].Store(smoothRate(s.refBps[i].Load(), s.refBytes[i].Load(), &s.prevRef[i], dt))
	}
	s.trates.measure(dt)
}

// smoothRate is a byte counter's bitrate over dt, smoothed with the old value
// (0.7 old, 0.3 new); prev holds the counter's last reading.
func smoothRate(old int64, b uint64, prev *uint64, dt time.Duration) int64 {
	p := *prev
	*prev = b
	if p == 0 || dt <= 0 {
		return old
	}
	inst := float64(b-p) * 8 / dt.Seconds()
	if old == 0 {
		return int64(inst)
	}
	return int64(0.7*float64(old) + 0.3*inst)
}

// layerRate is what receiving layer i costs: a simulcast encoding's rate, or
// for SVC spatial layer i with the lower layers' frames it predicts from.
func (t *Publication) layerRate(i int) (int, bool) {
	if n := t.svc.spatialLayers(); n > 1 {
		if i >= n {
			return 0, false
		}
		r := t.svc.bps[i].Load()
		for k := 0; k < i; k++ {
			r += t.svc.refBps[k].Load()
		}
		if r <= 0 {
			return assumedLayerRate, true
		}
		return int(r), true
	}
	l := t.layer(int8(i))
	if l == nil {
		return 0, false
	}
	return l.rate(), true
}

// svcRing is how many recent sequence numbers a subscriber remembers for
// late packets and NACKs.
const svcRing = 512

type seqEntry struct {
	seq, other uint16
	state      uint8
	marker     bool   // out ring: the marker this subscriber got
	pic        uint16 // out ring, VP8: the picture ID offset it was sent with
}

const (
	seqNone uint8 = iota
	seqKept
	seqDropped
	seqMissing // not arrived yet; other holds the offset then
)

// seqMap renumbers a subscriber's stream over the packets it drops (layers
// it does not get), so that its sequence numbers stay contiguous, and maps
// outgoing numbers back for NACKs. Late packets get the place they were given.
type seqMap struct {
	off    uint16 // out = in + off for the next in-order packet
	lastIn uint16
	padAt  uint16            // set by number: the place to fill with padding
	in     [svcRing]seqEntry // by incoming sequence number: other = out
	out    [svcRing]seqEntry // by outgoing sequence number: other = in
}

// svcDown is one subscriber's view of an SVC stream.
type svcDown struct {
	curS, curT int8   // layers forwarded now; -1 before the start
	maxT       int8   // temporal limit (all by default)
	ts         uint32 // timestamp of the picture decided on last
	haveTS     bool
	asked      int8 // spatial layer a keyframe was requested for
	// lowerDropped: frames of layers below curS were dropped since the last keyframe.
	lowerDropped bool
	seqMap
	ddBuf   []byte
	mask    uint32 // active decode targets last computed (0: all)
	maskFor *dd.Structure
	maskS   int8
	maskT   int8
}

func newSVCDown() *svcDown {
	return &svcDown{curS: -1, curT: -1, maxT: 7, asked: -1, ddBuf: make([]byte, 0, 64)}
}

// restart is called when the subscriber's stream (re)starts at p, a keyframe
// numbered so that it follows what was sent (off).
func (s *svcDown) restart(p *Packet, off uint16, want int8) {
	s.off = off
	s.lastIn = p.Header.SequenceNumber - 1
	s.curS, s.curT = want, s.maxT
	s.ts, s.haveTS = p.Header.Timestamp, true
	s.asked = -1
}

// decide moves the spatial/temporal layers at the start of a new picture: down
// at once, up where the stream allows it.
func (s *svcDown) decide(p *Packet, want int8) (needKey bool) {
	info := &p.SVC
	if s.haveTS && int32(p.Header.Timestamp-s.ts) <= 0 {
		return false
	}
	s.ts, s.haveTS = p.Header.Timestamp, true
	if s.maxT < s.curT {
		s.curT = s.maxT
	}
	if p.Keyframe {
		s.lowerDropped = false
	}
	// Down is at once while the lower layers were forwarded (full SVC); after
	// their frames were dropped (K-SVC: upper layers predict from them only on
	// key pictures) the lower layer's decoder lacks its references, and down
	// waits for a keyframe like up. asked is what retryKeyframe asks again for.
	switch {
	case want == s.curS:
		s.asked = -1
	case want < s.curS && !s.lowerDropped, s.canSwitch(p, want, s.curT):
		s.curS = want
		s.asked = -1
	case s.asked != want:
		s.asked = want
		needKey = true
	}
	if s.maxT > s.curT && s.canSwitch(p, s.curS, s.maxT) {
		s.curT = s.maxT
	}
	_ = info
	return needKey
}

// canSwitch reports whether layers up to (spatial, temporal) can be decoded
// from this picture on.
func (s *svcDown) canSwitch(p *Packet, spatial, temporal int8) bool {
	if p.Keyframe {
		return true
	}
	info := &p.SVC
	if info.hasDD {
		dt := targetOf(info.dd.Structure, spatial, temporal)
		return dt >= 0 && info.dd.DTI[dt] == dd.DTISwitch
	}
	// VP9: only a temporal move within the same spatial layer has switch
	// points without a keyframe (U on a picture this subscriber keeps).
	return spatial == s.curS && info.up && int8(info.temporal) <= s.curT
}

// targetOf is the decode target of exactly (spatial, temporal), or the
// largest one below; -1 if none.
func targetOf(st *dd.Structure, spatial, temporal int8) int {
	best := -1
	for i := 0; i < st.DTCount; i++ {
		ts, tt := int8(st.DecodeTargetSpatial[i]), int8(st.DecodeTargetTemporal[i])
		if ts > spatial || tt > temporal {
			continue
		}
		if best == -1 || ts > int8(st.DecodeTargetSpatial[best]) ||
			ts == int8(st.DecodeTargetSpatial[best]) && tt > int8(st.DecodeTargetTemporal[best]) {
			best = i
		}
	}
	return best
}

// keep says whether the subscriber needs p's frame at the current layers.
func (s *svcDown) keep(p *Packet) bool {
	info := &p.SVC
	if info.hasDD {
		dt := targetOf(info.dd.Structure, s.curS, s.curT)
		return dt >= 0 && info.dd.DTI[dt] != dd.DTINotPresent
	}
	if int8(info.temporal) > s.curT || int8(info.spatial) > s.curS {
		return false
	}
	// A lower spatial layer only if the kept one predicts from it (VP9 Z=0).
	return int8(info.spatial) == s.curS || info.interRef
}

// number assigns p its outgoing sequence number if it is kept, recording the
// mapping; late packets get the number their place was given.
func (s *seqMap) number(seq uint16, kept bool) (uint16, bool) {
	if d := int16(seq - s.lastIn); d > 0 {
		if d > 1 && int(d) <= svcRing {
			// Packets not arrived yet keep their places (counted as kept): a
			// retransmission may still bring them.
			for m := s.lastIn + 1; m != seq; m++ {
				s.in[m%svcRing] = seqEntry{seq: m, other: s.off, state: seqMissing}
			}
		}
		s.lastIn = seq
		if !kept {
			s.in[seq%svcRing] = seqEntry{seq: seq, state: seqDropped}
			s.off--
			return 0, false
		}
		out := seq + s.off
		s.in[seq%svcRing] = seqEntry{seq: seq, other: out, state: seqKept}
		s.out[out%svcRing] = seqEntry{seq: out, other: seq, state: seqKept}
		return out, true
	}
	e := &s.in[seq%svcRing]
	if e.seq != seq {
		return 0, false // too old to place
	}
	switch e.state {
	case seqKept:
		return e.other, true // a duplicate
	case seqMissing:
		if !kept {
			// Its place was given: fill it with padding, or the receiver
			// counts a loss and NACKs for nothing.
			e.state = seqDropped
			s.padAt = seq + e.other
			return 0, false
		}
		out := seq + e.other
		*e = seqEntry{seq: seq, other: out, state: seqKept}
		s.out[out%svcRing] = seqEntry{seq: out, other: seq, state: seqKept}
		return out, true
	}
	return 0, false
}

// source maps an outgoing sequence number back to the incoming one.
func (s *seqMap) source(out uint16) (in uint16, marker, ok bool) {
	e := s.out[out%svcRing]
	return e.other, e.marker, e.seq == out && e.state == seqKept
}

// marker: the end of the last kept spatial layer ends the picture for this
// subscriber.
func (s *svcDown) marker(p *Packet) bool {
	return p.Header.Marker || p.SVC.end && int8(p.SVC.spatial) == s.curS
}

// descriptor is the dependency descriptor to send with p: the publisher's, with
// the active decode targets narrowed to what this subscriber gets.
func (s *svcDown) descriptor(info *svcInfo) []byte {
	st := info.dd.Structure
	if st != s.maskFor || s.curS != s.maskS || s.curT != s.maskT {
		s.maskFor, s.maskS, s.maskT = st, s.curS, s.curT
		s.mask = activeTargets(st, s.curS, s.curT)
	}
	if s.mask == 0 {
		return info.ddRaw
	}
	s.ddBuf = info.dd.SetActiveTargets(info.ddRaw, s.mask, s.ddBuf)
	return s.ddBuf
}

// activeTargets is the mask of the decode targets whose frames the subscriber
// all gets at (spatial, temporal), or 0 when that is every target.
func activeTargets(st *dd.Structure, spatial, temporal int8) uint32 {
	cur := targetOf(st, spatial, temporal)
	if cur < 0 {
		return 0
	}
	var m uint32
	for i := 0; i < st.DTCount; i++ {
		all := true
		for t := 0; t < st.Templates; t++ {
			if st.DTI[t][i] != dd.DTINotPresent && st.DTI[t][cur] == dd.DTINotPresent {
				all = false
				break
			}
		}
		if all {
			m |= 1 << i
		}
	}
	if m == uint32(1)<<st.DTCount-1 {
		return 0
	}
	return m
}

// svcWant is the spatial layer the subscriber should get: its simulcast
// layer, within the layers the stream has.
func (d *DownTrack) svcWant() int8 {
	w := int8(min(d.maxLayer.Load(), d.allocLayer.Load()))
	if n := int8(d.pub.svc.spatialLayers()); n > 0 && w >= n {
		w = n - 1
	}
	return w
}

// svcFilter decides p for this subscriber (under d.mu): its outgoing sequence
// number and marker, or !ok to drop it; pad: send a padding packet numbered seq
// in its stead.
func (d *DownTrack) svcFilter(p *Packet) (seq uint16, marker, ok, pad bool) {
	s := d.svc
	s.padAt = 0
	s.maxT = d.temporalTarget()
	if p.SVC.padding {
		seq, ok = s.number(p.Header.SequenceNumber, false)
		return seq, false, ok, false
	}
	if s.decide(p, d.svcWant()) {
		if l := d.pub.layer(p.Layer); l != nil {
			l.requestKeyframe() // a spatial switch up waits for a keyframe
		}
	}
	kept := s.keep(p)
	if !kept && int8(p.SVC.spatial) < s.curS {
		s.lowerDropped = true
	}
	if seq, ok = s.number(p.Header.SequenceNumber, kept); !ok {
		if s.padAt != 0 {
			return s.padAt, false, true, true
		}
		return 0, false, false, false
	}
	marker = s.marker(p)
	s.out[seq%svcRing].marker = marker
	return seq, marker, true, false
}

// svcRetransmitDD is the descriptor for a retransmission whose cached header is
// hdr, narrowed like the original was (nil: none to send).
func (d *DownTrack) svcRetransmitDD(l *layer, hdr *rtp.Header, buf []byte) []byte {
	if d.ddID == 0 || l.svc.ddExt == 0 {
		return nil
	}
	raw := hdr.GetExtension(l.svc.ddExt)
	if raw == nil {
		return nil
	}
	var info svcInfo
	if dd.Parse(&info.dd, raw, l.svc.ddStr.Load()) != nil {
		return nil
	}
	info.ddRaw = raw
	d.mu.Lock()
	defer d.mu.Unlock()
	return append(buf, d.svc.descriptor(&info)...)
}
