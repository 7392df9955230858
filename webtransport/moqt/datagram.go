package moqt

import (
	"errors"
	"fmt"
)

// Petrel datagram types (single-byte draft-18 integers MoQT does not use).
const (
	DgramFragment        = 0x50
	DgramNack            = 0x51
	DgramKeyframeRequest = 0x52
	DgramFEC             = 0x53
)

// Limits of the datagram extension.
const (
	MaxFragments = 1024
	MaxObject    = 4 << 20
)

// Fragment is one piece of an object sent as a datagram.
type Fragment struct {
	TrackAlias uint64
	Group      uint64
	Object     uint64
	Index      int
	Count      int
	Length     int // the whole object's length
	Data       []byte
}

// fragmentHeaderMax is the largest fragment header (6 fields of at most 9 bytes).
const fragmentHeaderMax = 1 + 5*9

// AppendFragment encodes f.
func AppendFragment(b []byte, f *Fragment) []byte {
	b = append(b, DgramFragment)
	b = AppendVI(b, f.TrackAlias)
	b = AppendVI(b, f.Group)
	b = AppendVI(b, f.Object)
	b = AppendVI(b, uint64(f.Index))
	b = AppendVI(b, uint64(f.Count))
	b = AppendVI(b, uint64(f.Length))
	return append(b, f.Data...)
}

// Split cuts object (extension block + payload) into fragments that fit
// maxDatagram bytes each, calling emit with each encoded datagram (buf is reused
// between calls: emit must copy what it keeps).
func Split(alias, group, object uint64, obj []byte, maxDatagram int, buf []byte, emit func(dgram []byte)) error {
	hdr := 1 + SizeVI(alias) + SizeVI(group) + SizeVI(object) + 2 + 2 + SizeVI(uint64(len(obj)))
	room := maxDatagram - hdr
	if room < 16 {
		return fmt.Errorf("moqt: datagram size %d too small", maxDatagram)
	}
	if len(obj) > MaxObject {
		return fmt.Errorf("%w: %d bytes", ErrObjectTooLarge, len(obj))
	}
	count := (len(obj) + room - 1) / room
	if count == 0 {
		count = 1
	}
	if count > MaxFragments {
		return fmt.Errorf("%w: %d fragments", ErrObjectTooLarge, count)
	}
	// Even sizes: the last fragment is not a runt that a loss hits as often.
	per := (len(obj) + count - 1) / count
	for i := 0; i < count; i++ {
		lo, hi := i*per, min((i+1)*per, len(obj))
		if lo > hi {
			lo = hi
		}
		f := Fragment{TrackAlias: alias, Group: group, Object: object, Index: i, Count: count, Length: len(obj), Data: obj[lo:hi]}
		buf = AppendFragment(buf[:0], &f)
		emit(buf)
	}
	return nil
}

// Nack asks the publisher to resend fragments of one object.
type Nack struct {
	TrackAlias uint64
	Group      uint64
	Object     uint64
	Missing    []int
}

// KeyframeRequest asks the publisher to start a new group.
type KeyframeRequest struct {
	TrackAlias uint64
	GroupSeen  uint64
}

// FEC is the XOR of a run of an object's fragments.
type FEC struct {
	TrackAlias uint64
	Group      uint64
	Object     uint64
	First      int
	Count      int
	Parity     []byte
}

// AppendNack encodes n.
func AppendNack(b []byte, n *Nack) []byte {
	b = append(b, DgramNack)
	b = AppendVI(b, n.TrackAlias)
	b = AppendVI(b, n.Group)
	b = AppendVI(b, n.Object)
	b = AppendVI(b, uint64(len(n.Missing)))
	for _, m := range n.Missing {
		b = AppendVI(b, uint64(m))
	}
	return b
}

// AppendKeyframeRequest encodes k.
func AppendKeyframeRequest(b []byte, k *KeyframeRequest) []byte {
	b = append(b, DgramKeyframeRequest)
	b = AppendVI(b, k.TrackAlias)
	return AppendVI(b, k.GroupSeen)
}

// AppendFEC encodes f.
func AppendFEC(b []byte, f *FEC) []byte {
	b = append(b, DgramFEC)
	b = AppendVI(b, f.TrackAlias)
	b = AppendVI(b, f.Group)
	b = AppendVI(b, f.Object)
	b = AppendVI(b, uint64(f.First))
	b = AppendVI(b, uint64(f.Count))
	return AppendBytes(b, f.Parity)
}

// ErrDatagram is wrapped by every datagram parse error.
var ErrDatagram = errors.New("moqt: bad datagram")

// ParseDatagram decodes one Petrel datagram; the result is *Fragment, *Nack,
// *KeyframeRequest or *FEC and aliases b.
func ParseDatagram(b []byte) (any, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrDatagram)
	}
	r := NewReader(b[1:])
	var out any
	switch b[0] {
	case DgramFragment:
		f := &Fragment{TrackAlias: r.VI(), Group: r.VI(), Object: r.VI()}
		idx, cnt, l := r.VI(), r.VI(), r.VI()
		f.Data = r.Rest()
		if r.Err() == nil {
			switch {
			case cnt == 0 || cnt > MaxFragments || idx >= cnt:
				return nil, fmt.Errorf("%w: fragment %d of %d", ErrDatagram, idx, cnt)
			case l > MaxObject:
				return nil, fmt.Errorf("%w: object of %d bytes: %w", ErrDatagram, l, ErrObjectTooLarge)
			case uint64(len(f.Data)) > l:
				return nil, fmt.Errorf("%w: fragment longer than its object", ErrDatagram)
			}
		}
		f.Index, f.Count, f.Length = int(idx), int(cnt), int(l)
		out = f
	case DgramNack:
		n := &Nack{TrackAlias: r.VI(), Group: r.VI(), Object: r.VI()}
		c := r.VI()
		if r.Err() == nil && c > MaxFragments {
			return nil, fmt.Errorf("%w: nack of %d fragments", ErrDatagram, c)
		}
		for i := uint64(0); i < c && r.Err() == nil; i++ {
			v := r.VI()
			if v >= MaxFragments {
				return nil, fmt.Errorf("%w: nack index %d", ErrDatagram, v)
			}
			n.Missing = append(n.Missing, int(v))
		}
		out = n
	case DgramKeyframeRequest:
		out = &KeyframeRequest{TrackAlias: r.VI(), GroupSeen: r.VI()}
	case DgramFEC:
		f := &FEC{TrackAlias: r.VI(), Group: r.VI(), Object: r.VI()}
		first, cnt := r.VI(), r.VI()
		f.Parity = r.Bytes(MaxObject)
		if r.Err() == nil && (cnt == 0 || first+cnt > MaxFragments) {
			return nil, fmt.Errorf("%w: fec over %d+%d", ErrDatagram, first, cnt)
		}
		f.First, f.Count = int(first), int(cnt)
		out = f
	default:
		return nil, fmt.Errorf("%w: type 0x%x", ErrDatagram, b[0])
	}
	if r.Err() != nil {
		return nil, fmt.Errorf("%w: %w", ErrDatagram, r.Err())
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: trailing bytes", ErrDatagram)
	}
	return out, nil
}
