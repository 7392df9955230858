// Package bwe estimates the bandwidth toward one subscriber from transport-wide
// congestion control feedback (draft-holmer-rmcat-transport-wide-cc-extensions),
// the way Google Congestion Control does on the send side: a delay-based
// estimate (a trendline of queuing delay growth, an adaptive overuse threshold
// and AIMD rate control) capped by a loss-based one.
//
// OnSent is called for every packet sent and must stay cheap: it writes one slot
// of a ring without locks (and, while the ring is still growing, reads the
// slot's previous record first). Feedback and the estimate take a mutex; they run a few
// times a second.
package bwe

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
)

const (
	// Sent packets are remembered for feedback for ringHorizon, while feedback
	// comes every 100 ms: the ring starts at ringMin entries (8 bytes each) and
	// doubles, up to ringMax (over a second at 3000 packets/s, 32 KiB), when a
	// packet would overwrite one sent less than ringHorizon ago. An audience
	// member receiving a few hundred packets a second keeps 4 KiB.
	ringMin     = 1 << 9
	ringMax     = 1 << 12
	ringHorizon = time.Second

	burstInterval  = 5 * time.Millisecond   // packets sent this close form one group
	maxBurst       = 100 * time.Millisecond // a burst of arrivals spans at most this
	trendWindow    = 20
	smoothing      = 0.9
	thresholdGain  = 4.0
	maxDeltas      = 60
	overuseTime    = 10 * time.Millisecond
	kUp, kDown     = 0.0087, 0.039
	minThreshold   = 6.0 // ms
	maxThreshold   = 600.0
	initThreshold  = 12.5
	beta           = 0.85 // decrease to this share of the acknowledged rate
	ackedWindow    = 500 * time.Millisecond
	lossHigh       = 0.10
	lossLow        = 0.02
	defaultMin     = 30_000
	defaultMax     = 20_000_000
	defaultInitial = 1_000_000
)

// sent packs what feedback needs of one packet into one word, written and read
// atomically (the packet path writes, the RTCP reader reads):
//
//	bits  0-16  transport-wide sequence number + 1 (0: empty slot)
//	bits 17-31  size in bytes (clamped)
//	bits 32-63  send time in µs, modulo 2^32 (unwrapped against the feedback's time)
type sent struct{ v atomic.Uint64 }

const maxSentSize = 1<<15 - 1

func packSent(seq uint16, at int64, size int) uint64 {
	size = min(max(size, 0), maxSentSize)
	return uint64(seq) + 1 | uint64(size)<<17 | uint64(uint32(at/1000))<<32
}

// unpackSent returns the packet's sequence number + 1 (0 if empty), its size,
// and its send time in ns, unwrapped relative to now (ns).
func unpackSent(v uint64, now int64) (seq1 uint32, size int, at int64) {
	seq1 = uint32(v & (1<<17 - 1))
	size = int(v >> 17 & maxSentSize)
	nowUs := now / 1000
	back := uint32(nowUs) - uint32(v>>32) // µs since sending, modulo 2^32
	return seq1, size, (nowUs - int64(back)) * 1000
}

// Estimator is the bandwidth estimate toward one receiver.
type Estimator struct {
	ring   atomic.Pointer[ring]
	growMu sync.Mutex
	next   atomic.Uint32 // next transport-wide sequence number

	mu       sync.Mutex
	min, max int
	delay    float64 // delay-based estimate, bps
	loss     float64 // loss-based estimate, bps
	state    int     // hold, increase, decrease
	lastRate time.Time

	// trendline
	groupSend, groupArrive      int64 // first send / last arrival of the current group, ns
	groupLast, groupFirstArrive int64 // its last send / first arrival, ns
	prevSend, prevArrive        int64 // of the previous complete group
	haveGroup, havePrev         bool
	accDelay, smoothed          float64
	firstArrive                 int64
	window                      [][2]float64
	numDeltas                   int
	threshold                   float64
	lastThresh                  int64
	overuseFor                  float64 // ms
	overuseCount                int
	prevTrend                   float64
	signal                      int
	linkCapacity, capacityVar   float64

	acked    [][2]int64 // (arrival ns, size) of recently acknowledged packets
	ackedAt  int64      // arrival of the first packet ever acknowledged
	ackedAny bool
	lastLoss time.Time
}

// ring is the sent records, indexed by sequence number modulo its size.
type ring struct {
	slots []sent
	mask  int
}

func newRing(n int) *ring { return &ring{slots: make([]sent, n), mask: n - 1} }

func (r *ring) slot(seq uint16) *sent { return &r.slots[int(seq)&r.mask] }

const (
	stateHold = iota
	stateIncrease
	stateDecrease
)

const (
	signalNormal = iota
	signalOveruse
	signalUnderuse
)

