package sfu

import (
	"log/slog"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/bwe"
	"github.com/petrel-sfu/petrel/sfu/dd"
)

// l1t3 is Chromium's VP8 L1T3 pattern: TL0, TL2, TL1, TL2.
var l1t3 = [4]uint8{0, 2, 1, 2}

// A synthetic VP8 L1T3 stream: each picture is two packets with a 15-bit
// picture ID, TL0PICIDX and TID/Y, and carries its index in the payload so that
// a test can tell which picture a forwarded packet came from. Frames of a layer
// above TL0 reference the last TL0 frame and, unless they are layer-sync (Y)
// frames, the last frame of their own layer: a receiver missing that frame
// cannot decode them.
type vp8Stream struct {
	seq    uint16
	ts     uint32
	pic    uint16 // 15 bits
	tl0    uint8
	index  int
	tids   []uint8
	syncs  []bool
	pkt    Packet
	pub    *Publication
	at     int64
	lastOf [maxTemporal]int // index of the last frame of each layer, -1 none
}

func newVP8Stream(pub *Publication) *vp8Stream {
	return &vp8Stream{seq: 65500, pic: 0x7fe0, tl0: 250, pub: pub, at: now(), lastOf: [maxTemporal]int{-1, -1, -1, -1}}
}

// picture sends one picture of temporal layer tid.
func (s *vp8Stream) picture(t *testing.T, key bool, tid uint8, sync bool) {
	t.Helper()
	if tid == 0 && !key {
		s.tl0++
	}
	for k := 0; k < 2; k++ {
		payload := make([]byte, 200)
		payload[0] = 0x80 // X
		if k == 0 {
			payload[0] |= 0x10 // S, partition 0
		}
		payload[1] = 0x80 | 0x40 | 0x20 // I, L, T
		payload[2] = 0x80 | byte(s.pic>>8)
		payload[3] = byte(s.pic)
		payload[4] = s.tl0
		payload[5] = tid << 6
		if sync {
			payload[5] |= 0x20
		}
		payload[6] = 0x01 // inter frame
		if key {
			payload[6] = 0x00
		}
		payload[7], payload[8] = byte(s.index>>8), byte(s.index)
		p := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: s.seq, Timestamp: s.ts, SSRC: 42, Marker: k == 1}, Payload: payload}
		raw, _ := p.Marshal()
		if !s.pub.layer(0).parse(&s.pkt, raw) {
			t.Fatal("parse")
		}
		s.pkt.Arrival = s.at
		s.pub.fanout(&s.pkt)
		s.seq++
	}
	s.tids = append(s.tids, tid)
	s.syncs = append(s.syncs, sync)
	s.index++
	s.pic = (s.pic + 1) & 0x7fff
	s.ts += 3000
	s.at += int64(33 * time.Millisecond)
}

// cycles sends n L1T3 cycles; sync says which frames are layer-sync frames.
func (s *vp8Stream) cycles(t *testing.T, n int, sync func(tid uint8, cycle int) bool) {
	for c := 0; c < n; c++ {
		for _, tid := range l1t3 {
			s.picture(t, false, tid, tid > 0 && sync(tid, c))
		}
	}
}

// sent is one packet as a subscriber got it.
type sent struct {
	seq    uint16
	pic    uint16
	tl0    uint8
	tid    uint8
	index  int
	marker bool
}

type vp8Writer struct{ got []sent }

func (w *vp8Writer) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	if len(p) >= 9 {
		w.got = append(w.got, sent{seq: h.SequenceNumber, pic: uint16(p[2]&0x7f)<<8 | uint16(p[3]), tl0: p[4], tid: p[5] >> 6,
			index: int(p[7])<<8 | int(p[8]), marker: h.Marker})
	} else {
		w.got = append(w.got, sent{seq: h.SequenceNumber, index: -1})
	}
	return h.MarshalSize() + len(p) + int(h.PaddingSize), nil
}
func (w *vp8Writer) Write(b []byte) (int, error) { return len(b), nil }

