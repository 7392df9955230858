package sfu

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/petrel-sfu/petrel/sfu/dd"
)

// Temporal layers: a lower frame rate for a subscriber whose bandwidth does not
// carry the full one. Chromium sends each VP8 simulcast encoding with temporal
// layers (L1T3: TL0 at a quarter of the frame rate, TL1 doubling it, TL2 the
// rest), and VP9/AV1 SVC streams carry them too. Frames of a temporal layer
// reference only frames of the same or lower layers, so the layers above a
// subscriber's target can be dropped at any picture; going back up is safe only
// at a layer-sync frame (the VP8 Y bit: it references TL0 frames alone) or a
// keyframe, as LiveKit and mediasoup do.
//
// For VP8 the subscriber's stream must then look as if the dropped pictures
// never existed: sequence numbers are renumbered over them (seqMap, shared with
// SVC) and the 15-bit picture ID is shifted down by the pictures dropped so
// far, or Chromium's VP8 reference finder waits for the missing picture IDs.
// TL0PICIDX needs nothing: TL0 frames are never dropped.

// allTemporal is a temporal target that drops nothing.
const allTemporal = 7

// maxTemporal is how many temporal layers are measured (VP8's TID has 2 bits;
// Chromium sends at most 3 layers).
const maxTemporal = 4

// temporalRates counts a stream's bytes per temporal layer, so that the
// allocation knows what a lower frame rate costs.
type temporalRates struct {
	bytes [maxTemporal]atomic.Uint64
	bps   [maxTemporal]atomic.Int64
	prev  [maxTemporal]uint64 // room loop only
}

func (r *temporalRates) add(tid uint8, n int) {
	if int(tid) < maxTemporal {
		r.bytes[tid].Add(uint64(n))
	}
}

func (r *temporalRates) measure(dt time.Duration) {
	for i := range r.bytes {
		r.bps[i].Store(smoothRate(r.bps[i].Load(), r.bytes[i].Load(), &r.prev[i], dt))
	}
}

// layers is how many temporal layers the stream sends (1 without temporal
// layer information).
func (r *temporalRates) layers() int {
	for i := maxTemporal - 1; i > 0; i-- {
		if r.bps[i].Load() > 0 {
			return i + 1
		}
	}
	return 1
}

// share is the part of the stream's rate in temporal layers up to t.
func (r *temporalRates) share(t int) float64 {
	var upTo, all int64
	for i := range r.bps {
		b := r.bps[i].Load()
		all += b
		if i <= t {
			upTo += b
		}
	}
	if all <= 0 {
		return 1
	}
	return float64(upTo) / float64(all)
}

// temporalRates of layer i: a simulcast encoding's own, or an SVC stream's
// (the same shares in every spatial layer, near enough for the allocation).
func (t *Publication) temporalRates(i int) *temporalRates {
	if t.svc.spatialLayers() > 1 {
		return &t.svc.trates
	}
	if l := t.layer(int8(i)); l != nil {
		return &l.trates
	}
	return nil
}

// temporalLayers is how many temporal layers layer i has (1: none to drop).
func (t *Publication) temporalLayers(i int) int {
	if r := t.temporalRates(i); r != nil {
		return r.layers()
	}
	return 1
}

// layerRateT is what receiving layer i up to temporal layer tl costs.
func (t *Publication) layerRateT(i, tl int) (int, bool) {
	rate, ok := t.layerRate(i)
	if !ok {
		return 0, false
	}
	r := t.temporalRates(i)
	if r == nil || tl >= r.layers()-1 {
		return rate, true
	}
	// TL0 frames are the largest (references kept longest), so layers up to
	// tl take at least their share of the frames: a bit share measured below
	// it (a layer's bytes counted near zero) priced a frame rate at 1 bit/s.
	frames := math.Pow(2, float64(tl-(r.layers()-1)))
	return max(int(float64(rate)*max(r.share(tl), frames)), 1), true
}

// temporalTarget is the highest temporal layer the allocation grants.
func (d *DownTrack) temporalTarget() int8 { return int8(d.allocT.Load()) }

// CurrentTemporal is the highest temporal layer forwarded now (allTemporal:
// all of them, or a stream without temporal layers).
func (d *DownTrack) CurrentTemporal() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.vp8t != nil:
		return int(d.vp8t.curT)
	case d.svc != nil && d.svc.curT >= 0:
		return int(d.svc.curT)
	}
	return allTemporal
}

