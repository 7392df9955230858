package sfu

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"strings"
	"testing"

	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/sfu/dd"
)

// svcWriter records what a subscriber is sent: headers, the publisher's
// sequence number each payload carries, and the descriptor forwarded.
type svcWriter struct {
	hdrs []rtp.Header
	orig []uint16
	dds  [][]byte
}

func (w *svcWriter) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	w.hdrs = append(w.hdrs, *h)
	if len(p) == 0 {
		w.orig = append(w.orig, padding)
		return h.MarshalSize() + int(h.PaddingSize), nil
	}
	w.orig = append(w.orig, binary.BigEndian.Uint16(p[len(p)-2:]))
	w.dds = append(w.dds, append([]byte(nil), h.GetExtension(7)...))
	return h.MarshalSize() + len(p), nil
}

// padding stands for a padding packet in svcWriter.orig.
const padding = 0xffff

type svcFixture struct {
	t    *testing.T
	pub  *Publication
	ws   []*svcWriter
	seq  uint16
	logs *bytes.Buffer
	pkt  Packet
}

func newSVCFixture(t *testing.T, ck codecKind, subs int) *svcFixture {
	logs := &bytes.Buffer{}
	f := &svcFixture{t: t, seq: 1000, logs: logs}
	f.pub = &Publication{sid: "TR_svc", kind: Video, ck: ck, cacheSize: 1024,
		owner: &Participant{sid: "PA_x", log: slog.New(slog.NewTextHandler(logs, nil))}}
	empty := []*DownTrack{}
	f.pub.downs.Store(&empty)
	l := &layer{index: 0, pub: f.pub, src: &nopSource{}, cache: NewPacketCache(1024)}
	l.lastRecv.Store(now())
	if ck == codecAV1 {
		l.svc.ddExt = 5
	}
	f.pub.layers[0].Store(l)
	for i := 0; i < subs; i++ {
		d := newDownTrack(f.pub, nil)
		w := &svcWriter{}
		d.writer, d.ssrc, d.pt, d.clock, d.ddID = w, uint32(2000+i), 100, 90000, 7
		d.bound.Store(true)
		f.pub.addDown(d)
		f.ws = append(f.ws, w)
	}
	return f
}

func (f *svcFixture) down(i int) *DownTrack { return f.pub.Subscribers()[i] }

// send hands a packet to every subscriber; raw's payload ends with its
// sequence number.
func (f *svcFixture) send(raw []byte) bool {
	f.t.Helper()
	if !f.pub.layer(0).parse(&f.pkt, raw) {
		return false
	}
	f.pub.fanout(&f.pkt)
	return true
}

func rtpPacket(seq uint16, ts uint32, marker bool, payload []byte, ext []byte) []byte {
	payload = binary.BigEndian.AppendUint16(payload, seq)
	p := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 98, SequenceNumber: seq, Timestamp: ts, SSRC: 42, Marker: marker}, Payload: payload}
	if ext != nil {
		_ = p.Header.SetExtension(5, ext)
	}
	b, _ := p.Marshal()
	return b
}

// vp9 is a flexible-mode payload descriptor as Chromium sends with L3T3_KEY.
func vp9(pic uint16, sid, tid uint8, key, begin, end, up, notRef bool) []byte {
	b0 := byte(0x80 | 0x20 | 0x10) // I, L, F
	if !key {
		b0 |= 0x40 // P
	}
	if begin {
		b0 |= 0x08
	}
	if end {
		b0 |= 0x04
	}
	if notRef {
		b0 |= 0x01
	}
	layer := tid<<5 | sid<<1
	if up {
		layer |= 0x10
	}
	if key && sid > 0 {
		layer |= 0x01 // D: predicted from the layer below
	}
	p := []byte{b0, 0x80 | byte(pic>>8), byte(pic), layer}
	if !key {
		p = append(p, 1<<1) // P_DIFF 1
	}
	if key && sid == 0 && begin {
		p[0] |= 0x02             // V: the scalability structure follows
		p = append(p, 2<<5|0x10) // N_S+1 = 3 layers, Y (sizes), no G
		for _, w := range []uint16{320, 640, 1280} {
			p = binary.BigEndian.AppendUint16(p, w)
			p = binary.BigEndian.AppendUint16(p, w*9/16)
		}
	}
	return append(p, make([]byte, 100)...)
}