func vp8Sub(t *testing.T) (*Publication, *DownTrack, *vp8Writer) {
	pub, _ := testPub(1, false)
	d := pub.Subscribers()[0]
	w := &vp8Writer{}
	d.writer = w
	return pub, d, w
}

// checkContinuous: sequence numbers and picture IDs as a receiver must see
// them: each packet follows the last, each picture follows the last, and
// TL0PICIDX rises by one at each TL0 picture.
func checkContinuous(t *testing.T, got []sent) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if b.seq != a.seq+1 {
			t.Fatalf("packet %d: sequence %d after %d", i, b.seq, a.seq)
		}
		if b.index == a.index {
			if b.pic != a.pic {
				t.Fatalf("packet %d: picture ID changed within a picture", i)
			}
			continue
		}
		if b.pic != (a.pic+1)&0x7fff {
			t.Fatalf("packet %d: picture ID %d after %d (pictures %d, %d)", i, b.pic, a.pic, a.index, b.index)
		}
		if want := a.tl0; b.tid == 0 && b.tl0 != want+1 || b.tid != 0 && b.tl0 != want {
			t.Fatalf("packet %d: TL0PICIDX %d after %d at TID %d", i, b.tl0, a.tl0, b.tid)
		}
	}
}

// pictures forwarded since packet from, by their stream index.
func pictures(got []sent, from int) []int {
	var out []int
	for i := from; i < len(got); i++ {
		if i == from || got[i].index != got[i-1].index {
			out = append(out, got[i].index)
		}
	}
	return out
}

func TestVP8TemporalDropAndSwitchUpAtSync(t *testing.T) {
	pub, d, w := vp8Sub(t)
	s := newVP8Stream(pub)
	s.picture(t, true, 0, false)
	s.cycles(t, 3, func(uint8, int) bool { return true })
	if n := len(pictures(w.got, 0)); n != 13 {
		t.Fatalf("all layers: %d pictures of 13 forwarded", n)
	}
	// The allocation grants TL0 only: a quarter of the pictures, every TL0.
	d.allocT.Store(0)
	from := len(w.got)
	s.cycles(t, 10, func(uint8, int) bool { return true })
	got := pictures(w.got, from)
	if len(got) != 10 {
		t.Fatalf("TL0 only: %d pictures of 40 forwarded, want 10", len(got))
	}
	for _, i := range got {
		if s.tids[i] != 0 {
			t.Fatalf("TL0 only: picture %d of TL%d forwarded", i, s.tids[i])
		}
	}
	// TL1 granted: not before a TL1 layer-sync frame (none in the first two
	// cycles), then half the pictures.
	d.allocT.Store(1)
	from = len(w.got)
	s.cycles(t, 2, func(uint8, int) bool { return false })
	if got := pictures(w.got, from); len(got) != 2 {
		t.Fatalf("up to TL1 without a sync frame: %d pictures forwarded, want the 2 TL0", len(got))
	}
	from = len(w.got)
	s.cycles(t, 8, func(tid uint8, c int) bool { return c == 0 && tid == 1 })
	got = pictures(w.got, from)
	if len(got) != 16 || s.tids[got[1]] != 1 || !s.syncs[got[1]] {
		t.Fatalf("TL1: %d pictures of 32, want 16 from the sync frame on", len(got))
	}
	// Everything again, from a TL2 sync frame on.
	d.allocT.Store(allTemporal)
	from = len(w.got)
	s.cycles(t, 4, func(tid uint8, c int) bool { return c == 1 && tid == 2 })
	if got := pictures(w.got, from); len(got) != 2+3*4 {
		t.Fatalf("all layers again: %d pictures of 16 forwarded, want 14 (TL2 from the sync frame in cycle 1 on)", len(got))
	}
	checkContinuous(t, w.got)
	if d.CurrentTemporal() != 2 {
		t.Fatalf("current temporal layer %d, want 2", d.CurrentTemporal())
	}
}

