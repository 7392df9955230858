package datachan

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// The receiving side: DATA chunks are taken in TSN order (those that come
// early wait), reassembled into messages and handed to their channels in
// SSN order; a single-chunk unordered message is handed over as soon as it
// comes. SACKs go out for every second packet, at once on a gap or a
// duplicate, and otherwise after ackDelay.
//
// A gap is reported once it is older than hold. Senders that count miss
// indications (usrsctp, dcSCTP: three SACKs that report TSNs above a hole)
// resend a chunk that is only late and halve their window, over and over on
// a link that reorders; reporting a hole only when it is older than late
// chunks have been keeps those indications for real losses. hold starts at
// holdInit, rises to the age of a hole whose chunk came twice (resent while
// only late) and shrinks with each hole filled after it was reported.

// The window (RFC 9260 6.2) bounds everything the receiver holds: chunks
// past a gap, the message being reassembled, ordered messages waiting for
// an earlier one and messages not yet read. Each is charged its bytes and
// itemCost, so a flood of one-byte messages is bounded like one of large
// ones. A chunk that does not fit is dropped unacknowledged (the peer sends
// it again when the window opens), except the one that fills the gap before
// held chunks: it may use gapSlack more, or a window full of chunks past a
// loss would never take the retransmission that lets them go. A peer that
// goes on sending maxOverrun windows past a closed window is aborted.
const (
	// itemCost is what a held chunk or message costs besides its bytes: an
	// entry in a map or slice and the allocation's rounding, as
	// TestHostileMemory measures them.
	itemCost   = 128
	gapSlack   = 8 // a window's 1/gapSlack
	maxOverrun = 4
	// maxParked is how many ordered messages a stream holds behind a
	// missing one. A FORWARD-TSN names the SSNs it skips, so a peer that
	// follows RFC 3758 parks none for longer than a packet.
	maxParked = 1024
)

var errOverrun = fmt.Errorf("%w: the peer kept sending past a closed receive window", errProtocol)

const (
	ackDelay = 20 * time.Millisecond
	maxAhead = 1 << 16 // how far past the cumulative TSN a chunk may be
	maxEarly = 1 << 14 // chunks held past a gap (tiny ones would cost more than their bytes)
	maxDups  = 16
	maxHold  = 120 * int64(time.Millisecond) // at most this long a gap goes unreported
	maxHoles = 4096
	holdInit = maxHold
)

// hole records TSNs [start, end) found missing at a time: end came first.
type hole struct {
	start, end uint32
	at         int64
}

type inChunk struct {
	flags  byte
	stream uint16
	ssn    uint16
	ppid   uint32
	data   []byte
	done   bool // handed over early (unordered, one chunk), or discarded
	cost   int  // what it holds of the window
}

type inMsg struct {
	ppid uint32
	data []byte
}

type inStream struct {
	next    uint16
	waiting map[uint16]inMsg
}

type receiver struct {
	a         *Association
	window    int
	inStreams int // the stream ids the peer may send on: 0 to inStreams-1
	overrun   int // charged to the window by chunks dropped for lack of room since the last one taken
	badStream bool
	cum       uint32
	seen      []uint64 // bit i: TSN cum+1+i is held in ooo
	ooo       map[uint32]inChunk
	held      int // charged to the window: received and not yet read
	dups      []uint32
	blocks    []uint16 // gap blocks of the next SACK, start and end pairs
	partial   struct {
		active    bool
		stream    uint16
		ssn       uint16
		ppid      uint32
		unordered bool
		data      []byte
		cost      int
	}
	streams    map[uint16]*inStream
	unacked    int  // packets with DATA since the last SACK
	behind     bool // more packets wait to be read (set by readLoop)
	urgent     bool // this packet had a gap, a duplicate or the I flag
	sackNow    bool
	ackTimer   *time.Timer
	ackArmed   bool
	advertised int // the window of the last SACK
	highest    uint32
	holes      []hole // recent holes, in TSN order (and so in time order)
	hold       int64  // how long a hole goes unreported
	scan       int    // holes before this one are filled or of age
	holdTimer  *time.Timer
	holdArmed  bool
	maxGaps    int // gap blocks a SACK holds: as many as fit in a packet
}