// vp8Temporal is one subscriber's temporal-layer filter of a VP8 stream.
type vp8Temporal struct {
	seqMap
	curT int8 // highest temporal layer forwarded now
	// Pictures: the newest seen (incoming ID), how many were dropped since the
	// stream (re)started, and the decision on recent ones (late packets and
	// retransmissions of a picture follow it).
	lastPic uint16
	havePic bool
	shift   uint16
	pics    [picRing]picEntry
	// Without picture IDs a frame is told by its timestamp: the newest, and
	// the decisions on recent ones (frame: the newest's index).
	ts     uint32
	haveTS bool
	frames [16]tsEntry
	frame  int
	// upSince: when the target rose above curT with no sync frame since.
	upSince int64
	// maxTID is the highest temporal layer seen in the stream.
	maxTID int8
}

const picRing = 64

type tsEntry struct {
	ts        uint32
	keep, set bool
}

type picEntry struct {
	id, shift uint16
	state     uint8 // seqNone, seqKept, seqDropped, seqMissing (not seen yet)
}

// upWait is how long a switch up waits for a layer-sync frame before it asks
// for a keyframe (an encoder may send none).
const upWait = 2 * time.Second

// restart is called when the subscriber's stream (re)starts at keyframe p,
// numbered to follow what was sent (off). A keyframe is a switch point for
// every temporal layer.
func (t *vp8Temporal) restart(p *Packet, off uint16, target int8) {
	t.off = off
	t.lastIn = p.Header.SequenceNumber - 1
	t.curT = target
	t.havePic, t.haveTS = false, false
	t.frames = [len(t.frames)]tsEntry{}
	t.shift = 0
	t.upSince = 0
}

// move changes the temporal layer at the first packet of a new picture: down
// at once (lower layers never reference higher ones), up at a frame that the
// subscriber can decode from what it was sent and from which the higher
// layers' frames can be decoded (switchUp), at a layer-sync frame of the next
// layer, or at a keyframe. It reports whether the switch up has waited too
// long and a keyframe should be asked for.
func (t *vp8Temporal) move(p *Packet, target int8) (askKey bool) {
	v := &p.VP8
	tid := int8(v.tid)
	t.maxTID = max(t.maxTID, tid)
	switch {
	case p.Keyframe:
		t.curT = target
	case target < t.curT:
		t.curT = target
	case target > t.curT && v.switchUp > t.curT && (tid <= t.curT || tid == t.curT+1 && v.sync):
		// A switch indication says the frames after this one decode if
		// this one does, not that this one does: Chromium's VP8 L1T3 marks
		// its second TL1 frame of each cycle a switch point for TL2, but it
		// references the TL1 frame before it. The frame itself must be of a
		// layer forwarded, or a sync frame of the next one (which
		// references TL0 alone).
		t.curT = min(target, v.switchUp)
	case target > t.curT && tid == t.curT+1 && v.sync:
		// One layer at a time: a sync frame of layer k references TL0
		// alone, but the frames of a layer between might reference their
		// own layer's earlier frames, which were dropped.
		t.curT = tid
	}
	if target <= t.curT || t.curT >= t.maxTID {
		// Nothing to wait for: what the stream has is all forwarded (a
		// target above its top layer needs no keyframe).
		t.upSince = 0
		return false
	}
	if t.upSince == 0 {
		t.upSince = p.Arrival
	} else if p.Arrival-t.upSince > int64(upWait) {
		t.upSince = p.Arrival
		return true
	}
	return false
}