// Many switches at random, over picture ID and sequence wrap: the receiver's
// sequence numbers and picture IDs never skip, and every frame it gets can be
// decoded from frames it got.
func TestVP8TemporalManySwitchesStayDecodable(t *testing.T) {
	pub, d, w := vp8Sub(t)
	s := newVP8Stream(pub)
	rng := rand.New(rand.NewSource(4))
	s.picture(t, true, 0, false)
	forwarded := 1
	for round := 0; round < 200; round++ {
		target := []int32{0, 1, allTemporal}[rng.Intn(3)]
		d.allocT.Store(target)
		from := len(w.got)
		s.cycles(t, 1+rng.Intn(3), func(uint8, int) bool { return rng.Intn(3) == 0 })
		for _, i := range pictures(w.got, from) {
			if target != allTemporal && int32(s.tids[i]) > target {
				t.Fatalf("round %d: TL%d picture forwarded at target %d", round, s.tids[i], target)
			}
		}
		forwarded += len(pictures(w.got, from))
	}
	checkContinuous(t, w.got)
	// Decodability as in the stream's model: a frame needs the last TL0 frame
	// and, unless it is a sync frame, the last frame of each layer from TL1 up
	// to its own.
	have := map[int]bool{}
	lastOf := [maxTemporal]int{-1, -1, -1, -1}
	forwardedAt := map[int]bool{}
	for _, x := range w.got {
		forwardedAt[x.index] = true
	}
	for i, tid := range s.tids {
		if forwardedAt[i] {
			ok := i == 0 || have[lastOf[0]]
			for k := 1; k <= int(tid) && ok && !s.syncs[i]; k++ {
				ok = lastOf[k] == -1 || have[lastOf[k]]
			}
			if !ok {
				t.Fatalf("picture %d (TL%d, sync %v) forwarded without its references", i, tid, s.syncs[i])
			}
			have[i] = true
		}
		lastOf[tid] = i
	}
	if forwarded < len(s.tids)/4 || forwarded == len(s.tids) {
		t.Fatalf("%d of %d pictures forwarded", forwarded, len(s.tids))
	}
}

// A NACK after dropped pictures is answered with the packet as it was sent:
// same sequence number, same rewritten picture ID.
func TestVP8TemporalRetransmitMatchesOriginal(t *testing.T) {
	pub, d, w := vp8Sub(t)
	s := newVP8Stream(pub)
	s.picture(t, true, 0, false)
	d.allocT.Store(0)
	s.cycles(t, 5, func(uint8, int) bool { return true })
	orig := w.got[len(w.got)-3]
	buf := make([]byte, maxPacket)
	var hdr rtp.Header
	n := len(w.got)
	d.retransmit(orig.seq, buf, &hdr)
	if len(w.got) != n+1 {
		t.Fatal("no retransmission")
	}
	if re := w.got[n]; re != orig {
		t.Fatalf("retransmission %+v differs from the original %+v", re, orig)
	}
}