// vp9Picture sends one picture of three spatial layers, two packets each.
// Temporal pattern T0 T2 T1 T2; key pictures predict upper layers from lower
// ones, delta pictures do not (L3T3_KEY).
func (f *svcFixture) vp9Picture(pic uint16, key bool, skip map[uint16]bool) {
	tid := [4]uint8{0, 2, 1, 2}[pic%4]
	ts := uint32(pic) * 3000
	for sid := uint8(0); sid < 3; sid++ {
		for part := 0; part < 2; part++ {
			seq := f.seq
			f.seq++
			if skip[seq] {
				continue
			}
			last := part == 1
			f.send(rtpPacket(seq, ts, last && sid == 2, vp9(pic, sid, tid, key, !last, last, tid < 2, !key && sid < 2), nil))
		}
	}
}

// check: continuous sequence numbers, one marker per picture on its last
// packet, every packet of a spatial layer above want absent, and NACKs map
// back to what was sent.
func (f *svcFixture) check(i int, from int) {
	f.t.Helper()
	w := f.ws[i]
	d := f.down(i)
	for k := from; k < len(w.hdrs); k++ {
		h := w.hdrs[k]
		if k > 0 && h.SequenceNumber != w.hdrs[k-1].SequenceNumber+1 {
			f.t.Fatalf("sub %d: sequence gap %d→%d at %d", i, w.hdrs[k-1].SequenceNumber, h.SequenceNumber, k)
		}
		lastOfPicture := k == len(w.hdrs)-1 || w.hdrs[k+1].Timestamp != h.Timestamp
		if h.Marker != lastOfPicture {
			f.t.Fatalf("sub %d: packet %d (seq %d) marker %v, last of its picture %v", i, k, h.SequenceNumber, h.Marker, lastOfPicture)
		}
		if in, _, ok := d.svc.source(h.SequenceNumber); !ok || in != w.orig[k] {
			f.t.Fatalf("sub %d: NACK of %d maps to %d (%v), sent %d", i, h.SequenceNumber, in, ok, w.orig[k])
		}
	}
}

// spatialOf reads the SID of what sub i was sent (by the original sequence
// number: 6 packets per picture, 2 per layer).
func spatialOf(orig uint16) int { return int((orig-1000)%6) / 2 }

