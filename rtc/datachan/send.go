package datachan

import (
	"encoding/binary"
	"slices"
	"time"
)

// The sending side: messages cut into DATA chunks, sent within the
// congestion window (RFC 9260 7.2) and the peer's receive window,
// acknowledged by SACKs. Loss is RACK's (RFC 8985): a chunk is lost when one
// sent after it was acknowledged and a reordering window has passed since,
// so a reordering link does not look lossy; a window that turns out too
// small (the peer reports the retransmission as a duplicate) grows. A lost
// retransmission is resent the same way. The retransmission timeout is the
// last resort.

const (
	rtoMin     = 200 * int64(time.Millisecond)
	rtoMax     = 10 * int64(time.Second)
	rtoInitial = 1 * int64(time.Second)
	maxReoMult = 16
	// chainAge: how long a chain of reductions waits for the proofs that
	// would undo it, at least (8 smoothed RTTs if more).
	chainAge = 250 * int64(time.Millisecond)
	// maybeTruncated: a SACK with this many gap blocks may have left some
	// out. dcSCTP (Chromium) reports the first 20 and no more
	// (kMaxGapAckBlocksReported), so on a link that reorders much, most of
	// what it has received goes unreported until the holes below fill; the
	// others report as many as fit in a packet.
	maybeTruncated = 16
)

type outMsg struct {
	ch       *Channel
	stream   uint16
	deadline int64 // abandon after (0: never)
	maxRtx   int   // abandon after this many retransmissions (-1: never)
	gone     bool  // abandoned
}

type outChunk struct {
	msg     *outMsg
	tsn     uint32
	stream  uint16
	ssn     uint16
	ppid    uint32
	flags   byte
	data    []byte
	sentAt  int64  // last transmission
	seq     uint64 // order of the last transmission
	nSent   int
	acked   bool   // by a gap block (or the cumulative ack)
	lost    bool   // to be resent
	flying  bool   // counted in flight
	dropped bool   // abandoned
	lostEp  uint32 // the episode that declared it lost
	// what had been delivered when it was last sent, and when (delivery.go)
	delivered   int64
	deliveredAt int64
}

type sender struct {
	a         *Association
	mtu       int
	nextTSN   uint32
	cumAck    uint32      // the peer's cumulative ack
	inflight  []*outChunk // TSN cumAck+1 onwards
	nLost     int         // chunks of inflight to resend
	probe     bool        // the next retransmission may exceed cwnd: a timeout's, or a fast recovery's first
	afterT3   bool        // until t3Recover is acknowledged
	t3Recover uint32
	t3Seq     uint64 // the timeout's retransmission, whose acknowledgment RACK takes as its own
	// pacing
	rate      float64 // bytes per ns
	tokens    float64
	burst     int
	refilled  int64
	paceTimer *time.Timer
	paceArmed bool
	delivery  delivery
	queues    map[uint16]*streamQueue // chunks not sent yet, per stream
	active    []*streamQueue          // streams with chunks to send, in turn
	cur       *streamQueue            // the stream whose message is half sent
	seq       uint64

	cwnd, ssthresh, flight, rwnd, pba int
	inRecovery                        bool
	recover                           uint32 // recovery ends when this is acknowledged
	recoveryAt                        int64  // when it began
	// A reduction of cwnd is an episode: its retransmissions are logged, and
	// if the peer reports each as a duplicate, the reduction is undone.
	episode                  uint32
	rtxLog                   map[uint32]uint32 // TSN → episode of its retransmission
	epMarked, epSpurious     int               // chunks declared lost in the chain, and those proven not
	chain                    uint32            // the first episode of the chain
	chainStart               int64
	priorCwnd, priorSsthresh int
	priorWMax                float64
	cubic                    cubic
	hs                       hystart
	multRaised               int64 // when the reordering multiplier last grew

	srtt, rttvar, rto, minRTT int64
	rack                      struct {
		seq      uint64
		sentAt   int64
		rtt      int64
		reorder  bool // reordering seen
		mult     int
		maxSeqIn uint64
		extent   int64 // the latest a reordered chunk came after its round trip
	}
	t3, rackTimer *time.Timer
	t3Armed       bool

	advancedPeerAck uint32 // PR-SCTP: what FORWARD-TSN announces
	forwardNeeded   bool
	// The last SACK may have left out gap blocks (truncated): the chunks
	// after the last one it reported are neither known received nor lost.
	truncated  bool
	reportedTo uint32 // the last TSN the last SACK covered
	peerGaps   int    // the most gap blocks a SACK has had
}

