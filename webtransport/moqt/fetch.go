package moqt

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// FetchHeaderType starts a FETCH data stream (unidirectional): the type, then
// the FETCH's Request ID, then records until FIN.
const FetchHeaderType = 0x05

// Fetch record serialization flags (draft-18): bits 0–1 say where the subgroup
// id comes from, the others which fields are present; 0x8C and 0x10C mark the
// end of a range that does not exist or is unknown.
const (
	fetchSubgroupMask    = 0x03
	fetchObjectPresent   = 0x04
	fetchGroupPresent    = 0x08
	fetchPriorityPresent = 0x10
	fetchExtensions      = 0x20
	fetchDatagram        = 0x40
	fetchEndNotExist     = 0x8C
	fetchEndUnknown      = 0x10C
)

// AppendFetchHeader starts a FETCH data stream for request id.
func AppendFetchHeader(b []byte, requestID uint64) []byte {
	return AppendVI(AppendVI(b, FetchHeaderType), requestID)
}

// FetchEncoder writes the records of one FETCH stream in ascending order. Each
// record is coded against the previous one (group and object deltas, subgroup
// and priority carried over), as draft-18 requires.
type FetchEncoder struct {
	started           bool
	prev              Location
	prevSub, prevPrio uint64
}

// Append encodes one object (ext is the extension block body, without its length).
func (e *FetchEncoder) Append(b []byte, l Location, subgroup uint64, priority byte, ext, payload []byte) ([]byte, error) {
	var flags uint64
	var group, object, sub uint64
	hasGroup, hasObject, hasSub := false, false, false
	switch {
	case !e.started:
		flags |= fetchGroupPresent | fetchObjectPresent
		group, object, hasGroup, hasObject = l.Group, l.Object, true, true
	case l.Group == e.prev.Group:
		if l.Object <= e.prev.Object {
			return b, errors.New("moqt: fetch records out of order")
		}
		if l.Object != e.prev.Object+1 {
			flags |= fetchObjectPresent
			object, hasObject = l.Object-e.prev.Object, true
		}
	case l.Group > e.prev.Group:
		flags |= fetchGroupPresent
		group, hasGroup = l.Group-e.prev.Group-1, true
		if l.Object != e.prev.Object+1 {
			flags |= fetchObjectPresent
			object, hasObject = l.Object, true
		}
	default:
		return b, errors.New("moqt: fetch records out of order")
	}
	switch {
	case subgroup == 0:
	case e.started && subgroup == e.prevSub:
		flags |= 1
	case e.started && subgroup == e.prevSub+1:
		flags |= 2
	default:
		flags |= 3
		sub, hasSub = subgroup, true
	}
	if !e.started || uint64(priority) != e.prevPrio {
		flags |= fetchPriorityPresent
	}
	if len(ext) > 0 {
		flags |= fetchExtensions
	}
	b = AppendVI(b, flags)
	if hasGroup {
		b = AppendVI(b, group)
	}
	if hasSub {
		b = AppendVI(b, sub)
	}
	if hasObject {
		b = AppendVI(b, object)
	}
	if flags&fetchPriorityPresent != 0 {
		b = append(b, priority)
	}
	if len(ext) > 0 {
		b = AppendBytes(b, ext)
	}
	b = AppendBytes(b, payload)
	e.started, e.prev, e.prevSub, e.prevPrio = true, l, subgroup, uint64(priority)
	return b, nil
}

// FetchObject is one object read from a FETCH stream.
type FetchObject struct {
	Location
	Subgroup   uint64
	Priority   byte
	Extensions []byte
	Payload    []byte
}

// FetchDecoder reads the records of a FETCH stream after its header.
type FetchDecoder struct {
	br                *bufio.Reader
	max               int
	started           bool
	prev              Location
	prevSub, prevPrio uint64
	subKnown          bool
}

// NewFetchDecoder reads records from br, refusing objects above max bytes.
func NewFetchDecoder(br *bufio.Reader, max int) *FetchDecoder { return &FetchDecoder{br: br, max: max} }