// decide says whether p's picture is forwarded, and the number of pictures
// dropped before it (its picture ID shift).
func (t *vp8Temporal) decide(p *Packet, target int8) (keep bool, shift uint16, askKey bool) {
	v := &p.VP8
	if v.picOff == 0 {
		ts := p.Header.Timestamp
		if t.haveTS && int32(ts-t.ts) < 0 {
			// A late packet of an earlier picture (reordered, or the
			// publisher's retransmission): the picture's decision, not
			// one made now, or the receiver gets part of a picture.
			for _, f := range t.frames {
				if f.ts == ts && f.set {
					return f.keep, 0, false
				}
			}
			return false, 0, false // too old to place
		}
		if !t.haveTS || ts != t.ts {
			t.ts, t.haveTS = ts, true
			askKey = t.move(p, target)
			t.frame = (t.frame + 1) % len(t.frames)
			t.frames[t.frame] = tsEntry{ts: ts, keep: int8(v.tid) <= t.curT, set: true}
		}
		return int8(v.tid) <= t.curT, 0, askKey
	}
	mask := uint16(0x7fff)
	if !v.pic15 {
		mask = 0x7f
	}
	id := v.picID & mask
	if t.havePic {
		ahead := (id - t.lastPic) & mask
		if ahead == 0 || ahead > mask/2 {
			// The newest picture's next packet, or an older picture's.
			e := &t.pics[id%picRing]
			switch {
			case e.id != id || e.state == seqNone:
				return false, 0, false // too old to place
			case e.state == seqMissing:
				// Skipped when it was due (lost or reordered): it gets the
				// place it was given if its layer is forwarded.
				e.state = seqDropped
				if int8(v.tid) <= t.curT {
					e.state = seqKept
				}
			}
			return e.state == seqKept, e.shift, false
		}
		// Pictures skipped on the way keep their places.
		for m, n := (t.lastPic+1)&mask, 0; m != id && n < picRing; m, n = (m+1)&mask, n+1 {
			t.pics[m%picRing] = picEntry{id: m, shift: t.shift, state: seqMissing}
		}
	}
	t.lastPic, t.havePic = id, true
	askKey = t.move(p, target)
	keep = int8(v.tid) <= t.curT
	state := seqKept
	if !keep {
		t.shift++
		state = seqDropped
	}
	t.pics[id%picRing] = picEntry{id: id, shift: t.shift, state: state}
	return keep, t.shift, askKey
}

// vp8DD reads a VP8 packet's temporal layer from the dependency descriptor:
// Chromium (M156 here) negotiates the descriptor for VP8 and then sends a bare
// VP8 payload descriptor, without picture ID, TL0PICIDX or TID. A frame is a
// switch point for each decode target whose indication is Switch, for a
// subscriber that can decode the frame itself (see move). Chromium's L1T3
// cycle of eight frames is TL0 "SSS", TL2, TL1 "-SS" (references TL0 alone: a
// sync frame), TL2, TL0 "SRR", TL2, TL1 "-DS" (references the TL1 frame
// before it: a switch point for TL2 from TL1, not from TL0), TL2. A malformed
// descriptor is logged (at most once a second) and the packet forwarded
// without temporal information: the VP8 payload does not need the descriptor.
func (l *layer) vp8DD(pkt *Packet) {
	raw := pkt.Header.GetExtension(l.svc.ddExt)
	if raw == nil {
		return
	}
	d := &pkt.SVC.dd
	if err := dd.Parse(d, raw, l.svc.ddStr.Load()); err != nil {
		l.badDescriptor("VP8 dependency descriptor (temporal layers not filtered)", err)
		return
	}
	if d.NewStructure {
		l.svc.ddStr.Store(d.Structure)
	}
	v := &pkt.VP8
	if v.picOff != 0 && v.hasTID {
		return // the payload descriptor says it all
	}
	st := d.Structure
	v.hasTID, v.tid, v.start, v.sync, v.switchUp = true, d.Temporal, d.StartOfFrame, false, -1
	for i := 0; i < st.DTCount; i++ {
		if st.DecodeTargetSpatial[i] != d.Spatial || d.DTI[i] != dd.DTISwitch {
			continue
		}
		t := st.DecodeTargetTemporal[i]
		v.switchUp = max(v.switchUp, int8(t))
		// A frame that is a switch point of its own layer's decode target
		// decodes from the layers below: the descriptor's sync frame.
		if t == d.Temporal && t > 0 {
			v.sync = true
		}
	}
}

// vp8Filter decides p for this subscriber (under d.mu): its outgoing sequence
// number and picture ID offset, or !ok to drop it; pad: send a padding packet
// numbered seq in its stead (its place was given before it arrived).
func (d *DownTrack) vp8Filter(p *Packet) (seq, picOffset uint16, ok, pad bool) {
	t := d.vp8t
	t.padAt = 0
	keep, shift := true, t.shift
	if p.VP8.hasTID && len(p.Payload) > 0 {
		var askKey bool
		keep, shift, askKey = t.decide(p, d.temporalTarget())
		if askKey {
			if l := d.pub.layer(p.Layer); l != nil {
				l.requestKeyframe()
			}
		}
	}
	if seq, ok = t.number(p.Header.SequenceNumber, keep); !ok {
		if t.padAt != 0 {
			return t.padAt, 0, true, true
		}
		return 0, 0, false, false
	}
	picOffset = d.out.picOffset - shift
	t.out[seq%svcRing].pic = picOffset
	return seq, picOffset, true, false
}