func (s *sender) init(a *Association) {
	s.a = a
	s.queues = map[uint16]*streamQueue{}
	s.rtxLog = map[uint32]uint32{}
	s.mtu = a.cfg.MTU
	s.nextTSN = a.myTSN
	s.cumAck = a.myTSN - 1
	s.advancedPeerAck = s.cumAck
	s.rto = rtoInitial
	s.rack.mult = 1
}

func (s *sender) start(peer initChunk) {
	// RFC 9260 7.2.1, with a larger initial window (10 packets, as TCP's
	// RFC 6928).
	s.cwnd = 10 * s.mtu
	s.ssthresh = int(peer.rwnd)
	s.rwnd = int(peer.rwnd)
}

func (s *sender) stop() {
	if s.t3 != nil {
		s.t3.Stop()
	}
	if s.rackTimer != nil {
		s.rackTimer.Stop()
	}
	if s.paceTimer != nil {
		s.paceTimer.Stop()
	}
}

// maxPayload is the user data one DATA chunk carries.
func (s *sender) maxPayload() int { return s.mtu - headerSize - dataHeaderSize }

// enqueue cuts a message into chunks. The caller holds mu.
func (s *sender) enqueue(m *outMsg, stream, ssn uint16, ppid uint32, unordered bool, b []byte) {
	m.stream = stream
	whole := outChunk{msg: m, stream: stream, ssn: ssn, ppid: ppid, flags: flagBegin | flagEnd, data: b}
	if unordered {
		whole.flags |= flagUnordered
	}
	q := s.queues[stream]
	if q == nil {
		q = &streamQueue{}
		s.queues[stream] = q
	}
	if len(q.chunks) == q.head {
		// Back in the queue: no credit for the time it had nothing to send.
		q.vtime = 0
		if len(s.active) > 0 {
			q.vtime = s.active[0].vtime
			for _, x := range s.active {
				q.vtime = min(q.vtime, x.vtime)
			}
		}
		s.active = append(s.active, q)
	}
	cut(&whole, s.maxPayload(), func(c *outChunk) { q.chunks = append(q.chunks, c) })
}

// cut splits c (a message, or the part of one a chunk carries) into chunks
// of at most most bytes; the first keeps c's begin flag, the last its end
// flag. The chunks share one allocation.
func cut(c *outChunk, most int, each func(*outChunk)) {
	all := make([]outChunk, max(1, (len(c.data)+most-1)/most))
	b := c.data
	for i := range all {
		n := min(len(b), most)
		d := &all[i]
		*d = *c
		d.data, d.flags = b[:n], c.flags&^(flagBegin|flagEnd)
		if i == 0 {
			d.flags |= c.flags & flagBegin
		}
		if b = b[n:]; len(b) == 0 {
			d.flags |= c.flags & flagEnd
		}
		each(d)
	}
}

// recut cuts the chunks not sent yet to the packet size again, after path
// MTU discovery lowered it (pmtu.go): they have no TSN yet, so a message's
// remaining chunks may become more of them. Never per packet.
func (s *sender) recut() {
	most := s.maxPayload()
	for _, q := range s.queues {
		rest := q.chunks[q.head:]
		if !slices.ContainsFunc(rest, func(c *outChunk) bool { return len(c.data) > most }) {
			continue
		}
		var again []*outChunk
		for _, c := range rest {
			cut(c, most, func(d *outChunk) { again = append(again, d) })
		}
		q.chunks, q.head = again, 0
	}
}

// streamQueue is one stream's chunks waiting to be sent. Streams share the
// window by bytes, message by message (the chunks of one message have
// consecutive TSNs): the next message is from the stream that has sent the
// fewest bytes since it last had nothing to send, so a small message on one
// channel waits for at most one message of another's bulk.
type streamQueue struct {
	chunks []*outChunk
	head   int
	vtime  int64 // bytes sent, as a virtual clock
}

