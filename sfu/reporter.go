package sfu

import (
	"slices"
	"sync"
	"time"

	"github.com/pion/rtcp"
)

// One goroutine does every subscriber's periodic work: sharing out the
// bandwidth estimate twice a second, checking layers and keyframe retries,
// and a sender report per subscribed track once a second. A goroutine and a
// ticker per participant cost a thousand wake-ups every half second and a
// thousand goroutine stacks at a thousand viewers; here the work is the same
// and the wake-ups are twenty a second. Participants are spread over
// reportSlots slots, one slot per tick, so that their reports do not all
// leave in the same instant.
const reportSlots = 10

type reportee struct {
	p  *Participant
	pc rtcpWriter
}

// reporter is a manager's: its goroutine runs while it has participants.
type reporter struct {
	mu      sync.Mutex
	slots   [reportSlots][]reportee
	next    int
	n       int  // participants in the slots
	running bool // the goroutine runs
}

// add runs p's periodic work, its sender reports going out through pc, until
// p closes.
func (r *reporter) add(p *Participant, pc rtcpWriter) {
	r.mu.Lock()
	r.slots[r.next] = append(r.slots[r.next], reportee{p, pc})
	r.next = (r.next + 1) % reportSlots
	r.n++
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
}

func (r *reporter) run() {
	tick := time.NewTicker(allocateInterval / reportSlots)
	defer tick.Stop()
	var batch []reportee
	var sc reportScratch
	for n := 0; ; n++ {
		<-tick.C
		slot := n % reportSlots
		// Sender reports every other round: once a second.
		sr := (n/reportSlots)%2 == 0
		r.mu.Lock()
		batch = append(batch[:0], r.slots[slot]...)
		r.mu.Unlock()
		closed := false
		for _, x := range batch {
			if !x.p.reportTick(x.pc, sr, &sc) {
				closed = true
			}
		}
		clear(batch) // no participant stays reachable from here
		r.mu.Lock()
		if closed {
			before := len(r.slots[slot])
			r.slots[slot] = slices.DeleteFunc(r.slots[slot], func(x reportee) bool { return x.p.isClosed() })
			r.n -= before - len(r.slots[slot])
		}
		if r.n == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
}

// reportScratch is the reporter goroutine's reusable memory.
type reportScratch struct {
	subs []*DownTrack
	pkts []rtcp.Packet
}

// reportTick is one participant's periodic work; false once it has closed.
// It holds no participant lock while it works: choosing layers asks other
// participants for keyframes.
func (p *Participant) reportTick(pc rtcpWriter, sr bool, sc *reportScratch) bool {
	p.allocate()
	p.mu.Lock()
	closed := p.closed
	sc.subs = sc.subs[:0]
	for _, d := range p.subs {
		sc.subs = append(sc.subs, d)
	}
	p.mu.Unlock()
	if closed {
		return false
	}
	wall := time.Now()
	sc.pkts = sc.pkts[:0]
	for _, d := range sc.subs {
		d.chooseLayer()
		d.retryKeyframe()
		if sr {
			if r := d.senderReport(wall); r != nil {
				sc.pkts = append(sc.pkts, r)
			}
		}
	}
	if len(sc.pkts) > 0 {
		_ = pc.WriteRTCP(sc.pkts)
	}
	clear(sc.subs)
	clear(sc.pkts)
	return true
}

func (p *Participant) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}
