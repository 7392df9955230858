package sfu

import (
	"strings"

	"github.com/pion/rtp"
)

// Packet is one RTP packet from a publisher, parsed once and shared read-only by
// every subscriber's DownTrack. Payload points into the packet cache slot.
type Packet struct {
	Header   rtp.Header
	Payload  []byte
	Keyframe bool
	// Layer is the simulcast layer the packet belongs to (0 without simulcast).
	Layer int8
	// VP8 is the parsed VP8 payload descriptor (zero for other codecs).
	VP8 vp8Descriptor
	// SVC is the packet's spatial/temporal layer in a scalable stream (svc.go).
	SVC svcInfo
	// Arrival is the monotonic arrival time in nanoseconds (see now()).
	Arrival int64
}

// vp8Descriptor locates the fields of a VP8 payload descriptor (RFC 7741) that
// must be rewritten when a subscriber's stream switches between simulcast layers.
type vp8Descriptor struct {
	picOff int8 // offset of the picture ID, 0 if absent
	pic15  bool // 15-bit picture ID (M bit)
	picID  uint16
	tl0Off int8 // offset of TL0PICIDX, 0 if absent
	tl0    uint8
	// Temporal scalability (T bit): the packet's temporal layer and its layer
	// sync bit (Y: the frame depends only on TL0 frames, so a subscriber can
	// start receiving its layer here; from a dependency descriptor: the frame
	// is a switch point of its own layer's decode target).
	hasTID bool
	tid    uint8
	sync   bool
	// switchUp is the highest temporal layer a subscriber can switch up to at
	// this frame if it can decode the frame itself (a dependency descriptor's
	// switch indications; -1: none, 0 without a descriptor).
	switchUp int8
	// start: the first packet of a frame (S set, partition 0).
	start bool
}

func parseVP8(p []byte) vp8Descriptor {
	var d vp8Descriptor
	if len(p) < 2 || p[0]&0x80 == 0 {
		return d
	}
	ext := p[1]
	d.start = p[0]&0x10 != 0 && p[0]&0x07 == 0
	i := 2
	if ext&0x80 != 0 {
		if len(p) <= i {
			return vp8Descriptor{}
		}
		d.picOff = int8(i)
		if p[i]&0x80 != 0 {
			if len(p) <= i+1 {
				return vp8Descriptor{}
			}
			d.pic15 = true
			d.picID = uint16(p[i]&0x7f)<<8 | uint16(p[i+1])
			i += 2
		} else {
			d.picID = uint16(p[i])
			i++
		}
	}
	if ext&0x40 != 0 {
		if len(p) <= i {
			return vp8Descriptor{}
		}
		d.tl0Off = int8(i)
		d.tl0 = p[i]
		i++
	}
	if ext&0x20 != 0 { // T: TID|Y|KEYIDX
		if len(p) <= i {
			return vp8Descriptor{}
		}
		d.hasTID = true
		d.tid = p[i] >> 6
		d.sync = p[i]&0x20 != 0
	}
	return d
}

// rewrite writes picture ID and TL0PICIDX shifted by the offsets into p, which
// must be a private copy of the payload.
func (d *vp8Descriptor) rewrite(p []byte, picOffset uint16, tl0Offset uint8) {
	if d.picOff != 0 {
		id := d.picID + picOffset
		if d.pic15 {
			p[d.picOff] = 0x80 | byte(id>>8)&0x7f
			p[d.picOff+1] = byte(id)
		} else {
			p[d.picOff] = byte(id) & 0x7f
		}
	}
	if d.tl0Off != 0 {
		p[d.tl0Off] = d.tl0 + tl0Offset
	}
}

// splitRTP parses raw's header into h and returns the payload without its
// padding, recording the padding size in h so that it is written back on send.
// It rejects what is not RTP. It allocates nothing once h's slices have grown.
func splitRTP(h *rtp.Header, raw []byte) ([]byte, bool) {
	hn, err := h.Unmarshal(raw)
	if err != nil {
		return nil, false
	}
	end := len(raw)
	h.PaddingSize = 0
	if h.Padding {
		pad := int(raw[end-1])
		if pad == 0 || hn+pad > end {
			return nil, false
		}
		end -= pad
		h.PaddingSize = byte(pad)
	}
	return raw[hn:end], true
}

