package loadtest

import (
	"bytes"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/rtc"
)

func TestReaders(t *testing.T) {
	for _, tc := range []struct {
		file      string
		mime      string
		minFrames int
		frameDur  time.Duration
		tsInc     uint32
		wantKey   bool
	}{
		{"testdata/clip.ivf", webrtc.MimeTypeVP8, 170, time.Second / 30, 3000, true},
		{"testdata/clip.h264", webrtc.MimeTypeH264, 85, time.Second / 30, 3000, true},
		{"testdata/tone.ogg", webrtc.MimeTypeOpus, 490, 20 * time.Millisecond, 960, false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s, err := OpenFile(tc.file, 30)
			if err != nil {
				t.Fatal(err)
			}
			if s.Codec.MimeType != tc.mime {
				t.Fatalf("codec %s, want %s", s.Codec.MimeType, tc.mime)
			}
			if s.Frames() < tc.minFrames {
				t.Fatalf("%d frames, want at least %d", s.Frames(), tc.minFrames)
			}
			keys := 0
			var total time.Duration
			for i, f := range s.frames {
				if len(f.Packets) == 0 {
					t.Fatalf("frame %d has no packets", i)
				}
				for j, p := range f.Packets {
					if len(p.Payload) == 0 || len(p.Payload) > MTU {
						t.Fatalf("frame %d packet %d: %d bytes", i, j, len(p.Payload))
					}
					if p.Marker != (j == len(f.Packets)-1) {
						t.Fatalf("frame %d packet %d: marker %v", i, j, p.Marker)
					}
				}
				if f.Key {
					keys++
				}
				total += f.Dur
				if i < len(s.frames)-1 && (f.Dur != tc.frameDur || f.TSInc != tc.tsInc) {
					t.Fatalf("frame %d: dur %v ts step %d, want %v and %d", i, f.Dur, f.TSInc, tc.frameDur, tc.tsInc)
				}
			}
			if tc.wantKey && (keys == 0 || !s.frames[0].Key) {
				t.Fatalf("%d keyframes, first is key: %v", keys, s.frames[0].Key)
			}
			if tc.mime == webrtc.MimeTypeVP8 {
				// VP8 payload descriptor: S bit on the first packet of a frame.
				if s.frames[0].Packets[0].Payload[0]&0x10 == 0 {
					t.Fatal("first VP8 packet lacks the start-of-partition bit")
				}
			}
		})
	}
}

func TestReaderErrors(t *testing.T) {
	if _, err := ReadIVF("x", bytes.NewReader([]byte("DKIF garbage"))); err == nil {
		t.Error("garbage IVF accepted")
	}
	if _, err := ReadOgg("x", bytes.NewReader([]byte("OggS"))); err == nil {
		t.Error("truncated Ogg accepted")
	}
	if _, err := ReadH264("x", bytes.NewReader([]byte{1, 2, 3, 4}), 30); err == nil {
		t.Error("H.264 without slices accepted")
	}
	if _, err := OpenFile("testdata/make-clip.sh", 30); err == nil {
		t.Error("unknown extension accepted")
	}
	if _, err := ListenRTP("8.8.8.8:5004", webrtc.RTPCodecTypeVideo, CodecVP8); err == nil {
		t.Error("non-loopback RTP input accepted")
	}
}

// recorder is a TrackLocalWriter that keeps what it was given.
type recorder struct {
	mu   sync.Mutex
	hdrs []rtp.Header
	pays [][]byte
}

func (r *recorder) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hdrs = append(r.hdrs, *h)
	r.pays = append(r.pays, append([]byte(nil), p...))
	return len(p), nil
}
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }

func (r *recorder) snapshot() ([]rtp.Header, [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rtp.Header(nil), r.hdrs...), append([][]byte(nil), r.pays...)
}

type bindCtx struct {
	id   string
	ssrc webrtc.SSRC
	w    webrtc.TrackLocalWriter
}

func (b bindCtx) CodecParameters() []webrtc.RTPCodecParameters {
	return []webrtc.RTPCodecParameters{
		{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, PayloadType: 111},
		{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, PayloadType: 96},
	}
}
func (b bindCtx) HeaderExtensions() []webrtc.RTPHeaderExtensionParameter { return nil }
func (b bindCtx) SSRC() webrtc.SSRC                                      { return b.ssrc }
func (b bindCtx) SSRCRetransmission() webrtc.SSRC                        { return 0 }
func (b bindCtx) SSRCForwardErrorCorrection() webrtc.SSRC                { return 0 }
func (b bindCtx) WriteStream() webrtc.TrackLocalWriter                   { return b.w }
func (b bindCtx) ID() string                                             { return b.id }
func (b bindCtx) RTCPReader() interceptor.RTCPReader                     { return nil }