// Bytes are counted per temporal layer, and the allocation lowers the frame
// rate of the lowest layer when its full rate does not fit, and grants the
// layers above it at their full frame rate only.
func TestAllocationLowersFrameRate(t *testing.T) {
	pub, _, _ := vp8Sub(t)
	s := newVP8Stream(pub)
	l := pub.layer(0)
	s.picture(t, true, 0, false)
	s.cycles(t, 1, func(uint8, int) bool { return true })
	l.trates.measure(time.Second) // the first reading
	s.cycles(t, 30, func(uint8, int) bool { return true })
	l.trates.measure(time.Second)
	tl0, tl1, tl2 := l.trates.bps[0].Load(), l.trates.bps[1].Load(), l.trates.bps[2].Load()
	// Per cycle one TL0, one TL1 and two TL2 pictures of equal size.
	if tl0 == 0 || tl1 == 0 || tl2 < tl1*19/10 || tl2 > tl1*21/10 {
		t.Fatalf("per-layer rates %d %d %d: want TL2 twice TL1", tl0, tl1, tl2)
	}
	if l.trates.layers() != 3 || pub.temporalLayers(0) != 3 {
		t.Fatalf("%d temporal layers seen, want 3", l.trates.layers())
	}

	room := &Room{participants: map[string]*Participant{}, lastSpoke: map[string]time.Time{}, speakers: NewSpeakers()}
	sub := &Participant{sid: "PA_sub", room: room, subs: map[string]*DownTrack{}}
	room.participants[sub.sid] = sub
	op := &Participant{sid: "PA_a", room: room, joinedAt: time.Now()}
	room.participants[op.sid] = op
	sim := &Publication{sid: "TR_a", owner: op, kind: Video, ck: codecVP8, cacheSize: 64}
	empty := []*DownTrack{}
	sim.downs.Store(&empty)
	for i, rate := range []int64{200_000, 600_000, 1_800_000} {
		l := &layer{index: int8(i), pub: sim, src: &nopSource{}, cache: NewPacketCache(64)}
		l.bps.Store(rate)
		// Chromium's L1T3 split, roughly: TL0 half the bytes, TL1 and TL2 a quarter each.
		for tid, share := range []int64{50, 25, 25} {
			l.trates.bps[tid].Store(rate * share / 100)
		}
		l.lastRecv.Store(now())
		sim.layers[i].Store(l)
	}
	d := newDownTrack(sim, sub)
	d.twccID = 5
	d.bound.Store(true)
	sub.subs[sim.sid] = d
	for _, c := range []struct {
		estimate    int
		layer, temp int32
	}{
		{3_000_000, 2, allTemporal},
		{1_000_000, 1, allTemporal}, // the middle layer at full rate (600k): above the lowest, spatial layers only at full rate
		{400_000, 0, allTemporal},   // the middle one's 600k is over the hold margin: the low layer's full 200k
		{160_000, 0, 1},             // the low layer's full 200k does not fit: half its frame rate (150k)
		{90_000, 0, 0},              // not even that: TL0, never nothing
		{3_000_000, 2, allTemporal},
	} {
		sub.bwe = bwe.New(c.estimate, 0, 0)
		sub.allocate()
		if l, tl := d.allocLayer.Load(), d.allocT.Load(); l != c.layer || tl != c.temp {
			t.Fatalf("estimate %d: layer %d TL%d, want %d TL%d", c.estimate, l, tl, c.layer, c.temp)
		}
	}

	// A switch up is priced at the layer's recent peak: the middle layer
	// measured at 300k in a dip of its publisher, after 600k, is not granted
	// on 500k; on 700k it is.
	for _, c := range []struct {
		estimate int
		layer    int32
	}{{400_000, 0}, {500_000, 0}, {700_000, 1}} {
		if c.estimate == 500_000 {
			mid := sim.layer(1)
			mid.peak.Store(600_000)
			mid.bps.Store(300_000)
		}
		sub.bwe = bwe.New(c.estimate, 0, 0)
		sub.allocate()
		if l := d.allocLayer.Load(); l != c.layer {
			t.Fatalf("estimate %d after a dip: layer %d, want %d", c.estimate, l, c.layer)
		}
	}

	// A TL0 share measured near zero does not price a frame rate at 1 bit/s:
	// layers up to TL0 carry at least their quarter of the frames.
	top := sim.layer(2)
	top.trates.bps[0].Store(0)
	if r, _ := sim.layerRateT(2, 0); r < 1_800_000/4 {
		t.Fatalf("TL0 of the top layer priced at %d bit/s with its share measured at 0, want at least a quarter of 1.8M", r)
	}
}

