package moqt

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// LOC-style object extension keys (Petrel's ids; docs/protocol.md).
const (
	ExtTimestamp   = 0x2A0 // vi, media timestamp in microseconds
	ExtFlags       = 0x2A2 // vi, FlagKeyframe | FlagDiscardable
	ExtCodec       = 0x2A3 // bytes, codec string
	ExtWallclock   = 0x2A4 // vi, capture time, ms since the Unix epoch
	ExtDescription = 0x2A5 // bytes, codec description (avcC, Opus head)
	ExtWidth       = 0x2A6
	ExtHeight      = 0x2A8
	ExtAudioLevel  = 0x2AA
)

// Object flags.
const (
	FlagKeyframe    = 1
	FlagDiscardable = 2
)

// Meta is an object's LOC-style metadata.
type Meta struct {
	TimestampUs uint64
	Keyframe    bool
	Codec       string
	WallclockMs uint64
	Description []byte
	Width       int
	Height      int
	AudioLevel  int // -1: absent
}

// AppendExtensions appends m as an extension-header block (vi byte length +
// pairs), the form both stream objects and datagram objects carry.
func AppendExtensions(b []byte, m *Meta) []byte {
	var tmp [96]byte
	p := tmp[:0]
	var prev uint64
	put := func(k, v uint64) {
		p = AppendVI(p, k-prev)
		p = AppendVI(p, v)
		prev = k
	}
	putB := func(k uint64, v []byte) {
		p = AppendVI(p, k-prev)
		p = AppendBytes(p, v)
		prev = k
	}
	put(ExtTimestamp, m.TimestampUs)
	var flags uint64
	if m.Keyframe {
		flags |= FlagKeyframe
	}
	put(ExtFlags, flags)
	if m.Codec != "" {
		putB(ExtCodec, []byte(m.Codec))
	}
	if m.WallclockMs != 0 {
		put(ExtWallclock, m.WallclockMs)
	}
	if len(m.Description) > 0 {
		putB(ExtDescription, m.Description)
	}
	if m.Width > 0 {
		put(ExtWidth, uint64(m.Width))
	}
	if m.Height > 0 {
		put(ExtHeight, uint64(m.Height))
	}
	if m.AudioLevel >= 0 && m.AudioLevel <= 127 {
		put(ExtAudioLevel, uint64(m.AudioLevel))
	}
	b = AppendVI(b, uint64(len(p)))
	return append(b, p...)
}

// ParseExtensions reads an extension block body (without its length) into m.
// Unknown keys are skipped: other implementations put their own there.
func ParseExtensions(b []byte, m *Meta) error {
	*m = Meta{AudioLevel: -1}
	r := NewReader(b)
	for _, p := range readPairsToEnd(r) {
		switch p.Key {
		case ExtTimestamp:
			m.TimestampUs = p.Int
		case ExtFlags:
			m.Keyframe = p.Int&FlagKeyframe != 0
		case ExtCodec:
			m.Codec = string(p.Bytes)
		case ExtWallclock:
			m.WallclockMs = p.Int
		case ExtDescription:
			m.Description = append([]byte(nil), p.Bytes...)
		case ExtWidth:
			m.Width = int(min(p.Int, 1<<16))
		case ExtHeight:
			m.Height = int(min(p.Int, 1<<16))
		case ExtAudioLevel:
			m.AudioLevel = int(min(p.Int, 127))
		}
	}
	return r.Err()
}

// SubgroupHeader starts a subgroup data stream.
type SubgroupHeader struct {
	Type       uint64
	TrackAlias uint64
	Group      uint64
	Subgroup   uint64
	Priority   byte
}

// HeaderTypeSend is what Petrel writes: explicit subgroup id, extensions,
// explicit priority, no end-of-group marker.
const HeaderTypeSend = 0x15

// Subgroup stream type bits (draft-18): 0x10 is set on every subgroup type;
// bits 0x06 say where the subgroup id comes from (0 zero, 2 first object id, 4
// explicit); the rest are flags.
const (
	sgExtensions      = 0x01
	sgEndOfGroup      = 0x08
	sgDefaultPriority = 0x20
	sgFirstObject     = 0x40 // the stream starts at the subgroup's first object
)

// validSubgroupType reports whether t is a draft-18 subgroup stream type
// (0x10–0x15, 0x18–0x1D, 0x30–0x35, 0x38–0x3D and the same +0x40).
func validSubgroupType(t uint64) bool {
	base := t &^ (sgExtensions | sgEndOfGroup | sgDefaultPriority | sgFirstObject)
	return base == 0x10 || base == 0x12 || base == 0x14
}

// HasExtensions reports whether objects of this stream carry extension headers.
func (h SubgroupHeader) HasExtensions() bool { return h.Type&sgExtensions != 0 }

func (h SubgroupHeader) hasSubgroupID() bool { return h.Type&0x06 == 4 }

func (h SubgroupHeader) hasPriority() bool { return h.Type&sgDefaultPriority == 0 }