// next is the next chunk to send, nil if none; messages that expired
// before any of them was sent are dropped on the way.
func (s *sender) next(now int64) *outChunk {
	for {
		if s.cur == nil {
			if len(s.active) == 0 {
				return nil
			}
			s.cur = s.active[0]
			for _, q := range s.active[1:] {
				if q.vtime < s.cur.vtime {
					s.cur = q
				}
			}
		}
		q := s.cur
		if q.head == len(q.chunks) {
			s.cur = nil
			s.active = slices.DeleteFunc(s.active, func(x *streamQueue) bool { return x == q })
			q.chunks, q.head = q.chunks[:0], 0
			continue
		}
		c := q.chunks[q.head]
		if c.flags&flagBegin != 0 && c.msg.deadline != 0 && now > c.msg.deadline && !c.msg.gone {
			c.msg.gone = true
			s.releaseQueued(c.msg, q.chunks[q.head:])
		}
		if c.msg.gone {
			s.pop()
			continue
		}
		return c
	}
}

// pop takes the chunk next returned off its queue.
func (s *sender) pop() {
	q := s.cur
	c := q.chunks[q.head]
	q.chunks[q.head] = nil
	q.head++
	q.vtime += int64(len(c.data))
	if c.flags&flagEnd != 0 {
		s.cur = nil
	}
	if q.head > 1024 && q.head > len(q.chunks)/2 {
		q.chunks = append(q.chunks[:0], q.chunks[q.head:]...)
		q.head = 0
	}
}

// transmit sends what the windows allow: a due SACK, a FORWARD-TSN,
// retransmissions, then new chunks, bundled into packets of at most mtu.
func (s *sender) transmit() {
	a := s.a
	if a.state != stateEstablished {
		return
	}
	now := a.now()
	var w packetWriter
	open := false
	begin := func() {
		if !open {
			w.start(getBuf(), a.peerTag)
			open = true
		}
	}
	room := func(n int) {
		if open && w.len()+n > s.mtu {
			a.queue(&w)
			open = false
		}
		begin()
	}
	if a.rcv.sackNow {
		room(a.rcv.sackSize())
		a.rcv.appendSack(&w)
	}
	if s.forwardNeeded {
		s.forwardNeeded = false
		v := s.forwardTSN()
		room(chunkHeader + len(v))
		w.chunk(ctForwardTSN, 0, len(v))
		w.b = append(w.b, v...)
		w.pad()
	}
	sent := false
	s.refill(now)
	// Retransmissions, in TSN order, within cwnd.
	for i := 0; s.nLost > 0 && i < len(s.inflight) && (s.flight < s.cwnd || s.probe); i++ {
		c := s.inflight[i]
		if !c.lost {
			continue
		}
		if !s.paced(len(c.data), now) {
			break
		}
		if c.msg.maxRtx >= 0 && c.nSent > c.msg.maxRtx || c.msg.deadline != 0 && now > c.msg.deadline {
			s.abandon(c.msg)
			continue
		}
		room(dataHeaderSize + len(c.data))
		s.writeChunk(&w, c, now)
		s.setLost(c, false)
		s.probe = false
		sent = true
	}
	// New chunks, within cwnd and the peer's window.
	for s.flight < s.cwnd {
		c := s.next(now)
		if c == nil {
			break
		}
		if len(c.data) > s.rwnd && s.flight > 0 {
			break // the peer's window is full (one chunk may probe it)
		}
		if !s.paced(len(c.data), now) {
			break
		}
		s.rwnd = max(s.rwnd-len(c.data), 0)
		s.pop()
		c.tsn = s.nextTSN
		s.nextTSN++
		s.inflight = append(s.inflight, c)
		room(dataHeaderSize + len(c.data))
		s.writeChunk(&w, c, now)
		sent = true
	}
	if open {
		a.queue(&w)
	}
	if sent && !s.t3Armed {
		s.armT3()
	}
}