// Chromium negotiates the dependency descriptor for VP8 and then sends a bare
// payload descriptor (no picture ID, no TID): the temporal layers come from
// the descriptor, whose L1T3 structure (libwebrtc's) makes TL0 frames switch
// points for every decode target and TL1 frames for the top one.
func TestVP8TemporalFromDependencyDescriptor(t *testing.T) {
	S, D, N := uint8(dd.DTISwitch), uint8(dd.DTIDiscardable), uint8(dd.DTINotPresent)
	st := dd.NewStructure(3,
		[]uint8{0, 0, 0, 0, 0},
		[]uint8{0, 0, 1, 2, 2},
		[][]uint8{{S, S, S}, {S, S, S}, {N, D, S}, {N, N, D}, {N, N, D}},
		[][]uint8{nil, {4}, {2}, {1}, {1}})
	pub, d, w := vp8Sub(t)
	pub.owner.log = slog.New(slog.DiscardHandler)
	pub.layer(0).svc.ddExt = 5
	var pkt Packet
	seq, frame := uint16(100), 0
	type pic struct {
		tid  uint8
		refs []int
	}
	var pics []pic
	send := func(tpl int) {
		key := tpl == 0
		for k := 0; k < 2; k++ {
			payload := make([]byte, 100)
			if k == 0 {
				payload[0] = 0x10 // S, no X
			}
			payload[1] = 0x01
			if key {
				payload[1] = 0x00
			}
			payload[7], payload[8] = byte(frame>>8), byte(frame)
			p := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: uint32(frame) * 3000, SSRC: 42, Marker: k == 1}, Payload: payload}
			desc := dd.Build(nil, dd.Frame{StartOfFrame: k == 0, EndOfFrame: k == 1, Template: tpl, FrameNumber: uint16(frame), WithStructure: key}, st)
			_ = p.Header.SetExtension(5, desc)
			raw, _ := p.Marshal()
			if !pub.layer(0).parse(&pkt, raw) {
				t.Fatal("parse")
			}
			pkt.Arrival = now()
			pub.fanout(&pkt)
			seq++
		}
		var refs []int
		for _, f := range st.Fdiffs[tpl] {
			refs = append(refs, frame-int(f))
		}
		pics = append(pics, pic{tid: st.Temporal[tpl], refs: refs})
		frame++
	}
	cycle := func(n int) {
		for c := 0; c < n; c++ {
			for _, tpl := range []int{1, 3, 2, 4} {
				send(tpl)
			}
		}
	}
	// vp8Writer reads the frame's index from payload bytes 7-8.
	send(0)
	send(3)
	send(2)
	send(4)
	cycle(2)
	if n := len(w.got); n != 12*2 {
		t.Fatalf("all layers: %d packets of 24", n)
	}
	d.allocT.Store(0)
	from := len(w.got)
	cycle(5)
	if n := len(w.got) - from; n != 5*2 {
		t.Fatalf("TL0 only: %d packets, want 10 (a quarter)", n)
	}
	d.allocT.Store(1)
	from = len(w.got)
	cycle(3)
	if n := len(w.got) - from; n != 3*2*2 {
		t.Fatalf("up to TL1: %d packets, want 12 (half)", n)
	}
	d.allocT.Store(allTemporal)
	from = len(w.got)
	cycle(3)
	if n := len(w.got) - from; n != 3*4*2 {
		t.Fatalf("all again: %d packets, want 24", n)
	}
	for i := 1; i < len(w.got); i++ {
		if w.got[i].seq != w.got[i-1].seq+1 {
			t.Fatalf("packet %d: sequence %d after %d", i, w.got[i].seq, w.got[i-1].seq)
		}
	}
	// A malformed descriptor does not cost the packet: VP8 needs none.
	n := len(w.got)
	bad := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: uint32(frame) * 3000, SSRC: 42}, Payload: []byte{0x10, 0x01, 0, 0, 0, 0, 0, 0, 0}}
	_ = bad.Header.SetExtension(5, []byte{0xff})
	raw, _ := bad.Marshal()
	if !pub.layer(0).parse(&pkt, raw) || pkt.VP8.hasTID {
		t.Fatal("a packet with a malformed descriptor was rejected or given a temporal layer")
	}
	pub.fanout(&pkt)
	if len(w.got) != n+1 {
		t.Fatal("a packet with a malformed descriptor was not forwarded")
	}
	// Every frame forwarded has its references (the structure's frame diffs).
	got := map[int]bool{}
	for _, x := range w.got {
		got[x.index] = true
	}
	for i, p := range pics {
		for _, r := range p.refs {
			if got[i] && !got[r] {
				t.Fatalf("frame %d (TL%d) forwarded without frame %d it references", i, p.tid, r)
			}
		}
	}
}

