package loadtest

import (
	"encoding/binary"
	"testing"
	"time"
)

// TestFirstFrameIsVideo: a peer that receives video has its first frame when
// the first video frame is complete, not at an audio packet with the marker
// bit (which some servers forward and others clear).
func TestFirstFrameIsVideo(t *testing.T) {
	var tot Counters
	p := NewPeer("v", "subscriber", &tot)
	audio := &streamRx{kind: "audio", clock: 48000, start: p.start}
	video := &streamRx{kind: "video", clock: 90000, start: p.start}
	p.streams = []*streamRx{audio, video}
	pkt := func(seq uint16, marker bool) []byte {
		b := make([]byte, 40)
		b[0] = 0x80
		if marker {
			b[1] = 0x80
		}
		binary.BigEndian.PutUint16(b[2:], seq)
		return b
	}
	audio.onPacketAt(pkt(1, true), &tot, p.onFirst, p.start.Add(10*time.Millisecond))
	video.onPacketAt(pkt(1, false), &tot, p.onFirst, p.start.Add(20*time.Millisecond))
	video.onPacketAt(pkt(2, true), &tot, p.onFirst, p.start.Add(50*time.Millisecond))
	if got := p.Stats().FirstFrameMs; got < 49 || got > 51 {
		t.Errorf("first frame %.1f ms, want the video frame's 50", got)
	}
}
