package datachan

import (
	"math/rand/v2"
	"testing"
	"time"
)

// rounds drives a sender's HyStart++ through round trips of 20 SACKs each,
// the RTT samples of round k drawn by rtt(k), and says in which round
// conservative slow start began (0: never) and in which slow start ended.
func rounds(s *sender, n int, rtt func(k int) int64) (css, end int) {
	acked := uint64(0)
	for k := 1; k <= n; k++ {
		for i := 0; i < 20; i++ {
			acked++
			s.seq = acked + 20 // a window of 20 chunks ahead
			was := s.hs.cssBaseline != 0
			if s.cwnd < s.ssthresh {
				s.hs.ack(s, &outChunk{seq: acked, nSent: 1}, rtt(k))
			}
			if !was && s.hs.cssBaseline != 0 && css == 0 {
				css = k
			}
			if end == 0 && s.cwnd >= s.ssthresh {
				end = k
			}
		}
	}
	return css, end
}

// TestHyStart: slow start on an 80 ms path goes on while the RTT stays at
// its minimum, turns conservative (a quarter of the growth) in the round
// where the smallest RTT rose by 20 ms, a queue building, and ends five
// rounds later; an RTT that comes back down resumes it, so on a link whose
// every packet takes 60–110 ms (mobile's jitter) slow start never ends.
func TestHyStart(t *testing.T) {
	ms := int64(time.Millisecond)
	fresh := func() *sender {
		s := newTestSender()
		s.cwnd, s.ssthresh = 100*s.mtu, 1<<30
		return s
	}
	s := fresh()
	css, end := rounds(s, 12, func(k int) int64 {
		if k >= 4 {
			return 100 * ms
		}
		return 80 * ms
	})
	if css != 4 || end != 9 || s.ssthresh != s.cwnd {
		t.Fatalf("queue from round 4: conservative from round %d, slow start ended in %d (ssthresh %d, cwnd %d); want 4 and 9", css, end, s.ssthresh, s.cwnd)
	}
	if g := fresh().hs.growth(4000); g != 4000 {
		t.Fatalf("slow start grows by %d on 4000 bytes", g)
	}
	s = fresh()
	rounds(s, 4, func(k int) int64 { return map[bool]int64{true: 100, false: 80}[k >= 4] * ms })
	if g := s.hs.growth(4000); g != 1000 {
		t.Fatalf("conservative slow start grows by %d on 4000 bytes, want 1000", g)
	}
	s = fresh()
	css, end = rounds(s, 12, func(k int) int64 { return map[bool]int64{true: 100, false: 80}[k == 4] * ms })
	if css != 4 || end != 0 || s.hs.cssBaseline != 0 {
		t.Fatalf("RTT up in round 4 only: conservative from %d, ended in %d; want 4 and never", css, end)
	}
	r := rand.New(rand.NewPCG(5, 6))
	s = fresh()
	if _, end = rounds(s, 50, func(int) int64 { return 60*ms + r.Int64N(50*ms) }); end != 0 {
		t.Fatalf("jitter of 60-110 ms: slow start ended in round %d", end)
	}
}