func (r *receiver) init(a *Association) {
	r.a = a
	r.window = int(a.cfg.ReceiveWindow)
	r.ooo = map[uint32]inChunk{}
	r.streams = map[uint16]*inStream{}
	r.hold = holdInit
	// A SACK reports as many gaps as fit in one packet beside its
	// duplicates: after a burst of losses, a sender that sees no miss
	// indication for the unreported chunks resends one a round trip.
	r.maxGaps = max((a.cfg.MTU-headerSize-chunkHeader-12-4*maxDups)/4, 16)
}

func (r *receiver) start(peer initChunk) {
	r.cum, r.highest = peer.tsn-1, peer.tsn-1
	r.inStreams = int(peer.outStreams) // Petrel takes 65535, as many as a peer can send on
}

func (r *receiver) stop() {
	if r.ackTimer != nil {
		r.ackTimer.Stop()
	}
	if r.holdTimer != nil {
		r.holdTimer.Stop()
	}
}

func (r *receiver) has(tsn uint32) bool {
	off := tsn - r.cum - 1
	w := int(off / 64)
	return w < len(r.seen) && r.seen[w]&(1<<(off%64)) != 0
}

func (r *receiver) mark(tsn uint32) {
	off := tsn - r.cum - 1
	w := int(off / 64)
	for len(r.seen) <= w {
		r.seen = append(r.seen, 0)
	}
	r.seen[w] |= 1 << (off % 64)
}

// advance moves cum forward by k, shifting the bitmap.
func (r *receiver) advance(k uint32) {
	r.cum += k
	if len(r.seen) == 0 {
		return
	}
	words, sh := int(k/64), k%64
	if words >= len(r.seen) {
		r.seen = r.seen[:0]
		return
	}
	n := len(r.seen) - words
	for i := 0; i < n; i++ {
		v := r.seen[i+words] >> sh
		if sh != 0 && i+words+1 < len(r.seen) {
			v |= r.seen[i+words+1] << (64 - sh)
		}
		r.seen[i] = v
	}
	r.seen = r.seen[:n]
	for len(r.seen) > 0 && r.seen[len(r.seen)-1] == 0 {
		r.seen = r.seen[:len(r.seen)-1]
	}
}

func (r *receiver) handleData(flags byte, v []byte) error {
	if len(v) < 12 {
		return errMalformed
	}
	if len(v) == 12 {
		return errors.New("datachan: DATA chunk without user data")
	}
	tsn := binary.BigEndian.Uint32(v)
	c := inChunk{flags: flags, stream: binary.BigEndian.Uint16(v[4:]), ssn: binary.BigEndian.Uint16(v[6:]),
		ppid: binary.BigEndian.Uint32(v[8:])}
	data := v[12:]
	if int(c.stream) >= r.inStreams {
		// RFC 9260 6.5: acknowledged, reported with an ERROR, discarded.
		r.badStream = true
		c.done, data = true, nil
	}
	if flags&flagImmediate != 0 {
		r.urgent = true
	}
	if tsnLessEq(tsn, r.cum) || r.has(tsn) {
		if len(r.dups) < maxDups {
			r.dups = append(r.dups, tsn)
		}
		r.urgent = true
		r.resent(tsn)
		return nil
	}
	if tsn-r.cum > maxAhead {
		r.a.drop(errors.New("datachan: DATA too far ahead"))
		return r.overran(len(data) + itemCost)
	}
	if tsnLess(r.highest, tsn) {
		if tsn != r.highest+1 {
			r.opened(tsn)
		}
		r.highest = tsn
	} else if r.hold > 0 {
		r.filled(tsn)
	}
	inOrder := tsn == r.cum+1
	c.cost = len(data) + itemCost
	if inOrder && c.done {
		c.cost = 0
	}
	if room := r.window - r.held; c.cost > room && !(inOrder && len(r.ooo) > 0 && c.cost <= room+r.window/gapSlack) {
		// No room: not acknowledged, so the peer resends it.
		return r.overran(c.cost)
	}
	if !inOrder && len(r.ooo) >= maxEarly {
		return nil
	}
	r.overrun = 0
	r.held += c.cost
	if !inOrder {
		if !c.done {
			c.data = append([]byte(nil), data...) // it waits: its own copy
		}
		r.a.stats.ReceivedOutOfOrder++
		r.urgent = true
		if !c.done && flags&(flagUnordered|flagBegin|flagEnd) == flagUnordered|flagBegin|flagEnd {
			// The message takes the chunk's charge; its entry here keeps itemCost.
			r.held += itemCost
			if err := r.message(c.stream, c.ssn, c.ppid, true, c.data); err != nil {
				return err
			}
			c.done, c.data, c.cost = true, nil, itemCost
		}
		r.ooo[tsn] = c
		r.mark(tsn)
		return nil
	}
	c.data = data // borrowed from the read buffer: consume copies it
	r.advance(1)
	if err := r.consume(c); err != nil {
		return err
	}
	return r.pull()
}

