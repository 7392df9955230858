package datachan

import (
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// newTestSender is the sending half of an association that is never
// connected, for tests of its window and pacing arithmetic.
func newTestSender() *sender {
	a := &Association{epoch: time.Now(), cfg: Config{MTU: 1200}, log: slog.New(slog.DiscardHandler)}
	a.snd.init(a)
	return &a.snd
}

// TestCubicRegrowth: after a reduction from 1000 packets on an 80 ms path
// (in congestion avoidance),
// with the whole window acknowledged each round trip, cwnd is back at 1000
// packets after K = cbrt(300/0.4) ≈ 9.1 s (Reno: 300 round trips, 24 s),
// flat near it halfway (concave), and a second reduction below that point
// moves it down (fast convergence).
func TestCubicRegrowth(t *testing.T) {
	s := newTestSender()
	const rtt = 80 * int64(time.Millisecond)
	s.srtt, s.minRTT = rtt, rtt
	seg := s.mtu
	// A loss in slow start halves the window (slow start overshoots by up
	// to twice); one in congestion avoidance keeps 0.7 of it.
	s.cwnd, s.ssthresh = 1000*seg, 1<<30
	s.reduce()
	if s.cwnd != 500*seg || s.cubic.wMax != float64(1000*seg) {
		t.Fatalf("after a loss in slow start cwnd %d wMax %.0f, want %d and %d", s.cwnd, s.cubic.wMax, 500*seg, 1000*seg)
	}
	s.cwnd, s.ssthresh, s.cubic.wMax = 1000*seg, 1000*seg, 0
	s.reduce()
	if s.cwnd != 700*seg || s.ssthresh != s.cwnd {
		t.Fatalf("after a reduction cwnd %d ssthresh %d, want %d", s.cwnd, s.ssthresh, 700*seg)
	}
	k := math.Cbrt(300 / cubicC)
	var now, back int64
	half := false
	for now = int64(time.Second); now < 30*int64(time.Second); now += int64(time.Millisecond) {
		// A window per round trip, in 1 ms slices.
		s.caGrow(s.cwnd/80, now)
		el := float64(now-int64(time.Second)) / float64(time.Second)
		if !half && el >= k/2 {
			half = true
			if s.cwnd < 950*seg || s.cwnd > 1000*seg {
				t.Fatalf("cwnd %d packets halfway to wMax (%.1f s), want 950-1000", s.cwnd/seg, el)
			}
		}
		if s.cwnd >= 1000*seg {
			back = now - int64(time.Second)
			break
		}
	}
	if b := time.Duration(back).Seconds(); back == 0 || b < k-0.5 || b > k+0.5 {
		t.Fatalf("back at wMax after %.2f s, want %.1f ± 0.5 s", b, k)
	}
	// A loss before wMax is reached again: wMax becomes 0.85 of cwnd.
	s.cwnd = 900 * seg
	s.cubic.wMax = 1000 * float64(seg)
	s.reduce()
	if w := s.cubic.wMax / float64(seg); math.Abs(w-900*0.85) > 1 {
		t.Fatalf("wMax %.0f packets after a loss below it, want 765", w)
	}
}

// TestPacingBurst: after a pause, a sender at 1000 packets of cwnd on an
// 80 ms path releases 1 ms' worth of chunks at once (about 16 packets at
// 1.25 times cwnd per RTT), not the window the SACK opened: Chromium's
// socket buffer holds about 55 datagrams.
func TestPacingBurst(t *testing.T) {
	s := newTestSender()
	const rtt = 80 * int64(time.Millisecond)
	s.srtt, s.minRTT = rtt, rtt
	seg := s.mtu
	s.cwnd, s.ssthresh = 1000*seg, 1000*seg
	s.paceArmed = true // as if the timer were armed: no timer in this test
	burst := func(now int64) int {
		s.refill(now)
		n := 0
		for s.paced(seg, now) {
			n++
		}
		return n
	}
	burst(0)
	// 1.25 * 1000 packets / 80 ms = 15.6 packets a millisecond.
	if n := burst(int64(time.Second)); n < 15 || n > 17 {
		t.Fatalf("%d packets at once after a pause, want 1 ms' worth (16)", n)
	}
	// Paced steadily, the rate is 1.25 cwnd per RTT.
	total := 0
	start := 2 * int64(time.Second)
	burst(start)
	for now := start; now < start+rtt; now += int64(100 * time.Microsecond) {
		total += burst(now)
	}
	if total < 1200 || total > 1300 {
		t.Fatalf("%d packets paced in one RTT, want 1250", total)
	}
}

// TestLossFloor: a loss with no queue on the path (the RTT at its minimum,
// the delivery rate what cwnd carries in it: a receiver's socket buffer
// that overflowed) keeps the window; one behind a queue of twice the
// path's RTT still takes CUBIC's 0.7.
func TestLossFloor(t *testing.T) {
	s := newTestSender()
	const rtt = 80 * int64(time.Millisecond)
	seg := s.mtu
	w := 1000 * seg
	// A round trip of deliveries at cwnd per RTT: a chunk sent at 0, when
	// nothing had been delivered, and acknowledged at rtt, when the window
	// has been.
	c := &outChunk{deliveredAt: 1}
	s.delivery.delivered = int64(w)
	s.delivery.sample(c, rtt+1, rtt)
	if got := s.delivery.bdp(rtt); got < w-seg || got > w+seg {
		t.Fatalf("bdp %d, want %d", got, w)
	}
	s.srtt, s.minRTT, s.rack.rtt = rtt, rtt, rtt
	s.cwnd, s.ssthresh = w, w
	s.cubic.epoch = 7
	s.onLoss(false)
	if s.cwnd != w || s.inRecovery || s.cubic.epoch != 7 || s.a.stats.LossesKept != 1 {
		t.Fatalf("after a loss without a queue: cwnd %d packets, in recovery %v, CUBIC's epoch %d, %d losses kept; want the window, the curve and no recovery",
			s.cwnd/seg, s.inRecovery, s.cubic.epoch, s.a.stats.LossesKept)
	}
	// The RTT of the last delivery a quarter above its minimum: a queue
	// of 20 ms. The reduction comes, and the floor holds it at what the
	// delivery rate carries.
	s.rack.rtt = rtt * 5 / 4
	s.onLoss(false)
	if !s.inRecovery || s.cwnd < w-seg || s.a.stats.LossesKept != 1 {
		t.Fatalf("after a loss behind a 20 ms queue: in recovery %v, cwnd %d packets, want a recovery and the floor's 1000", s.inRecovery, s.cwnd/seg)
	}
	// In slow start the delivery rate trails the window by half: the loss
	// is kept while that rate still grows by a quarter a round trip, and
	// halves the window once it has stopped (the pipe is full).
	for _, grew := range []bool{true, false} {
		s.inRecovery = false
		s.rack.rtt = rtt
		s.cwnd, s.ssthresh = w, 1<<30
		s.delivery = delivery{delivered: int64(w / 2)}
		s.delivery.sample(c, rtt+1, rtt)
		s.delivery.grew = grew
		s.onLoss(false)
		if want := map[bool]int{true: w, false: w / 2}[grew]; s.cwnd != want {
			t.Fatalf("slow start, delivery rate growing %v: cwnd %d packets after a loss, want %d", grew, s.cwnd/seg, want/seg)
		}
	}
	// The same rate behind a queue: the RTT is three times its minimum.
	s.inRecovery = false
	s.srtt, s.minRTT, s.rack.rtt = 3*rtt, rtt, 3*rtt
	s.delivery = delivery{}
	s.delivery.delivered = int64(w)
	s.delivery.sample(c, 3*rtt+1, 3*rtt)
	s.cwnd, s.ssthresh = w, w
	s.onLoss(false)
	if s.cwnd != 700*seg {
		t.Fatalf("cwnd %d packets after a loss behind a queue, want 700", s.cwnd/seg)
	}
}

// TestTimeoutHoldsSsthresh: a blackout of 1.5 s after 2 MB have grown the
// window brings several retransmission timeouts; the first takes ssthresh
// to half the window, and the later ones, which come before the first's
// data is acknowledged and whose window is one packet, hold it there
// (RFC 5681 3.1) rather than halve that packet again to the 4-packet
// floor, where the transfer would then crawl in congestion avoidance.
func TestTimeoutHoldsSsthresh(t *testing.T) {
	var cut atomic.Bool
	fixed := func(*rand.Rand) time.Duration { return 5 * time.Millisecond }
	a, b := pair(t, func(ab, ba *link) {
		ab.delay, ba.delay = fixed, fixed
		ab.filter = func([]byte) bool { return !cut.Load() }
	})
	transfer(t, a, b, 250, func(c *Channel) { send(t, c, 250, 8000) })
	for a.Stats().Flight > 0 {
		time.Sleep(time.Millisecond)
	}
	var ss []int
	transfer(t, a, b, 50, func(c *Channel) {
		cut.Store(true)
		send(t, c, 50, 8000)
		for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if s := a.Stats(); int(s.Timeouts) > len(ss) {
				ss = append(ss, s.Ssthresh)
			}
		}
		cut.Store(false)
	})
	t.Logf("ssthresh after each timeout: %v", ss)
	if len(ss) < 2 {
		t.Fatalf("%d timeouts in the blackout, want 2 or more", len(ss))
	}
	for _, x := range ss[1:] {
		if x != ss[0] || x <= 4*1200 {
			t.Fatalf("ssthresh after each timeout %v, want the first's, above 4 packets, held", ss)
		}
	}
}