// ReadFetchHeader reads a FETCH stream's header after its type and returns the
// Request ID.
func ReadFetchHeader(br *bufio.Reader) (uint64, error) { return ReadVI(br) }

// Next reads the next object, skipping end-of-range markers; io.EOF at a record
// boundary is the end of the stream.
func (d *FetchDecoder) Next(o *FetchObject) error {
	for {
		flags, err := ReadVI(d.br)
		if err != nil {
			return err
		}
		if flags == fetchEndNotExist || flags == fetchEndUnknown {
			g, err1 := ReadVI(d.br)
			ob, err2 := ReadVI(d.br)
			if err := errors.Join(err1, err2); err != nil {
				return unexpected(err)
			}
			d.started, d.prev = true, Location{g, ob}
			continue
		}
		if flags >= 0x80 {
			return fmt.Errorf("moqt: fetch serialization flags 0x%x", flags)
		}
		return d.object(flags, o)
	}
}

// streamReader reads fields from a stream, remembering the first error (the
// stream counterpart of Reader).
type streamReader struct {
	br  *bufio.Reader
	err error
}

func (r *streamReader) vi() uint64 {
	if r.err != nil {
		return 0
	}
	v, err := ReadVI(r.br)
	r.err = unexpected(err)
	return v
}

func (r *streamReader) byte() byte {
	if r.err != nil {
		return 0
	}
	c, err := r.br.ReadByte()
	r.err = unexpected(err)
	return c
}

func (r *streamReader) fill(b []byte) {
	if r.err == nil {
		_, err := io.ReadFull(r.br, b)
		r.err = unexpected(err)
	}
}

func (d *FetchDecoder) object(flags uint64, o *FetchObject) error {
	r := &streamReader{br: d.br}
	first := !d.started
	switch {
	case flags&fetchGroupPresent != 0 && first:
		o.Group = r.vi()
	case flags&fetchGroupPresent != 0:
		step := r.vi()
		if d.prev.Group+step+1 <= d.prev.Group {
			return errors.New("moqt: fetch group overflow")
		}
		o.Group = d.prev.Group + step + 1
	case first:
		return errors.New("moqt: first fetch record without a group")
	default:
		o.Group = d.prev.Group
	}
	o.Subgroup = 0
	if flags&fetchDatagram == 0 {
		switch flags & fetchSubgroupMask {
		case 1, 2:
			if !d.subKnown {
				return errors.New("moqt: fetch record refers to a subgroup never given")
			}
			o.Subgroup = d.prevSub + flags&fetchSubgroupMask - 1
		case 3:
			o.Subgroup = r.vi()
		}
	}
	switch {
	case flags&fetchObjectPresent != 0 && (first || flags&fetchGroupPresent != 0):
		o.Object = r.vi()
	case flags&fetchObjectPresent != 0:
		o.Object = d.prev.Object + r.vi()
	case first:
		return errors.New("moqt: first fetch record without an object id")
	default:
		o.Object = d.prev.Object + 1
	}
	switch {
	case flags&fetchPriorityPresent != 0:
		o.Priority = r.byte()
	case first:
		return errors.New("moqt: first fetch record without a priority")
	default:
		o.Priority = byte(d.prevPrio)
	}
	o.Extensions = o.Extensions[:0]
	if flags&fetchExtensions != 0 {
		n := r.vi()
		if n > 4096 {
			return fmt.Errorf("%w: %d bytes of extensions", ErrObjectTooLarge, n)
		}
		if r.err == nil {
			o.Extensions = grow(o.Extensions, int(n))
			r.fill(o.Extensions)
		}
	}
	n := r.vi()
	if n > uint64(d.max) {
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrObjectTooLarge, n, d.max)
	}
	if r.err == nil {
		o.Payload = grow(o.Payload, int(n))
		r.fill(o.Payload)
	}
	if r.err != nil {
		return r.err
	}
	d.started, d.prev, d.prevPrio = true, o.Location, uint64(o.Priority)
	if flags&fetchDatagram == 0 {
		d.prevSub, d.subKnown = o.Subgroup, true
	}
	return nil
}
