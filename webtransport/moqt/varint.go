// Package moqt is the wire codec of MoQ Transport draft-ietf-moq-transport-18 as
// Petrel speaks it (docs/protocol.md, "WebTransport media (MoQT)"): the draft-18
// variable-length integer, key-value pairs, the control messages Petrel uses,
// subgroup stream headers and objects, LOC-style object metadata, and Petrel's
// datagram extensions (fragments, NACK, keyframe request, FEC) with reassembly.
// Everything here parses hostile input: every decoder bounds-checks and returns
// an error, never panics.
package moqt

import (
	"errors"
	"io"
)

// ErrShort means the input ended inside a field.
var ErrShort = errors.New("moqt: truncated")

// MaxVI is the largest value a draft-18 integer carries (all of uint64).
const MaxVI = ^uint64(0)

// SizeVI is the encoded length of v: the shortest form, as draft-18 requires of
// encoders (a prefix of n one-bits means n extra bytes).
func SizeVI(v uint64) int {
	switch {
	case v <= 0x7F:
		return 1
	case v <= 0x3FFF:
		return 2
	case v <= 0x1F_FFFF:
		return 3
	case v <= 0x0FFF_FFFF:
		return 4
	case v <= 0x07_FFFF_FFFF:
		return 5
	case v <= 0x03FF_FFFF_FFFF:
		return 6
	case v <= 0x01_FFFF_FFFF_FFFF:
		return 7
	case v <= 0x00FF_FFFF_FFFF_FFFF:
		return 8
	}
	return 9
}

// AppendVI appends v in draft-18 form. Draft-18 replaced the QUIC varint (2-bit
// length) with a leading-ones prefix so that all 64 bits fit.
func AppendVI(b []byte, v uint64) []byte {
	n := SizeVI(v)
	switch n {
	case 1:
		return append(b, byte(v))
	case 9:
		return append(b, 0xFF, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	tag := byte(0xFF << (9 - n))
	b = append(b, tag|byte(v>>(8*(n-1))))
	for i := n - 2; i >= 0; i-- {
		b = append(b, byte(v>>(8*i)))
	}
	return b
}

// extra is the number of bytes after the first one.
func extra(first byte) int {
	n := 0
	for n < 8 && first&(0x80>>n) != 0 {
		n++
	}
	return n
}

// ParseVI decodes one integer from the start of b and returns it with its length.
func ParseVI(b []byte) (uint64, int, error) {
	if len(b) == 0 {
		return 0, 0, ErrShort
	}
	n := extra(b[0])
	if len(b) < 1+n {
		return 0, 0, ErrShort
	}
	var v uint64
	if n < 7 {
		v = uint64(b[0] & (0xFF >> (n + 1)))
	}
	for i := 1; i <= n; i++ {
		v = v<<8 | uint64(b[i])
	}
	return v, 1 + n, nil
}

// ReadVI decodes one integer from a byte stream.
func ReadVI(r io.ByteReader) (uint64, error) {
	first, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	n := extra(first)
	var v uint64
	if n < 7 {
		v = uint64(first & (0xFF >> (n + 1)))
	}
	for i := 0; i < n; i++ {
		c, err := r.ReadByte()
		if err != nil {
			if err == io.EOF {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, err
		}
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// Reader walks a byte slice, remembering the first error: decoders read every
// field and check Err once, which keeps them short without hiding a truncation.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err is the first error met.
func (r *Reader) Err() error { return r.err }

// Len is the number of unread bytes.
func (r *Reader) Len() int { return len(r.b) }

// Rest returns the unread bytes and consumes them.
func (r *Reader) Rest() []byte { b := r.b; r.b = nil; return b }

// VI reads an integer.
func (r *Reader) VI() uint64 {
	if r.err != nil {
		return 0
	}
	v, n, err := ParseVI(r.b)
	if err != nil {
		r.err = err
		return 0
	}
	r.b = r.b[n:]
	return v
}

// U8 reads one byte.
func (r *Reader) U8() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.err = ErrShort
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// U16 reads a big-endian 16-bit integer.
func (r *Reader) U16() uint16 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 2 {
		r.err = ErrShort
		return 0
	}
	v := uint16(r.b[0])<<8 | uint16(r.b[1])
	r.b = r.b[2:]
	return v
}

// Bytes reads a vi length and that many bytes (aliasing the input), refusing
// lengths above max.
func (r *Reader) Bytes(max int) []byte {
	n := r.VI()
	if r.err != nil {
		return nil
	}
	if n > uint64(max) {
		r.err = errors.New("moqt: field too long")
		return nil
	}
	if uint64(len(r.b)) < n {
		r.err = ErrShort
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

// Fixed reads n bytes.
func (r *Reader) Fixed(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.err = ErrShort
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

// AppendBytes appends a vi length and b.
func AppendBytes(dst, b []byte) []byte {
	return append(AppendVI(dst, uint64(len(b))), b...)
}