// overran counts a chunk dropped for want of window: a peer that sends
// maxOverrun windows past the one it was told is aborted.
func (r *receiver) overran(cost int) error {
	r.overrun += cost
	r.a.stats.Overrun++
	if r.overrun > maxOverrun*r.window {
		return errOverrun
	}
	return nil
}

// pull takes the chunks that waited for the cumulative TSN to reach them.
func (r *receiver) pull() error {
	for len(r.seen) > 0 && r.seen[0]&1 != 0 {
		n := uint32(bits.TrailingZeros64(^r.seen[0]))
		for i := uint32(1); i <= n; i++ {
			tsn := r.cum + i
			c := r.ooo[tsn]
			delete(r.ooo, tsn)
			if err := r.consume(c); err != nil {
				return err
			}
		}
		r.advance(n)
	}
	return nil
}

// consume reassembles chunks taken in TSN order.
func (r *receiver) consume(c inChunk) error {
	p := &r.partial
	if c.done {
		r.held -= c.cost
		return nil
	}
	if c.flags&flagBegin != 0 {
		if p.active {
			r.discardPartial()
		}
		p.active, p.stream, p.ssn, p.ppid, p.unordered = true, c.stream, c.ssn, c.ppid, c.flags&flagUnordered != 0
		p.cost = 0
		if c.flags&flagEnd != 0 {
			p.data = append([]byte(nil), c.data...) // a whole message: exactly its size
		} else {
			p.data = append(getMsgBuf(), c.data...)
		}
	} else {
		if !p.active || p.stream != c.stream {
			r.held -= c.cost // a fragment of a message that was skipped
			return nil
		}
		p.data = append(p.data, c.data...)
	}
	p.cost += c.cost
	if len(p.data) > int(r.a.cfg.MaxMessage) {
		return fmt.Errorf("datachan: a message over the %d-byte limit", r.a.cfg.MaxMessage)
	}
	if c.flags&flagEnd != 0 {
		p.active = false
		d := p.data
		p.data = nil
		if c.flags&flagBegin == 0 && len(d) < msgBufSize*3/4 {
			// A message that may wait holds no more than its size.
			small := append([]byte(nil), d...)
			putMsgBuf(d)
			d = small
		}
		r.held -= p.cost - msgCost(d)
		p.cost = 0
		return r.message(p.stream, p.ssn, p.ppid, p.unordered, d)
	}
	return nil
}

// msgCost is what a complete message holds of the window.
func msgCost(d []byte) int { return len(d) + itemCost }

func (r *receiver) discardPartial() {
	if !r.partial.active {
		return
	}
	r.held -= r.partial.cost
	putMsgBuf(r.partial.data)
	r.partial.active, r.partial.data, r.partial.cost = false, nil, 0
}

