package sfu

import (
	"io"
	"testing"
	"time"

	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/protocol"
)

type recWriter struct {
	hdrs []rtp.Header
	pics []uint16
	keep bool
	n    int
}

func (w *recWriter) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	w.n++
	if w.keep {
		w.hdrs = append(w.hdrs, *h)
		if d := parseVP8(p); d.picOff != 0 {
			w.pics = append(w.pics, d.picID)
		}
	}
	return h.MarshalSize() + len(p) + int(h.PaddingSize), nil // as Pion: bytes written
}
func (w *recWriter) Write(b []byte) (int, error) { return len(b), nil }

// testPub is a video publication with the given simulcast layers and n bound
// subscribers whose writers record what they are given.
func testPub(n int, keep bool, layers ...int8) (*Publication, []*recWriter) {
	pub := &Publication{sid: "TR_x", kind: Video, ck: codecVP8, cacheSize: 1024, owner: &Participant{sid: "PA_x"}}
	empty := []*DownTrack{}
	pub.downs.Store(&empty)
	if len(layers) == 0 {
		layers = []int8{0}
	}
	for _, i := range layers {
		l := &layer{index: i, pub: pub, src: &nopSource{}, cache: NewPacketCache(1024)}
		l.lastRecv.Store(now())
		pub.layers[i].Store(l)
	}
	var ws []*recWriter
	for i := 0; i < n; i++ {
		d := newDownTrack(pub, nil)
		w := &recWriter{keep: keep}
		d.writer, d.ssrc, d.pt, d.clock = w, uint32(1000+i), 100, 90000
		d.bound.Store(true)
		pub.addDown(d)
		ws = append(ws, w)
	}
	return pub, ws
}

func vp8Packet(seq uint16, ts uint32, key bool, at int64) []byte {
	payload := make([]byte, 1000)
	payload[0] = 0x10 // S=1, PID=0
	payload[1] = 0x01 // inter frame
	if key {
		payload[1] = 0x00
	}
	p := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: ts, SSRC: 42}, Payload: payload}
	_ = p.Header.SetExtension(3, []byte{1, 2})
	b, _ := p.Marshal()
	return b
}

func TestDownTrackStartsAtKeyframeAndStaysContinuous(t *testing.T) {
	pub, ws := testPub(1, true)
	d := pub.Subscribers()[0]
	var pkt Packet
	feed := func(seq uint16, ts uint32, key bool, at int64) {
		if !pub.layer(0).parse(&pkt, vp8Packet(seq, ts, key, at)) {
			t.Fatal("parse")
		}
		pkt.Arrival = at
		pub.fanout(&pkt)
	}
	ms := int64(1e6)
	feed(98, 9000, false, 0) // before any keyframe: not forwarded
	feed(99, 9000, false, 0)
	for i := uint16(0); i < 10; i++ {
		feed(100+i, 12000+uint32(i)*3000, i == 0, int64(i)*33*ms)
	}
	if len(ws[0].hdrs) != 10 || ws[0].hdrs[0].SequenceNumber != 100 {
		t.Fatalf("forwarded %d packets, first seq %d", len(ws[0].hdrs), ws[0].hdrs[0].SequenceNumber)
	}
	// A pause (mute) then the publisher's numbering jumps: the subscriber's does not.
	d.resync()
	feed(500, 900000, false, 400*ms) // waits for a keyframe
	feed(501, 903000, true, 500*ms)
	feed(502, 906000, false, 533*ms)
	h := ws[0].hdrs
	if len(h) != 12 {
		t.Fatalf("forwarded %d packets after resync", len(h))
	}
	for i := 1; i < len(h); i++ {
		if h[i].SequenceNumber != h[i-1].SequenceNumber+1 {
			t.Fatalf("sequence gap %d→%d", h[i-1].SequenceNumber, h[i].SequenceNumber)
		}
		if int32(h[i].Timestamp-h[i-1].Timestamp) <= 0 {
			t.Fatalf("timestamp not increasing %d→%d", h[i-1].Timestamp, h[i].Timestamp)
		}
		if h[i].SSRC != 1000 || h[i].PayloadType != 100 || len(h[i].Extensions) != 0 {
			t.Fatalf("header not rewritten: %+v", h[i])
		}
	}
	// Elapsed time across the pause is kept (500−297 ms ≈ 18270 ticks).
	if gap := h[10].Timestamp - h[9].Timestamp; gap < 15000 || gap > 21000 {
		t.Fatalf("timestamp gap across the pause %d", gap)
	}
	// A late packet from before the stream start is not forwarded.
	feed(97, 6000, false, 600*ms)
	if len(ws[0].hdrs) != 12 {
		t.Fatal("packet from before the start forwarded")
	}
}

