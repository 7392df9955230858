package dd

// Frame is what a sender writes in one packet's descriptor.
type Frame struct {
	StartOfFrame, EndOfFrame bool
	Template                 int // index into the structure's templates
	FrameNumber              uint16
	// WithStructure attaches the structure (on a keyframe's packets).
	WithStructure bool
}

// Build writes the descriptor of f under s into dst[:0] and returns it: the
// sending side of Parse, for synthetic publishers and tests. Templates carry
// everything (no custom DTIs, diffs or chains).
func Build(dst []byte, f Frame, s *Structure) []byte {
	w := writer{b: dst[:0]}
	w.put(b2u(f.StartOfFrame), 1)
	w.put(b2u(f.EndOfFrame), 1)
	w.put(uint32((f.Template+int(s.IDOffset))%MaxTemplates), 6)
	w.put(uint32(f.FrameNumber), 16)
	if f.WithStructure {
		w.put(0b10000, 5)
		writeStructure(&w, s)
	}
	return w.b
}

func writeStructure(w *writer, s *Structure) {
	w.put(uint32(s.IDOffset), 6)
	w.put(uint32(s.DTCount-1), 5)
	for t := 0; t < s.Templates; t++ {
		switch {
		case t == s.Templates-1:
			w.put(3, 2)
		case s.Spatial[t+1] > s.Spatial[t]:
			w.put(2, 2)
		case s.Temporal[t+1] > s.Temporal[t]:
			w.put(1, 2)
		default:
			w.put(0, 2)
		}
	}
	for t := 0; t < s.Templates; t++ {
		for i := 0; i < s.DTCount; i++ {
			w.put(uint32(s.DTI[t][i]), 2)
		}
	}
	for t := 0; t < s.Templates; t++ {
		for _, fd := range s.Fdiffs[t] {
			w.put(1, 1)
			w.put(uint32(fd-1), 4)
		}
		w.put(0, 1)
	}
	w.ns(uint32(s.Chains), uint32(s.DTCount+1))
	if s.Chains > 0 {
		for i := 0; i < s.DTCount; i++ {
			w.ns(uint32(s.ProtectedBy[i]), uint32(s.Chains))
		}
		for t := 0; t < s.Templates; t++ {
			for c := 0; c < s.Chains; c++ {
				w.put(uint32(s.ChainFdiffs[t][c]), 4)
			}
		}
	}
	if s.Width[0] == 0 {
		w.put(0, 1)
		return
	}
	w.put(1, 1)
	for i := 0; i <= int(s.MaxSpatial); i++ {
		w.put(uint32(s.Width[i]-1), 16)
		w.put(uint32(s.Height[i]-1), 16)
	}
}

// ns writes v < n in the non-symmetric code reader.ns reads.
func (w *writer) ns(v, n uint32) {
	bits := 0
	for x := n; x != 0; x >>= 1 {
		bits++
	}
	m := uint32(1)<<bits - n
	if v < m {
		w.put(v, bits-1)
		return
	}
	x := v + m
	w.put(x>>1, bits-1)
	w.put(x&1, 1)
}

// NewStructure builds a structure from per-template layers and DTIs (the
// derived per-target layers filled in), for Build.
func NewStructure(dtCount int, spatial, temporal []uint8, dti [][]uint8, fdiffs [][]uint8) *Structure {
	s := &Structure{DTCount: dtCount, Templates: len(spatial)}
	for t := range spatial {
		s.Spatial[t], s.Temporal[t] = spatial[t], temporal[t]
		s.MaxSpatial = max(s.MaxSpatial, spatial[t])
		s.MaxTemporal = max(s.MaxTemporal, temporal[t])
		copy(s.DTI[t][:], dti[t])
		if t < len(fdiffs) {
			s.Fdiffs[t] = fdiffs[t]
		}
	}
	s.deriveTargets()
	return s
}