// codecKind identifies the payload format for keyframe detection.
type codecKind uint8

const (
	codecOther codecKind = iota
	codecVP8
	codecVP9
	codecH264
	codecAV1
	codecH265
)

func codecOf(mime string) codecKind {
	switch strings.ToLower(mime) {
	case "video/vp8":
		return codecVP8
	case "video/vp9":
		return codecVP9
	case "video/h264":
		return codecH264
	case "video/av1":
		return codecAV1
	case "video/h265":
		return codecH265
	}
	return codecOther
}

// isKeyframe reports whether payload starts or carries a keyframe. It looks only at
// the payload descriptor and the first bytes of the frame; it never decodes.
func isKeyframe(c codecKind, p []byte) bool {
	switch c {
	case codecVP8:
		return vp8Keyframe(p)
	case codecVP9:
		return vp9Keyframe(p)
	case codecH264:
		return h264Keyframe(p)
	case codecAV1:
		// Aggregation header Z|Y|W|W|N|-|-|-: N starts a new coded video sequence.
		return len(p) > 0 && p[0]&0x08 != 0
	case codecH265:
		return h265Keyframe(p)
	}
	return false
}

func vp8Keyframe(p []byte) bool {
	if len(p) < 1 {
		return false
	}
	x := p[0]&0x80 != 0
	s := p[0]&0x10 != 0
	pid := p[0] & 0x07
	if !s || pid != 0 {
		return false
	}
	i := 1
	if x {
		if len(p) < 2 {
			return false
		}
		ext := p[1]
		i = 2
		if ext&0x80 != 0 { // picture id
			if len(p) <= i {
				return false
			}
			if p[i]&0x80 != 0 {
				i += 2
			} else {
				i++
			}
		}
		if ext&0x40 != 0 { // tl0picidx
			i++
		}
		if ext&0x30 != 0 { // tid / keyidx
			i++
		}
	}
	// Frame tag: bit 0 is the inverse key frame flag.
	return len(p) > i && p[i]&0x01 == 0
}

// vp9Keyframe: I|P|L|F|B|E|V|Z not inter-predicted (P=0), the start of a frame
// (B=1) and, in a stream with spatial layers, of the base layer: upper layers
// of a key picture are not inter-predicted either, but a stream cannot start
// with them.
func vp9Keyframe(p []byte) bool {
	if len(p) == 0 || p[0]&0x40 != 0 || p[0]&0x08 == 0 {
		return false
	}
	if p[0]&0x20 == 0 { // no layer indices
		return true
	}
	i := 1
	if p[0]&0x80 != 0 { // picture ID, 7 or 15 bits
		if len(p) < 2 {
			return false
		}
		i = 2
		if p[1]&0x80 != 0 {
			i = 3
		}
	}
	return len(p) > i && (p[i]>>1)&0x07 == 0
}

func h264Keyframe(p []byte) bool {
	if len(p) < 1 {
		return false
	}
	switch t := p[0] & 0x1f; {
	case t == 5 || t == 7:
		return true
	case t == 24: // STAP-A: 16-bit sizes then NAL units
		for i := 1; i+2 < len(p); {
			n := int(p[i])<<8 | int(p[i+1])
			i += 2
			if i >= len(p) {
				break
			}
			if nt := p[i] & 0x1f; nt == 5 || nt == 7 {
				return true
			}
			i += n
		}
	case t == 28: // FU-A: start bit and the inner type
		return len(p) > 1 && p[1]&0x80 != 0 && (p[1]&0x1f == 5 || p[1]&0x1f == 7)
	}
	return false
}

func h265Keyframe(p []byte) bool {
	if len(p) < 3 {
		return false
	}
	irap := func(t byte) bool { return (t >= 16 && t <= 21) || t == 32 || t == 33 || t == 34 }
	switch t := (p[0] >> 1) & 0x3f; {
	case irap(t):
		return true
	case t == 48: // aggregation packet: check the first unit
		return len(p) > 4 && irap((p[4]>>1)&0x3f)
	case t == 49: // fragmentation unit
		return p[2]&0x80 != 0 && irap(p[2]&0x3f)
	}
	return false
}
