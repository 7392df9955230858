package datachan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// SCTP packets (RFC 9260 3): a 12-byte common header, then chunks, each a
// type, flags, length and value padded to four bytes.

const (
	ctData             = 0
	ctInit             = 1
	ctInitAck          = 2
	ctSack             = 3
	ctHeartbeat        = 4
	ctHeartbeatAck     = 5
	ctAbort            = 6
	ctShutdown         = 7
	ctShutdownAck      = 8
	ctError            = 9
	ctCookieEcho       = 10
	ctCookieAck        = 11
	ctShutdownComplete = 14
	ctReconfig         = 130 // RFC 6525
	ctForwardTSN       = 192 // RFC 3758
)

// DATA chunk flags.
const (
	flagEnd       = 0x01
	flagBegin     = 0x02
	flagUnordered = 0x04
	flagImmediate = 0x08 // RFC 7053: SACK at once
)

// Parameters of INIT, INIT-ACK and RE-CONFIG.
const (
	ptStateCookie      = 7
	ptOutgoingReset    = 13
	ptReconfigResponse = 16
	ptSupportedExt     = 0x8008
	ptForwardTSN       = 0xc000
)

const (
	headerSize     = 12
	chunkHeader    = 4
	dataHeaderSize = 16 // chunk header, TSN, stream, SSN, PPID
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var errMalformed = errors.New("datachan: malformed SCTP packet")

// checkPacket verifies a packet's header and CRC32c (stored little-endian,
// as every stack does) and returns its verification tag.
func checkPacket(b []byte) (uint32, error) {
	if len(b) < headerSize+chunkHeader {
		return 0, errMalformed
	}
	want := binary.LittleEndian.Uint32(b[8:])
	crc := crc32.Update(0, castagnoli, b[:8])
	crc = crc32.Update(crc, castagnoli, zero4[:])
	crc = crc32.Update(crc, castagnoli, b[12:])
	if crc != want {
		return 0, errors.New("datachan: bad SCTP checksum")
	}
	return binary.BigEndian.Uint32(b[4:]), nil
}

var zero4 [4]byte

// chunkIter walks a packet's chunks.
type chunkIter struct {
	b   []byte
	err error
}

// next returns the next chunk's type, flags and value (without its header).
func (it *chunkIter) next() (typ, flags byte, value []byte, ok bool) {
	if len(it.b) == 0 || it.err != nil {
		return 0, 0, nil, false
	}
	if len(it.b) < chunkHeader {
		it.err = errMalformed
		return 0, 0, nil, false
	}
	n := int(binary.BigEndian.Uint16(it.b[2:]))
	if n < chunkHeader || n > len(it.b) {
		it.err = fmt.Errorf("%w: chunk length %d of %d bytes left", errMalformed, n, len(it.b))
		return 0, 0, nil, false
	}
	typ, flags, value = it.b[0], it.b[1], it.b[chunkHeader:n]
	pad := (n + 3) &^ 3
	if pad > len(it.b) {
		pad = len(it.b)
	}
	it.b = it.b[pad:]
	return typ, flags, value, true
}

// packetWriter builds one packet in a buffer: header, then chunks, then the
// checksum.
type packetWriter struct {
	b []byte
}

func (w *packetWriter) start(buf []byte, vtag uint32) {
	w.b = append(buf[:0], 0x13, 0x88, 0x13, 0x88) // ports 5000 (RFC 8841)
	w.b = binary.BigEndian.AppendUint32(w.b, vtag)
	w.b = append(w.b, 0, 0, 0, 0)
}

func (w *packetWriter) len() int { return len(w.b) }

// chunk appends a chunk header for a value of n bytes; the caller appends the
// value, then calls pad.
func (w *packetWriter) chunk(typ, flags byte, n int) {
	w.b = append(w.b, typ, flags)
	w.b = binary.BigEndian.AppendUint16(w.b, uint16(chunkHeader+n))
}

func (w *packetWriter) pad() {
	for len(w.b)%4 != 0 {
		w.b = append(w.b, 0)
	}
}

func (w *packetWriter) finish() []byte {
	binary.LittleEndian.PutUint32(w.b[8:], crc32.Checksum(w.b, castagnoli))
	return w.b
}

// params walks TLV parameters (INIT, RE-CONFIG, HEARTBEAT).
func params(b []byte, f func(typ uint16, v []byte)) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return errMalformed
		}
		n := int(binary.BigEndian.Uint16(b[2:]))
		if n < 4 || n > len(b) {
			return errMalformed
		}
		f(binary.BigEndian.Uint16(b), b[4:n])
		n = (n + 3) &^ 3
		if n > len(b) {
			n = len(b)
		}
		b = b[n:]
	}
	return nil
}

func appendParam(b []byte, typ uint16, v []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(4+len(v)))
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// initChunk is INIT and INIT-ACK's fixed part and what Petrel reads of
// their parameters.
type initChunk struct {
	tag        uint32
	rwnd       uint32
	outStreams uint16
	inStreams  uint16
	tsn        uint32
	cookie     []byte
	forwardTSN bool // the peer supports partial reliability
	reconfig   bool // and stream reset
}

func parseInit(v []byte) (initChunk, error) {
	if len(v) < 16 {
		return initChunk{}, errMalformed
	}
	c := initChunk{
		tag:        binary.BigEndian.Uint32(v),
		rwnd:       binary.BigEndian.Uint32(v[4:]),
		outStreams: binary.BigEndian.Uint16(v[8:]),
		inStreams:  binary.BigEndian.Uint16(v[10:]),
		tsn:        binary.BigEndian.Uint32(v[12:]),
	}
	if c.tag == 0 || c.outStreams == 0 || c.inStreams == 0 {
		return c, errors.New("datachan: INIT with a zero tag or no streams")
	}
	err := params(v[16:], func(typ uint16, p []byte) {
		switch typ {
		case ptStateCookie:
			c.cookie = p
		case ptForwardTSN:
			c.forwardTSN = true
		case ptSupportedExt:
			for _, t := range p {
				switch t {
				case ctForwardTSN:
					c.forwardTSN = true
				case ctReconfig:
					c.reconfig = true
				}
			}
		}
	})
	return c, err
}

func appendInit(b []byte, c initChunk) []byte {
	b = binary.BigEndian.AppendUint32(b, c.tag)
	b = binary.BigEndian.AppendUint32(b, c.rwnd)
	b = binary.BigEndian.AppendUint16(b, c.outStreams)
	b = binary.BigEndian.AppendUint16(b, c.inStreams)
	b = binary.BigEndian.AppendUint32(b, c.tsn)
	b = appendParam(b, ptSupportedExt, []byte{ctReconfig, ctForwardTSN})
	b = appendParam(b, ptForwardTSN, nil)
	if c.cookie != nil {
		b = appendParam(b, ptStateCookie, c.cookie)
	}
	return b
}

// TSN and SSN arithmetic is serial (RFC 1982).
func tsnLess(a, b uint32) bool   { return int32(a-b) < 0 }
func tsnLessEq(a, b uint32) bool { return int32(a-b) <= 0 }
func ssnLess(a, b uint16) bool   { return int16(a-b) < 0 }