// message orders a complete message on its stream. Only a stream with a
// channel keeps an order; on another, only a first message (a
// DATA_CHANNEL_OPEN) is taken.
func (r *receiver) message(stream, ssn uint16, ppid uint32, unordered bool, data []byte) error {
	if unordered {
		return r.a.deliver(stream, ppid, data)
	}
	st := r.streams[stream]
	if st == nil {
		if r.a.chans[stream] == nil {
			if ssn != 0 {
				r.held -= msgCost(data)
				r.a.drop(errors.New("datachan: an ordered message for a channel that is not open"))
				return nil
			}
			if err := r.a.deliver(stream, ppid, data); err != nil || r.a.chans[stream] == nil {
				return err
			}
			r.streams[stream] = &inStream{next: 1}
			return nil
		}
		st = &inStream{}
		r.streams[stream] = st
	}
	switch {
	case ssn == st.next:
	case ssnLess(st.next, ssn):
		if len(st.waiting) >= maxParked {
			return fmt.Errorf("%w: over %d ordered messages wait behind a missing one on stream %d", errProtocol, maxParked, stream)
		}
		if st.waiting == nil {
			st.waiting = map[uint16]inMsg{}
		}
		if old, ok := st.waiting[ssn]; ok {
			r.held -= msgCost(old.data)
		}
		st.waiting[ssn] = inMsg{ppid, data}
		return nil
	default:
		r.held -= msgCost(data)
		return nil
	}
	for {
		st.next++
		if err := r.a.deliver(stream, ppid, data); err != nil {
			return err
		}
		m, ok := st.waiting[st.next]
		if !ok {
			return nil
		}
		delete(st.waiting, st.next)
		ppid, data = m.ppid, m.data
	}
}

// handleForwardTSN skips what the peer gave up (RFC 3758 3.6).
func (r *receiver) handleForwardTSN(v []byte) error {
	if len(v) < 4 || (len(v)-4)%4 != 0 {
		return errMalformed
	}
	r.urgent = true
	to := binary.BigEndian.Uint32(v)
	if tsnLessEq(to, r.cum) {
		return nil
	}
	if to-r.cum > maxAhead {
		return errors.New("datachan: FORWARD-TSN too far ahead")
	}
	// What came of the skipped range is taken in order (the sender skips
	// acknowledged chunks along with abandoned ones); a message that misses
	// a chunk is discarded. Only the chunks held are visited: a range is up
	// to maxAhead TSNs.
	span := to - r.cum
	for off := uint32(0); off < span; {
		b, ok := r.nextBit(off, true)
		if !ok || b >= span {
			r.discardPartial()
			break
		}
		if b > off {
			r.discardPartial()
		}
		t := r.cum + 1 + b
		c := r.ooo[t]
		delete(r.ooo, t)
		if err := r.consume(c); err != nil {
			return err
		}
		off = b + 1
	}
	r.advance(span)
	if tsnLess(r.highest, r.cum) {
		r.highest = r.cum
	}
	for i := 4; i < len(v); i += 4 {
		stream, ssn := binary.BigEndian.Uint16(v[i:]), binary.BigEndian.Uint16(v[i+2:])
		st := r.streams[stream]
		if st == nil || ssnLess(ssn, st.next) {
			continue
		}
		// The fewer of the skipped SSNs and the waiting messages are visited.
		if int(ssn-st.next) < len(st.waiting) {
			for s := st.next; s != ssn+1; s++ {
				if m, ok := st.waiting[s]; ok {
					delete(st.waiting, s)
					r.held -= msgCost(m.data)
				}
			}
		} else {
			for s, m := range st.waiting {
				if s-st.next <= ssn-st.next {
					delete(st.waiting, s)
					r.held -= msgCost(m.data)
				}
			}
		}
		st.next = ssn + 1
		for {
			m, ok := st.waiting[st.next]
			if !ok {
				break
			}
			delete(st.waiting, st.next)
			st.next++
			if err := r.a.deliver(stream, m.ppid, m.data); err != nil {
				return err
			}
		}
	}
	return r.pull()
}

// opened records the hole below tsn, the new highest TSN. At maxHoles the
// records go that are older than 2 maxHold (a second copy of one of their
// chunks no longer tells anything), and at least the older half.
func (r *receiver) opened(tsn uint32) {
	now := r.a.now()
	if len(r.holes) >= maxHoles {
		cut, _ := slices.BinarySearchFunc(r.holes, now-2*maxHold, func(h hole, t int64) int { return cmp.Compare(h.at, t) })
		cut = max(cut, len(r.holes)/2)
		r.holes = append(r.holes[:0], r.holes[cut:]...)
		r.scan = max(r.scan-cut, 0)
	}
	r.holes = append(r.holes, hole{r.highest + 1, tsn, now})
}