// Hostile payload descriptors in a stream with temporal layers: no panic, and
// what goes out stays contiguous.
func FuzzVP8Temporal(f *testing.F) {
	f.Add([]byte{0x90, 0xe0, 0x80, 0x01, 0x05, 0x60, 0x01}, []byte{0x80, 0x20}, uint8(0))
	f.Add([]byte{0x80, 0x80, 0xff}, []byte{0x90, 0xff, 0x7f, 0xff, 0x01, 0xc0}, uint8(1))
	f.Fuzz(func(t *testing.T, a, b []byte, target uint8) {
		if len(a) > 1200 || len(b) > 1200 {
			return // not cached: lost at the door, a gap like any loss
		}
		pub, d, w := vp8Sub(t)
		s := newVP8Stream(pub)
		s.picture(t, true, 0, false)
		d.allocT.Store(int32(target % 8))
		var pkt Packet
		for i := 0; i < 8; i++ {
			payload := a
			if i%3 == 1 {
				payload = b
			}
			p := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: s.seq, Timestamp: s.ts + uint32(i/2)*3000, SSRC: 42}, Payload: payload}
			raw, err := p.Marshal()
			if err != nil {
				return
			}
			if !pub.layer(0).parse(&pkt, raw) {
				t.Fatal("a packet of valid RTP was rejected")
			}
			pkt.Arrival = now()
			pub.fanout(&pkt)
			s.seq++
			if i == 4 {
				d.allocT.Store(allTemporal)
			}
		}
		for i := 1; i < len(w.got); i++ {
			if w.got[i].seq != w.got[i-1].seq+1 {
				t.Fatalf("sequence %d after %d", w.got[i].seq, w.got[i-1].seq)
			}
		}
	})
}

// chromeVP8 is a VP8 L1T3 stream as Chromium (M156) sends it with the
// dependency descriptor: its structure's templates as read from a real
// stream, two packets a frame, bare payload descriptors. Each eight-frame
// cycle is TL0 "SSS", TL2, TL1 "-SS", TL2, TL0 "SRR", TL2, TL1 "-DS", TL2;
// the second TL1 frame references the first, so it is a switch point for TL2
// only to a subscriber that got TL1.
type chromeVP8 struct {
	st    *dd.Structure
	pub   *Publication
	pkt   Packet
	seq   uint16
	frame int
	at    int64
	tids  []uint8
	refs  [][]int
	// late holds the second packets that send held back (deliverLate).
	late [][]byte
}

var chromeCycle = [8]int{1, 5, 3, 5, 2, 6, 4, 6}

func newChromeVP8(t *testing.T) (*chromeVP8, *DownTrack, *vp8Writer) {
	S, R, D, N := uint8(dd.DTISwitch), uint8(dd.DTIRequired), uint8(dd.DTIDiscardable), uint8(dd.DTINotPresent)
	st := dd.NewStructure(3,
		[]uint8{0, 0, 0, 0, 0, 0, 0},
		[]uint8{0, 0, 0, 1, 1, 2, 2},
		[][]uint8{{S, S, S}, {S, S, S}, {S, R, R}, {N, S, S}, {N, D, S}, {N, N, D}, {N, N, D}},
		[][]uint8{nil, {4}, {4}, {2}, {4, 2}, {1}, {3, 1}})
	pub, d, w := vp8Sub(t)
	pub.owner.log = slog.New(slog.DiscardHandler)
	pub.layer(0).svc.ddExt = 5
	return &chromeVP8{st: st, pub: pub, seq: 1000, at: now()}, d, w
}

