package webtransport

import (
	"bytes"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"
)

type testFrame struct {
	tsUs uint64
	key  bool
	data []byte
}

func vp8Frames(rng *rand.Rand, n, gop int) []testFrame {
	var out []testFrame
	for i := 0; i < n; i++ {
		key := i%gop == 0
		size := 300 + rng.Intn(3000)
		if key {
			size = 6000 + rng.Intn(4000)
		}
		b := make([]byte, size)
		rng.Read(b)
		if key {
			b[0] &^= 1 // VP8 frame tag: key frame
			b[3], b[4], b[5] = 0x9d, 0x01, 0x2a
		} else {
			b[0] |= 1
		}
		out = append(out, testFrame{tsUs: uint64(i) * 33333, key: key, data: b})
	}
	return out
}

func h264Frames(rng *rand.Rand, n, gop int) []testFrame {
	var out []testFrame
	sc := []byte{0, 0, 0, 1}
	nal := func(typ byte, size int) []byte {
		b := make([]byte, size)
		rng.Read(b)
		for i := range b {
			if b[i] == 0 {
				b[i] = 1 // no accidental start codes
			}
		}
		b[0] = 0x60 | typ
		return append(append([]byte(nil), sc...), b...)
	}
	for i := 0; i < n; i++ {
		var b []byte
		key := i%gop == 0
		if key {
			b = append(b, nal(7, 12)...)
			b = append(b, nal(8, 4)...)
			b = append(b, nal(5, 5000+rng.Intn(3000))...)
		} else {
			b = append(b, nal(1, 200+rng.Intn(2500))...)
		}
		out = append(out, testFrame{tsUs: uint64(i) * 33333, key: key, data: b})
	}
	return out
}

// kindFrames is vp8Frames or h264Frames by codec.
func kindFrames(kind string, rng *rand.Rand, n, gop int) []testFrame {
	if kind == "h264" {
		return h264Frames(rng, n, gop)
	}
	return vp8Frames(rng, n, gop)
}

type rtpIn struct {
	h   rtp.Header
	p   []byte
	key bool
}

func packetize(t *testing.T, kind string, frames []testFrame) [][]rtpIn {
	pk, err := NewPacketizer(kind, 90000, 96, 0xabc, 65500) // sequence numbers wrap
	if err != nil {
		t.Fatal(err)
	}
	var out [][]rtpIn
	for _, f := range frames {
		var pkts []rtpIn
		pk.Packetize(f.tsUs+1_000_000_000, f.data, func(p *rtp.Packet) {
			pkts = append(pkts, rtpIn{h: p.Header, p: append([]byte(nil), p.Payload...), key: f.key})
		})
		if len(pkts) == 0 || !pkts[len(pkts)-1].h.Marker {
			t.Fatalf("frame without a marker packet")
		}
		out = append(out, pkts)
	}
	return out
}

type gotFrame struct {
	tsUs uint64
	key  bool
	data []byte
}

func depacketize(t *testing.T, kind string, pkts []rtpIn) ([]gotFrame, *Depacketizer, bool) {
	dp, err := NewDepacketizer(kind, 90000)
	if err != nil {
		t.Fatal(err)
	}
	var got []gotFrame
	needKey := false
	for i := range pkts {
		dp.Push(&pkts[i].h, pkts[i].p, pkts[i].key, func(ts uint64, key bool, f []byte) {
			got = append(got, gotFrame{ts, key, append([]byte(nil), f...)})
		})
		needKey = dp.NeedKeyframe() || needKey
	}
	return got, dp, needKey
}

func flatten(fs [][]rtpIn) []rtpIn {
	var out []rtpIn
	for _, f := range fs {
		out = append(out, f...)
	}
	return out
}

// Frames -> RTP -> frames keeps every frame's bytes, boundaries, keyframe flag
// and timing, in order, with reordering and duplication on the way.
func TestBridgeRoundTripReorderDuplicate(t *testing.T) {
	for _, kind := range []string{"vp8", "h264"} {
		t.Run(kind, func(t *testing.T) {
			rng := rand.New(rand.NewSource(3))
			frames := kindFrames(kind, rng, 90, 30)
			pkts := flatten(packetize(t, kind, frames))
			// Reorder within windows of 6 packets and duplicate 10%.
			for i := 0; i+6 <= len(pkts); i += 6 {
				rng.Shuffle(6, func(a, b int) { pkts[i+a], pkts[i+b] = pkts[i+b], pkts[i+a] })
			}
			var mixed []rtpIn
			for _, p := range pkts {
				mixed = append(mixed, p)
				if rng.Intn(10) == 0 {
					mixed = append(mixed, p)
				}
			}
			got, dp, _ := depacketize(t, kind, mixed)
			if len(got) != len(frames) {
				t.Fatalf("%d frames out of %d (dropped %d)", len(got), len(frames), dp.Dropped)
			}
			for i, g := range got {
				f := frames[i]
				if !bytes.Equal(g.data, f.data) {
					t.Fatalf("frame %d: %d bytes differ from %d", i, len(g.data), len(f.data))
				}
				if g.key != f.key {
					t.Fatalf("frame %d: keyframe %v, want %v", i, g.key, f.key)
				}
				if d := int64(g.tsUs) - int64(f.tsUs); d < -12 || d > 12 {
					t.Fatalf("frame %d: timestamp %d, want %d", i, g.tsUs, f.tsUs)
				}
			}
		})
	}
}