func TestSVCVP9LayersPerSubscriber(t *testing.T) {
	f := newSVCFixture(t, codecVP9, 2)
	f.down(0).maxLayer.Store(0)
	f.down(1).maxLayer.Store(2)
	for pic := uint16(0); pic < 8; pic++ {
		f.vp9Picture(pic, pic == 0, nil)
	}
	if !f.pub.isSVC() {
		t.Fatal("three spatial layers not recognized")
	}
	f.check(0, 0)
	f.check(1, 0)
	for _, o := range f.ws[0].orig {
		if spatialOf(o) != 0 {
			t.Fatalf("low subscriber got spatial layer %d", spatialOf(o))
		}
	}
	if n := len(f.ws[0].orig); n != 16 {
		t.Fatalf("low subscriber got %d packets, want 16 (8 pictures × 2)", n)
	}
	// The high one: all of the key picture, then the top layer alone (its
	// delta frames predict from nothing below).
	if n := len(f.ws[1].orig); n != 6+7*2 {
		t.Fatalf("high subscriber got %d packets, want 20", n)
	}
	for _, o := range f.ws[1].orig[6:] {
		if spatialOf(o) != 2 {
			t.Fatalf("high subscriber got spatial layer %d of a delta picture", spatialOf(o))
		}
	}

	// Up: not before a keyframe, which is asked for once.
	src := f.pub.layer(0).src.(*nopSource)
	before := src.keyframes.Load()
	f.down(0).maxLayer.Store(2)
	n0 := len(f.ws[0].orig)
	for pic := uint16(8); pic < 12; pic++ {
		f.vp9Picture(pic, false, nil)
	}
	for _, o := range f.ws[0].orig[n0:] {
		if spatialOf(o) != 0 {
			t.Fatal("switched up without a keyframe")
		}
	}
	if asked := src.keyframes.Load() - before; asked != 1 {
		t.Fatalf("%d keyframe requests for one switch up", asked)
	}
	n0 = len(f.ws[0].orig)
	f.vp9Picture(12, true, nil)
	f.vp9Picture(13, false, nil)
	if got := f.ws[0].orig[n0:]; len(got) != 8 || spatialOf(got[len(got)-1]) != 2 {
		t.Fatalf("after the keyframe: %d packets, last of layer %d", len(got), spatialOf(got[len(got)-1]))
	}
	// Down: S1's own frames were not forwarded since the key picture (K-SVC),
	// so down waits for a keyframe too, forwarding S2 meanwhile.
	f.down(1).maxLayer.Store(1)
	n1 := len(f.ws[1].orig)
	before = src.keyframes.Load()
	f.pub.layer(0).lastPLI.Store(0) // outside the aggregation window of the last request
	f.vp9Picture(14, false, nil)
	if got := f.ws[1].orig[n1:]; len(got) != 2 || spatialOf(got[0]) != 2 {
		t.Fatalf("switch down before a keyframe: %v", got)
	}
	if src.keyframes.Load() == before {
		t.Fatal("no keyframe asked for the switch down")
	}
	n1 = len(f.ws[1].orig)
	f.vp9Picture(15, true, nil)
	f.vp9Picture(16, false, nil)
	if got := f.ws[1].orig[n1:]; len(got) != 4+2 || spatialOf(got[len(got)-1]) != 1 {
		t.Fatalf("switch down at the keyframe: %v", got)
	}
	// Temporal: T0 only, then back up at a switching-up point.
	f.down(1).allocT.Store(0) // what the allocation sets when the frame rate must drop
	n1 = len(f.ws[1].orig)
	for pic := uint16(17); pic < 22; pic++ { // T2 T1 T2 T0 T2
		f.vp9Picture(pic, false, nil)
	}
	if got := len(f.ws[1].orig) - n1; got != 2 {
		t.Fatalf("T0 only: %d packets in 5 pictures, want one picture", got)
	}
	f.down(1).allocT.Store(allTemporal)
	n1 = len(f.ws[1].orig)
	for pic := uint16(22); pic < 26; pic++ {
		f.vp9Picture(pic, false, nil)
	}
	// T1 T2 T0 T2: up only from the T0 picture (a switching-up point this
	// subscriber has), then the T2 after it.
	if got := f.ws[1].orig[n1:]; len(got) != 4 || (got[0]-1000)/6 != 24 {
		t.Fatalf("all temporal layers again: %v", got)
	}
	f.check(0, 0)
	f.check(1, 0)
}

// Chromium negotiates the dependency descriptor for every video section but
// sends it with AV1 only: a VP9 stream without it is read from its payload
// descriptor.
func TestSVCVP9DependencyDescriptorNegotiatedNotSent(t *testing.T) {
	f := newSVCFixture(t, codecVP9, 2)
	f.pub.layer(0).svc.ddExt = 5
	f.down(0).maxLayer.Store(0)
	f.down(1).maxLayer.Store(2)
	for pic := uint16(0); pic < 8; pic++ {
		f.vp9Picture(pic, pic == 0, nil)
	}
	if !f.pub.isSVC() {
		t.Fatal("three spatial layers not recognized")
	}
	f.check(0, 0)
	f.check(1, 0)
	for _, o := range f.ws[0].orig {
		if spatialOf(o) != 0 {
			t.Fatalf("low subscriber got spatial layer %d", spatialOf(o))
		}
	}
	if n := len(f.ws[0].orig); n != 16 {
		t.Fatalf("low subscriber got %d packets, want 16 (8 pictures × 2)", n)
	}
}

