package datachan

import (
	"encoding/binary"
	"errors"
	"io"
	"time"
)

// Data channels (RFC 8831) and their establishment (DCEP, RFC 8832): a
// channel is a stream; DATA_CHANNEL_OPEN on it opens it, DATA_CHANNEL_ACK
// answers, and an outgoing stream reset (RFC 6525) closes it.

// Payload protocol identifiers (RFC 8831 8).
const (
	ppidDCEP        = 50
	ppidString      = 51
	ppidBinary      = 53
	ppidStringEmpty = 56
	ppidBinaryEmpty = 57
)

const (
	dcepAck  = 0x02
	dcepOpen = 0x03
)

// Channel types of DATA_CHANNEL_OPEN.
const (
	chanReliable     = 0x00
	chanRexmit       = 0x01
	chanTimed        = 0x02
	chanUnorderedBit = 0x80
)

// Options are a channel's delivery: ordered or not, and at most one of
// MaxRetransmits and MaxLifetime for partial reliability.
type Options struct {
	Unordered      bool
	MaxRetransmits *uint32
	MaxLifetime    *time.Duration
	Protocol       string
}

// Channel is one data channel.
type Channel struct {
	a        *Association
	id       uint16
	label    string
	opt      Options
	nextSSN  uint16
	acked    bool // our OPEN was acknowledged (or the peer opened it)
	msgs     []inMsg
	notify   chan struct{}
	rclosed  bool // the peer reset its stream, or the association ended
	lclosed  bool // we reset ours
	buffered int
	low      int
	onLow    func()
	// onReadable is called (after the association's lock is released)
	// when messages arrive or the channel closes; queued: a call is due.
	onReadable func()
	queued     bool
}

// ErrEmpty is what ReadNow returns when no message waits.
var ErrEmpty = errors.New("datachan: no message waiting")

// OnReadable has f called when a message arrives or the channel closes,
// and at once if that happened already, on the goroutine that handed the
// packet over (or closed the channel): a reader of the channel then needs
// no goroutine of its own, and reads what is there with ReadNow. Calls may
// overlap when the association closes while a packet is handled.
func (c *Channel) OnReadable(f func()) {
	a := c.a
	a.mu.Lock()
	c.onReadable = f
	if len(c.msgs) > 0 || c.rclosed || c.lclosed {
		c.wake()
	}
	a.unlockAndFlush()
}

// ReadNow is ReadMessage that does not wait: ErrEmpty when no message
// is queued.
func (c *Channel) ReadNow(p []byte) (int, bool, error) {
	c.a.mu.Lock()
	n, str, ok, err := c.pop(p)
	if ok {
		return n, str, err
	}
	c.a.mu.Unlock()
	return 0, false, ErrEmpty
}

// pop takes the next message into p, or says the channel has ended; ok
// false: neither (mu is then still held; otherwise it is released).
func (c *Channel) pop(p []byte) (n int, str, ok bool, err error) {
	a := c.a
	if len(c.msgs) > 0 {
		m := c.msgs[0]
		if len(m.data) > len(p) {
			a.mu.Unlock()
			return 0, false, true, io.ErrShortBuffer
		}
		n := copy(p, m.data)
		putMsgBuf(m.data)
		c.msgs[0] = inMsg{}
		c.msgs = c.msgs[1:]
		a.rcv.freed(msgCost(m.data))
		a.unlockAndFlush()
		return n, m.ppid == ppidString || m.ppid == ppidStringEmpty, true, nil
	}
	if c.rclosed || c.lclosed {
		a.mu.Unlock()
		return 0, false, true, io.EOF
	}
	return 0, false, false, nil
}

// Label is the channel's label.
func (c *Channel) Label() string { return c.label }

// Protocol is the channel's subprotocol.
func (c *Channel) Protocol() string { return c.opt.Protocol }

// ID is the channel's stream id.
func (c *Channel) ID() uint16 { return c.id }

// Options are the channel's delivery options.
func (c *Channel) Options() Options { return c.opt }

// Accept waits for a channel the peer opens.
func (a *Association) Accept() (*Channel, error) {
	select {
	case c := <-a.accept:
		return c, nil
	case <-a.done:
		return nil, ErrClosed
	}
}

// Open opens a channel: its DATA_CHANNEL_OPEN goes out at once, and
// messages may follow before the peer acknowledges it.
func (a *Association) Open(label string, opt Options) (*Channel, error) {
	a.mu.Lock()
	defer a.unlockAndFlush()
	if a.state == stateClosed {
		return nil, ErrClosed
	}
	if len(label) > 0xffff || len(opt.Protocol) > 0xffff {
		return nil, errors.New("datachan: label or protocol too long")
	}
	id := a.nextID
	for a.chans[id] != nil {
		id += 2
		if id == a.nextID {
			return nil, errors.New("datachan: no stream left")
		}
	}
	a.nextID = id + 2
	c := a.newChannel(id, label, opt)
	typ, param := byte(chanReliable), uint32(0)
	switch {
	case opt.MaxRetransmits != nil:
		typ, param = chanRexmit, *opt.MaxRetransmits
	case opt.MaxLifetime != nil:
		typ, param = chanTimed, uint32(*opt.MaxLifetime/time.Millisecond)
	}
	if opt.Unordered {
		typ |= chanUnorderedBit
	}
	m := []byte{dcepOpen, typ, 0, 0}
	m = binary.BigEndian.AppendUint32(m, param)
	m = binary.BigEndian.AppendUint16(m, uint16(len(label)))
	m = binary.BigEndian.AppendUint16(m, uint16(len(opt.Protocol)))
	m = append(m, label...)
	m = append(m, opt.Protocol...)
	a.sendDCEP(c, m)
	return c, nil
}

