package mix

import (
	"io"
	"log/slog"
	"math"
	"strconv"
	"testing"

	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/audio/opus"
	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/sfu"
)

func packet(seq uint16, payload ...byte) *sfu.Packet {
	return &sfu.Packet{Header: rtp.Header{SequenceNumber: seq}, Payload: payload}
}

// The jitter buffer plays packets in sequence order after its playout delay,
// drops late ones, conceals a gap that later packets show, and falls idle
// when nothing comes.
func TestJitterBuffer(t *testing.T) {
	in := &input{}
	if _, play := in.take(opus.FrameSamples); play {
		t.Fatal("played before any packet")
	}
	in.WriteRTP(packet(10, 10))
	in.WriteRTP(packet(12, 12))
	in.WriteRTP(packet(11, 11))
	for range playoutDelay {
		if _, play := in.take(opus.FrameSamples); play {
			t.Fatal("played within the playout delay")
		}
	}
	for want := byte(10); want <= 12; want++ {
		n, play := in.take(opus.FrameSamples)
		if !play || n != 1 || in.pkt[0] != want {
			t.Fatalf("want packet %d, got n=%d play=%v first byte %d", want, n, play, in.pkt[0])
		}
	}
	in.WriteRTP(packet(9, 9)) // late: 9 was played long ago
	in.WriteRTP(packet(14, 14))
	if n, play := in.take(opus.FrameSamples); !play || n != 0 {
		t.Fatalf("13 is lost (14 waits): want concealment, got n=%d play=%v", n, play)
	}
	if n, play := in.take(opus.FrameSamples); n != 1 || !play || in.pkt[0] != 14 {
		t.Fatalf("want 14, got n=%d play=%v", n, play)
	}
	plc := 0
	const idleFrames = idleSamples / opus.FrameSamples
	for range 2 * idleFrames {
		if n, play := in.take(opus.FrameSamples); play && n == 0 {
			plc++
		}
	}
	if plc != idleFrames-1 {
		t.Fatalf("%d frames concealed after the last packet, want %d then idle", plc, idleFrames-1)
	}
	in.WriteRTP(packet(40000, 1)) // a far jump restarts the input
	for range playoutDelay {
		in.take(opus.FrameSamples)
	}
	if n, play := in.take(opus.FrameSamples); n != 1 || !play {
		t.Fatalf("after a jump: n=%d play=%v", n, play)
	}
}

// clip sums with saturation and leaves out the listener's own frame.
func TestClipMinusOne(t *testing.T) {
	own := &input{pcm: []int16{30000, -30000, 5}}
	full := []int32{30000 + 20000, -30000 - 20000, 5 + 7}
	pcm := make([]int16, 3)
	clip(pcm, full, nil)
	if pcm[0] != 32767 || pcm[1] != -32768 || pcm[2] != 12 {
		t.Fatalf("full mix clipped to %v", pcm)
	}
	clip(pcm, full, []*input{own})
	if pcm[0] != 20000 || pcm[1] != -20000 || pcm[2] != 7 {
		t.Fatalf("minus one: %v", pcm)
	}
}

