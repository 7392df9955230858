package record

import (
	"encoding/binary"
	"errors"

	"github.com/Eyevinn/mp4ff/avc"
)

// H.264 over RTP (RFC 6184) in both directions: incoming packets are assembled
// into access units (one per RTP timestamp) stored as length-prefixed NAL units,
// the sample format of MP4; played-back samples are cut into RTP payloads again.

const (
	nalSEI   = 6
	nalIDR   = 5
	nalSPS   = 7
	nalPPS   = 8
	nalAUD   = 9
	nalSTAPA = 24
	nalFUA   = 28
)

// maxAccessUnit bounds one frame: a hostile or broken publisher must not make the
// recorder buffer without limit.
const maxAccessUnit = 4 << 20

var errAUTooLarge = errors.New("access unit larger than 4 MiB")

// assembler collects one access unit's NAL units from RTP payloads.
type assembler struct {
	buf   []byte // length-prefixed NAL units of the current access unit
	fu    []byte // a fragmented NAL unit being reassembled
	inFU  bool
	key   bool // the access unit holds an IDR slice
	sps   []byte
	pps   []byte
	broke bool // a packet was lost inside the access unit: drop it
	// badSPS is the first SPS that did not parse, for one log line.
	badSPS []byte
}

// push adds one RTP payload; it reports an error only for malformed payloads.
func (a *assembler) push(p []byte) error {
	if len(p) < 1 {
		return errors.New("empty h264 payload")
	}
	switch typ := p[0] & 0x1f; typ {
	case nalSTAPA:
		p = p[1:]
		for len(p) > 0 {
			if len(p) < 2 {
				return errors.New("truncated STAP-A")
			}
			n := int(binary.BigEndian.Uint16(p))
			p = p[2:]
			if n == 0 || n > len(p) {
				return errors.New("STAP-A unit overruns the packet")
			}
			if err := a.nal(p[:n]); err != nil {
				return err
			}
			p = p[n:]
		}
	case nalFUA:
		if len(p) < 3 {
			return errors.New("truncated FU-A")
		}
		start, end := p[1]&0x80 != 0, p[1]&0x40 != 0
		if start {
			a.fu = append(a.fu[:0], p[0]&0xe0|p[1]&0x1f)
			a.inFU = true
		} else if !a.inFU {
			a.broke = true // its start was lost
			return nil
		}
		if len(a.fu)+len(p)-2 > maxAccessUnit {
			return errAUTooLarge
		}
		a.fu = append(a.fu, p[2:]...)
		if end {
			a.inFU = false
			return a.nal(a.fu)
		}
	case 0, 25, 26, 27, 29, 30, 31:
		return errors.New("unsupported h264 packetization")
	default:
		return a.nal(p)
	}
	return nil
}

func (a *assembler) nal(n []byte) error {
	if len(a.buf)+4+len(n) > maxAccessUnit {
		return errAUTooLarge
	}
	switch n[0] & 0x1f {
	case nalIDR:
		a.key = true
	case nalSPS:
		// Keep the last SPS that parses: the segment's avcC is built from it,
		// and a broken one would stop the recording at the next segment.
		if _, err := avc.ParseSPSNALUnit(n, false); err == nil {
			a.sps = append(a.sps[:0], n...)
		} else if a.badSPS == nil {
			a.badSPS = append([]byte(nil), n...)
		}
	case nalPPS:
		a.pps = append(a.pps[:0], n...)
	case nalAUD:
		return nil // meaningless in MP4
	}
	a.buf = binary.BigEndian.AppendUint32(a.buf, uint32(len(n)))
	a.buf = append(a.buf, n...)
	return nil
}

// reset starts the next access unit.
func (a *assembler) reset() {
	a.buf = a.buf[:0]
	a.inFU = false
	a.key = false
	a.broke = false
}

// hasParamSets reports whether the sample already carries SPS and PPS in band.
func hasParamSets(sample []byte) bool {
	var sps, pps bool
	forNALs(sample, func(n []byte) {
		switch n[0] & 0x1f {
		case nalSPS:
			sps = true
		case nalPPS:
			pps = true
		}
	})
	return sps && pps
}

// forNALs calls fn for each NAL unit of a length-prefixed sample; it stops at the
// first malformed length (a torn file must not make a reader panic).
func forNALs(sample []byte, fn func(n []byte)) {
	for len(sample) >= 4 {
		l := int(binary.BigEndian.Uint32(sample))
		sample = sample[4:]
		if l == 0 || l > len(sample) {
			return
		}
		fn(sample[:l])
		sample = sample[l:]
	}
}

// packetizer cuts samples into RTP payloads of at most mtu bytes: a NAL unit that
// fits goes alone, a larger one in FU-A fragments. Small parameter sets are
// aggregated in a STAP-A so the keyframe's first packet carries them.
type packetizer struct {
	mtu int
}

// payloads calls emit for each payload of the sample; last marks the access
// unit's final packet (the RTP marker bit).
func (z packetizer) payloads(sample []byte, emit func(payload []byte, last bool)) {
	var nals [][]byte
	forNALs(sample, func(n []byte) { nals = append(nals, n) })
	var buf []byte
	for i := 0; i < len(nals); i++ {
		n := nals[i]
		last := i == len(nals)-1
		// Aggregate consecutive small NAL units (SPS, PPS, SEI) with what follows.
		if !last && len(n)+len(nals[i+1])+5 <= z.mtu && n[0]&0x1f != nalIDR && n[0]&0x1f != 1 {
			buf = append(buf[:0], n[0]&0x60|nalSTAPA)
			j := i
			for ; j < len(nals) && len(buf)+2+len(nals[j]) <= z.mtu; j++ {
				buf = binary.BigEndian.AppendUint16(buf, uint16(len(nals[j])))
				buf = append(buf, nals[j]...)
			}
			emit(buf, j == len(nals))
			i = j - 1
			continue
		}
		if len(n) <= z.mtu {
			emit(n, last)
			continue
		}
		hdr, body := n[0], n[1:]
		first := true
		for len(body) > 0 {
			c := min(len(body), z.mtu-2)
			fuh := hdr & 0x1f
			if first {
				fuh |= 0x80
			}
			if c == len(body) {
				fuh |= 0x40
			}
			buf = append(buf[:0], hdr&0xe0|nalFUA, fuh)
			buf = append(buf, body[:c]...)
			body = body[c:]
			emit(buf, last && len(body) == 0)
			first = false
		}
	}
}
