package moqt

import (
	"fmt"
	"sort"
	"time"
)

// ObjectKey names one object of one track.
type ObjectKey struct {
	TrackAlias uint64
	Group      uint64
	Object     uint64
}

func (k ObjectKey) less(o ObjectKey) bool {
	if k.Group != o.Group {
		return k.Group < o.Group
	}
	return k.Object < o.Object
}

type partial struct {
	length, count, per, got int
	have                    []bool
	data                    []byte
	first                   time.Time
	nacked                  time.Time
	nacks                   int
	fec                     []*FEC
}

// Assembler rebuilds objects from fragments that arrive lost, duplicated and
// reordered. It is not safe for concurrent use (one per receiving session).
type Assembler struct {
	// MaxPending bounds objects in reassembly; the oldest is dropped beyond it.
	MaxPending int
	pending    map[ObjectKey]*partial
	// done remembers recently completed objects, so that a late duplicate does
	// not start a new partial object.
	done map[ObjectKey]time.Time
	// gaps are objects a later object of the same group skipped: every
	// fragment of them was lost (a small delta frame is one fragment), so
	// nothing is pending to NACK. They are NACKed for fragment 0, whose
	// answer tells the object's size; the rest is then NACKed as usual.
	gaps    map[ObjectKey]*gap
	newest  map[uint64]ObjectKey // per track alias
	Dropped int                  // objects given up (deadline, eviction)
}

type gap struct{ first, nacked time.Time }

// NewAssembler makes an Assembler.
func NewAssembler() *Assembler {
	return &Assembler{MaxPending: 64, pending: map[ObjectKey]*partial{}, done: map[ObjectKey]time.Time{},
		gaps: map[ObjectKey]*gap{}, newest: map[uint64]ObjectKey{}}
}

// noteGap records the objects between the newest of k's track and k, when k
// is further on in the same group, and forgets k's own gap.
func (a *Assembler) noteGap(k ObjectKey, now time.Time) {
	if len(a.gaps) > 0 {
		delete(a.gaps, k)
	}
	n, ok := a.newest[k.TrackAlias]
	if ok && k.Group == n.Group && k.Object > n.Object+1 {
		for o := n.Object + 1; o < k.Object && o <= n.Object+64 && len(a.gaps) < a.MaxPending; o++ {
			gk := ObjectKey{k.TrackAlias, k.Group, o}
			if _, done := a.done[gk]; done {
				continue
			}
			if _, p := a.pending[gk]; p {
				continue
			}
			a.gaps[gk] = &gap{first: now}
		}
	}
	if !ok || k.Group > n.Group || k.Group == n.Group && k.Object > n.Object {
		a.newest[k.TrackAlias] = k
	}
}

// fragSpan is fragment i's byte range in an object of length l cut into c.
func fragSpan(l, c, i int) (int, int) {
	per := (l + c - 1) / c
	lo, hi := i*per, min((i+1)*per, l)
	if lo > hi {
		lo = hi
	}
	return lo, hi
}

// Add takes one fragment. When it completes an object, Add returns the object's
// bytes (extension block + payload; owned by the caller) and true.
func (a *Assembler) Add(f *Fragment, now time.Time) ([]byte, bool, error) {
	k := ObjectKey{f.TrackAlias, f.Group, f.Object}
	if _, ok := a.done[k]; ok {
		return nil, false, nil // duplicate of a finished object
	}
	lo, hi := fragSpan(f.Length, f.Count, f.Index)
	if hi-lo != len(f.Data) {
		return nil, false, fmt.Errorf("%w: fragment %d/%d has %d bytes, want %d", ErrDatagram, f.Index, f.Count, len(f.Data), hi-lo)
	}
	a.noteGap(k, now)
	if f.Count == 1 {
		a.finish(k, now)
		return append([]byte(nil), f.Data...), true, nil
	}
	p := a.pending[k]
	if p == nil {
		if len(a.pending) >= a.MaxPending {
			a.evictOldest()
		}
		p = &partial{length: f.Length, count: f.Count, have: make([]bool, f.Count), data: make([]byte, f.Length), first: now}
		a.pending[k] = p
	}
	if p.length != f.Length || p.count != f.Count {
		return nil, false, fmt.Errorf("%w: fragment disagrees with its object's size", ErrDatagram)
	}
	if p.have[f.Index] {
		return nil, false, nil
	}
	copy(p.data[lo:hi], f.Data)
	p.have[f.Index] = true
	p.got++
	if p.got < p.count {
		a.tryFEC(p)
	}
	if p.got == p.count {
		delete(a.pending, k)
		a.finish(k, now)
		return p.data, true, nil
	}
	return nil, false, nil
}

