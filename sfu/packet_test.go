package sfu

import (
	"bytes"
	"io"
	"sync/atomic"
	"testing"
	"time"

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
		c.Put(seq, []byte{byte(seq), byte(seq >> 8)}, int64(seq)*int64(time.Second))
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
	if c.Put(1, make([]byte, maxPacket+1), 0) != nil {
		t.Fatal("oversized packet cached")
	}
}

// TestPacketCacheGrowsToItsHorizon: a cache holds about a second of packets:
// at 50 packets a second it stays at its first 64 slots, at 400 it doubles to
// 512 without losing what it held, and it never passes its size.
func TestPacketCacheGrowsToItsHorizon(t *testing.T) {
	buf := make([]byte, maxPacket)
	run := func(c *PacketCache, pps int, n int) {
		for i := 0; i < n; i++ {
			seq := uint16(65000 + i) // across the wrap
			if got := c.Put(seq, []byte{byte(seq), byte(seq >> 8), 7}, int64(i)*int64(time.Second)/int64(pps)); len(got) != 3 || got[0] != byte(seq) {
				t.Fatalf("stored copy % x", got)
			}
		}
	}
	slow := NewPacketCache(1024)
	run(slow, 50, 2000)
	if slow.Size() != 64 {
		t.Errorf("50 packets/s: %d slots, want 64", slow.Size())
	}
	fast := NewPacketCache(1024)
	run(fast, 400, 4000)
	if fast.Size() != 512 {
		t.Errorf("400 packets/s: %d slots, want 512", fast.Size())
	}
	// The last second is all there, across the growth and the wrap.
	for i := 4000 - 400; i < 4000; i++ {
		seq := uint16(65000 + i)
		if n := fast.Get(seq, buf); n != 3 || buf[0] != byte(seq) || buf[1] != byte(seq>>8) {
			t.Fatalf("packet %d of the last second: n=%d % x", seq, n, buf[:3])
		}
	}
	capped := NewPacketCache(128)
	run(capped, 1000, 3000)
	if capped.Size() != 128 {
		t.Errorf("capped cache: %d slots, want 128", capped.Size())
	}
	// A pinned GOP stays however old, up to the size: a camera with a 4 s
	// GOP at 50 packets/s keeps its 200 packets.
	gop := NewPacketCache(1024)
	gop.Put(0, []byte{0, 0, 1}, 0)
	gop.Pin(0)
	for i := 1; i < 200; i++ {
		gop.Put(uint16(i), []byte{byte(i), 0, 1}, int64(i)*20*int64(time.Millisecond))
	}
	if n := gop.Get(0, buf); n != 3 || gop.Size() != 256 {
		t.Errorf("pinned keyframe: n=%d, %d slots", n, gop.Size())
	}
	// Packets that move while the cache grows keep their bytes.
	grow := NewPacketCache(1024)
	for i := 0; i < 300; i++ {
		grow.Put(uint16(i), []byte{byte(i), byte(i >> 8), 9}, int64(i)*int64(time.Millisecond))
	}
	for i := 0; i < 300; i++ {
		if n := grow.Get(uint16(i), buf); n != 3 || buf[0] != byte(i) || buf[2] != 9 {
			t.Fatalf("packet %d after growing to %d: n=%d", i, grow.Size(), n)
		}
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
