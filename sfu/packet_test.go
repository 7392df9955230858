package sfu

import (
	"bytes"
	"io"
	"sync/atomic"
	"testing"

	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
)

func TestKeyframeDetection(t *testing.T) {
	vp8 := func(frame []byte, pictureID bool) []byte {
		p := &codecs.VP8Payloader{EnablePictureID: pictureID}
		return p.Payload(1200, frame)[0]
	}
	h264 := func(nals ...[]byte) [][]byte {
		var annexB []byte
		for _, n := range nals {
			annexB = append(annexB, 0, 0, 0, 1)
			annexB = append(annexB, n...)
		}
		return (&codecs.H264Payloader{}).Payload(1200, annexB)
	}
	big := bytes.Repeat([]byte{0xaa}, 3000)
	for _, tc := range []struct {
		name string
		c    codecKind
		p    []byte
		want bool
	}{
		{"vp8 key", codecVP8, vp8(append([]byte{0x10}, big[:10]...), false), true},
		{"vp8 key with picture id", codecVP8, vp8(append([]byte{0x10}, big[:10]...), true), true},
		{"vp8 delta", codecVP8, vp8(append([]byte{0x11}, big[:10]...), true), false},
		{"vp8 continuation", codecVP8, []byte{0x00, 0x00}, false},
		{"vp8 empty", codecVP8, nil, false},
		{"h264 idr", codecH264, h264([]byte{0x65, 1, 2, 3})[0], true},
		{"h264 sps+pps (stap-a)", codecH264, h264([]byte{0x67, 1, 2}, []byte{0x68, 1, 2}, []byte{0x65, 1})[0], true},
		{"h264 non-idr", codecH264, h264([]byte{0x41, 1, 2, 3})[0], false},
		{"h264 fu-a start of idr", codecH264, h264(append([]byte{0x65}, big...))[0], true},
		{"h264 fu-a middle of idr", codecH264, h264(append([]byte{0x65}, big...))[1], false},
		{"h264 truncated stap-a", codecH264, []byte{24, 0, 9, 0x65}, true},
		{"h264 bad stap-a size", codecH264, []byte{24, 0xff, 0xff}, false},
		{"vp9 key start", codecVP9, []byte{0x08, 0}, true},
		{"vp9 inter", codecVP9, []byte{0x48, 0}, false},
		{"av1 new sequence", codecAV1, []byte{0x08}, true},
		{"av1 other", codecAV1, []byte{0x10}, false},
		{"h265 idr", codecH265, []byte{19 << 1, 1, 0}, true},
		{"h265 trail", codecH265, []byte{1 << 1, 1, 0}, false},
		{"audio", codecOther, []byte{1, 2, 3}, false},
	} {
		if got := isKeyframe(tc.c, tc.p); got != tc.want {
			t.Errorf("%s: got %v, want %v (% x)", tc.name, got, tc.want, tc.p[:min(len(tc.p), 8)])
		}
	}
}

func TestPacketCache(t *testing.T) {
	c := NewPacketCache(64)
	buf := make([]byte, maxPacket)
	for seq := uint16(65500); seq != 100; seq++ {
		c.Put(seq, []byte{byte(seq), byte(seq >> 8)})
	}
	if n := c.Get(99, buf); n != 2 || buf[0] != 99 {
		t.Fatalf("recent packet: n=%d % x", n, buf[:2])
	}
	if n := c.Get(65535, buf); n != 0 {
		t.Fatal("a packet evicted by wraparound is still returned")
	}
	if n := c.Get(36, buf); n != 2 || buf[0] != 36 {
		t.Fatalf("oldest kept packet: n=%d", n)
	}
	if n := c.Get(35, buf); n != 0 {
		t.Fatal("packet beyond the window returned")
	}
	if c.Put(1, make([]byte, maxPacket+1)) != nil {
		t.Fatal("oversized packet cached")
	}
}

func FuzzParseData(f *testing.F) {
	f.Add(EncodeData(DataHeader{To: []string{"a"}, Topic: "t", Text: true}, []byte("hi")))
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p, err := ParseData(b)
		if err != nil {
			return
		}
		h2, p2, err := ParseData(EncodeData(h, p))
		if err != nil || !bytes.Equal(p, p2) || h2.Topic != h.Topic || len(h2.To) != len(h.To) {
			t.Fatalf("round trip changed the message")
		}
	})
}

func TestDataFraming(t *testing.T) {
	in := DataHeader{To: []string{"bob"}, Topic: "chat", Text: true}
	h, p, err := ParseData(EncodeData(in, []byte("hello")))
	if err != nil || string(p) != "hello" || h.Topic != "chat" || h.To[0] != "bob" || !h.Text {
		t.Fatalf("%+v %q %v", h, p, err)
	}
	for _, bad := range [][]byte{nil, {2, 0, 0}, {1, 0, 10, '{'}, {1, 0, 1, 'x'}, {1, 0x20, 0, '{'}} {
		if _, _, err := ParseData(bad); err == nil {
			t.Errorf("accepted % x", bad)
		}
	}
}

// BenchmarkParse is the per-packet cost at the start of the packet path.
func BenchmarkParse(b *testing.B) {
	pub := &Publication{ck: codecVP8, kind: 2}
	l := &layer{pub: pub, src: &nopSource{}, cache: NewPacketCache(1024)}
	raw, _ := (&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SSRC: 1}, Payload: make([]byte, 1100)}).Marshal()
	var pkt Packet
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		raw[2], raw[3] = byte(i>>8), byte(i)
		if !l.parse(&pkt, raw) {
			b.Fatal("parse failed")
		}
	}
}

// nopSource is a layer's source in unit tests that drive the layer directly: it
// counts keyframe requests.
type nopSource struct{ keyframes atomic.Int64 }

func (s *nopSource) ReadRTP([]byte) (int, error)  { return 0, io.EOF }
func (s *nopSource) ReadRTCP([]byte) (int, error) { return 0, io.EOF }
func (s *nopSource) SSRC() uint32                 { return 1 }
func (s *nopSource) RID() string                  { return "" }
func (s *nopSource) RequestKeyframe()             { s.keyframes.Add(1) }
func (s *nopSource) Stop()                        {}