// BenchmarkFanout50 is the per-packet cost of handing one packet to 50
// subscribers, without the SRTP and socket work behind each writer.
func BenchmarkFanout50(b *testing.B) {
	pub, _ := testPub(50, false)
	raw := vp8Packet(1, 1, true, 0)
	var pkt Packet
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		raw[2], raw[3] = byte(i>>8), byte(i)
		pub.layer(0).parse(&pkt, raw)
		pub.fanout(&pkt)
	}
}

// vp8Simulcast makes a VP8 packet with a 15-bit picture ID and TL0PICIDX, as
// browsers send with simulcast.
func vp8Simulcast(seq uint16, ts uint32, pic uint16, tl0 uint8, key bool) []byte {
	payload := make([]byte, 600)
	payload[0] = 0x90 // X=1, S=1
	payload[1] = 0xc0 // I=1, L=1
	payload[2] = 0x80 | byte(pic>>8)
	payload[3] = byte(pic)
	payload[4] = tl0
	payload[5] = 0x01
	if key {
		payload[5] = 0x00
	}
	b, _ := (&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: ts, SSRC: 7}, Payload: payload}).Marshal()
	return b
}

func TestSimulcastSwitchKeepsOneContinuousStream(t *testing.T) {
	pub, ws := testPub(1, true, 0, 1)
	d := pub.Subscribers()[0]
	if got := d.target.Load(); got != 1 {
		t.Fatalf("initial target %d, want the highest layer 1", got)
	}
	ms := int64(1e6)
	var pkts [2]Packet
	// Layers have unrelated numbering, as separate SSRCs do.
	seq := [2]uint16{100, 40000}
	ts := [2]uint32{1000, 7_000_000}
	pic := [2]uint16{300, 9000}
	tl0 := [2]uint8{10, 200}
	step := func(frame int, keyOn int8) {
		for i := int8(0); i < 2; i++ {
			raw := vp8Simulcast(seq[i], ts[i], pic[i], tl0[i], keyOn == i || frame == 0)
			if !pub.layer(i).parse(&pkts[i], raw) {
				t.Fatal("parse")
			}
			pkts[i].Arrival = int64(frame) * 33 * ms
			pub.fanout(&pkts[i])
			seq[i]++
			ts[i] += 3000
			pic[i]++
			tl0[i]++
		}
	}
	for f := 0; f < 10; f++ {
		step(f, -1)
	}
	if d.CurrentLayer() != 1 || len(ws[0].hdrs) != 10 {
		t.Fatalf("layer %d, %d packets", d.CurrentLayer(), len(ws[0].hdrs))
	}
	d.SetMaxLayer(0)
	for f := 10; f < 15; f++ {
		step(f, -1) // no keyframe on layer 0 yet: stay on layer 1
	}
	if d.CurrentLayer() != 1 {
		t.Fatal("switched without a keyframe")
	}
	step(15, 0)
	for f := 16; f < 20; f++ {
		step(f, -1)
	}
	if d.CurrentLayer() != 0 {
		t.Fatalf("did not switch down at the keyframe (layer %d)", d.CurrentLayer())
	}
	d.SetMaxLayer(2)
	step(20, 1)
	step(21, -1)
	if d.CurrentLayer() != 1 {
		t.Fatal("did not switch back up")
	}
	h := ws[0].hdrs
	// One packet per frame, plus at frame 20 both the old layer's frame and the
	// new layer's keyframe (captured at the same instant).
	if len(h) != 23 {
		t.Fatalf("%d packets forwarded, want 23", len(h))
	}
	for i := 1; i < len(h); i++ {
		if h[i].SequenceNumber != h[i-1].SequenceNumber+1 {
			t.Fatalf("packet %d: sequence %d after %d", i, h[i].SequenceNumber, h[i-1].SequenceNumber)
		}
		dt := h[i].Timestamp - h[i-1].Timestamp
		if i == 21 && dt >= 1 && dt < 100 {
			continue // same capture instant, other layer
		}
		if dt < 2000 || dt > 4000 {
			t.Fatalf("packet %d: timestamp step %d", i, dt)
		}
	}
	// Picture IDs continue across switches as the decoder expects.
	for i := 1; i < len(ws[0].pics); i++ {
		if ws[0].pics[i] != ws[0].pics[i-1]+1 {
			t.Fatalf("picture id %d after %d", ws[0].pics[i], ws[0].pics[i-1])
		}
	}
	if d.switches.Load() != 2 {
		t.Fatalf("%d switches, want 2", d.switches.Load())
	}
	// NACKs map back to the layer and numbering each packet came from.
	for i, want := range map[int]int8{3: 1, 16: 0, 22: 1} {
		seg, ok := d.source(h[i].SequenceNumber)
		if !ok || seg.layer != want {
			t.Fatalf("out seq %d maps to layer %d (%v), want %d", h[i].SequenceNumber, seg.layer, ok, want)
		}
	}
}

