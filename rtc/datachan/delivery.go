package datachan

// Delivery rate (as in draft-cheng-iccrg-delivery-rate-estimation, which
// BBR uses): each chunk remembers how much had been delivered when it was
// sent and when the last delivery before that came; when it is
// acknowledged, what was delivered since, over the time since, is a sample
// of the rate the path and the receiver took. The interval is at least a
// round trip, so a SACK that acknowledges much at once does not inflate it.
//
// It bounds a reduction of cwnd from below (onLoss): a window of the
// delivery rate times the minimum RTT fills the path without a queue, so a
// loss that came without one, a receiver's socket buffer that overflowed
// while its reader was late (Chromium's holds 55 datagrams), costs no
// throughput, while a loss from a bottleneck's queue still takes the window
// down by the queue at least (as TCP Westwood+ does on its bandwidth
// estimate).
type delivery struct {
	delivered int64 // bytes acknowledged, ever
	at        int64 // when the last of them was

	// the largest sample of this window of a smoothed RTT, and of the last
	cur, prev float64 // bytes per ns
	start     int64
	grew      bool // the last window's sample was a quarter above the one before
}

// sample takes the rate the newest acknowledged chunk saw, as its SACK came
// at now.
func (d *delivery) sample(c *outChunk, now, srtt int64) {
	d.at = now
	if now-d.start > srtt {
		d.grew = d.cur >= 1.25*d.prev
		d.prev, d.cur, d.start = d.cur, 0, now
	}
	if el := now - c.deliveredAt; el > 0 {
		d.cur = max(d.cur, float64(d.delivered-c.delivered)/float64(el))
	}
}

// bdp is the window that carries the rate delivered lately over rtt.
func (d *delivery) bdp(rtt int64) int {
	return int(max(d.cur, d.prev) * float64(rtt))
}
