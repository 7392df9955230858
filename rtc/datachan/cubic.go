package datachan

import (
	"math"
	"time"
)

// Congestion avoidance is CUBIC's (RFC 9438), as the TCP that data
// channels are measured against: after a reduction the window grows back
// toward where the loss came (wMax) along a cubic of time, not by one
// packet per round trip, and a reduction keeps 0.7 of it, not half: after
// a burst dropped by a browser's socket buffer on a long path, CUBIC comes
// back to wMax in a few seconds whatever the RTT.
const (
	cubicC    = 0.4 // segments per second cubed
	cubicBeta = 0.7
	// renoAlpha makes the Reno-friendly estimate grow as Reno would with
	// cubicBeta's reduction (RFC 9438 4.3).
	renoAlpha = 3 * (1 - cubicBeta) / (1 + cubicBeta)
)

type cubic struct {
	wMax  float64 // bytes: the window when the last reduction came
	k     float64 // seconds from the epoch's start to wMax
	epoch int64   // when growth since the last reduction began (0: not yet)
	wEst  float64 // bytes: the Reno-friendly window
}

// reduce is a congestion event (RFC 9438 4.6, with fast convergence 4.7):
// ssthresh and cwnd go to cubicBeta of cwnd, or half of it in slow start.
// Slow start doubles the window each round trip, so when the first loss
// shows the path is full it holds up to twice what fits, and 0.7 of that
// would overflow a deep bottleneck queue again, in bursts of losses that
// end in timeouts.
func (s *sender) reduce() {
	beta := cubicBeta
	if s.cwnd < s.ssthresh {
		beta = 0.5
	}
	w := float64(s.cwnd)
	if w < s.cubic.wMax {
		w = w * (1 + beta) / 2 // a second loss below wMax: make room for others
	}
	s.cubic.wMax = w
	s.cubic.epoch = 0
	s.ssthresh = max(int(float64(s.cwnd)*beta), 4*s.mtu)
	s.cwnd = s.ssthresh
	s.pba = 0
	s.hs = hystart{}
}

// caGrow opens cwnd in congestion avoidance on acked newly acknowledged
// bytes (RFC 9438 4.2–4.5).
func (s *sender) caGrow(acked int, now int64) {
	c := &s.cubic
	cwnd := float64(s.cwnd)
	seg := float64(s.mtu)
	if c.epoch == 0 {
		c.epoch = now
		c.wEst = cwnd
		if c.wMax > cwnd {
			c.k = math.Cbrt((c.wMax - cwnd) / seg / cubicC)
		} else {
			c.k, c.wMax = 0, cwnd
		}
	}
	rtt := float64(s.srtt) / float64(time.Second)
	t := float64(now-c.epoch)/float64(time.Second) + rtt
	target := c.wMax + cubicC*seg*(t-c.k)*(t-c.k)*(t-c.k)
	target = min(max(target, cwnd), 1.5*cwnd)
	c.wEst += renoAlpha * seg * float64(acked) / cwnd
	if c.wEst > target {
		target = c.wEst // the Reno-friendly region: as fast as Reno at least
	}
	// cwnd rises by (target - cwnd)/cwnd per acknowledged segment; what is
	// under a byte waits in pba.
	s.pba += int((target - cwnd) * float64(acked))
	if inc := s.pba / s.cwnd; inc > 0 {
		s.pba -= inc * s.cwnd
		s.cwnd += inc
	}
}