func (s *chromeVP8) packet(t *testing.T, tpl, k int) []byte {
	t.Helper()
	payload := make([]byte, 100)
	if k == 0 {
		payload[0] = 0x10 // S, no X
	}
	payload[1] = 0x01
	if tpl == 0 {
		payload[1] = 0x00
	}
	payload[7], payload[8] = byte(s.frame>>8), byte(s.frame)
	p := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: s.seq + uint16(k), Timestamp: uint32(s.frame) * 4500, SSRC: 42, Marker: k == 1}, Payload: payload}
	desc := dd.Build(nil, dd.Frame{StartOfFrame: k == 0, EndOfFrame: k == 1, Template: tpl, FrameNumber: uint16(s.frame), WithStructure: tpl == 0}, s.st)
	_ = p.Header.SetExtension(5, desc)
	raw, _ := p.Marshal()
	return raw
}

func (s *chromeVP8) deliver(t *testing.T, raw []byte, at int64) {
	t.Helper()
	if !s.pub.layer(0).parse(&s.pkt, raw) {
		t.Fatal("parse")
	}
	s.pkt.Arrival = at
	s.pub.fanout(&s.pkt)
}

// send sends one frame of template tpl; with late, its second packet is held
// back for deliverLate.
func (s *chromeVP8) send(t *testing.T, tpl int, late bool) {
	t.Helper()
	s.deliver(t, s.packet(t, tpl, 0), s.at)
	if late {
		s.late = append(s.late, s.packet(t, tpl, 1))
	} else {
		s.deliver(t, s.packet(t, tpl, 1), s.at)
	}
	var refs []int
	for _, f := range s.st.Fdiffs[tpl] {
		refs = append(refs, s.frame-int(f))
	}
	s.tids = append(s.tids, s.st.Temporal[tpl])
	s.refs = append(s.refs, refs)
	s.seq += 2
	s.frame++
	s.at += int64(50 * time.Millisecond)
}

// cycles sends n whole cycles of Chromium's eight L1T3 frames.
func (s *chromeVP8) cycles(t *testing.T, n int) {
	t.Helper()
	for c := 0; c < n; c++ {
		for _, tpl := range chromeCycle {
			s.send(t, tpl, false)
		}
	}
}

func (s *chromeVP8) deliverLate(t *testing.T) {
	t.Helper()
	for _, raw := range s.late {
		s.deliver(t, raw, s.at)
	}
	s.late = nil
}

// decodable checks what the subscriber got as its decoder would: contiguous
// sequence numbers, whole frames, and every frame's references among them.
func (s *chromeVP8) decodable(t *testing.T, got []sent) (frames int) {
	t.Helper()
	// In sequence order, as the receiver puts late packets back in place.
	got = append([]sent(nil), got...)
	sort.SliceStable(got, func(i, j int) bool { return int16(got[i].seq-got[j].seq) < 0 })
	packets := map[int]int{}
	for i, x := range got {
		if i > 0 && x.seq != got[i-1].seq+1 {
			t.Fatalf("packet %d: sequence %d after %d", i, x.seq, got[i-1].seq)
		}
		if x.index >= 0 {
			packets[x.index]++
		}
	}
	for f, n := range packets {
		if n != 2 {
			t.Fatalf("frame %d (TL%d): %d of its 2 packets forwarded", f, s.tids[f], n)
		}
		for _, r := range s.refs[f] {
			if packets[r] == 0 {
				t.Fatalf("frame %d (TL%d) forwarded without frame %d (TL%d) it references", f, s.tids[f], r, s.tids[r])
			}
		}
	}
	return len(packets)
}