// New returns an estimator that starts at initial bps and stays in [min, max].
func New(initial, min, max int) *Estimator {
	if initial <= 0 {
		initial = defaultInitial
	}
	if min <= 0 {
		min = defaultMin
	}
	if max <= 0 {
		max = defaultMax
	}
	e := &Estimator{min: min, max: max, delay: float64(initial), loss: float64(max), threshold: initThreshold, state: stateIncrease}
	e.ring.Store(newRing(ringMin))
	return e
}

// NextSeq allocates the transport-wide sequence number of a packet about to be
// sent.
func (e *Estimator) NextSeq() uint16 { return uint16(e.next.Add(1) - 1) }

// OnSent records a packet's send time (monotonic ns) and size in bytes.
func (e *Estimator) OnSent(seq uint16, at int64, size int) {
	r := e.ring.Load()
	s := r.slot(seq)
	if len(r.slots) < ringMax {
		if old := s.v.Load(); old != 0 {
			if _, _, prev := unpackSent(old, at); at-prev < int64(ringHorizon) {
				r = e.grow(r)
				s = r.slot(seq)
			}
		}
	}
	s.v.Store(packSent(seq, at, size))
}

// grow replaces r with a ring twice its size holding its records. A record
// written into r meanwhile by another sender may be lost: feedback about that
// packet is then ignored, as about any packet not remembered.
func (e *Estimator) grow(r *ring) *ring {
	e.growMu.Lock()
	defer e.growMu.Unlock()
	if cur := e.ring.Load(); cur != r {
		return cur
	}
	n := newRing(2 * len(r.slots))
	for i := range r.slots {
		if v := r.slots[i].v.Load(); v != 0 {
			n.slot(uint16(v&(1<<17-1) - 1)).v.Store(v)
		}
	}
	e.ring.Store(n)
	return n
}

// Estimate is the current estimate in bits per second.
func (e *Estimator) Estimate() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return int(math.Min(e.delay, e.loss))
}

// Received is the rate the receiver acknowledged over the last half second, bps.
func (e *Estimator) Received() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return int(e.ackedRate())
}

// Capacity is the upper end of the link capacity learnt at the last decreases
// (their acknowledged rates, smoothed, plus three deviations), bps; 0 while
// none is known or once more than that got through. A rate above it has not
// been shown to pass.
func (e *Estimator) Capacity() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.linkCapacity <= 0 {
		return 0
	}
	return int(e.linkCapacity + 3*e.capacityDev())
}