// Pacing: chunks leave at twice cwnd per smoothed RTT in slow start and
// 1.25 times after (as Linux paces TCP), not in bursts as SACKs open the
// window, which overflow a browser's socket buffer or a bottleneck's queue.
// The bucket holds 1 ms' worth (at least 8 packets): Chromium's 128 KiB
// socket buffer holds about 55 datagrams (figures: docs/benchmarks.md).
func (s *sender) refill(now int64) {
	if s.srtt == 0 {
		return
	}
	gain := int64(5) // in quarters
	if s.cwnd < s.ssthresh {
		gain = 8
	}
	// The RTT of the last chunk RACK saw delivered follows the path after a
	// timeout too, when every acknowledged chunk is a retransmission and the
	// smoothed RTT gets no samples (Karn) and stays at its high.
	rtt := s.srtt
	if s.rack.rtt > 0 && s.rack.rtt < rtt {
		rtt = s.rack.rtt
	}
	s.rate = float64(int64(s.cwnd)*gain/4) / float64(rtt) // bytes per ns
	s.burst = max(8*s.mtu, int(s.rate*float64(time.Millisecond)))
	s.tokens = min(float64(s.burst), s.tokens+float64(now-s.refilled)*s.rate)
	s.refilled = now
}

// paced takes n bytes from the bucket, or arms the timer for when they are
// there and says no.
func (s *sender) paced(n int, now int64) bool {
	if s.srtt == 0 || s.probe {
		return true
	}
	if s.tokens >= float64(n) || s.tokens >= float64(s.burst) {
		s.tokens -= float64(n)
		return true
	}
	if !s.paceArmed {
		s.paceArmed = true
		d := time.Duration((float64(n) - s.tokens) / s.rate)
		if s.paceTimer == nil {
			s.paceTimer = time.AfterFunc(d, s.onPace)
		} else {
			s.paceTimer.Reset(d)
		}
	}
	return false
}

func (s *sender) onPace() {
	a := s.a
	a.mu.Lock()
	s.paceArmed = false
	if a.state == stateEstablished {
		s.transmit()
	}
	a.unlockAndFlush()
}

func (s *sender) writeChunk(w *packetWriter, c *outChunk, now int64) {
	w.chunk(ctData, c.flags, dataHeaderSize-chunkHeader+len(c.data))
	w.b = binary.BigEndian.AppendUint32(w.b, c.tsn)
	w.b = binary.BigEndian.AppendUint16(w.b, c.stream)
	w.b = binary.BigEndian.AppendUint16(w.b, c.ssn)
	w.b = binary.BigEndian.AppendUint32(w.b, c.ppid)
	w.b = append(w.b, c.data...)
	w.pad()
	if c.nSent > 0 && c.lostEp > 0 {
		if len(s.rtxLog) > 8192 {
			for t, ep := range s.rtxLog {
				if ep < s.chain {
					delete(s.rtxLog, t)
				}
			}
		}
		s.rtxLog[c.tsn] = c.lostEp
	}
	c.nSent++
	c.sentAt = now
	c.delivered, c.deliveredAt = s.delivery.delivered, s.delivery.at
	if c.deliveredAt == 0 {
		c.deliveredAt = now
	}
	s.seq++
	c.seq = s.seq
	if !c.flying {
		c.flying = true
		s.flight += len(c.data)
	}
}

// unfly takes a chunk out of the flight.
func (s *sender) unfly(c *outChunk) {
	if c.flying {
		c.flying = false
		s.flight -= len(c.data)
	}
}

// release is called once per chunk when it leaves the sender for good
// (acknowledged or abandoned): the channel's buffered amount drops.
func (s *sender) release(c *outChunk) {
	if ch := c.msg.ch; ch != nil {
		ch.unbuffer(len(c.data))
	}
}

// releaseQueued releases the chunks of m among chunks (not sent yet).
func (s *sender) releaseQueued(m *outMsg, chunks []*outChunk) {
	for _, c := range chunks {
		if c.msg == m {
			s.release(c)
		}
	}
}

