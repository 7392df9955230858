package netem

import (
	"math"
	"math/rand/v2"
	"time"
)

// bufSize holds one IP packet of the TUN's MTU (1500) with room to spare.
const bufSize = 2048

// MTU of the emulated link.
const MTU = 1500

type packet struct {
	due int64 // ns on the link's clock when the packet leaves the emulator
	seq uint64
	n   int
	buf [bufSize]byte
}

// Stats counts what one direction did with its packets.
type Stats struct {
	In        uint64 // packets read from the sending side
	Out       uint64 // packets delivered to the receiving side
	Bytes     uint64 // bytes delivered
	Lost      uint64 // dropped by random or Gilbert–Elliott loss
	QueueDrop uint64 // tail-dropped by the rate queue
	PoolDrop  uint64 // dropped because every buffer was in flight
	Dups      uint64 // extra copies made by duplication
	WriteErr  uint64 // delivery to the receiving TUN failed
	// LateNs sums how late packets left compared with their due time
	// (the emulator's own timing error); LateMaxNs is the worst case.
	LateNs, LateMaxNs uint64
	// Wakes counts the forwarding thread's passes: under load one per
	// coalescing tick, not one per packet (router_linux.go).
	Wakes uint64
}

// link is the impairment model of one direction, free of I/O and clocks so it
// can be driven by tests with synthetic time. It keeps its buffers in a free
// list and its delay line in a binary heap: after warm-up the per-packet path
// allocates nothing.
type link struct {
	rng   *rand.Rand
	bad   bool // Gilbert–Elliott state
	heap  []*packet
	free  []*packet
	total int // buffers allocated
	max   int // buffers allowed
	seq   uint64

	// The rate queue is a FIFO of departure times: a packet is in the queue
	// until the bottleneck has finished serializing it.
	lastDepart int64
	departs    []int64 // ring
	dHead      int
	dLen       int

	stats Stats
}

func newLink(seed uint64, maxPackets int) *link {
	if maxPackets <= 0 {
		maxPackets = 1 << 15
	}
	return &link{
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		max: maxPackets,
	}
}

// get returns a free buffer or nil when maxPackets are in flight. Buffers
// are allocated in slabs, so growth is rare and the steady state is free.
func (l *link) get() *packet {
	if len(l.free) == 0 {
		if l.total >= l.max {
			return nil
		}
		n := min(256, l.max-l.total)
		slab := make([]packet, n)
		for i := range slab {
			l.free = append(l.free, &slab[i])
		}
		l.total += n
		if cap(l.heap) < l.total {
			h := make([]*packet, len(l.heap), l.total)
			copy(h, l.heap)
			l.heap = h
		}
	}
	p := l.free[len(l.free)-1]
	l.free = l.free[:len(l.free)-1]
	return p
}

func (l *link) put(p *packet) { l.free = append(l.free, p) }

// lose decides whether the next packet is lost.
func (l *link) lose(p *Params) bool {
	if ge := p.GE; ge != nil {
		// As netem: first move the chain, then draw the loss in the new state.
		if l.bad {
			if l.rng.Float64() < ge.R {
				l.bad = false
			}
		} else if l.rng.Float64() < ge.P {
			l.bad = true
		}
		if l.bad {
			return ge.LossBad > 0 && l.rng.Float64() < ge.LossBad
		}
		return ge.LossGood > 0 && l.rng.Float64() < ge.LossGood
	}
	return p.Loss > 0 && l.rng.Float64() < p.Loss
}

// delay draws one packet's delay in ns.
func (l *link) delay(p *Params) int64 {
	d := float64(p.Delay)
	if p.Jitter > 0 {
		j := float64(p.Jitter)
		switch p.Dist {
		case Uniform:
			d += j * (2*l.rng.Float64() - 1)
		case Pareto:
			// Pareto(xm=1, shape 3) has mean 1.5 and standard deviation
			// sqrt(3)/2; normalise to mean 0, deviation 1.
			x := math.Pow(1-l.rng.Float64(), -1.0/3)
			d += j * (x - 1.5) / 0.8660254037844386
		default:
			d += j * l.rng.NormFloat64()
		}
	}
	if d < 0 {
		return 0
	}
	return int64(d)
}

// admit runs the rate queue: it returns when the packet leaves the
// bottleneck, or false when the queue is full.
func (l *link) admit(n int, now int64, p *Params) (int64, bool) {
	if p.Rate <= 0 {
		l.dLen = 0
		l.lastDepart = now
		return now, true
	}
	lim := p.limit()
	if len(l.departs) != lim {
		l.resizeQueue(lim)
	}
	for l.dLen > 0 && l.departs[l.dHead] <= now {
		l.dHead = (l.dHead + 1) % len(l.departs)
		l.dLen--
	}
	if l.dLen >= lim {
		return 0, false
	}
	start := max(now, l.lastDepart)
	l.lastDepart = start + int64(n)*8*int64(time.Second)/p.Rate
	l.departs[(l.dHead+l.dLen)%len(l.departs)] = l.lastDepart
	l.dLen++
	return l.lastDepart, true
}

// resizeQueue runs only when the limit changes (a script step), never per packet.
func (l *link) resizeQueue(lim int) {
	d := make([]int64, lim)
	keep := min(l.dLen, lim)
	for i := 0; i < keep; i++ {
		d[i] = l.departs[(l.dHead+i)%len(l.departs)]
	}
	l.departs, l.dHead, l.dLen = d, 0, keep
}

// enqueue takes ownership of pkt (pkt.n set) that arrived at now.
func (l *link) enqueue(pkt *packet, now int64, p *Params) {
	l.stats.In++
	if l.lose(p) {
		l.stats.Lost++
		l.put(pkt)
		return
	}
	if p.Duplicate > 0 && l.rng.Float64() < p.Duplicate {
		if dup := l.get(); dup != nil {
			dup.n = pkt.n
			copy(dup.buf[:pkt.n], pkt.buf[:pkt.n])
			l.stats.Dups++
			l.schedule(dup, now, p)
		}
	}
	l.schedule(pkt, now, p)
}

func (l *link) schedule(pkt *packet, now int64, p *Params) {
	depart, ok := l.admit(pkt.n, now, p)
	if !ok {
		l.stats.QueueDrop++
		l.put(pkt)
		return
	}
	pkt.due = depart + l.delay(p)
	l.seq++
	pkt.seq = l.seq
	l.push(pkt)
}

// nextDue reports when the earliest packet is due.
func (l *link) nextDue() (int64, bool) {
	if len(l.heap) == 0 {
		return 0, false
	}
	return l.heap[0].due, true
}

// popDue removes and returns the earliest packet if it is due at now.
func (l *link) popDue(now int64) *packet {
	if len(l.heap) == 0 || l.heap[0].due > now {
		return nil
	}
	return l.pop()
}

func less(a, b *packet) bool {
	return a.due < b.due || (a.due == b.due && a.seq < b.seq)
}

func (l *link) push(p *packet) {
	l.heap = append(l.heap, p)
	i := len(l.heap) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !less(l.heap[i], l.heap[parent]) {
			break
		}
		l.heap[i], l.heap[parent] = l.heap[parent], l.heap[i]
		i = parent
	}
}

func (l *link) pop() *packet {
	h := l.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = nil
	h = h[:last]
	i := 0
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && less(h[c+1], h[c]) {
			c++
		}
		if !less(h[c], h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	l.heap = h
	return top
}
