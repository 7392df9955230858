package dd

import (
	"errors"
	"testing"
)

// l2t2 is a two-spatial, two-temporal structure as an L2T2_KEY encoder uses it:
// decode targets S0T0, S0T1, S1T0, S1T1.
func l2t2() *Structure {
	s := NewStructure(4,
		[]uint8{0, 0, 1, 1},
		[]uint8{0, 1, 0, 1},
		[][]uint8{
			{DTISwitch, DTISwitch, DTISwitch, DTISwitch},
			{DTINotPresent, DTIDiscardable, DTINotPresent, DTINotPresent},
			{DTINotPresent, DTINotPresent, DTISwitch, DTISwitch},
			{DTINotPresent, DTINotPresent, DTINotPresent, DTIDiscardable},
		},
		[][]uint8{nil, {1}, {1}, {1}})
	s.IDOffset = 5
	s.Chains = 2
	s.ProtectedBy = [MaxDecodeTargets]uint8{0, 0, 1, 1}
	s.ChainFdiffs[1] = [MaxDecodeTargets]uint8{1, 1}
	s.Width[0], s.Height[0], s.Width[1], s.Height[1] = 320, 180, 640, 360
	return s
}

func TestRoundTrip(t *testing.T) {
	s := l2t2()
	buf := Build(nil, Frame{StartOfFrame: true, Template: 2, FrameNumber: 777, WithStructure: true}, s)
	var d Descriptor
	if err := Parse(&d, buf, nil); err != nil {
		t.Fatal(err)
	}
	if !d.NewStructure || d.Spatial != 1 || d.Temporal != 0 || d.FrameNumber != 777 || !d.StartOfFrame || d.EndOfFrame {
		t.Fatalf("parsed %+v", d)
	}
	got := d.Structure
	if got.DTCount != 4 || got.Templates != 4 || got.Chains != 2 || got.ProtectedBy[2] != 1 || got.Width[1] != 640 || got.Height[0] != 180 {
		t.Fatalf("structure %+v", got)
	}
	if got.Fdiffs[1][0] != 1 || len(got.Fdiffs[0]) != 0 || got.ChainFdiffs[1][1] != 1 {
		t.Fatalf("fdiffs %v chains %v", got.Fdiffs[:4], got.ChainFdiffs[1][:2])
	}
	if !d.HasActiveTargets || d.ActiveTargets != 0xf {
		t.Fatalf("a new structure activates every target, got %b", d.ActiveTargets)
	}
	if m := got.TargetsUpTo(0, 1); m != 0b0011 {
		t.Fatalf("targets up to S0T1: %b", m)
	}
	// A 3-byte descriptor of a later frame reads with the kept structure.
	short := Build(nil, Frame{EndOfFrame: true, Template: 3, FrameNumber: 778}, s)
	if len(short) != 3 {
		t.Fatalf("mandatory fields only: %d bytes", len(short))
	}
	if err := Parse(&d, short, got); err != nil {
		t.Fatal(err)
	}
	if d.Spatial != 1 || d.Temporal != 1 || d.DTI[3] != DTIDiscardable || d.HasActiveTargets || !d.EndOfFrame {
		t.Fatalf("parsed %+v", d)
	}
}

func TestSetActiveTargets(t *testing.T) {
	s := l2t2()
	for _, withStruct := range []bool{true, false} {
		src := Build(nil, Frame{StartOfFrame: true, Template: 1, FrameNumber: 9, WithStructure: withStruct}, s)
		var d Descriptor
		if err := Parse(&d, src, s); err != nil {
			t.Fatal(err)
		}
		out := d.SetActiveTargets(src, 0b0011, make([]byte, 0, 64))
		var e Descriptor
		if err := Parse(&e, out, s); err != nil {
			t.Fatalf("rewritten descriptor does not parse: %v", err)
		}
		if !e.HasActiveTargets || e.ActiveTargets != 0b0011 || e.FrameNumber != 9 || e.Temporal != 1 || e.NewStructure != withStruct {
			t.Fatalf("structure %v: rewritten %+v", withStruct, e)
		}
		// Rewriting again replaces the mask rather than adding one.
		again := e.SetActiveTargets(out, 0b0001, nil)
		if err := Parse(&e, again, s); err != nil || e.ActiveTargets != 1 {
			t.Fatalf("second rewrite: %v %b", err, e.ActiveTargets)
		}
	}
}

func TestMalformed(t *testing.T) {
	s := l2t2()
	full := Build(nil, Frame{Template: 0, WithStructure: true}, s)
	var d Descriptor
	for _, c := range []struct {
		name string
		buf  []byte
		prev *Structure
		want error
	}{
		{"empty", nil, s, ErrShort},
		{"two bytes", []byte{0x80, 0}, s, ErrShort},
		{"no structure yet", []byte{0x80, 0, 1}, nil, ErrNoStructure},
		{"cut structure", full[:6], nil, ErrShort},
		{"unknown template", []byte{0x80 | 40, 0, 1}, s, ErrTemplate},
	} {
		if err := Parse(&d, c.buf, c.prev); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	s := l2t2()
	f.Add(Build(nil, Frame{Template: 0, WithStructure: true}, s))
	f.Add(Build(nil, Frame{Template: 3}, s))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Descriptor
		if err := Parse(&d, b, s); err != nil {
			return
		}
		// Whatever parses must rewrite into something that parses alike.
		out := d.SetActiveTargets(b, 1, nil)
		var e Descriptor
		if err := Parse(&e, out, s); err != nil {
			t.Fatalf("rewrite of %x gave %x: %v", b, out, err)
		}
		if e.ActiveTargets != 1&(1<<d.Structure.DTCount-1) || e.Spatial != d.Spatial || e.Temporal != d.Temporal || e.FrameNumber != d.FrameNumber {
			t.Fatalf("rewrite of %x changed the frame: %+v vs %+v", b, e, d)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	s := l2t2()
	buf := Build(nil, Frame{Template: 3, FrameNumber: 5}, s)
	var d Descriptor
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = Parse(&d, buf, s)
	}
}