func (s *sender) handleSack(v []byte) error {
	if len(v) < 12 {
		return errMalformed
	}
	cum := binary.BigEndian.Uint32(v)
	arwnd := int(binary.BigEndian.Uint32(v[4:]))
	ngap := int(binary.BigEndian.Uint16(v[8:]))
	ndup := int(binary.BigEndian.Uint16(v[10:]))
	if len(v) < 12+4*ngap+4*ndup {
		return errMalformed
	}
	if tsnLess(cum, s.cumAck) {
		return nil // an old SACK, overtaken
	}
	if !tsnLess(cum, s.nextTSN) {
		return errMalformed // acknowledges what was never sent
	}
	a := s.a
	now := a.now()
	acked := 0
	var newest *outChunk // the newly acknowledged chunk sent last
	prevMax := s.rack.maxSeqIn
	wasTruncated, wasTo := s.truncated, s.reportedTo
	ack := func(c *outChunk) {
		if c.acked {
			return
		}
		if c.lost && c.lostEp >= s.chain {
			s.epSpurious++ // declared lost, and here before it was resent
		}
		c.acked = true
		s.setLost(c, false)
		s.unfly(c)
		acked += len(c.data)
		s.delivery.delivered += int64(len(c.data))
		if newest == nil || c.seq > newest.seq {
			newest = c
		}
		if c.nSent == 1 && c.seq < prevMax && !(wasTruncated && tsnLess(wasTo, c.tsn)) {
			// Delivered after one sent later: reordering, by how much
			// more than the round trip it came late. (Not a chunk the
			// last SACK may have left out: that it comes now says
			// nothing of when it arrived.)
			s.rack.reorder = true
			if late := now - c.sentAt - s.rack.rtt; late > s.rack.extent {
				s.rack.extent = late
			}
		}
		if c.seq > s.rack.maxSeqIn {
			s.rack.maxSeqIn = c.seq
		}
	}
	advanced := cum != s.cumAck
	for s.cumAck != cum {
		c := s.inflight[0]
		s.inflight[0] = nil
		s.inflight = s.inflight[1:]
		s.cumAck++
		if !c.dropped {
			ack(c)
			s.release(c)
		}
	}
	// Fewer blocks than the peer has sent before: it left none out.
	s.peerGaps = max(s.peerGaps, ngap)
	s.truncated, s.reportedTo = ngap >= maybeTruncated && ngap == s.peerGaps, cum
	for i := 0; i < ngap; i++ {
		start := binary.BigEndian.Uint16(v[12+4*i:])
		end := binary.BigEndian.Uint16(v[14+4*i:])
		if start == 0 || end < start || int(end) > len(s.inflight) {
			return errMalformed
		}
		if to := cum + uint32(end); tsnLess(s.reportedTo, to) {
			s.reportedTo = to
		}
		for off := start; off <= end; off++ {
			if c := s.inflight[off-1]; !c.dropped {
				ack(c)
			}
		}
	}
	for i := 0; i < ndup; i++ {
		// A duplicate: if of a retransmission, one the peer did not need.
		tsn := binary.BigEndian.Uint32(v[12+4*ngap+4*i:])
		ep, ok := s.rtxLog[tsn]
		if !ok {
			continue
		}
		// Not forgotten: a chunk resent twice needs two duplicates, as it
		// counted twice in its chain.
		a.stats.SpuriousRetransmits++
		s.rack.reorder = true
		if s.rack.mult < maxReoMult && now-s.multRaised > s.srtt {
			s.rack.mult++
			s.multRaised = now
		}
		if ep >= s.chain {
			s.epSpurious++
		}
	}
	if s.epMarked > 0 && s.epSpurious >= s.epMarked {
		// Every retransmission of the last reduction was spurious: undo it
		// (the duplicates may come after the recovery ended).
		s.cwnd, s.ssthresh = max(s.cwnd, s.priorCwnd), max(s.ssthresh, s.priorSsthresh)
		s.cubic.wMax, s.cubic.epoch = s.priorWMax, 0
		s.inRecovery = false
		s.epMarked, s.epSpurious = 0, 0
	}
	s.rwnd = max(arwnd-s.flight, 0)
	if newest != nil {
		s.delivery.sample(newest, now, s.srtt)
		rtt := now - newest.sentAt
		if newest.nSent == 1 {
			s.rttSample(rtt)
		}
		if s.cwnd < s.ssthresh {
			s.hs.ack(s, newest, rtt)
		}
		// A retransmission acknowledged sooner than the minimum RTT may be
		// its original's (RFC 8985 6.2), unless the original went a
		// timeout ago: then RACK must move, or the rest of the flight
		// waits for a timeout each.
		if newest.nSent == 1 || rtt >= s.minRTT || newest.seq == s.t3Seq {
			if newest.seq > s.rack.seq {
				s.rack.seq, s.rack.sentAt, s.rack.rtt = newest.seq, newest.sentAt, rtt
			}
		}
	}
	s.advancePeerAck()
	if tsnLess(s.cumAck, s.advancedPeerAck) {
		s.forwardNeeded = true // the last FORWARD-TSN was lost
	}
	if s.afterT3 && !tsnLess(s.cumAck, s.t3Recover) {
		s.afterT3 = false
	}
	if s.inRecovery && !tsnLess(s.cumAck, s.recover) {
		s.inRecovery = false
	}
	if acked > 0 && !s.inRecovery {
		// Bytes acknowledged by gap blocks count too (unlike RFC 9260
		// 7.2.1, which waits for the cumulative ack): on a reordering link
		// most bytes are acknowledged that way first.
		s.grow(acked, now)
	}
	s.detectLoss(now)
	if advanced {
		if len(s.inflight) == 0 {
			s.stopT3()
		} else {
			s.armT3()
		}
	}
	return nil
}