// Up from TL0 with the allocation rising just before a "-DS" TL1 frame: that
// frame references the TL1 frame before it, which was dropped, so the switch
// waits for the next frame that decodes from TL0 ("SSS" or "-SS"). (Switching
// there cost a Chromium viewer a decoder error and a 3 s freeze until the
// keyframe it asked for.)
func TestVP8TemporalDDSwitchUpNotAtUndecodableFrame(t *testing.T) {
	for _, target := range []int32{1, allTemporal} {
		s, d, w := newChromeVP8(t)
		s.send(t, 0, false)
		for _, tpl := range chromeCycle[1:] {
			s.send(t, tpl, false)
		}
		d.allocT.Store(0)
		s.cycles(t, 3)
		// TL0 "SSS", TL2, TL1 "-SS", TL2, TL0 "SRR", TL2 at TL0; then more.
		for _, tpl := range chromeCycle[:6] {
			s.send(t, tpl, false)
		}
		d.allocT.Store(target)
		from := len(w.got)
		s.send(t, 4, false) // "-DS": not decodable from TL0
		s.send(t, 6, false)
		if len(w.got) != from {
			t.Fatalf("target %d: the frames after the rise to it were forwarded before a frame that decodes from TL0", target)
		}
		s.cycles(t, 2)
		want := 8
		if target == 1 {
			want = 4
		}
		if n := len(pictures(w.got, from)); n != 2*want {
			t.Fatalf("target %d: %d frames of 16 forwarded after the switch, want %d", target, n, 2*want)
		}
		s.decodable(t, w.got)
	}
}

// Random moves of the allocation between TL0, TL1 and everything: every frame
// forwarded decodes, and no keyframe is asked for (switch points come every
// few frames).
func TestVP8TemporalDDManySwitchesStayDecodable(t *testing.T) {
	s, d, w := newChromeVP8(t)
	rng := rand.New(rand.NewSource(7))
	s.send(t, 0, false)
	for round := 0; round < 300; round++ {
		d.allocT.Store([]int32{0, 1, allTemporal}[rng.Intn(3)])
		for n := 1 + rng.Intn(10); n > 0; n-- {
			s.send(t, chromeCycle[s.frame%8], false)
		}
	}
	if n := s.decodable(t, w.got); n < s.frame/4 || n == s.frame {
		t.Fatalf("%d of %d frames forwarded", n, s.frame)
	}
	if k := s.pub.layer(0).src.(*nopSource).keyframes.Load(); k != 0 {
		t.Fatalf("%d keyframes asked for", k)
	}
}

// Back to the full frame rate: once the top layer is forwarded nothing is
// left to wait for, and no keyframe is asked for however long it runs (the
// target, every layer, is above the stream's top layer).
func TestVP8TemporalDDAllLayersAsksNoKeyframe(t *testing.T) {
	s, d, w := newChromeVP8(t)
	s.send(t, 0, false)
	for _, tpl := range chromeCycle[1:] {
		s.send(t, tpl, false)
	}
	d.allocT.Store(1)
	s.cycles(t, 2)
	d.allocT.Store(allTemporal)
	from := len(w.got)
	s.cycles(t, 20) // 8 s
	if n := len(pictures(w.got, from)); n < 20*8-2 {
		t.Fatalf("%d frames of %d forwarded at every layer", n, 20*8)
	}
	if k := s.pub.layer(0).src.(*nopSource).keyframes.Load(); k != 0 {
		t.Fatalf("%d keyframes asked for with every layer forwarded", k)
	}
	s.decodable(t, w.got)
}

// A packet of a frame arriving after the next frame has begun (reordered, or
// the publisher's retransmission) goes with its frame's decision, even when
// the allocation moved in between: the subscriber gets whole frames.
func TestVP8TemporalDDLatePacketFollowsItsFrame(t *testing.T) {
	s, d, w := newChromeVP8(t)
	next := func(late bool) { s.send(t, chromeCycle[s.frame%8], late) }
	s.send(t, 0, false)
	for s.frame < 9 {
		next(false)
	}
	next(true) // frame 9, TL2, kept: its second packet comes late
	d.allocT.Store(0)
	next(false) // frame 10, TL1: dropped
	s.deliverLate(t)
	for s.frame < 23 {
		next(false)
	}
	next(true) // frame 23, TL2, dropped: its second packet comes late
	d.allocT.Store(allTemporal)
	next(false) // frame 24, TL0 "SSS": every layer from here
	s.deliverLate(t)
	for s.frame < 40 {
		next(false)
	}
	// Frames 0-9, the TL0 frames 12, 16 and 20, frames 24-39.
	if n := s.decodable(t, w.got); n != 10+3+16 {
		t.Fatalf("%d frames forwarded, want 29", n)
	}
}