// holeOf finds the recorded hole tsn was in.
func (r *receiver) holeOf(tsn uint32) (hole, bool) {
	i, ok := slices.BinarySearchFunc(r.holes, tsn, func(h hole, t uint32) int {
		switch {
		case tsnLess(t, h.start):
			return 1
		case tsnLessEq(h.end, t):
			return -1
		}
		return 0
	})
	if !ok {
		return hole{}, false
	}
	return r.holes[i], true
}

// resent: a second copy of tsn came, so the peer resent it while the first
// was on its way or already here. If tsn was in a hole, a hole as old as
// that one was only late: holes go unreported that long.
func (r *receiver) resent(tsn uint32) {
	if h, ok := r.holeOf(tsn); ok {
		if late := r.a.now() - h.at; late > r.hold {
			r.hold = min(late, maxHold)
		}
	}
}

// filled: tsn came into a hole. If the hole had been reported, the peer
// may have resent tsn for a real loss: hold shrinks a little, and on a
// link that loses without reordering it goes (a duplicate, if the loss
// was not real, sets it again).
func (r *receiver) filled(tsn uint32) {
	if h, ok := r.holeOf(tsn); ok && r.a.now()-h.at >= r.hold {
		r.hold -= r.hold / 16
		if r.hold < int64(time.Millisecond) {
			r.hold = 0
		}
	}
}

// visible is the offset (from cum+1) below which gaps are reported: the
// start of the oldest hole younger than hold that is not filled yet; and
// when that hole comes of age.
func (r *receiver) visible(now int64) (limit uint32, due int64) {
	limit = uint32(len(r.seen)) * 64
	if r.hold == 0 {
		return limit, 0
	}
	i, _ := slices.BinarySearchFunc(r.holes, now-r.hold, func(h hole, t int64) int {
		if h.at <= t {
			return -1
		}
		return 1
	})
	// Holes only fill and age, so those before r.scan need no second look.
	for r.scan = max(r.scan, i); r.scan < len(r.holes); r.scan++ {
		h := r.holes[r.scan]
		if tsnLessEq(h.end, r.cum+1) {
			continue // filled
		}
		var from uint32
		if tsnLess(r.cum+1, h.start) {
			from = h.start - r.cum - 1
		}
		if off, ok := r.nextBit(from, false); ok && off < h.end-r.cum-1 {
			return off, h.at + r.hold
		}
	}
	return limit, 0
}

// stretch is how many packets a SACK may cover while more wait to be read.
// No more than 3: usrsctp (Firefox), with its default max burst of 4
// packets, lowers cwnd to the flight plus 4 packets when a SACK leaves more
// than that free (sctp_use_cwnd_based_maxburst), so a SACK that covers
// more cuts its rate (lab/notes.md).
const stretch = 3

// afterPacket decides when the packet's DATA is acknowledged: every second
// packet, or every third while more packets already wait to be read. A
// receiver that falls behind (the server's CPU is busy) thus spends a third
// less on SACKs, and one that keeps up acknowledges every second packet,
// which a sender in slow start grows on.
func (r *receiver) afterPacket() {
	r.unacked++
	if r.urgent || r.unacked >= 2 && (!r.behind || r.unacked >= stretch) || len(r.seen) > 0 {
		r.urgent = false
		r.sackNow = true
		return
	}
	if !r.ackArmed {
		r.ackArmed = true
		if r.ackTimer == nil {
			r.ackTimer = time.AfterFunc(ackDelay, r.onAckTimer)
		} else {
			r.ackTimer.Reset(ackDelay)
		}
	}
}

// armHold makes sure a SACK goes out when a hidden hole comes of age,
// whether or not more DATA comes.
func (r *receiver) armHold(due int64) {
	if r.holdArmed {
		return
	}
	r.holdArmed = true
	d := time.Duration(max(due-r.a.now(), 0))
	if r.holdTimer == nil {
		r.holdTimer = time.AfterFunc(d, r.onHoldTimer)
	} else {
		r.holdTimer.Reset(d)
	}
}