func (s *sender) rttSample(r int64) {
	if r <= 0 {
		r = 1
	}
	if s.srtt == 0 {
		s.srtt, s.rttvar = r, r/2
	} else {
		d := s.srtt - r
		if d < 0 {
			d = -d
		}
		s.rttvar = (3*s.rttvar + d) / 4
		s.srtt = (7*s.srtt + r) / 8
	}
	if s.minRTT == 0 || r < s.minRTT {
		s.minRTT = r
	}
	// A receiver may hold a gap report back for up to maxHold (Petrel's
	// does, recv.go): the timeout waits that much longer.
	s.rto = min(max(s.srtt+max(4*s.rttvar, int64(10*time.Millisecond)), rtoMin)+maxHold, rtoMax)
}

// reoWnd is RACK's reordering window: a quarter of the minimum RTT times a
// multiplier that grows with each round trip that had a spurious
// retransmission (RFC 8985 6.2), at most the smoothed RTT; or, if more, a
// quarter more than the latest a reordered chunk came, at most two smoothed
// RTTs (a jittery link reorders by more than an RTT's worth of the
// smallest RTT samples, which RACK's window is measured from); none before
// any reordering was seen.
func (s *sender) reoWnd() int64 {
	if !s.rack.reorder {
		return 0
	}
	return max(min(int64(s.rack.mult)*s.minRTT/4, s.srtt), min(s.rack.extent*5/4, 2*s.srtt))
}

// grow opens cwnd on newly acknowledged bytes: slow start below ssthresh
// (RFC 9260 7.2.1), CUBIC above, only while the window is used.
func (s *sender) grow(acked int, now int64) {
	if s.flight+acked < s.cwnd-2*s.mtu && !s.paceArmed {
		return // not limited by cwnd (nor by pacing, whose rate is cwnd's)
	}
	if s.cwnd < s.ssthresh {
		s.cwnd += s.hs.growth(acked)
		return
	}
	s.caGrow(acked, now)
}

// detectLoss marks lost what RACK says is: sent before the chunk acknowledged
// last, and not acknowledged an RTT and the reordering window after it was
// sent. Chunks sent after that one are not candidates, which bounds the scan.
func (s *sender) detectLoss(now int64) {
	if s.rack.seq == 0 {
		return
	}
	reo := s.reoWnd()
	var wait int64
	lost := false
	known := s.inflight
	if s.truncated {
		known = known[:min(int(s.reportedTo-s.cumAck), len(known))]
	}
	for _, c := range known {
		if c.seq >= s.rack.seq {
			if c.nSent == 1 {
				break
			}
			continue
		}
		if c.acked || c.lost || c.dropped {
			continue
		}
		if left := c.sentAt + s.rack.rtt + reo - now; left > 0 {
			if wait == 0 || left < wait {
				wait = left
			}
			continue
		}
		// A loss starts a recovery; so does a retransmission lost after
		// the last one began (RFC 5681 4.3, RFC 8985 3.4): the reduced
		// window still overflows the path.
		again := s.inRecovery && c.nSent > 1 && c.sentAt > s.recoveryAt
		if !lost || again {
			s.onLoss(again)
			lost = true
		}
		s.markLost(c)
		s.a.stats.FastRetransmits++
	}
	if s.truncated {
		s.presume(s.inflight[len(known):], now, reo)
	}
	if wait > 0 {
		if s.rackTimer == nil {
			s.rackTimer = time.AfterFunc(time.Duration(wait), s.onRackTimer)
		} else {
			s.rackTimer.Reset(time.Duration(wait))
		}
	}
}