// TestFanout binds two tracks of one synthetic source and checks that each gets
// every packet with its own SSRC, payload type and continuous sequence numbers,
// and a readable send stamp.
func TestFanout(t *testing.T) {
	s := Synthetic(false, 500, 30, 30)
	var a, b recorder
	ta, tb := s.Track("a", "st"), s.Track("b", "st")
	if _, err := ta.Bind(bindCtx{"a", 1111, &a}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Bind(bindCtx{"b", 2222, &b}); err != nil {
		t.Fatal(err)
	}
	// A rebind of the same context replaces its sink.
	if _, err := tb.Bind(bindCtx{"b", 2222, &b}); err != nil {
		t.Fatal(err)
	}
	s.Start()
	time.Sleep(400 * time.Millisecond)
	if err := tb.Unbind(bindCtx{"b", 2222, &b}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	s.Stop()
	ha, pa := a.snapshot()
	hb, _ := b.snapshot()
	if len(ha) < 20 || len(hb) < 10 || len(hb) >= len(ha) {
		t.Fatalf("a got %d packets, b %d (b unbound early)", len(ha), len(hb))
	}
	for i, h := range ha {
		if h.SSRC != 1111 || h.PayloadType != 96 {
			t.Fatalf("packet %d: ssrc %d pt %d", i, h.SSRC, h.PayloadType)
		}
		if i > 0 && h.SequenceNumber != ha[i-1].SequenceNumber+1 {
			t.Fatalf("packet %d: seq %d after %d", i, h.SequenceNumber, ha[i-1].SequenceNumber)
		}
		if _, sent, ok := ReadStamp(pa[i]); !ok || time.Since(time.Unix(0, sent)) > 5*time.Second {
			t.Fatalf("packet %d: no valid stamp", i)
		}
	}
	for _, h := range hb {
		if h.SSRC != 2222 {
			t.Fatalf("b got ssrc %d", h.SSRC)
		}
	}
	// Roughly 500 kbit/s: a 400-600 ms window holds 15-40 KB of payload.
	var bytesA int
	for _, p := range pa {
		bytesA += len(p)
	}
	if bytesA < 10_000 || bytesA > 60_000 {
		t.Fatalf("%d payload bytes in about 0.6 s, want about 37 KB", bytesA)
	}
	if _, err := s.Track("c", "st").Bind(h264Ctx{}); err == nil {
		t.Fatal("bound to a connection without VP8")
	}
}

type h264Ctx struct{ bindCtx }

func (h264Ctx) CodecParameters() []webrtc.RTPCodecParameters {
	return []webrtc.RTPCodecParameters{{RTPCodecCapability: CodecH264, PayloadType: 102}}
}

// TestListenRTP feeds RTP into a UDP source and checks that it is forwarded with
// the sink's SSRC and the input's timestamps and payload.
func TestListenRTP(t *testing.T) {
	s, err := ListenRTP("127.0.0.1:0", webrtc.RTPCodecTypeVideo, CodecVP8)
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	if _, err := s.Track("a", "st").Bind(bindCtx{"a", 42, &rec}); err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer s.Stop()
	conn, err := net.Dial("udp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := 0; i < 10; i++ {
		p := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: uint16(100 + i), Timestamp: uint32(9000 * i), SSRC: 7, Marker: i%2 == 1},
			Payload: []byte{0x10, byte(i), 0xaa}}
		b, _ := p.Marshal()
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write([]byte("not rtp")) // ignored
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		hs, ps := rec.snapshot()
		if len(hs) == 10 {
			for i, h := range hs {
				if h.SSRC != 42 || h.Timestamp-hs[0].Timestamp != uint32(9000*i) || h.Marker != (i%2 == 1) || ps[i][1] != byte(i) {
					t.Fatalf("packet %d: %+v %x", i, h, ps[i])
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("forwarded %d of 10 packets", len(hs))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDelayHist(t *testing.T) {
	var h DelayHist
	for i := 1; i <= 100; i++ {
		h.Add(time.Duration(i) * time.Millisecond)
	}
	p50, p99 := h.Quantile(0.5), h.Quantile(0.99)
	if p50 < 50*time.Millisecond || p50 > 63*time.Millisecond || p99 < 99*time.Millisecond || p99 > 125*time.Millisecond {
		t.Fatalf("p50 %v p99 %v", p50, p99)
	}
}

func TestReadProc(t *testing.T) {
	a, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := 0; i < 30_000_000; i++ {
		x += i ^ (x >> 3)
	}
	b, _ := ReadProc(0)
	if a.RSS <= 0 || b.CPU <= a.CPU {
		t.Fatalf("rss %d, cpu %v -> %v (%d)", a.RSS, a.CPU, b.CPU, x)
	}
	// Work in the kernel (reading /proc formats it there) shows as stime.
	for range 20_000 {
		if _, err := os.ReadFile("/proc/self/stat"); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := ReadProc(0)
	if c.Sys <= b.Sys || c.Sys > c.CPU || c.Sys-b.Sys > c.CPU-b.CPU {
		t.Fatalf("kernel time %v -> %v of %v -> %v", b.Sys, c.Sys, b.CPU, c.CPU)
	}
}

// TestKeyframeOnRequest: a keyframe request makes the source send its next
// keyframe at once instead of at the next one-second boundary, and requests are
// rate-limited to one a second.
func TestKeyframeOnRequest(t *testing.T) {
	s := Synthetic(false, 300, 30, 30)
	var rec recorder
	if _, err := s.Track("a", "st").Bind(bindCtx{"a", 1, &rec}); err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer s.Stop()
	time.Sleep(150 * time.Millisecond) // past the first keyframe
	if k := s.Keyframes(); k != 1 {
		t.Fatalf("%d keyframes at start, want 1", k)
	}
	s.RequestKeyframe()
	time.Sleep(150 * time.Millisecond)
	if k := s.Keyframes(); k != 2 {
		t.Fatalf("%d keyframes 150 ms after a request, want 2", k)
	}
	s.RequestKeyframe() // within the second: waits for the limit
	time.Sleep(150 * time.Millisecond)
	if k := s.Keyframes(); k != 2 {
		t.Fatalf("%d keyframes after a second request within 1 s, want still 2", k)
	}
	a := Synthetic(true, 0, 0, 0)
	a.RequestKeyframe()
	if a.wantKey.Load() {
		t.Fatal("an audio source took a keyframe request")
	}
}

// levelCtx negotiates the RFC 6464 audio level extension, as a browser's offer does.
type levelCtx struct{ bindCtx }

func (levelCtx) HeaderExtensions() []webrtc.RTPHeaderExtensionParameter {
	return []webrtc.RTPHeaderExtensionParameter{{URI: rtc.ExtAbsSendTime, ID: 3}, {URI: rtc.ExtAudioLevel, ID: 5}}
}

// levelRecorder keeps the audio level of each packet at the time it is written
// (the sink rewrites the extension's byte in place for the next one).
type levelRecorder struct {
	mu     sync.Mutex
	levels []int // -1: no extension
}

func (r *levelRecorder) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	l := -1
	if b := h.GetExtension(5); len(b) == 1 {
		l = int(b[0])
	}
	r.mu.Lock()
	r.levels = append(r.levels, l)
	r.mu.Unlock()
	return len(p), nil
}
func (r *levelRecorder) Write(b []byte) (int, error) { return len(b), nil }

// TestSyntheticAudioLevels: synthetic audio carries the negotiated audio level
// on every packet, speech and pauses per talker, different talkers differently;
// without the extension negotiated, packets carry none.
func TestSyntheticAudioLevels(t *testing.T) {
	for _, ssrc := range []uint32{1111, 2222, 3333} {
		var speech, pause, onset int
		for n := uint32(0); n < 1000; n++ { // 20 s
			l := talkLevel(ssrc, n)
			switch {
			case l >= 25 && l <= 47:
				speech++
				if n > 0 && talkLevel(ssrc, n-1) > 47 {
					onset++
				}
			case l >= 62 && l <= 71:
				pause++
			default:
				t.Fatalf("ssrc %d frame %d: level %d outside speech and noise", ssrc, n, l)
			}
		}
		if speech < 200 || pause < 300 || onset < 2 {
			t.Fatalf("ssrc %d: %d speech frames, %d pause frames, %d starts of speech in 20 s", ssrc, speech, pause, onset)
		}
	}
	same := 0
	for n := uint32(0); n < 1000; n++ {
		if talkLevel(1111, n) == talkLevel(2222, n) {
			same++
		}
	}
	if same > 500 {
		t.Fatalf("two talkers share the level of %d frames in 1000", same)
	}

	s := Synthetic(true, 0, 0, 0)
	var a, b levelRecorder
	if _, err := s.Track("a", "st").Bind(levelCtx{bindCtx{"a", 1111, &a}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Track("b", "st").Bind(bindCtx{"b", 2222, &b}); err != nil {
		t.Fatal(err)
	}
	s.Start()
	time.Sleep(300 * time.Millisecond)
	s.Stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(a.levels) < 5 || len(b.levels) < 5 {
		t.Fatalf("%d and %d packets in 300 ms", len(a.levels), len(b.levels))
	}
	for i, l := range a.levels {
		if want := int(talkLevel(1111, uint32(i+1))); l != want {
			t.Fatalf("packet %d: level %d, want %d", i, l, want)
		}
	}
	for i, l := range b.levels {
		if l != -1 {
			t.Fatalf("packet %d carries a level (%d) that was not negotiated", i, l)
		}
	}
}

// TestSyntheticAudioNoAlloc: writing an audio frame with its level to a
// bound track allocates nothing in the generator.
func TestSyntheticAudioNoAlloc(t *testing.T) {
	s := Synthetic(true, 0, 0, 0)
	if _, err := s.Track("a", "st").Bind(levelCtx{bindCtx{"a", 1111, discard{}}}); err != nil {
		t.Fatal(err)
	}
	f := s.frames[0]
	if n := testing.AllocsPerRun(200, func() { s.writeFrame(&f, 0) }); n != 0 {
		t.Fatalf("%v allocations per audio frame", n)
	}
}

type discard struct{}

func (discard) WriteRTP(h *rtp.Header, p []byte) (int, error) { return len(p), nil }
func (discard) Write(b []byte) (int, error)                   { return len(b), nil }