// benchRoom is a mixed room of n participants (local, so the benchmark needs
// no network), each with an input and an output; talking of them send a tone.
func benchRoom(b testing.TB, n, talking int) (*roomMix, func(frame int)) {
	mgr := sfu.NewManager(config.Default(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	b.Cleanup(mgr.Shutdown)
	room, err := mgr.CreateRoom("bench", 0, "")
	if err != nil {
		b.Fatal(err)
	}
	room.SetAudioMix(true)
	rm := &roomMix{room: room, mgr: mgr, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		inputs: map[*sfu.Publication]*input{}, outputs: map[string]*output{},
		full: make([]int32, opus.FrameSamples), pcm: make([]int16, opus.FrameSamples)}
	if rm.shared, err = opus.NewEncoder(bitrate); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rm.teardown)
	// 50 frames of a tone per talker, encoded before the clock starts.
	frames := make([][][]byte, talking)
	enc, _ := opus.NewEncoder(bitrate)
	defer enc.Close()
	pcm := make([]int16, opus.FrameSamples)
	for i := range frames {
		for f := range 50 {
			for j := range pcm {
				pcm[j] = int16(5000 * math.Sin(2*math.Pi*float64(300+50*i)*float64(f*opus.FrameSamples+j)/opus.Rate))
			}
			buf := make([]byte, opus.MaxPacket)
			m, _ := enc.Encode(pcm, buf)
			frames[i] = append(frames[i], buf[:m])
		}
	}
	var ins []*input
	for i := range n {
		id := "p" + strconv.Itoa(i)
		dec, _ := opus.NewDecoder()
		in := newInput(id, dec)
		in.remove = func() {}
		rm.inputs[&sfu.Publication{}] = in
		ins = append(ins, in)
		o, err := newOutput(mgr, "bench", auth.MixPrefix+id, id)
		if err != nil {
			b.Fatal(err)
		}
		o.pub.AddSink(discard{}) // a listener: unheard mixes are not encoded
		rm.outputs[id] = o
	}
	return rm, func(f int) {
		for i := range talking {
			ins[i].WriteRTP(&sfu.Packet{Header: rtp.Header{SequenceNumber: uint16(f)}, Payload: frames[i][f%50]})
		}
	}
}

// BenchmarkMixFrame is one 20 ms frame of a 50-participant room: the
// packets' arrival in the inputs, decoding, mixing, encoding and sending.
// ns/participant-frame is the CPU each participant costs per frame.
func BenchmarkMixFrame(b *testing.B) {
	for _, talking := range []int{3, 50} {
		b.Run(strconv.Itoa(talking)+"of50talking", func(b *testing.B) {
			rm, feed := benchRoom(b, 50, talking)
			for f := range playoutDelay + 1 {
				feed(f)
				rm.frame()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				feed(i + playoutDelay + 1)
				rm.frame()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/50, "ns/participant-frame")
		})
	}
}

// Garbage in an input (a hostile publisher's "Opus": libopus decodes much
// of it as noise, refuses the rest, which is concealed) stops nobody's mix.
func TestGarbageInputKeepsMixing(t *testing.T) {
	rm, feed := benchRoom(t, 3, 2)
	var garbage *input
	start := map[string]uint16{}
	for _, in := range rm.inputs {
		if in.owner == "p2" {
			garbage = in
		}
	}
	for id, o := range rm.outputs {
		start[id] = o.hdr.SequenceNumber
	}
	junk := make([]byte, 200)
	for f := range 50 {
		feed(f)
		for i := range junk {
			junk[i] = byte(f*31 + i*7)
		}
		if f%2 == 0 {
			junk[0] = 0xff // a code 3 header with an impossible frame count: refused
		}
		garbage.WriteRTP(&sfu.Packet{Header: rtp.Header{SequenceNumber: uint16(f)}, Payload: junk})
		rm.frame()
	}
	for id, o := range rm.outputs {
		if sent := o.hdr.SequenceNumber - start[id]; sent != 50 {
			t.Errorf("%s's mix: %d frames sent of 50", id, sent)
		}
	}
}

// discard is a listener that drops what it hears.
type discard struct{}

func (discard) WriteRTP(*sfu.Packet) {}

// A mix nobody receives (a WHIP caller's, until a WHEP viewer of the same
// identity plays it) costs no encoding and sends nothing; once heard, it does.
func TestUnheardMixNotEncoded(t *testing.T) {
	rm, feed := benchRoom(t, 3, 3)
	o, err := newOutput(rm.mgr, "bench", auth.MixPrefix+"p0", "p0")
	if err != nil {
		t.Fatal(err)
	}
	rm.outputs["p0"].close()
	rm.outputs["p0"] = o // p0 talks, and nobody hears its minus-one
	start := o.hdr.SequenceNumber
	f := 0
	for ; f < 20; f++ {
		feed(f)
		rm.frame()
	}
	if o.enc != nil || o.hdr.SequenceNumber != start {
		t.Fatalf("unheard: encoder made %v, %d frames sent", o.enc != nil, o.hdr.SequenceNumber-start)
	}
	o.pub.AddSink(discard{})
	for ; f < 40; f++ {
		feed(f)
		rm.frame()
	}
	if o.enc == nil || o.hdr.SequenceNumber-start != 20 {
		t.Fatalf("heard: encoder made %v, %d frames sent of 20", o.enc != nil, o.hdr.SequenceNumber-start)
	}
}

// A sender whose packets hold more audio than time passes (60 ms packets
// every 20 ms) fills the input's buffers to their bound and no further: its
// jitter buffer overflows and restarts (a short pause), the rest plays.
func TestInputTooMuchAudio(t *testing.T) {
	enc, _ := opus.NewEncoder(bitrate)
	defer enc.Close()
	dec, _ := opus.NewDecoder()
	in := newInput("x", dec)
	defer dec.Close()
	pcm := make([]int16, 3*opus.FrameSamples)
	buf := make([]byte, opus.MaxPacket)
	n, err := enc.EncodePacket(pcm, buf)
	if err != nil {
		t.Fatal(err)
	}
	played := 0
	for f := range 200 {
		in.WriteRTP(packet(uint16(f), buf[:n]...))
		if in.frame() {
			played++
		}
		if in.have >= 3*opus.FrameSamples {
			t.Fatalf("frame %d: %d samples buffered", f, in.have)
		}
	}
	if played < 180 {
		t.Fatalf("%d frames of 200 played", played)
	}
}