// AddFEC takes a parity datagram; it may complete an object.
func (a *Assembler) AddFEC(f *FEC, now time.Time) ([]byte, bool) {
	k := ObjectKey{f.TrackAlias, f.Group, f.Object}
	if _, ok := a.done[k]; ok {
		return nil, false
	}
	p := a.pending[k]
	if p == nil || f.First+f.Count > p.count || len(p.fec) >= 8 {
		return nil, false // parity before any fragment: rare, not worth buffering
	}
	p.fec = append(p.fec, &FEC{First: f.First, Count: f.Count, Parity: append([]byte(nil), f.Parity...)})
	a.tryFEC(p)
	if p.got == p.count {
		delete(a.pending, k)
		a.finish(k, now)
		return p.data, true
	}
	return nil, false
}

// tryFEC recovers a fragment that is the only one missing in a parity run.
func (a *Assembler) tryFEC(p *partial) {
	for _, f := range p.fec {
		miss := -1
		for i := f.First; i < f.First+f.Count; i++ {
			if !p.have[i] {
				if miss >= 0 {
					miss = -2
					break
				}
				miss = i
			}
		}
		if miss < 0 {
			continue
		}
		lo, hi := fragSpan(p.length, p.count, miss)
		if len(f.Parity) < hi-lo {
			continue
		}
		out := p.data[lo:hi]
		copy(out, f.Parity[:hi-lo])
		for i := f.First; i < f.First+f.Count; i++ {
			if i == miss {
				continue
			}
			l2, h2 := fragSpan(p.length, p.count, i)
			for j := 0; j < h2-l2 && j < len(out); j++ {
				out[j] ^= p.data[l2+j]
			}
		}
		p.have[miss] = true
		p.got++
	}
}

func (a *Assembler) finish(k ObjectKey, now time.Time) {
	a.done[k] = now
	if len(a.done) > 4*a.MaxPending {
		for dk, t := range a.done {
			if now.Sub(t) > 5*time.Second || len(a.done) > 8*a.MaxPending {
				delete(a.done, dk)
			}
		}
	}
}

func (a *Assembler) evictOldest() {
	var old ObjectKey
	first := true
	for k := range a.pending {
		if first || k.less(old) {
			old, first = k, false
		}
	}
	delete(a.pending, old)
	a.Dropped++
}

// Nacks returns NACKs for incomplete objects that have waited at least wait
// since their first fragment (a reorder window) and were not NACKed within
// every, and for fragment 0 of objects a later object of their group skipped;
// objects older than giveUp are dropped (their playout deadline passed) and
// returned in dropped.
func (a *Assembler) Nacks(now time.Time, wait, every, giveUp time.Duration) (nacks []Nack, dropped []ObjectKey) {
	for k, p := range a.pending {
		age := now.Sub(p.first)
		if age > giveUp {
			delete(a.pending, k)
			a.Dropped++
			dropped = append(dropped, k)
			continue
		}
		if age < wait || now.Sub(p.nacked) < every {
			continue
		}
		n := Nack{TrackAlias: k.TrackAlias, Group: k.Group, Object: k.Object}
		for i, h := range p.have {
			if !h {
				n.Missing = append(n.Missing, i)
			}
		}
		p.nacked = now
		p.nacks++
		nacks = append(nacks, n)
	}
	for k, g := range a.gaps {
		age := now.Sub(g.first)
		if age > giveUp {
			delete(a.gaps, k)
			a.Dropped++
			dropped = append(dropped, k)
			continue
		}
		if age < wait || now.Sub(g.nacked) < every {
			continue
		}
		g.nacked = now
		nacks = append(nacks, Nack{TrackAlias: k.TrackAlias, Group: k.Group, Object: k.Object, Missing: []int{0}})
	}
	sort.Slice(nacks, func(i, j int) bool {
		return ObjectKey{nacks[i].TrackAlias, nacks[i].Group, nacks[i].Object}.less(ObjectKey{nacks[j].TrackAlias, nacks[j].Group, nacks[j].Object})
	})
	return nacks, dropped
}

// Pending is the number of objects in reassembly.
func (a *Assembler) Pending() int { return len(a.pending) }