// OnFeedback processes one transport-wide feedback packet received at now (ns).
func (e *Estimator) OnFeedback(fb *rtcp.TransportLayerCC, now int64) {
	type ack struct {
		send, arrive int64
		size         int
	}
	acks := make([]ack, 0, fb.PacketStatusCount)
	lost := 0
	ref := int64(fb.ReferenceTime) * 64 * int64(time.Millisecond)
	arrive := ref
	seq := fb.BaseSequenceNumber
	deltas := fb.RecvDeltas
	r := e.ring.Load()
	status := func(sym uint16) {
		seq1, size, sentAt := unpackSent(r.slot(seq).v.Load(), now)
		known := seq1 == uint32(seq)+1
		switch sym {
		case rtcp.TypeTCCPacketReceivedSmallDelta, rtcp.TypeTCCPacketReceivedLargeDelta:
			if len(deltas) > 0 {
				arrive += deltas[0].Delta * int64(time.Microsecond)
				deltas = deltas[1:]
			}
			if known {
				acks = append(acks, ack{send: sentAt, arrive: arrive, size: size})
			}
		default:
			if known {
				lost++
			}
		}
		seq++
	}
	remaining := int(fb.PacketStatusCount)
	for _, c := range fb.PacketChunks {
		switch ch := c.(type) {
		case *rtcp.RunLengthChunk:
			for i := 0; i < int(ch.RunLength) && remaining > 0; i++ {
				status(ch.PacketStatusSymbol)
				remaining--
			}
		case *rtcp.StatusVectorChunk:
			for _, sym := range ch.SymbolList {
				if remaining == 0 {
					break
				}
				status(sym)
				remaining--
			}
		}
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range acks {
		e.onPacket(a.send, a.arrive)
		e.acked = append(e.acked, [2]int64{a.arrive, int64(a.size)})
		if !e.ackedAny {
			e.ackedAt, e.ackedAny = a.arrive, true
		}
	}
	e.trimAcked()
	e.updateLoss(len(acks), lost, now)
	e.updateRate(now)
}

// onPacket feeds one acknowledged packet to the trendline. Packets sent within
// burstInterval of a group's first form the group; so do packets that arrive
// in a burst with it (libwebrtc's InterArrival::BelongsToBurst): within
// burstInterval of its last arrival, sooner after it than they were sent, and
// within maxBurst of its first arrival. A receiver that does not read its
// socket for a while (starved of CPU, on a loaded machine) stamps what waited
// with one time: one late group, not a queue that grows. Deltas between groups
// are taken between their last send times, as libwebrtc's.
func (e *Estimator) onPacket(send, arrive int64) {
	if !e.haveGroup {
		e.groupSend, e.groupLast, e.groupArrive, e.groupFirstArrive, e.haveGroup = send, send, arrive, arrive, true
		return
	}
	sentApart := send - e.groupSend
	arriveDelta := arrive - e.groupArrive
	burst := arriveDelta <= int64(burstInterval) && arriveDelta-(send-e.groupLast) < 0 &&
		arrive-e.groupFirstArrive < int64(maxBurst)
	if sentApart <= int64(burstInterval) || burst {
		e.groupArrive = max(e.groupArrive, arrive)
		e.groupLast = max(e.groupLast, send)
		return
	}
	// The current group is complete.
	if e.havePrev {
		sendDelta := float64(e.groupLast-e.prevSend) / 1e6
		arriveDelta := float64(e.groupArrive-e.prevArrive) / 1e6
		e.trend(arriveDelta-sendDelta, e.groupArrive, sendDelta)
	}
	e.prevSend, e.prevArrive, e.havePrev = e.groupLast, e.groupArrive, true
	e.groupSend, e.groupLast, e.groupArrive, e.groupFirstArrive = send, send, arrive, arrive
}

// trend updates the delay trendline with one inter-group delay variation (ms).
func (e *Estimator) trend(delayDelta float64, arrive int64, sendDelta float64) {
	if e.firstArrive == 0 {
		e.firstArrive = arrive
	}
	e.numDeltas = min(e.numDeltas+1, 1000)
	e.accDelay += delayDelta
	e.smoothed = smoothing*e.smoothed + (1-smoothing)*e.accDelay
	e.window = append(e.window, [2]float64{float64(arrive-e.firstArrive) / 1e6, e.smoothed})
	if len(e.window) > trendWindow {
		e.window = e.window[1:]
	}
	if len(e.window) < trendWindow {
		return
	}
	slope := regression(e.window)
	modified := float64(min(e.numDeltas, maxDeltas)) * slope * thresholdGain
	e.detect(modified, sendDelta, arrive)
}

func regression(pts [][2]float64) float64 {
	var sx, sy float64
	for _, p := range pts {
		sx += p[0]
		sy += p[1]
	}
	mx, my := sx/float64(len(pts)), sy/float64(len(pts))
	var num, den float64
	for _, p := range pts {
		num += (p[0] - mx) * (p[1] - my)
		den += (p[0] - mx) * (p[0] - mx)
	}
	if den == 0 {
		return 0
	}
	return num / den
}

// detect is the overuse detector with its adaptive threshold.
func (e *Estimator) detect(trend, tsDelta float64, now int64) {
	switch {
	case trend > e.threshold:
		if e.overuseFor < 0 {
			e.overuseFor = tsDelta / 2
		} else {
			e.overuseFor += tsDelta
		}
		e.overuseCount++
		if e.overuseFor > float64(overuseTime/time.Millisecond) && e.overuseCount > 1 && trend >= e.prevTrend {
			e.overuseFor, e.overuseCount = 0, 0
			e.signal = signalOveruse
		}
	case trend < -e.threshold:
		e.overuseFor, e.overuseCount = -1, 0
		e.signal = signalUnderuse
	default:
		e.overuseFor, e.overuseCount = -1, 0
		e.signal = signalNormal
	}
	e.prevTrend = trend
	// Adapt the threshold, ignoring spikes far above it.
	if math.Abs(trend) <= e.threshold+15 {
		k := kDown
		if math.Abs(trend) >= e.threshold {
			k = kUp
		}
		dt := 100.0
		if e.lastThresh != 0 {
			dt = math.Min(float64(now-e.lastThresh)/1e6, 100)
		}
		e.threshold += k * (math.Abs(trend) - e.threshold) * dt
		e.threshold = math.Max(minThreshold, math.Min(maxThreshold, e.threshold))
	}
	e.lastThresh = now
}

func (e *Estimator) trimAcked() {
	if len(e.acked) == 0 {
		return
	}
	last := e.acked[len(e.acked)-1][0]
	i := 0
	for i < len(e.acked) && last-e.acked[i][0] > int64(ackedWindow) {
		i++
	}
	e.acked = append(e.acked[:0], e.acked[i:]...)
}

// ackedRate is what the receiver got over the last window, bps (0 if unknown).
func (e *Estimator) ackedRate() float64 {
	if len(e.acked) < 2 {
		return 0
	}
	last := e.acked[len(e.acked)-1][0]
	if last-e.ackedAt >= int64(ackedWindow) {
		// What arrived over the whole window, as libwebrtc's bitrate
		// estimator: over the arrivals' own span, a burst after a gap (a
		// receiver or relay starved of CPU) read as twice a 300 kbit/s link.
		var bytes int64
		for _, a := range e.acked {
			bytes += a[1]
		}
		return float64(bytes*8) / ackedWindow.Seconds()
	}
	span := float64(last-e.acked[0][0]) / 1e9
	if span < 0.1 {
		return 0
	}
	var bytes int64
	for _, a := range e.acked[1:] {
		bytes += a[1]
	}
	return float64(bytes*8) / span
}

// updateRate is the AIMD rate controller.
func (e *Estimator) updateRate(now int64) {
	t := time.Unix(0, now)
	dt := 0.0
	if !e.lastRate.IsZero() {
		dt = math.Min(t.Sub(e.lastRate).Seconds(), 1)
	}
	e.lastRate = t
	acked := e.ackedRate()
	switch e.signal {
	case signalOveruse:
		if e.state != stateDecrease || dt > 0 {
			if acked > 0 {
				e.delay = beta * acked
				e.updateCapacity(acked)
			} else {
				e.delay *= beta
			}
			e.state = stateHold
			e.signal = signalNormal // one decrease per detection
		}
	case signalUnderuse:
		e.state = stateHold
	default:
		if e.state == stateHold {
			e.state = stateIncrease
		}
		if e.state == stateIncrease && dt > 0 {
			prev := e.delay
			// What gets through above the last known capacity's upper bound
			// means the capacity has grown (or the decrease that set it was
			// not the link's: a receiver starved of CPU stamps late arrivals
			// that read as queuing): forget it and grow multiplicatively again,
			// as libwebrtc's AIMD does. Kept, a capacity learnt at a few
			// hundred kbit/s held the estimate to additive steps of 48 kbit/s
			// per second for good.
			if e.linkCapacity > 0 && acked > e.linkCapacity+3*e.capacityDev() {
				e.linkCapacity, e.capacityVar = 0, 0
			}
			if e.linkCapacity > 0 && e.delay > e.linkCapacity-3*e.capacityDev() {
				// Near the last known capacity: additive, about one packet per RTT.
				e.delay += 1200 * 8 * dt / 0.2
			} else {
				e.delay *= math.Pow(1.08, dt)
			}
			// Do not grow far beyond what actually gets through, but a cap is
			// never a reason to go down (libwebrtc's AIMD does the same).
			if limit := 1.5*acked + 10_000; acked > 0 && e.delay > limit {
				e.delay = math.Max(prev, limit)
			}
		}
	}
	e.delay = math.Max(float64(e.min), math.Min(float64(e.max), e.delay))
}

// capacityDev is the link capacity's standard deviation, bps. The variance is
// normalised in kbit/s, as libwebrtc's: in bit/s the same 0.4 to 2.5 gave a
// deviation 32 times too small (424 bit/s at 450 kbit/s), so that an estimate
// a step above the capacity never counted as beyond it.
func (e *Estimator) capacityDev() float64 {
	return math.Sqrt(e.capacityVar*e.linkCapacity/1000) * 1000
}

func (e *Estimator) updateCapacity(rate float64) {
	if e.linkCapacity == 0 {
		e.linkCapacity, e.capacityVar = rate, 0.4
		return
	}
	const alpha = 0.05
	e.linkCapacity = (1-alpha)*e.linkCapacity + alpha*rate
	// In kbit/s, see capacityDev.
	c, r := e.linkCapacity/1000, rate/1000
	e.capacityVar = (1-alpha)*e.capacityVar + alpha*(c-r)*(c-r)/math.Max(c, 1)
	e.capacityVar = math.Max(0.4, math.Min(2.5, e.capacityVar))
}

// updateLoss is the loss-based controller: back off above 10% loss, grow below 2%.
func (e *Estimator) updateLoss(received, lost int, now int64) {
	total := received + lost
	if total == 0 {
		return
	}
	frac := float64(lost) / float64(total)
	t := time.Unix(0, now)
	switch {
	case frac > lossHigh:
		if t.Sub(e.lastLoss) > 300*time.Millisecond {
			base := math.Min(e.loss, math.Max(e.delay, e.ackedRate()))
			e.loss = base * (1 - 0.5*frac)
			e.lastLoss = t
		}
	case frac < lossLow:
		if t.Sub(e.lastLoss) > 200*time.Millisecond {
			e.loss = math.Min(float64(e.max), e.loss*1.05+1000)
			e.lastLoss = t
		}
	}
	e.loss = math.Max(float64(e.min), e.loss)
}