func (r *receiver) onHoldTimer() {
	a := r.a
	a.mu.Lock()
	r.holdArmed = false
	r.sackNow = true
	if a.state == stateEstablished {
		a.snd.transmit()
	}
	a.unlockAndFlush()
}

func (r *receiver) onAckTimer() {
	a := r.a
	a.mu.Lock()
	r.ackArmed = false
	if a.state == stateEstablished && r.unacked > 0 {
		r.sackNow = true
		a.snd.transmit()
	}
	a.unlockAndFlush()
}

// freed is called when the application read n bytes; a SACK announces a
// window that opened by half.
func (r *receiver) freed(n int) {
	r.held -= n
	if r.a.state == stateEstablished && r.window-r.held-r.advertised >= r.window/2 {
		r.sackNow = true
		r.a.snd.transmit()
	}
}

// sackSize finds the gap blocks and returns the SACK chunk's size.
func (r *receiver) sackSize() int {
	r.blocks = r.blocks[:0]
	limit, due := r.visible(r.a.now())
	for i := uint32(0); ; {
		from, ok := r.nextBit(i, true)
		if !ok || from >= limit || len(r.blocks) >= 2*r.maxGaps {
			break
		}
		to, ok := r.nextBit(from, false)
		if !ok {
			to = uint32(len(r.seen)) * 64
		}
		to = min(to, limit)
		r.addBlock(from, to-1)
		i = to
	}
	if due > 0 {
		r.armHold(due)
	}
	return chunkHeader + 12 + 2*len(r.blocks) + 4*len(r.dups)
}

// nextBit finds the first bit at or after from that is set (or clear).
func (r *receiver) nextBit(from uint32, set bool) (uint32, bool) {
	for w := int(from / 64); w < len(r.seen); w++ {
		word := r.seen[w]
		if !set {
			word = ^word
		}
		if w == int(from/64) {
			word &^= (1 << (from % 64)) - 1
		}
		if word != 0 {
			return uint32(w)*64 + uint32(bits.TrailingZeros64(word)), true
		}
	}
	return 0, false
}

// addBlock records a run of offsets (0 is cum+1) as a gap block (1-based);
// sackSize stops at maxGaps.
func (r *receiver) addBlock(from, to uint32) {
	if to < 0xffff {
		r.blocks = append(r.blocks, uint16(from+1), uint16(to+1))
	}
}

func (r *receiver) appendSack(w *packetWriter) {
	rwnd := max(r.window-r.held, 0)
	w.chunk(ctSack, 0, 12+2*len(r.blocks)+4*len(r.dups))
	w.b = binary.BigEndian.AppendUint32(w.b, r.cum)
	w.b = binary.BigEndian.AppendUint32(w.b, uint32(rwnd))
	w.b = binary.BigEndian.AppendUint16(w.b, uint16(len(r.blocks)/2))
	w.b = binary.BigEndian.AppendUint16(w.b, uint16(len(r.dups)))
	for _, b := range r.blocks {
		w.b = binary.BigEndian.AppendUint16(w.b, b)
	}
	for _, d := range r.dups {
		w.b = binary.BigEndian.AppendUint32(w.b, d)
	}
	r.dups = r.dups[:0]
	r.sackNow = false
	r.unacked = 0
	r.advertised = rwnd
	if r.ackArmed {
		r.ackArmed = false
		r.ackTimer.Stop()
	}
}

// Messages of several chunks are reassembled in pooled buffers of
// msgBufSize (a larger message outgrows its buffer, which then is not
// returned); Channel.Read returns them once copied out.
const msgBufSize = 64 << 10

var msgBufs = sync.Pool{New: func() any { b := make([]byte, 0, msgBufSize); return &b }}

func getMsgBuf() []byte { return (*msgBufs.Get().(*[]byte))[:0] }

func putMsgBuf(b []byte) {
	if cap(b) == msgBufSize {
		b = b[:0]
		msgBufs.Put(&b)
	}
}
