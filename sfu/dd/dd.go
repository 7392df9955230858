// Package dd reads the AV1 RTP dependency descriptor header extension
// (https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension)
// and rewrites its active decode targets, which is what a forwarder needs to drop
// spatial and temporal layers of one stream without decoding: each packet names a
// frame template, the template gives the frame's spatial and temporal layer and
// how it matters to each decode target (not present, discardable, switch point,
// required), and the template structure that defines them travels on keyframes.
//
// Parsing a descriptor that carries no structure allocates nothing.
package dd

import (
	"errors"
	"fmt"
)

// Decode target indications (spec: DTI).
const (
	DTINotPresent  = 0
	DTIDiscardable = 1
	DTISwitch      = 2
	DTIRequired    = 3
)

// Limits of the format (dt_cnt_minus_one is 5 bits, template ids 6 bits).
const (
	MaxDecodeTargets = 32
	MaxTemplates     = 64
	maxSpatial       = 4
)

var (
	ErrShort       = errors.New("dd: descriptor ends early")
	ErrNoStructure = errors.New("dd: no template structure received yet")
	ErrTemplate    = errors.New("dd: frame names a template the structure does not have")
	ErrStructure   = errors.New("dd: malformed template structure")
)

// Structure is a template dependency structure: it stays valid for the frames
// that follow it until the next one.
type Structure struct {
	IDOffset    uint8
	DTCount     int
	Templates   int
	Spatial     [MaxTemplates]uint8
	Temporal    [MaxTemplates]uint8
	DTI         [MaxTemplates][MaxDecodeTargets]uint8
	Fdiffs      [MaxTemplates][]uint8
	Chains      int
	ProtectedBy [MaxDecodeTargets]uint8
	ChainFdiffs [MaxTemplates][MaxDecodeTargets]uint8
	MaxSpatial  uint8
	MaxTemporal uint8
	// DecodeTarget{Spatial,Temporal} are the highest layers each decode target uses.
	DecodeTargetSpatial  [MaxDecodeTargets]uint8
	DecodeTargetTemporal [MaxDecodeTargets]uint8
	// Render sizes per spatial layer when the structure gives them (0 otherwise).
	Width, Height [maxSpatial]uint16
}

// Descriptor is one parsed dependency descriptor.
type Descriptor struct {
	StartOfFrame, EndOfFrame bool
	TemplateID               uint8
	FrameNumber              uint16
	// Structure is the structure the frame was read with: NewStructure is set
	// when this descriptor carried it.
	Structure    *Structure
	NewStructure bool
	// ActiveTargets is the active decode targets bitmask when present
	// (HasActiveTargets), all targets after a new structure.
	HasActiveTargets bool
	ActiveTargets    uint32
	Spatial          uint8
	Temporal         uint8
	// DTI per decode target of this frame (the template's or custom).
	DTI [MaxDecodeTargets]uint8

	// Where parts lie, in bits from the start, for rewriting.
	extended      bool
	flagsEnd      int // end of the five extended flags
	structEnd     int // end of the template structure (== flagsEnd without one)
	maskEnd       int // end of the active decode targets bitmask
	frameDefEnd   int
	customFlags   uint8 // custom_dtis, custom_fdiffs, custom_chains as in the 3 low bits
	structPresent bool
}

type reader struct {
	b   []byte
	pos int
	err error
}

func (r *reader) f(n int) uint32 {
	var v uint32
	for i := 0; i < n; i++ {
		if r.pos >= len(r.b)*8 {
			r.err = ErrShort
			return 0
		}
		bit := r.b[r.pos>>3] >> (7 - r.pos&7) & 1
		v = v<<1 | uint32(bit)
		r.pos++
	}
	return v
}

// ns reads a non-symmetric unsigned value below n (spec 4.10.7 of AV1).
func (r *reader) ns(n uint32) uint32 {
	w := 0
	for x := n; x != 0; x >>= 1 {
		w++
	}
	m := uint32(1)<<w - n
	v := r.f(w - 1)
	if v < m {
		return v
	}
	return v<<1 - m + r.f(1)
}

// Parse reads buf, the extension's payload. prev is the stream's latest structure
// (nil if none yet); a descriptor that carries a new one returns it in
// d.Structure, newly allocated, and the caller keeps it for the frames after.
func Parse(d *Descriptor, buf []byte, prev *Structure) error {
	*d = Descriptor{}
	if len(buf) < 3 {
		return ErrShort
	}
	r := reader{b: buf}
	d.StartOfFrame = r.f(1) == 1
	d.EndOfFrame = r.f(1) == 1
	d.TemplateID = uint8(r.f(6))
	d.FrameNumber = uint16(r.f(16))
	s := prev
	if len(buf) > 3 {
		d.extended = true
		d.structPresent = r.f(1) == 1
		d.HasActiveTargets = r.f(1) == 1
		d.customFlags = uint8(r.f(3))
		d.flagsEnd = r.pos
		if d.structPresent {
			s = new(Structure)
			if err := readStructure(&r, s); err != nil {
				return err
			}
			d.NewStructure = true
		}
		d.structEnd = r.pos
		if s == nil {
			return ErrNoStructure
		}
		if d.HasActiveTargets {
			d.ActiveTargets = r.f(s.DTCount)
		} else if d.structPresent {
			d.HasActiveTargets = true
			d.ActiveTargets = uint32(1)<<s.DTCount - 1
		}
		d.maskEnd = r.pos
	} else if s == nil {
		return ErrNoStructure
	}
	d.Structure = s
	ti := (int(d.TemplateID) + MaxTemplates - int(s.IDOffset)) % MaxTemplates
	if ti >= s.Templates {
		return ErrTemplate
	}
	d.Spatial, d.Temporal = s.Spatial[ti], s.Temporal[ti]
	if d.customFlags&4 != 0 {
		for i := 0; i < s.DTCount; i++ {
			d.DTI[i] = uint8(r.f(2))
		}
	} else {
		d.DTI = s.DTI[ti]
	}
	if d.customFlags&2 != 0 {
		for {
			size := r.f(2)
			if size == 0 || r.err != nil {
				break
			}
			r.f(4 * int(size))
		}
	}
	if d.customFlags&1 != 0 {
		r.f(8 * s.Chains)
	}
	d.frameDefEnd = r.pos
	if r.err != nil {
		return r.err
	}
	return nil
}

