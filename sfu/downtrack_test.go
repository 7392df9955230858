package sfu

import (
	"testing"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

type recWriter struct {
	hdrs []rtp.Header
	keep bool
	n    int
}

func (w *recWriter) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	w.n++
	if w.keep {
		w.hdrs = append(w.hdrs, *h)
	}
	return len(p), nil
}
func (w *recWriter) Write(b []byte) (int, error) { return len(b), nil }

func testPub(n int, keep bool) (*Publication, []*recWriter) {
	pub := &Publication{sid: "TR_x", kind: webrtc.RTPCodecTypeVideo, ck: codecVP8, cache: NewPacketCache(1024), owner: &Participant{sid: "PA_x"}}
	empty := []*DownTrack{}
	pub.downs.Store(&empty)
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
		if !pub.parse(&pkt, vp8Packet(seq, ts, key, at)) {
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
		pub.parse(&pkt, raw)
		pub.fanout(&pkt)
	}
}
