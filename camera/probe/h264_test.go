package probe

import (
	"testing"

	"github.com/pion/rtp"
)

func pkt(seq uint16, ts uint32, marker bool, payload ...byte) *rtp.Packet {
	return &rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq, Timestamp: ts, Marker: marker}, Payload: payload}
}

// The assembler counts a frame only when every packet of it arrived and the
// chain goes back to an IDR with SPS and PPS; a gap stops counting until the
// next such IDR.
func TestAssemblerCompleteFrames(t *testing.T) {
	stap := []byte{24, 0, 2, 0x67, 0x42, 0, 1, 0x68} // STAP-A: SPS (2 bytes), PPS (1 byte)
	idrStart := []byte{28, 0x85, 1}                  // FU-A start of an IDR slice
	idrEnd := []byte{28, 0x45, 2}                    // FU-A end
	p := []byte{0x41, 9}                             // a P slice
	steps := []struct {
		p       *rtp.Packet
		frames  int
		keys    int
		gapWant bool
	}{
		{pkt(10, 100, false, p...), 0, 0, false},        // a P frame before any IDR: not decodable
		{pkt(11, 100, true, p...), 0, 0, false},         //
		{pkt(12, 200, false, stap...), 0, 0, false},     // SPS+PPS
		{pkt(13, 200, false, idrStart...), 0, 0, false}, // IDR begins
		{pkt(14, 200, true, idrEnd...), 1, 1, false},    // IDR complete: decodable
		{pkt(15, 300, true, p...), 2, 1, false},         // P follows
		{pkt(17, 400, true, p...), 2, 1, true},          // 16 lost: broken chain
		{pkt(18, 500, true, p...), 2, 1, false},         // still broken
		{pkt(19, 600, false, idrStart...), 2, 1, false}, // an IDR without parameter sets since the gap
		{pkt(20, 600, true, idrEnd...), 2, 1, false},    //
		{pkt(21, 700, false, stap...), 2, 1, false},     // parameter sets, then an IDR: back
		{pkt(22, 700, false, idrStart...), 2, 1, false}, //
		{pkt(23, 700, true, idrEnd...), 3, 2, false},    //
		{pkt(23, 700, true, idrEnd...), 3, 2, false},    // duplicate: ignored
	}
	frames, keys := 0, 0
	a := Assembler{OnFrame: func(k bool) {
		frames++
		if k {
			keys++
		}
	}}
	for i, s := range steps {
		if gap := a.Push(s.p); gap != s.gapWant {
			t.Fatalf("step %d: gap %v", i, gap)
		}
		if frames != s.frames || keys != s.keys {
			t.Fatalf("step %d (seq %d): %d frames %d keyframes, want %d %d", i, s.p.SequenceNumber, frames, keys, s.frames, s.keys)
		}
	}
}
