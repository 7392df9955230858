package moqt

import (
	"errors"
	"fmt"
)

// OBJECT_DATAGRAM type bits (draft-18): one whole object in one datagram, no
// fragmentation and no recovery. Types 0x00–0x0F carry a payload, 0x20–0x2D
// (without bits 0x02 and 0x10) a status instead; Petrel's own datagrams are
// 0x50–0x53, so the first byte tells them apart.
const (
	odExtensions      = 0x01
	odEndOfGroup      = 0x02
	odZeroObjectID    = 0x04
	odDefaultPriority = 0x08
	odStatus          = 0x20
)

// IsObjectDatagram reports whether a datagram starting with t is a MoQT
// OBJECT_DATAGRAM.
func IsObjectDatagram(t byte) bool {
	return t <= 0x0F || t&^(odExtensions|odZeroObjectID|odDefaultPriority) == odStatus
}

// ObjectDatagram is one MoQT OBJECT_DATAGRAM.
type ObjectDatagram struct {
	TrackAlias uint64
	Group      uint64
	Object     uint64
	Priority   byte // 128 when the datagram used the default
	EndOfGroup bool
	Extensions []byte // extension block body, without its length
	HasStatus  bool
	Status     uint64
	Payload    []byte
}

// AppendObjectDatagram encodes d (payload form unless HasStatus).
func AppendObjectDatagram(b []byte, d *ObjectDatagram) []byte {
	var t byte
	if len(d.Extensions) > 0 {
		t |= odExtensions
	}
	if d.Object == 0 {
		t |= odZeroObjectID
	}
	if d.HasStatus {
		t |= odStatus
	} else if d.EndOfGroup {
		t |= odEndOfGroup
	}
	b = append(b, t)
	b = AppendVI(b, d.TrackAlias)
	b = AppendVI(b, d.Group)
	if d.Object != 0 {
		b = AppendVI(b, d.Object)
	}
	b = append(b, d.Priority)
	if len(d.Extensions) > 0 {
		b = AppendBytes(b, d.Extensions)
	}
	if d.HasStatus {
		return AppendVI(b, d.Status)
	}
	return append(b, d.Payload...)
}

// ErrObjectDatagram is wrapped by every OBJECT_DATAGRAM parse error.
var ErrObjectDatagram = errors.New("moqt: bad object datagram")

// ParseObjectDatagram decodes an OBJECT_DATAGRAM into d (aliasing b).
func ParseObjectDatagram(b []byte, d *ObjectDatagram) error {
	if len(b) == 0 || !IsObjectDatagram(b[0]) {
		return fmt.Errorf("%w: type", ErrObjectDatagram)
	}
	t := b[0]
	r := NewReader(b[1:])
	*d = ObjectDatagram{TrackAlias: r.VI(), Group: r.VI(), Priority: 128}
	if t&odZeroObjectID == 0 {
		d.Object = r.VI()
	}
	if t&odDefaultPriority == 0 {
		d.Priority = r.U8()
	}
	if t&odExtensions != 0 {
		d.Extensions = r.Bytes(4096)
		if r.Err() == nil && len(d.Extensions) == 0 {
			return fmt.Errorf("%w: empty extension block", ErrObjectDatagram)
		}
	}
	if t&odStatus != 0 {
		d.HasStatus, d.Status = true, r.VI()
		if r.Err() == nil && r.Len() != 0 {
			return fmt.Errorf("%w: trailing bytes after the status", ErrObjectDatagram)
		}
	} else {
		d.EndOfGroup = t&odEndOfGroup != 0
		d.Payload = r.Rest()
		if r.Err() == nil && len(d.Payload) == 0 {
			return fmt.Errorf("%w: no payload", ErrObjectDatagram)
		}
	}
	if r.Err() != nil {
		return fmt.Errorf("%w: %w", ErrObjectDatagram, r.Err())
	}
	return nil
}