func readStructure(r *reader, s *Structure) error {
	s.IDOffset = uint8(r.f(6))
	s.DTCount = int(r.f(5)) + 1
	// template_layers
	var sid, tid uint8
	for {
		if s.Templates >= MaxTemplates {
			return fmt.Errorf("%w: more than %d templates", ErrStructure, MaxTemplates)
		}
		s.Spatial[s.Templates], s.Temporal[s.Templates] = sid, tid
		s.Templates++
		idc := r.f(2)
		if r.err != nil {
			return r.err
		}
		if idc == 3 {
			break
		}
		switch idc {
		case 1:
			tid++
			s.MaxTemporal = max(s.MaxTemporal, tid)
		case 2:
			tid = 0
			sid++
		}
		if sid >= maxSpatial || tid > 7 {
			return fmt.Errorf("%w: layer ids out of range", ErrStructure)
		}
	}
	s.MaxSpatial = sid
	for t := 0; t < s.Templates; t++ {
		for i := 0; i < s.DTCount; i++ {
			s.DTI[t][i] = uint8(r.f(2))
		}
	}
	for t := 0; t < s.Templates && r.err == nil; t++ {
		for n := 0; r.f(1) == 1 && r.err == nil; n++ {
			if n >= 16 {
				return fmt.Errorf("%w: too many frame diffs", ErrStructure)
			}
			s.Fdiffs[t] = append(s.Fdiffs[t], uint8(r.f(4))+1)
		}
	}
	s.Chains = int(r.ns(uint32(s.DTCount + 1)))
	if s.Chains > 0 {
		for i := 0; i < s.DTCount; i++ {
			s.ProtectedBy[i] = uint8(r.ns(uint32(s.Chains)))
		}
		for t := 0; t < s.Templates; t++ {
			for c := 0; c < s.Chains; c++ {
				s.ChainFdiffs[t][c] = uint8(r.f(4))
			}
		}
	}
	s.deriveTargets()
	if r.f(1) == 1 {
		for i := 0; i <= int(s.MaxSpatial); i++ {
			s.Width[i] = uint16(r.f(16)) + 1
			s.Height[i] = uint16(r.f(16)) + 1
		}
	}
	return r.err
}

// deriveTargets sets each decode target's highest layers (decode_target_layers).
func (s *Structure) deriveTargets() {
	for i := 0; i < s.DTCount; i++ {
		for t := 0; t < s.Templates; t++ {
			if s.DTI[t][i] != DTINotPresent {
				s.DecodeTargetSpatial[i] = max(s.DecodeTargetSpatial[i], s.Spatial[t])
				s.DecodeTargetTemporal[i] = max(s.DecodeTargetTemporal[i], s.Temporal[t])
			}
		}
	}
}

// TargetsUpTo is the bitmask of the decode targets that use no layer above
// spatial and temporal.
func (s *Structure) TargetsUpTo(spatial, temporal uint8) uint32 {
	var m uint32
	for i := 0; i < s.DTCount; i++ {
		if s.DecodeTargetSpatial[i] <= spatial && s.DecodeTargetTemporal[i] <= temporal {
			m |= 1 << i
		}
	}
	return m
}

type writer struct {
	b   []byte
	pos int
}

func (w *writer) put(v uint32, n int) {
	for i := n - 1; i >= 0; i-- {
		if w.pos>>3 >= len(w.b) {
			w.b = append(w.b, 0)
		}
		if v>>i&1 == 1 {
			w.b[w.pos>>3] |= 1 << (7 - w.pos&7)
		}
		w.pos++
	}
}

// copyBits copies src's bits [from, to) to w.
func (w *writer) copyBits(src []byte, from, to int) {
	for i := from; i < to; i++ {
		w.put(uint32(src[i>>3]>>(7-i&7)&1), 1)
	}
}

// SetActiveTargets writes into dst[:0] the descriptor src (parsed into d) with
// its active decode targets bitmask set to mask, keeping everything else,
// and returns it. dst's capacity is reused; src and dst must not overlap.
func (d *Descriptor) SetActiveTargets(src []byte, mask uint32, dst []byte) []byte {
	w := writer{b: dst[:0]}
	w.copyBits(src, 0, 24)
	if !d.extended {
		// The mandatory fields alone: add the extended flags (no structure,
		// mask present, nothing custom) and the mask.
		w.put(0b01000, 5)
		w.put(mask, d.Structure.DTCount)
	} else {
		w.put(b2u(d.structPresent), 1)
		w.put(1, 1)
		w.put(uint32(d.customFlags), 3)
		w.copyBits(src, d.flagsEnd, d.structEnd)
		w.put(mask, d.Structure.DTCount)
		w.copyBits(src, d.maskEnd, d.frameDefEnd)
	}
	// A descriptor of exactly 3 bytes means "no extended fields": pad past it.
	for len(w.b) <= 3 {
		w.b = append(w.b, 0)
	}
	return w.b
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
