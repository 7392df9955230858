package datachan

import (
	"bytes"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// pathLimit makes a link drop packets larger than its limit, which a test
// may change while the link runs; largest records the largest passed.
type pathLimit struct {
	limit, largest atomic.Int64
}

func (p *pathLimit) filter(b []byte) bool {
	if int64(len(b)) > p.limit.Load() {
		return false
	}
	for {
		l := p.largest.Load()
		if int64(len(b)) <= l || p.largest.CompareAndSwap(l, int64(len(b))) {
			return true
		}
	}
}

// waitMTU waits until the association's MTU satisfies ok and no probe is
// in flight.
func waitMTU(t *testing.T, a *Association, ok func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.mu.Lock()
		m, probing := a.snd.mtu, a.pm.size != 0
		a.mu.Unlock()
		if ok(m) && !probing {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("path MTU stayed at %d", m)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPathMTU: on a path that carries 1500-byte packets the association
// goes from 1200 to MaxMTU with its first probe; on one that carries 1300
// the search ends within probeStep below it; data flows in packets of the
// size found.
func TestPathMTU(t *testing.T) {
	for _, tc := range []struct {
		path, min, max int
	}{{1500, 1428, 1428}, {1300, 1300 - probeStep, 1300}} {
		var lim pathLimit
		lim.limit.Store(int64(tc.path))
		a, b := pairWith(t, Config{MaxMTU: 1428}, func(ab, ba *link) { ab.filter = lim.filter })
		m := waitMTU(t, a, func(m int) bool { return m > 1200 })
		if m < tc.min || m > tc.max {
			t.Errorf("path of %d: MTU %d, want %d to %d", tc.path, m, tc.min, tc.max)
		}
		transfer(t, a, b, 300, func(c *Channel) { send(t, c, 300, 4000) })
		if got := int(lim.largest.Load()); got != m {
			t.Errorf("path of %d: largest packet %d, want the MTU found, %d", tc.path, got, m)
		}
	}
}

// TestPathMTUPadDropped: a peer that drops a packet with a chunk it does
// not know (pion/sctp does) never answers a probe; the association stays
// at 1200 and works.
func TestPathMTUPadDropped(t *testing.T) {
	var probes atomic.Int64
	a, b := pairWith(t, Config{MaxMTU: 1428}, func(ab, ba *link) {
		ab.filter = func(p []byte) bool {
			it := chunkIter{b: p[headerSize:]}
			for {
				typ, _, _, ok := it.next()
				if !ok {
					return true
				}
				if typ == ctPad {
					probes.Add(1)
					return false
				}
			}
		}
	})
	transfer(t, a, b, 300, func(c *Channel) { send(t, c, 300, 4000) })
	time.Sleep(200 * time.Millisecond)
	if m := a.Stats().MTU; m != 1200 {
		t.Errorf("MTU %d, want 1200", m)
	}
	// 1428 and then the bisection down to 1232, three tries each.
	if n := probes.Load(); n < 9 || n > 20 {
		t.Errorf("%d probes, want the search's, 9 to 20", n)
	}
}

// TestPathMTUBlackHole: the path shrinks under a raised MTU. Messages of
// 450 bytes go three to a packet of 1410 bytes, which it drops; the
// retransmission timeout takes the association back to 1200, the chunks go
// again in smaller packets, a new search finds the smaller path, and every
// message arrives.
func TestPathMTUBlackHole(t *testing.T) {
	var lim pathLimit
	lim.limit.Store(1500)
	fixed := func(*rand.Rand) time.Duration { return 5 * time.Millisecond }
	a, b := pairWith(t, Config{MaxMTU: 1428}, func(ab, ba *link) { ab.filter, ab.delay, ba.delay = lim.filter, fixed, fixed })
	waitMTU(t, a, func(m int) bool { return m == 1428 })
	transfer(t, a, b, 300, func(c *Channel) {
		lim.limit.Store(1300)
		for i := range 300 {
			if err := c.Send(message(i, 450), false); err != nil {
				t.Fatal(err)
			}
		}
	})
	if a.Stats().Timeouts == 0 {
		t.Error("no retransmission timeout")
	}
	if m := waitMTU(t, a, func(m int) bool { return m > 1200 }); m > 1300 {
		t.Errorf("MTU %d on a path of 1300", m)
	}
}

// TestRecut: after the MTU fell, chunks not sent yet are cut to the new
// size, with a message's first and last flags where they belong and its
// bytes in order.
func TestRecut(t *testing.T) {
	s := newTestSender()
	s.mtu = 1428
	msgs := [][]byte{message(1, 100), message(2, 5000), message(3, 1400)}
	for i, m := range msgs {
		s.enqueue(&outMsg{maxRtx: -1}, 1, uint16(i), ppidBinary, false, m)
	}
	s.mtu = 1200
	s.recut()
	q := s.queues[1]
	var got []byte
	msg := 0
	for _, c := range q.chunks[q.head:] {
		if len(c.data) > s.maxPayload() {
			t.Fatalf("a chunk of %d bytes, more than %d", len(c.data), s.maxPayload())
		}
		if begin := len(got) == 0; begin != (c.flags&flagBegin != 0) {
			t.Fatalf("message %d: begin flag %v at byte %d", msg, !begin, len(got))
		}
		if c.ssn != uint16(msg) {
			t.Fatalf("a chunk of message %d has SSN %d", msg, c.ssn)
		}
		got = append(got, c.data...)
		if c.flags&flagEnd != 0 {
			if !bytes.Equal(got, msgs[msg]) {
				t.Fatalf("message %d cut again: its bytes changed", msg)
			}
			got, msg = nil, msg+1
		}
	}
	if msg != len(msgs) {
		t.Fatalf("%d messages ended, want %d", msg, len(msgs))
	}
}

// TestPathChanged: told that the path changed, the association goes back
// to 1200 at once and finds the new path's size without a timeout.
func TestPathChanged(t *testing.T) {
	var lim pathLimit
	lim.limit.Store(1500)
	a, b := pairWith(t, Config{MaxMTU: 1428}, func(ab, ba *link) { ab.filter = lim.filter })
	waitMTU(t, a, func(m int) bool { return m == 1428 })
	lim.limit.Store(1300)
	a.PathChanged()
	if m := waitMTU(t, a, func(m int) bool { return m > 1200 }); m > 1300 || m < 1300-probeStep {
		t.Errorf("MTU %d on a path of 1300", m)
	}
	transfer(t, a, b, 200, func(c *Channel) { send(t, c, 200, 4000) })
	if n := a.Stats().Timeouts; n != 0 {
		t.Errorf("%d retransmission timeouts", n)
	}
}