// AppendSubgroupHeader encodes h (h.Type 0 means HeaderTypeSend).
func AppendSubgroupHeader(b []byte, h SubgroupHeader) []byte {
	if h.Type == 0 {
		h.Type = HeaderTypeSend
	}
	b = AppendVI(b, h.Type)
	b = AppendVI(b, h.TrackAlias)
	b = AppendVI(b, h.Group)
	if h.hasSubgroupID() {
		b = AppendVI(b, h.Subgroup)
	}
	if h.hasPriority() {
		b = append(b, h.Priority)
	}
	return b
}

// ErrNotSubgroup is returned for a data stream that is not a subgroup stream
// (a FETCH stream, garbage).
var ErrNotSubgroup = errors.New("moqt: not a subgroup stream")

// ReadSubgroupHeader reads the header of a data stream.
func ReadSubgroupHeader(br *bufio.Reader) (SubgroupHeader, error) {
	t, err := ReadVI(br)
	if err != nil {
		return SubgroupHeader{}, err
	}
	return ReadSubgroupHeaderAfterType(br, t)
}

// ReadSubgroupHeaderAfterType reads the rest of a subgroup header whose type t
// the caller already read (to tell data streams from the control stream).
func ReadSubgroupHeaderAfterType(br *bufio.Reader, t uint64) (SubgroupHeader, error) {
	h := SubgroupHeader{Type: t}
	var err error
	if !validSubgroupType(h.Type) {
		return h, fmt.Errorf("%w: type 0x%x", ErrNotSubgroup, h.Type)
	}
	if h.TrackAlias, err = ReadVI(br); err != nil {
		return h, err
	}
	if h.Group, err = ReadVI(br); err != nil {
		return h, err
	}
	if h.hasSubgroupID() {
		if h.Subgroup, err = ReadVI(br); err != nil {
			return h, err
		}
	}
	if h.hasPriority() {
		if h.Priority, err = br.ReadByte(); err != nil {
			return h, err
		}
	} else {
		h.Priority = 128
	}
	return h, nil
}

// AppendObject encodes one object of a subgroup stream. prev is the previous
// object id on the stream (-1 for the first).
func AppendObject(b []byte, prev int64, id uint64, m *Meta, payload []byte) []byte {
	if prev < 0 {
		b = AppendVI(b, id)
	} else {
		b = AppendVI(b, id-uint64(prev)-1)
	}
	b = AppendExtensions(b, m)
	b = AppendVI(b, uint64(len(payload)))
	return append(b, payload...)
}

// StreamObject is one object read from a subgroup stream.
type StreamObject struct {
	ID         uint64
	Extensions []byte // the raw extension block body (without its length)
	Status     uint64
	Payload    []byte
}

// ErrObjectTooLarge is returned for an object above the reader's limit.
var ErrObjectTooLarge = errors.New("moqt: object too large")

// ObjectReader reads the objects of one subgroup stream.
type ObjectReader struct {
	br   *bufio.Reader
	h    SubgroupHeader
	prev int64
	max  int
}

// NewObjectReader reads objects after h from br, refusing objects above max bytes.
func NewObjectReader(br *bufio.Reader, h SubgroupHeader, max int) *ObjectReader {
	return &ObjectReader{br: br, h: h, prev: -1, max: max}
}

// Next reads the next object into o, reusing o's buffers. io.EOF at a clean
// object boundary is the end of the stream.
func (or *ObjectReader) Next(o *StreamObject) error {
	d, err := ReadVI(or.br)
	if err != nil {
		return err // io.EOF: clean end
	}
	if or.prev < 0 {
		o.ID = d
	} else {
		o.ID = uint64(or.prev) + d + 1
		if o.ID < uint64(or.prev) {
			return errors.New("moqt: object id overflow")
		}
	}
	if o.ID > 1<<62 {
		return errors.New("moqt: object id out of range")
	}
	or.prev = int64(o.ID)
	o.Extensions = o.Extensions[:0]
	if or.h.HasExtensions() {
		n, err := ReadVI(or.br)
		if err != nil {
			return unexpected(err)
		}
		if n > 4096 {
			return fmt.Errorf("%w: %d bytes of extensions", ErrObjectTooLarge, n)
		}
		o.Extensions = grow(o.Extensions, int(n))
		if _, err := io.ReadFull(or.br, o.Extensions); err != nil {
			return unexpected(err)
		}
	}
	n, err := ReadVI(or.br)
	if err != nil {
		return unexpected(err)
	}
	o.Status = 0
	if n == 0 {
		if o.Status, err = ReadVI(or.br); err != nil {
			return unexpected(err)
		}
		o.Payload = o.Payload[:0]
		return nil
	}
	if n > uint64(or.max) {
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrObjectTooLarge, n, or.max)
	}
	o.Payload = grow(o.Payload, int(n))
	if _, err := io.ReadFull(or.br, o.Payload); err != nil {
		return unexpected(err)
	}
	return nil
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