// presume takes out of the flight the chunks past a truncated report that
// were sent an RTT and the reordering window ago: had the report gone on,
// RACK would have judged them by now. They have most likely arrived (the
// holes below them are few, or the report would not stop there), and
// counted in flight they would hold the window shut until the timeout.
// When a report reaches them, they are
// acknowledged, or RACK finds them lost and they are resent. Chunks in TSN
// order were sent in order too, but for the resent ones, so the scan stops
// at the first new chunk too young.
func (s *sender) presume(unreported []*outChunk, now, reo int64) {
	for _, c := range unreported {
		if now-c.sentAt < s.rack.rtt+reo {
			if c.nSent == 1 {
				break
			}
			continue
		}
		if c.flying && !c.acked && !c.lost {
			s.unfly(c)
			s.a.stats.Presumed++
		}
	}
}

func (s *sender) onRackTimer() {
	a := s.a
	a.mu.Lock()
	if a.state == stateEstablished {
		s.detectLoss(a.now())
		s.transmit()
	}
	a.unlockAndFlush()
}

// setLost keeps nLost, the chunks waiting to be resent.
func (s *sender) setLost(c *outChunk, lost bool) {
	if c.lost != lost {
		c.lost = lost
		if lost {
			s.nLost++
		} else {
			s.nLost--
		}
	}
}

func (s *sender) markLost(c *outChunk) {
	s.setLost(c, true)
	c.lostEp = s.episode
	s.epMarked++
	s.unfly(c)
}

// onLoss enters fast recovery once per window of data (RFC 9260 7.2.4),
// and again when a retransmission sent during it is lost.
func (s *sender) onLoss(again bool) {
	if s.inRecovery && !again || s.afterT3 {
		// After a timeout the window is already one packet, growing in
		// slow start while what RACK finds lost is resent.
		return
	}
	if s.noCongestion() {
		s.a.stats.LossesKept++
		return
	}
	s.inRecovery = true
	s.recover = s.nextTSN - 1
	s.recoveryAt = s.a.now()
	s.newEpisode()
	prior := s.cwnd
	s.reduce()
	// The first retransmission goes out whatever the window (RFC 9260
	// 7.2.4, 3), so it does not wait for the flight to drain below a
	// halved window, which truncated SACKs can keep from draining.
	s.probe = true
	// Not below what the delivery rate fills without a queue (delivery.go).
	if w := min(s.delivery.bdp(s.minRTT), prior); w > s.cwnd {
		s.cwnd, s.ssthresh = w, w
	}
}

// noCongestion says whether a loss found the path without a queue, so that
// it is no bottleneck's overflow: a browser's socket buffer that overflowed
// while its reader was late, or random loss. It keeps the window and
// CUBIC's curve: CUBIC regrows in K = ∛(reduction / C) seconds whatever
// the RTT, so a needless reduction costs seconds. No queue: the chunk
// delivered last took no more than
// an eighth above the minimum RTT (1 ms at least), and the delivery rate
// still carries the window, as BBR's model has it: in slow start it grew
// by a quarter in the last round trip (BBR's full-pipe test), after it the
// window is within an eighth of the delivery rate times the minimum RTT.
// A receiver that drops what it cannot read delivers less than the window
// and gets a reduction, as does a policer.
func (s *sender) noCongestion() bool {
	if s.minRTT == 0 || s.rack.rtt > s.minRTT+max(s.minRTT/8, int64(time.Millisecond)) {
		return false
	}
	if s.cwnd < s.ssthresh {
		return s.delivery.grew
	}
	return s.delivery.bdp(s.minRTT) >= s.cwnd-s.cwnd/8
}

// newEpisode starts a reduction of cwnd. It joins the chain of the last
// ones while that chain is unresolved (some of what it declared lost is not
// yet proven spurious) and younger than chainAge: a proof takes a round
// trip and the reordering delay to come back, and another reduction can
// come first. Undoing the chain goes back to before its first reduction.
func (s *sender) newEpisode() {
	s.episode++
	now := s.a.now()
	if s.chain == 0 || s.epMarked == 0 || now-s.chainStart > max(8*s.srtt, chainAge) {
		s.chain, s.chainStart = s.episode, now
		s.epMarked, s.epSpurious = 0, 0
		s.priorCwnd, s.priorSsthresh, s.priorWMax = s.cwnd, s.ssthresh, s.cubic.wMax
	}
}

