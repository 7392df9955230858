package emulator

import (
	"errors"
	"sync/atomic"

	"github.com/pion/rtp"
)

// OpusSamples checks an Opus packet's table of contents (RFC 6716 section 3.1:
// configuration, frame count code, and for codes 1 to 3 the lengths that
// follow) and returns how many 48 kHz samples it carries. There is no Opus
// decoder among the dependencies; a packet whose TOC parses and whose duration
// matches the RTP timestamp step is what a decoder would accept as framing.
func OpusSamples(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, errors.New("empty Opus packet")
	}
	toc := p[0]
	config := int(toc >> 3)
	var frame int // samples at 48 kHz
	switch {
	case config < 12: // SILK: 10, 20, 40, 60 ms
		frame = []int{480, 960, 1920, 2880}[config%4]
	case config < 16: // hybrid: 10, 20 ms
		frame = []int{480, 960}[config%2]
	default: // CELT: 2.5, 5, 10, 20 ms
		frame = []int{120, 240, 480, 960}[config%4]
	}
	n := 1
	switch toc & 3 {
	case 1:
		if (len(p)-1)%2 != 0 {
			return 0, errors.New("Opus code 1: two equal frames need an even length")
		}
		n = 2
	case 2:
		if len(p) < 2 {
			return 0, errors.New("Opus code 2: no frame length")
		}
		l := int(p[1])
		if l >= 252 {
			if len(p) < 3 {
				return 0, errors.New("Opus code 2: truncated frame length")
			}
			l += 4 * int(p[2])
		}
		if l > len(p)-2 {
			return 0, errors.New("Opus code 2: first frame longer than the packet")
		}
		n = 2
	case 3:
		if len(p) < 2 {
			return 0, errors.New("Opus code 3: no frame count")
		}
		n = int(p[1] & 0x3f)
		if n == 0 {
			return 0, errors.New("Opus code 3: zero frames")
		}
	}
	if n*frame > 5760 { // 120 ms
		return 0, errors.New("Opus packet longer than 120 ms")
	}
	return n * frame, nil
}

// TalkStats counts the audio a camera's loudspeaker received on one path.
type TalkStats struct {
	Packets atomic.Int64 // RTP packets received
	Opus    atomic.Int64 // Opus packets whose TOC parsed and whose duration matched the timestamp step
	BadOpus atomic.Int64 // Opus packets that did not
	Other   atomic.Int64 // packets of another codec (G.711)
}

// countTalk reads an incoming audio track until it ends. isOpus tells how to
// check its packets.
func (s *TalkStats) count(read func([]byte) (int, error), isOpus bool) {
	buf := make([]byte, 1500)
	var pkt rtp.Packet
	var prevTS uint32
	var prevSeq uint16
	var prevSamples int
	have := false
	for {
		n, err := read(buf)
		if err != nil {
			return
		}
		if pkt.Unmarshal(buf[:n]) != nil {
			continue
		}
		s.Packets.Add(1)
		if !isOpus {
			s.Other.Add(1)
			continue
		}
		samples, err := OpusSamples(pkt.Payload)
		switch {
		case err != nil:
			s.BadOpus.Add(1)
		case have && pkt.SequenceNumber == prevSeq+1 && (pkt.Timestamp-prevTS < uint32(prevSamples) || pkt.Timestamp-prevTS > 48000):
			// Consecutive packets: the timestamp advances by at least the
			// previous packet's duration (more after a DTX pause), never by
			// seconds. A sequence gap says nothing.
			s.BadOpus.Add(1)
		default:
			s.Opus.Add(1)
		}
		if err == nil {
			prevTS, prevSeq, prevSamples, have = pkt.Timestamp, pkt.SequenceNumber, samples, true
		}
	}
}