// A frame that lost a packet is never emitted; the frames after it wait for the
// next keyframe and a keyframe is asked for.
func TestBridgeLossWaitsForKeyframe(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	frames := vp8Frames(rng, 60, 30)
	per := packetize(t, "vp8", frames)
	if len(per[10]) < 2 {
		t.Fatal("test needs a multi-packet frame")
	}
	per[10] = append(per[10][:1], per[10][2:]...) // lose the second packet of frame 10
	got, _, needKey := depacketize(t, "vp8", flatten(per))
	if !needKey {
		t.Fatal("no keyframe request after a loss")
	}
	if len(got) != 10+30 {
		t.Fatalf("%d frames, want 40 (0-9 and 30-59)", len(got))
	}
	for i, g := range got {
		want := i
		if i >= 10 {
			want = i + 20
		}
		if !bytes.Equal(g.data, frames[want].data) {
			t.Fatalf("output %d is not frame %d", i, want)
		}
	}
	if !got[10].key {
		t.Fatal("resumed on a delta frame")
	}
}

// Losing a whole frame (every packet) is detected at the next complete frame.
func TestBridgeWholeFrameLost(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	frames := vp8Frames(rng, 40, 20)
	per := packetize(t, "vp8", frames)
	per[5] = nil
	got, _, needKey := depacketize(t, "vp8", flatten(per))
	if !needKey || len(got) != 5+20 {
		t.Fatalf("needKey %v, %d frames (want 25)", needKey, len(got))
	}
}

func TestOpusFrames(t *testing.T) {
	pk, _ := NewPacketizer("opus", 48000, 111, 1, 100)
	dp, _ := NewDepacketizer("opus", 48000)
	var pkts []rtpIn
	for i := 0; i < 50; i++ {
		pk.Packetize(uint64(i)*20000, []byte{byte(i), 1, 2}, func(p *rtp.Packet) {
			pkts = append(pkts, rtpIn{h: p.Header, p: append([]byte(nil), p.Payload...)})
		})
	}
	pkts[3], pkts[4] = pkts[4], pkts[3] // late packet: dropped, not replayed out of order
	var got []byte
	var ts []uint64
	for i := range pkts {
		dp.Push(&pkts[i].h, pkts[i].p, false, func(us uint64, _ bool, f []byte) { got = append(got, f[0]); ts = append(ts, us) })
	}
	if len(got) != 49 || got[3] != 4 || got[4] != 5 {
		t.Fatalf("opus frames %v", got)
	}
	if ts[1] != 20000 {
		t.Fatalf("opus timestamps %v", ts[:3])
	}
}

// Padding-only packets between frames (what Chromium sends to probe when it
// has no RTX: the last frame's timestamp, no marker, no payload) take
// sequence numbers but carry no media: every frame still comes out, and no
// loss is declared.
func TestBridgePaddingBetweenFrames(t *testing.T) {
	for _, kind := range []string{"vp8", "h264"} {
		t.Run(kind, func(t *testing.T) {
			frames := kindFrames(kind, rand.New(rand.NewSource(11)), 60, 30)
			var pkts []rtpIn
			for i, f := range packetize(t, kind, frames) {
				pkts = append(pkts, f...)
				if i%7 == 3 {
					last := f[len(f)-1]
					for range 1 + i%3 {
						pad := last
						pad.h.Marker, pad.h.Padding, pad.h.PaddingSize = false, true, 200
						pad.p, pad.key = nil, false
						pkts = append(pkts, pad)
					}
				}
			}
			seq := pkts[0].h.SequenceNumber
			for i := range pkts {
				pkts[i].h.SequenceNumber = seq + uint16(i)
			}
			got, dp, needKey := depacketize(t, kind, pkts)
			if needKey || dp.Dropped != 0 || len(got) != len(frames) {
				t.Fatalf("%d frames of %d, %d dropped, keyframe asked for: %v", len(got), len(frames), dp.Dropped, needKey)
			}
			for i, g := range got {
				if !bytes.Equal(g.data, frames[i].data) {
					t.Fatalf("frame %d differs", i)
				}
			}
		})
	}
}

// A subscriber that waits for a group start keeps asking for one: a single
// request can be lost, and a WebRTC publisher sends no keyframe unasked.
func TestDroppingSubscriberAsksAgain(t *testing.T) {
	var asked atomic.Int32
	d := &downSub{q: make(chan outObj, 16), dropping: true, keyframe: func() { asked.Add(1) }}
	deadline := time.Now().Add(700 * time.Millisecond)
	for obj := uint64(1); time.Now().Before(deadline); obj++ {
		d.enqueue(outObj{group: 1, obj: obj})
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the requests run on their own goroutines
	if n := asked.Load(); n < 2 || n > 4 {
		t.Fatalf("%d keyframe requests in 0.7 s of waiting, want one every %v", n, keyframeRetry)
	}
	d.enqueue(outObj{group: 2, obj: 0})
	if d.dropping || len(d.q) != 1 {
		t.Fatalf("a group start did not end the wait (dropping %v, queued %d)", d.dropping, len(d.q))
	}
}