func TestSVCLatePacketsKeepTheirPlace(t *testing.T) {
	f := newSVCFixture(t, codecVP9, 1)
	f.down(0).maxLayer.Store(1)
	f.vp9Picture(0, true, nil)
	// Picture 1 loses its S1 first packet (seq 1008) and its S2 last (1011).
	f.vp9Picture(1, false, map[uint16]bool{1008: true, 1011: true})
	f.vp9Picture(2, false, nil)
	n := len(f.ws[0].hdrs)
	// Both arrive late: the S1 one fills its place, the S2 one is not wanted
	// and padding fills its place.
	f.send(rtpPacket(1008, 3000, false, vp9(1, 1, 2, false, true, false, false, true), nil))
	f.send(rtpPacket(1011, 3000, true, vp9(1, 2, 2, false, false, true, false, false), nil))
	w := f.ws[0]
	if len(w.hdrs) != n+2 || w.orig[n] != 1008 || w.orig[n+1] != padding {
		t.Fatalf("late packets: sent %v", w.orig[n:])
	}
	// Every place from the first packet on is taken exactly once.
	taken := map[uint16]bool{}
	for _, h := range w.hdrs {
		if taken[h.SequenceNumber] {
			t.Fatalf("sequence number %d sent twice", h.SequenceNumber)
		}
		taken[h.SequenceNumber] = true
	}
	for s := w.hdrs[0].SequenceNumber; s != w.hdrs[n-1].SequenceNumber; s++ {
		if !taken[s] {
			t.Fatalf("sequence number %d never sent", s)
		}
	}
	// Its number is the one left free between the packets around it.
	var prev, next uint16
	for k, o := range w.orig[:n] {
		if o == 1009 {
			next = w.hdrs[k].SequenceNumber
		}
		if o == 1001 {
			prev = w.hdrs[k].SequenceNumber
		}
	}
	if got := w.hdrs[n].SequenceNumber; got != next-1 || got <= prev {
		t.Fatalf("late packet numbered %d, between %d and %d", got, prev, next)
	}
	if in, _, ok := f.down(0).svc.source(w.hdrs[n].SequenceNumber); !ok || in != 1008 {
		t.Fatal("late packet not answerable on NACK")
	}
}

// The publisher's padding (bandwidth probes on the media SSRC) is not
// forwarded and leaves no gap.
func TestSVCPublisherPaddingRenumberedAway(t *testing.T) {
	f := newSVCFixture(t, codecVP9, 1)
	f.down(0).maxLayer.Store(2)
	f.vp9Picture(0, true, nil)
	pad := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 98, SequenceNumber: f.seq, Timestamp: 0, SSRC: 42, Padding: true, PaddingSize: 200}}
	raw, err := pad.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	f.seq++
	if !f.send(raw) {
		t.Fatal("padding refused")
	}
	f.vp9Picture(1, false, nil)
	for _, o := range f.ws[0].orig {
		if o == padding {
			t.Fatal("the publisher's padding was forwarded")
		}
	}
	f.check(0, 0)
}

func TestSVCMalformedDescriptorsRefused(t *testing.T) {
	f := newSVCFixture(t, codecVP9, 1)
	// L set but the layer byte missing.
	if f.send(rtpPacket(1, 0, false, []byte{0xa8 | 0x10, 0x81}[:2], nil)[:14]) {
		t.Fatal("a truncated VP9 descriptor was accepted")
	}
	if !strings.Contains(f.logs.String(), "malformed VP9 payload descriptor") {
		t.Fatalf("no log line: %q", f.logs.String())
	}
	a := newSVCFixture(t, codecAV1, 1)
	if a.send(rtpPacket(1, 0, false, []byte{0x08}, []byte{0x80, 0x00})) {
		t.Fatal("a two-byte dependency descriptor was accepted")
	}
	if a.send(rtpPacket(2, 0, false, []byte{0x00}, []byte{0x80, 0x00, 0x02})) {
		t.Fatal("a descriptor before any structure was accepted")
	}
	if !strings.Contains(a.logs.String(), "malformed dependency descriptor") {
		t.Fatalf("no log line: %q", a.logs.String())
	}
	if len(f.ws[0].hdrs)+len(a.ws[0].hdrs) != 0 {
		t.Fatal("malformed packets forwarded")
	}
}

// l2t2Key: decode targets S0T0 S0T1 S1T0 S1T1; upper layers predict from
// lower ones only on key pictures (templates 0 and 3).
func l2t2Key() *dd.Structure {
	S, R, D, N := uint8(dd.DTISwitch), uint8(dd.DTIRequired), uint8(dd.DTIDiscardable), uint8(dd.DTINotPresent)
	return dd.NewStructure(4,
		[]uint8{0, 0, 0, 1, 1, 1},
		[]uint8{0, 0, 1, 0, 0, 1},
		[][]uint8{{S, S, S, S}, {S, R, N, N}, {N, D, N, N}, {N, N, S, S}, {N, N, R, R}, {N, N, N, D}},
		[][]uint8{nil, {2}, {1}, {1}, {2}, {1}})
}