func TestVP8PictureIDRewrite(t *testing.T) {
	raw := vp8Simulcast(1, 1, 0x7ffe, 250, true)
	var p rtp.Packet
	_ = p.Unmarshal(raw)
	d := parseVP8(p.Payload)
	if d.picOff != 2 || !d.pic15 || d.picID != 0x7ffe || d.tl0Off != 4 || d.tl0 != 250 {
		t.Fatalf("%+v", d)
	}
	buf := append([]byte(nil), p.Payload...)
	d.rewrite(buf, 3, 10) // wraps both fields
	got := parseVP8(buf)
	if got.picID != 1 || got.tl0 != 4 {
		t.Fatalf("after rewrite pic %d tl0 %d", got.picID, got.tl0)
	}
	if !isKeyframe(codecVP8, buf) {
		t.Fatal("rewrite broke the frame")
	}
}

func TestLayerForSize(t *testing.T) {
	pub, _ := testPub(0, false, 0, 1, 2)
	pub.info.Layers = []protocol.LayerInfo{{RID: "q", Width: 320, Height: 180}, {RID: "h", Width: 640, Height: 360}, {RID: "f", Width: 1280, Height: 720}}
	for _, tc := range []struct{ w, h, want int }{{160, 90, 0}, {320, 180, 0}, {400, 200, 1}, {1280, 720, 2}, {1920, 1080, 2}, {0, 0, 0}} {
		if got := pub.layerForSize(tc.w, tc.h); got != tc.want {
			t.Errorf("%dx%d: layer %d, want %d", tc.w, tc.h, got, tc.want)
		}
	}
	pub.info.Layers = nil
	pub.info.Width, pub.info.Height = 1280, 720
	if got := pub.layerForSize(300, 170); got != 0 {
		t.Errorf("assumed sizes: layer %d, want 0", got)
	}
}

func TestKeyframeRequestsAggregateWithoutLosingLateRequesters(t *testing.T) {
	pub, _ := testPub(0, false, 0)
	l := pub.layer(0)
	sent := func() int64 { return l.lastPLI.Load() }
	// The source ignores requests, so a request is only recorded in lastPLI.
	l.src = newBlockSource()
	t0 := now()
	l.lastPLI.Store(t0 - int64(100*time.Millisecond))
	// The requested keyframe has not arrived: a second requester rides on it.
	l.lastKey.Store(t0 - int64(time.Second))
	l.requestKeyframe()
	if sent() != t0-int64(100*time.Millisecond) || l.deferred.Load() {
		t.Fatal("request inside the window with a keyframe pending was not absorbed")
	}
	// The keyframe went by before this requester was ready: it gets its own,
	// once the window is over.
	l.lastKey.Store(t0 - int64(50*time.Millisecond))
	l.requestKeyframe()
	if !l.deferred.Load() {
		t.Fatal("late requester's request was dropped")
	}
	deadline := time.Now().Add(2 * time.Second)
	for sent() < t0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if sent() < t0 {
		t.Fatal("deferred keyframe request never sent")
	}
}

func TestParallelFanoutReachesEverySubscriber(t *testing.T) {
	pub, ws := testPub(200, false)
	w := newFanWorkers(3)
	defer w.close()
	raw := vp8Packet(1, 1, true, 0)
	var pkt Packet
	for i := 0; i < 50; i++ {
		raw[2], raw[3] = byte(i>>8), byte(i)
		pub.layer(0).parse(&pkt, raw)
		if sent := pub.fanoutParallel(&pkt, w); sent != 200 {
			t.Fatalf("packet %d reached %d of 200 subscribers", i, sent)
		}
	}
	for i, x := range ws {
		if x.n != 50 {
			t.Fatalf("subscriber %d got %d packets", i, x.n)
		}
	}
}