func (s *sender) armT3() {
	s.t3Armed = true
	d := time.Duration(s.rto)
	if s.t3 == nil {
		s.t3 = time.AfterFunc(d, s.onT3)
	} else {
		s.t3.Reset(d)
	}
}

func (s *sender) stopT3() {
	s.t3Armed = false
	if s.t3 != nil {
		s.t3.Stop()
	}
}

// onT3 is the retransmission timeout (RFC 9260 6.3.3): the window starts
// again from one packet.
func (s *sender) onT3() {
	a := s.a
	a.mu.Lock()
	defer a.unlockAndFlush()
	s.t3Armed = false
	if a.state != stateEstablished || len(s.inflight) == 0 {
		return
	}
	a.stats.Timeouts++
	s.newEpisode()
	again := s.afterT3
	s.afterT3, s.t3Recover = true, s.nextTSN-1
	s.rto = min(2*s.rto, rtoMax)
	if !again {
		s.reduce()
	}
	// else a timeout again before the last one's data was acknowledged:
	// ssthresh is held (RFC 5681 3.1): halving the one-packet window
	// again would leave it at the floor for the rest of the transfer.
	a.blackHole()
	s.cwnd = s.mtu
	s.inRecovery = false
	// Only the earliest chunk is resent (as RACK-TLP and F-RTO do): if the
	// timeout was spurious, a queue that grew faster than the RTO, its
	// original is acknowledged or reported duplicate and the reduction is
	// undone; if it was not, RACK declares the rest lost once the
	// retransmission is acknowledged, since all of it was sent before.
	var first *outChunk
	for _, c := range s.inflight {
		if !c.acked && !c.dropped {
			s.setLost(c, false)
			s.markLost(c)
			s.probe = true // it goes out whatever is still counted in flight
			first = c
			break
		}
	}
	if tsnLess(s.cumAck, s.advancedPeerAck) {
		s.forwardNeeded = true
	}
	s.transmit()
	if first != nil && !first.lost {
		s.t3Seq = first.seq
	}
	if !s.t3Armed {
		s.armT3()
	}
}

// abandon gives up a message (partial reliability): its chunks are no
// longer sent, and a FORWARD-TSN moves the peer past them.
func (s *sender) abandon(m *outMsg) {
	if m.gone {
		return
	}
	m.gone = true
	for _, c := range s.inflight {
		if c.msg == m && !c.dropped {
			c.dropped = true
			s.setLost(c, false)
			s.unfly(c)
			s.release(c)
			s.a.stats.Abandoned++
		}
	}
	if q := s.queues[m.stream]; q != nil {
		s.releaseQueued(m, q.chunks[q.head:])
	}
	s.advancePeerAck()
}

// advancePeerAck moves the advanced peer ack point (RFC 3758 3.5, C1 and
// C2) over the abandoned chunks, and the acknowledged ones between them,
// that follow the cumulative ack; a FORWARD-TSN announces it. It runs when
// a message is abandoned and on each SACK: a message abandoned behind a
// chunk not yet acknowledged can only be skipped once that chunk is.
func (s *sender) advancePeerAck() {
	if tsnLess(s.advancedPeerAck, s.cumAck) {
		s.advancedPeerAck = s.cumAck
	}
	moved := false
	for i := int(s.advancedPeerAck - s.cumAck); i < len(s.inflight); i++ {
		c := s.inflight[i]
		if !c.dropped && !c.acked {
			break
		}
		s.advancedPeerAck++
		moved = moved || c.dropped
	}
	if moved {
		s.forwardNeeded = true
	}
}

// forwardTSN is a FORWARD-TSN's value: the new cumulative TSN and, for the
// ordered streams skipped, the last SSN skipped.
func (s *sender) forwardTSN() []byte {
	v := binary.BigEndian.AppendUint32(nil, s.advancedPeerAck)
	last := map[uint16]uint16{}
	for i, c := range s.inflight {
		if tsnLess(s.advancedPeerAck, s.cumAck+1+uint32(i)) {
			break
		}
		if c.dropped && c.flags&flagUnordered == 0 {
			last[c.stream] = c.ssn
		}
	}
	for st, ssn := range last {
		v = binary.BigEndian.AppendUint16(v, st)
		v = binary.BigEndian.AppendUint16(v, ssn)
	}
	return v
}
