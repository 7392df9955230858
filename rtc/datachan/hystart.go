package datachan

import "time"

// Slow start ends where a queue starts to build, not where it overflows
// (HyStart++, RFC 9406): when the smallest RTT of a round trip is above the
// last round's by an eighth (4–16 ms), the window grows a quarter as fast
// for five rounds (conservative slow start), then congestion avoidance
// takes over; if the RTT comes back down, it was jitter, and slow start
// goes on. Behind a deep queue the first loss comes a queue's worth of
// round trips late, with the window many times the path, and the burst of
// losses that ends it takes seconds to repair through a receiver that
// reports 20 holes per SACK (dcSCTP).
// Chunks are paced, so there is no limit on growth per SACK (RFC 9406's L).
const (
	hsMinThresh = 4 * int64(time.Millisecond)
	hsMaxThresh = 16 * int64(time.Millisecond)
	hsSamples   = 8 // RTT samples a round needs before its minimum counts
	cssDivisor  = 4
	cssRounds   = 5
)

type hystart struct {
	windowEnd       uint64 // the round ends when the chunk sent last at its start is acknowledged
	lastMin, curMin int64  // the smallest RTT of the last round and of this one (0: none)
	samples         int
	cssBaseline     int64 // in conservative slow start: curMin when it began; else 0
	cssRounds       int
}

// ack runs on each SACK that acknowledged something new in slow start:
// newest is the chunk acknowledged that was sent last, rtt the time since
// it was sent (an RTT sample unless it was a retransmission).
func (h *hystart) ack(s *sender, newest *outChunk, rtt int64) {
	if newest.nSent == 1 && rtt > 0 {
		if h.curMin == 0 || rtt < h.curMin {
			h.curMin = rtt
		}
		h.samples++
	}
	if newest.seq >= h.windowEnd {
		if h.cssBaseline != 0 {
			if h.cssRounds++; h.cssRounds >= cssRounds {
				s.ssthresh = s.cwnd // the end of slow start
				h.cssBaseline = 0
			}
		}
		h.lastMin, h.curMin, h.samples = h.curMin, 0, 0
		h.windowEnd = s.seq
	}
	if h.samples < hsSamples || h.lastMin == 0 {
		return
	}
	if h.cssBaseline == 0 {
		if h.curMin >= h.lastMin+min(max(h.lastMin/8, hsMinThresh), hsMaxThresh) {
			h.cssBaseline, h.cssRounds = h.curMin, 0
		}
	} else if h.curMin < h.cssBaseline {
		h.cssBaseline = 0 // the RTT came back down: it was jitter
	}
}

// growth is what acked bytes add to cwnd in slow start.
func (h *hystart) growth(acked int) int {
	if h.cssBaseline != 0 {
		return acked / cssDivisor
	}
	return acked
}