func (f *svcFixture) av1Picture(st *dd.Structure, frame uint16, key bool) {
	ts := uint32(frame) * 3000
	templates := [2]int{1, 4}
	if key {
		templates = [2]int{0, 3}
	} else if frame%2 == 1 {
		templates = [2]int{2, 5}
	}
	for s, tpl := range templates {
		agg := byte(0x10) // one OBU element
		if key && s == 0 {
			agg |= 0x08 // N: a new coded video sequence
		}
		desc := dd.Build(nil, dd.Frame{StartOfFrame: true, EndOfFrame: true, Template: tpl, FrameNumber: frame*2 + uint16(s), WithStructure: key && s == 0}, st)
		f.send(rtpPacket(f.seq, ts, s == 1, append([]byte{agg}, make([]byte, 80)...), desc))
		f.seq++
	}
}

func TestSVCAV1DependencyDescriptor(t *testing.T) {
	f := newSVCFixture(t, codecAV1, 2)
	st := l2t2Key()
	f.down(0).maxLayer.Store(0)
	f.down(1).maxLayer.Store(1)
	for fr := uint16(0); fr < 6; fr++ {
		f.av1Picture(st, fr, fr == 0)
	}
	f.check(0, 0)
	f.check(1, 0)
	if n := len(f.ws[0].hdrs); n != 6 {
		t.Fatalf("S0 subscriber got %d packets, want 6", n)
	}
	if n := len(f.ws[1].hdrs); n != 7 {
		t.Fatalf("S1 subscriber got %d packets, want the key picture's 2 and 5 S1 frames", n)
	}
	masks := func(w *svcWriter) (out []uint32) {
		var s *dd.Structure
		for _, raw := range w.dds {
			var d dd.Descriptor
			if err := dd.Parse(&d, raw, s); err != nil {
				t.Fatalf("forwarded descriptor does not parse: %v", err)
			}
			s = d.Structure
			out = append(out, d.ActiveTargets)
		}
		return out
	}
	for _, m := range masks(f.ws[0]) {
		if m != 0b0011 {
			t.Fatalf("S0 subscriber's active decode targets %04b, want S0T0|S0T1", m)
		}
	}
	for _, m := range masks(f.ws[1]) {
		if m != 0b1100 {
			t.Fatalf("S1 subscriber's active decode targets %04b, want S1T0|S1T1", m)
		}
	}
	// Up only at a switch indication (the key picture).
	f.down(0).maxLayer.Store(1)
	n := len(f.ws[0].hdrs)
	f.av1Picture(st, 6, false)
	if len(f.ws[0].hdrs) != n+1 {
		t.Fatal("switched up at a frame that is not a switch point")
	}
	f.av1Picture(st, 7, true)
	f.av1Picture(st, 8, false)
	if got := len(f.ws[0].hdrs) - n - 1; got != 3 {
		t.Fatalf("after the key picture: %d packets, want 2 + 1", got)
	}
	if m := masks(f.ws[0]); m[len(m)-1] != 0b1100 {
		t.Fatalf("after switching up: active targets %04b", m[len(m)-1])
	}
	f.check(0, 0)
}

func BenchmarkSVCForward(b *testing.B) {
	f := newSVCFixture(&testing.T{}, codecVP9, 1)
	f.down(0).maxLayer.Store(1)
	raws := make([][]byte, 0, 600)
	for pic := uint16(0); pic < 100; pic++ {
		tid := [4]uint8{0, 2, 1, 2}[pic%4]
		for sid := uint8(0); sid < 3; sid++ {
			for part := 0; part < 2; part++ {
				raws = append(raws, rtpPacket(uint16(len(raws)), uint32(pic)*3000, part == 1 && sid == 2, vp9(pic, sid, tid, pic == 0, part == 0, part == 1, true, pic != 0 && sid < 2), nil))
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.send(raws[i%len(raws)])
	}
}