func BenchmarkFanout400Parallel(b *testing.B) {
	pub, _ := testPub(400, false)
	w := newFanWorkers(1)
	defer w.close()
	raw := vp8Packet(1, 1, true, 0)
	var pkt Packet
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		raw[2], raw[3] = byte(i>>8), byte(i)
		pub.layer(0).parse(&pkt, raw)
		pub.fanoutParallel(&pkt, w)
	}
}

// chanSource hands a layer's read loop the packets sent on it.
type chanSource struct {
	nopSource
	c chan []byte
}

func (s *chanSource) ReadRTP(b []byte) (int, error) {
	p, ok := <-s.c
	if !ok {
		return 0, io.EOF
	}
	return copy(b, p), nil
}

// A layer the publisher turned off and turns on again (the subscriber asked
// for it) is switched to on its first packet, the keyframe it starts with: the
// subscriber's layer choice waited for the next allocation round (up to
// 500 ms), then asked for another keyframe.
func TestLayerBackOnIsTakenAtItsFirstKeyframe(t *testing.T) {
	pub, ws := testPub(1, true, 0, 2)
	d := pub.Subscribers()[0]
	high := pub.layer(2)
	high.lastRecv.Store(now() - int64(3*time.Second)) // turned off 3 s ago
	d.chooseLayer()
	if got := d.target.Load(); got != 0 {
		t.Fatalf("target %d while the top layer is off", got)
	}
	var pkt Packet
	if !pub.layer(0).parse(&pkt, vp8Packet(1, 3000, true, 0)) {
		t.Fatal("parse")
	}
	pkt.Arrival = now()
	pub.fanout(&pkt)
	if len(ws[0].hdrs) != 1 {
		t.Fatalf("low keyframe: %d packets forwarded", len(ws[0].hdrs))
	}

	src := &chanSource{c: make(chan []byte)}
	high.src = src
	done := make(chan struct{})
	go func() { high.forward(); close(done) }()
	// Chromium probes with padding on the SSRC of an encoding it has off:
	// not media, the layer stays off.
	pad := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 499, Timestamp: 6000, SSRC: 42,
		Padding: true, PaddingSize: 200}}
	raw, _ := pad.Marshal()
	src.c <- raw
	src.c <- raw // returns once the first one is handled
	if got := d.target.Load(); got != 0 {
		t.Fatalf("target %d after padding on the turned-off layer", got)
	}
	src.c <- vp8Packet(500, 6000, true, 0)
	close(src.c)
	<-done
	if got := d.target.Load(); got != 2 {
		t.Fatalf("target %d after the top layer came back", got)
	}
	if len(ws[0].hdrs) != 2 || ws[0].hdrs[1].Padding {
		t.Fatalf("the top layer's first keyframe was not forwarded (%d packets)", len(ws[0].hdrs))
	}
}

// A stream that runs long past one sync point (a camera, a call without
// layer switches) keeps being forwarded, and NACKs of its recent packets
// map to its current numbering: the segment's start must not fall half the
// sequence space behind (32768 packets: 18 minutes of 30 packets a second).
func TestDownTrackForwardsPastHalfTheSequenceSpace(t *testing.T) {
	pub, ws := testPub(1, false)
	d := pub.Subscribers()[0]
	var pkt Packet
	feed := func(seq uint16, ts uint32, key bool) {
		if !pub.layer(0).parse(&pkt, vp8Packet(seq, ts, key, 0)) {
			t.Fatal("parse")
		}
		pub.fanout(&pkt)
	}
	// A first segment, then a resync (a mute) so that an older segment exists.
	feed(1000, 0, true)
	d.resync()
	const n = 70000 // past two wraps of the 16-bit numbering
	for i := 0; i < n; i++ {
		feed(uint16(5000+i), uint32(3000+i*3000), i%3000 == 0)
	}
	if ws[0].n != n+1 {
		t.Fatalf("forwarded %d of %d packets", ws[0].n, n+1)
	}
	last := uint16((5000 + n - 1) & 0xffff)
	seg, ok := d.source(last + d.out.seqOffset)
	if !ok || seg.seqOffset != d.out.seqOffset {
		t.Fatalf("a NACK of the last packet maps to segment %+v (found %v), want offset %d", seg, ok, d.out.seqOffset)
	}
}