func (a *Association) newChannel(id uint16, label string, opt Options) *Channel {
	c := &Channel{a: a, id: id, label: label, opt: opt, notify: make(chan struct{}, 1), low: 0}
	a.chans[id] = c
	return c
}

// sendDCEP sends a DCEP message: ordered and reliable, whatever the channel.
func (a *Association) sendDCEP(c *Channel, m []byte) {
	a.snd.enqueue(&outMsg{maxRtx: -1}, c.id, c.nextSSN, ppidDCEP, false, m)
	c.nextSSN++
	a.snd.transmit()
}

// deliver hands a complete message to its channel.
func (a *Association) deliver(stream uint16, ppid uint32, data []byte) error {
	if ppid == ppidDCEP {
		a.rcv.held -= msgCost(data)
		a.handleDCEP(stream, data)
		return nil
	}
	c := a.chans[stream]
	if c == nil || c.rclosed || c.lclosed {
		// Nobody reads a channel closed on this side.
		a.rcv.held -= msgCost(data)
		a.drop(errors.New("datachan: a message for a channel that is not open"))
		return nil
	}
	switch ppid {
	case ppidStringEmpty, ppidBinaryEmpty:
		a.rcv.held -= len(data)
		data = data[:0]
	case ppidString, ppidBinary:
	default:
		a.rcv.held -= msgCost(data)
		a.drop(errors.New("datachan: unknown payload protocol"))
		return nil
	}
	c.acked = true
	c.msgs = append(c.msgs, inMsg{ppid, data})
	c.wake()
	return nil
}

func (a *Association) handleDCEP(stream uint16, m []byte) {
	if len(m) == 0 {
		return
	}
	switch m[0] {
	case dcepAck:
		if c := a.chans[stream]; c != nil {
			c.acked = true
		}
	case dcepOpen:
		if len(m) < 12 {
			a.drop(errors.New("datachan: short DATA_CHANNEL_OPEN"))
			return
		}
		ll, pl := int(binary.BigEndian.Uint16(m[8:])), int(binary.BigEndian.Uint16(m[10:]))
		if len(m) < 12+ll+pl {
			a.drop(errors.New("datachan: short DATA_CHANNEL_OPEN"))
			return
		}
		if a.chans[stream] != nil {
			return // already open (a duplicate, or negotiated)
		}
		if len(a.chans) >= a.cfg.MaxChannels {
			a.drop(errors.New("datachan: too many channels open"))
			a.resetID(stream)
			return
		}
		opt := Options{Unordered: m[1]&chanUnorderedBit != 0, Protocol: string(m[12+ll : 12+ll+pl])}
		param := binary.BigEndian.Uint32(m[4:])
		switch m[1] &^ chanUnorderedBit {
		case chanRexmit:
			opt.MaxRetransmits = &param
		case chanTimed:
			d := time.Duration(param) * time.Millisecond
			opt.MaxLifetime = &d
		}
		c := a.newChannel(stream, string(m[12:12+ll]), opt)
		c.acked = true
		a.sendDCEP(c, []byte{dcepAck})
		if f := a.cfg.OnChannel; f != nil {
			a.callbacks = append(a.callbacks, func() { f(c) })
			return
		}
		select {
		case a.accept <- c:
		default:
			a.log.Info("sctp: a channel nobody accepts; closing it", "label", c.label)
			a.resetStream(c)
		}
	}
}

