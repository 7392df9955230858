package opus

import (
	"math"
	"testing"
)

// codecPair makes an encoder at 32 kbit/s and a decoder, closed when the test ends.
func codecPair(t *testing.T) (*Encoder, *Decoder) {
	t.Helper()
	enc, err := NewEncoder(32000)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(enc.Close)
	dec, err := NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dec.Close)
	return enc, dec
}

// A 440 Hz tone survives an encode and decode round trip (its energy stays at
// 440 Hz, not at 880), and a lost packet is concealed with a full frame.
func TestRoundTripKeepsTheTone(t *testing.T) {
	enc, dec := codecPair(t)
	pcm := make([]int16, FrameSamples)
	out := make([]int16, FrameSamples)
	pkt := make([]byte, MaxPacket)
	var got []int16
	for f := 0; f < 25; f++ {
		for i := range pcm {
			pcm[i] = int16(8000 * math.Sin(2*math.Pi*440*float64(f*FrameSamples+i)/Rate))
		}
		n, err := enc.Encode(pcm, pkt)
		if err != nil || n == 0 {
			t.Fatalf("encode: %d %v", n, err)
		}
		m, err := dec.Decode(pkt[:n], out)
		if err != nil || m != FrameSamples {
			t.Fatalf("decode: %d %v", m, err)
		}
		if f >= 10 {
			got = append(got, out[:m]...)
		}
	}
	if a, b := power(got, 440), power(got, 880); a < 100*b {
		t.Fatalf("440 Hz power %g, 880 Hz %g", a, b)
	}
	if m, err := dec.Decode(nil, out); err != nil || m != FrameSamples {
		t.Fatalf("plc: %d %v", m, err)
	}
	if _, err := dec.Decode([]byte{0xff, 0xff, 0xff}, out); err == nil {
		t.Fatal("garbage decoded without error")
	}
	if _, err := enc.Encode(pcm[:10], pkt); err != ErrFrame {
		t.Fatalf("short frame: %v", err)
	}
}

// power is the Goertzel filter's power at freq.
func power(x []int16, freq float64) float64 {
	w := 2 * math.Pi * freq / Rate
	c := 2 * math.Cos(w)
	var s1, s2 float64
	for _, v := range x {
		s := float64(v) + c*s1 - s2
		s2, s1 = s1, s
	}
	return s1*s1 + s2*s2 - c*s1*s2
}

// Packets of 10, 40 and 60 ms decode to their own length, a lost one is
// concealed with the length given, and lengths no packet has are refused.
func TestPacketLengths(t *testing.T) {
	enc, dec := codecPair(t)
	pkt := make([]byte, MaxPacket)
	out := make([]int16, MaxPacketSamples)
	for _, ms := range []int{10, 40, 60} {
		pcm := make([]int16, Rate*ms/1000)
		for i := range pcm {
			pcm[i] = int16(8000 * math.Sin(2*math.Pi*440*float64(i)/Rate))
		}
		n, err := enc.EncodePacket(pcm, pkt)
		if err != nil {
			t.Fatalf("%d ms: encode: %v", ms, err)
		}
		if m, err := dec.Decode(pkt[:n], out); err != nil || m != len(pcm) {
			t.Fatalf("%d ms: decoded %d samples (%v), want %d", ms, m, err, len(pcm))
		}
		if m, err := dec.Conceal(out[:len(pcm)]); err != nil || m != len(pcm) {
			t.Fatalf("%d ms: concealed %d samples (%v), want %d", ms, m, err, len(pcm))
		}
	}
	if _, err := enc.EncodePacket(make([]int16, 1000), pkt); err != ErrLength {
		t.Fatalf("1000 samples encoded: %v", err)
	}
	if _, err := dec.Conceal(out[:100]); err != ErrLength {
		t.Fatalf("100 samples concealed: %v", err)
	}
	if _, err := dec.Conceal(make([]int16, MaxPacketSamples+120)); err != ErrLength {
		t.Fatalf("more than 120 ms concealed: %v", err)
	}
}
