package order

import (
	"reflect"
	"testing"
	"time"
)

func TestBuffer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, c := range []struct {
		name    string
		seqs    []uint16
		at      []int // ms, per packet (0 when left out)
		out     []uint16
		dropped []uint16
	}{
		{name: "in order", seqs: []uint16{7, 8, 9}, out: []uint16{7, 8, 9}},
		{name: "a retransmission after its followers", seqs: []uint16{1, 3, 4, 2, 5}, out: []uint16{1, 2, 3, 4, 5}},
		{name: "across the wrap", seqs: []uint16{65534, 0, 65535, 1}, out: []uint16{65534, 65535, 0, 1}},
		{name: "duplicates and late ones are dropped", seqs: []uint16{10, 12, 12, 11, 10, 13}, out: []uint16{10, 11, 12, 13}, dropped: []uint16{12, 10}},
		{name: "a packet that never comes is skipped after the wait",
			seqs: []uint16{1, 3, 4, 5, 2}, at: []int{0, 10, 20, 10 + int(Wait/time.Millisecond), 400},
			out: []uint16{1, 3, 4, 5}, dropped: []uint16{2}},
		{name: "far ahead: the hole is given up at once", seqs: []uint16{1, 3, 3 + Slots, 4 + Slots}, out: []uint16{1, 3, 3 + Slots, 4 + Slots}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var o Buffer[uint16]
			var out, dropped []uint16
			for i, s := range c.seqs {
				at := 0
				if i < len(c.at) {
					at = c.at[i]
				}
				o.Push(&s, s, ms(at), func(q *uint16) { out = append(out, *q) }, func(q *uint16) { dropped = append(dropped, *q) })
			}
			if !reflect.DeepEqual(out, c.out) || !reflect.DeepEqual(dropped, c.dropped) {
				t.Fatalf("released %v, dropped %v; want %v and %v", out, dropped, c.out, c.dropped)
			}
		})
	}

	// A hole while nothing more comes: the recorder's tick gives up on it,
	// and a stop releases whatever is held.
	var o Buffer[uint16]
	var out []uint16
	keep := func(q *uint16) { out = append(out, *q) }
	for _, s := range []uint16{1, 3, 6} {
		o.Push(&s, s, ms(0), keep, nil)
	}
	o.Expire(ms(100), keep)
	if !reflect.DeepEqual(out, []uint16{1}) {
		t.Fatalf("released %v before the wait", out)
	}
	o.Expire(ms(100+int(Wait/time.Millisecond)), keep)
	if !reflect.DeepEqual(out, []uint16{1, 3}) {
		t.Fatalf("released %v after one wait", out)
	}
	o.Flush(keep)
	if !reflect.DeepEqual(out, []uint16{1, 3, 6}) || o.held != 0 {
		t.Fatalf("released %v after the flush, %d held", out, o.held)
	}
}