func (c *Channel) wake() {
	if c.onReadable != nil && !c.queued {
		c.queued = true
		c.a.callbacks = append(c.a.callbacks, c.readable)
	}
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Read reads one message into p: io.ErrShortBuffer (and the message stays)
// if it does not fit, io.EOF once the channel closed and its messages are
// read.
func (c *Channel) Read(p []byte) (int, error) {
	n, _, err := c.ReadMessage(p)
	return n, err
}

// ReadMessage is Read that also says whether the message was a string.
func (c *Channel) ReadMessage(p []byte) (int, bool, error) {
	a := c.a
	for {
		a.mu.Lock()
		if n, str, ok, err := c.pop(p); ok {
			return n, str, err
		}
		a.mu.Unlock()
		<-c.notify
	}
}

// Write sends p as a binary message.
func (c *Channel) Write(p []byte) (int, error) {
	return len(p), c.Send(p, false)
}

// WriteString sends s as a text message.
func (c *Channel) WriteString(s string) (int, error) {
	return len(s), c.Send([]byte(s), true)
}

// Send queues one message (a copy of b) and never blocks: BufferedAmount
// says how much waits.
func (c *Channel) Send(b []byte, isString bool) error {
	a := c.a
	if len(b) > maxSend {
		return errors.New("datachan: message larger than the peer takes")
	}
	ppid := uint32(ppidBinary)
	switch {
	case isString && len(b) == 0:
		ppid, b = ppidStringEmpty, []byte{0}
	case len(b) == 0:
		ppid, b = ppidBinaryEmpty, []byte{0}
	case isString:
		ppid = ppidString
		b = append([]byte(nil), b...)
	default:
		b = append([]byte(nil), b...)
	}
	a.mu.Lock()
	defer a.unlockAndFlush()
	if a.state == stateClosed || c.lclosed || c.rclosed {
		return ErrClosed
	}
	m := &outMsg{ch: c, maxRtx: -1}
	if r := c.opt.MaxRetransmits; r != nil {
		m.maxRtx = int(*r)
	}
	if l := c.opt.MaxLifetime; l != nil {
		m.deadline = a.now() + int64(*l)
	}
	// Until the peer acknowledged the channel, messages go ordered (RFC
	// 8832 6), so none overtakes the OPEN.
	unordered := c.opt.Unordered && c.acked
	ssn := c.nextSSN
	if !unordered {
		c.nextSSN++
	}
	a.snd.enqueue(m, c.id, ssn, ppid, unordered, b)
	c.buffered += len(b)
	a.snd.transmit()
	return nil
}

// maxSend is the largest message sent; the SDP's a=max-message-size is the
// caller's to respect.
const maxSend = 1 << 30

// BufferedAmount is the bytes sent on the channel and not yet acknowledged.
func (c *Channel) BufferedAmount() uint64 {
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	return uint64(c.buffered)
}

// OnBufferedAmountLow calls f (on the association's goroutine, without its
// lock) when the buffered amount falls to threshold or below.
func (c *Channel) OnBufferedAmountLow(threshold uint64, f func()) {
	c.a.mu.Lock()
	c.low, c.onLow = int(threshold), f
	c.a.mu.Unlock()
}

func (c *Channel) unbuffer(n int) {
	before := c.buffered
	c.buffered -= n
	if c.onLow != nil && before > c.low && c.buffered <= c.low {
		c.a.callbacks = append(c.a.callbacks, c.onLow)
	}
}

// Close closes the channel: its outgoing stream is reset, and the peer
// resets its own in answer.
func (c *Channel) Close() error {
	a := c.a
	a.mu.Lock()
	defer a.unlockAndFlush()
	if a.state != stateEstablished || c.lclosed {
		return nil
	}
	a.resetStream(c)
	c.wake()
	return nil
}

func (c *Channel) closeLocked() {
	c.rclosed = true
	c.wake()
}

// resetStream sends an outgoing SSN reset request for c's stream.
func (a *Association) resetStream(c *Channel) {
	c.lclosed = true
	a.resetID(c.id)
	if c.rclosed {
		delete(a.chans, c.id)
	}
}

func (a *Association) resetID(id uint16) {
	p := binary.BigEndian.AppendUint32(nil, a.reconfSeq)
	p = binary.BigEndian.AppendUint32(p, a.peerReq-1)
	p = binary.BigEndian.AppendUint32(p, a.snd.nextTSN-1)
	p = binary.BigEndian.AppendUint16(p, id)
	a.reconfSeq++
	a.control(a.peerTag, ctReconfig, 0, appendParam(nil, ptOutgoingReset, p))
}

// handleReconfig answers the peer's outgoing stream resets: the channels
// close for reading, and are reset from this side too.
func (a *Association) handleReconfig(v []byte) {
	var resp []byte
	err := params(v, func(typ uint16, p []byte) {
		if typ != ptOutgoingReset || len(p) < 12 || len(p)%2 != 0 {
			return
		}
		seq := binary.BigEndian.Uint32(p)
		a.peerReq = seq + 1
		r := binary.BigEndian.AppendUint32(nil, seq)
		r = binary.BigEndian.AppendUint32(r, 1) // success, performed
		resp = appendParam(resp, ptReconfigResponse, r)
		for i := 12; i+2 <= len(p); i += 2 {
			id := binary.BigEndian.Uint16(p[i:])
			delete(a.rcv.streams, id)
			c := a.chans[id]
			if c == nil {
				continue
			}
			c.rclosed = true
			c.wake()
			if !c.lclosed {
				a.resetStream(c)
			}
			delete(a.chans, id)
		}
	})
	if err != nil {
		a.drop(err)
		return
	}
	if resp != nil {
		a.control(a.peerTag, ctReconfig, 0, resp)
	}
}

// readable calls the channel's OnReadable function (a callback, mu free).
func (c *Channel) readable() {
	c.a.mu.Lock()
	c.queued = false
	f := c.onReadable
	c.a.mu.Unlock()
	f()
}
