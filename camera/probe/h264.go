package probe

import "github.com/pion/rtp"

// Assembler follows an H.264 RTP stream (RFC 6184, packetization mode 1) and
// reports each complete frame a decoder could decode: every packet of it
// present, and an unbroken chain back to an IDR preceded by an SPS and a PPS.
// It looks at NAL headers only and keeps no payload.
type Assembler struct {
	// OnFrame is called at the end of each decodable frame.
	OnFrame func(keyframe bool)

	started    bool
	lastSeq    uint16
	prevMarker bool

	inFrame  bool
	frameTS  uint32
	frameOK  bool
	frameIDR bool

	sps, pps  bool // seen since the chain began
	decodable bool
}

// Push takes the next packet; it returns whether a sequence gap came before it.
func (a *Assembler) Push(p *rtp.Packet) (gap bool) {
	if a.started {
		d := int16(p.SequenceNumber - a.lastSeq)
		if d <= 0 {
			return false // duplicate or late: already counted as a gap
		}
		gap = d != 1
	}
	first := !a.started
	a.started = true
	a.lastSeq = p.SequenceNumber
	if gap {
		a.decodable = false
		a.sps, a.pps = false, false
	}
	if !a.inFrame || p.Timestamp != a.frameTS || gap {
		a.inFrame = true
		a.frameTS = p.Timestamp
		a.frameIDR = false
		a.frameOK = !gap && (a.prevMarker || (first && startsNAL(p.Payload)))
	}
	a.scan(p.Payload)
	a.prevMarker = p.Marker
	if p.Marker {
		a.inFrame = false
		if !a.frameOK {
			return gap
		}
		if a.frameIDR && a.sps && a.pps {
			a.decodable = true
		}
		if a.decodable && a.OnFrame != nil {
			a.OnFrame(a.frameIDR)
		}
	}
	return gap
}

// startsNAL reports whether a payload begins a NAL unit (not the middle of a
// fragmented one).
func startsNAL(b []byte) bool {
	if len(b) < 1 {
		return false
	}
	if b[0]&0x1f == 28 {
		return len(b) > 1 && b[1]&0x80 != 0
	}
	return true
}

func (a *Assembler) nal(t byte) {
	switch t {
	case 7:
		a.sps = true
	case 8:
		a.pps = true
	case 5:
		a.frameIDR = true
	}
}

func (a *Assembler) scan(b []byte) {
	if len(b) < 1 {
		return
	}
	switch t := b[0] & 0x1f; t {
	case 24: // STAP-A
		for i := 1; i+2 < len(b); {
			n := int(b[i])<<8 | int(b[i+1])
			i += 2
			if n == 0 || i+n > len(b) {
				return
			}
			a.nal(b[i] & 0x1f)
			i += n
		}
	case 28: // FU-A
		if len(b) > 1 && b[1]&0x80 != 0 {
			a.nal(b[1] & 0x1f)
		}
	default:
		a.nal(t)
	}
}
