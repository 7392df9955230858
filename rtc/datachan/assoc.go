// Package datachan is Petrel's own WebRTC data channel stack: an SCTP
// association (RFC 9260) over a DTLS connection, with RACK loss detection
// (RFC 8985) in place of counting miss indications, partial reliability
// (RFC 3758), stream reset (RFC 6525) and the data channel establishment
// protocol (RFC 8832). It replaces pion/sctp and pion/datachannel where
// Petrel runs data channels without a PeerConnection (session data
// sessions), for the reasons in lab/notes.md ("Pion: what Petrel tunes, and
// what stands in the way"): pion/sctp halves its window on reordering,
// retransmits a chunk only once before a 1 s timeout, and hands each packet
// through several goroutines. Here a packet is handled on the goroutine that
// reads the DTLS connection, under one lock, and sent from it.
package datachan

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Config is an association's setting.
type Config struct {
	// Conn carries one SCTP packet per Read and Write: a DTLS connection.
	Conn net.Conn
	// Client is true for the DTLS client, which opens channels on even
	// stream ids, the server on odd ones (RFC 8832 6).
	Client bool
	// MaxMessage is the largest message accepted (a=max-message-size); a
	// larger one aborts the association. 0: 256 KiB.
	MaxMessage uint32
	// ReceiveWindow is the bytes the peer may send ahead of what the
	// application read (recv.go says what counts). 0: 4 MiB; at least twice
	// MaxMessage, or a message could not complete.
	ReceiveWindow uint32
	// MaxChannels bounds the channels open at once; the peer's
	// DATA_CHANNEL_OPEN beyond it is answered with a stream reset. 0: 64.
	MaxChannels int
	// MTU is the SCTP packet size. 0: 1200 (with DTLS's AES-GCM overhead a
	// datagram stays within 1280 bytes).
	MTU int
	// MaxMTU is the largest SCTP packet path MTU discovery tries (pmtu.go);
	// at most 8192. 0: MTU, no discovery.
	MaxMTU int
	// Log gets the association's errors; nil: discarded.
	Log *slog.Logger
	// Input: the owner hands packets over with Input instead of a reader
	// goroutine reading Conn (which still carries the writes), so an idle
	// association costs no goroutine.
	Input bool
	// OnChannel, if set, gets each channel the peer opens instead of
	// Accept; it runs on the goroutine that handed the packet over.
	OnChannel func(*Channel)
	// OnClose, if set, is called once when the association ends, with why.
	OnClose func(error)
}

const (
	stateCookieWait = iota
	stateCookieEchoed
	stateEstablished
	stateClosed
)

// ErrClosed is what reads and writes return once the association ended.
var ErrClosed = errors.New("datachan: association closed")

// errProtocol marks what the peer did wrong enough to abort for: the ABORT
// carries a Protocol Violation cause (RFC 9260 3.3.10.13).
var errProtocol = errors.New("datachan: protocol violation")

// Association is one SCTP association and its data channels.
type Association struct {
	cfg   Config
	log   *slog.Logger
	epoch time.Time

	mu      sync.Mutex
	state   int
	myTag   uint32
	peerTag uint32
	myTSN   uint32 // our initial TSN
	cookie  []byte // the cookie of our INIT-ACK
	peer    initChunk
	pending initChunk // the INIT our cookie answers
	tries   int       // INIT or COOKIE-ECHO sends
	hsTimer *time.Timer
	err     error
	ready   chan struct{}
	done    chan struct{}

	snd sender
	rcv receiver
	pm  pmtu

	chans     map[uint16]*Channel
	accept    chan *Channel
	nextID    uint16
	reconfSeq uint32 // our next RE-CONFIG request number
	peerReq   uint32 // the peer's next expected request number

	stats Stats

	// Packets built under mu wait in out; they are written under wmu,
	// taken before mu is released, so they leave in order.
	out       [][]byte
	callbacks []func()
	wmu       sync.Mutex
	spare     [][]byte // (wmu) the other of two slices out alternates with
}

// Stats are an association's counters.
type Stats struct {
	PacketsIn, PacketsOut  uint64
	Dropped                uint64 // packets with a bad checksum, tag or chunk
	FastRetransmits        uint64 // chunks RACK declared lost
	Timeouts               uint64 // T3-rtx expiries
	SpuriousRetransmits    uint64 // duplicates the peer reported
	LossesKept             uint64 // losses that found no queue and kept the window (send.go, noCongestion)
	Presumed               uint64 // chunks past a truncated SACK taken out of the flight (send.go, presume)
	Cwnd, Ssthresh, Flight int
	MTU                    int // the packet size path MTU discovery reached
	SRTT, MinRTT           time.Duration
	ReorderWindow          time.Duration
	PeerWindow             int
	Abandoned              uint64 // chunks given up (partial reliability)
	Overrun                uint64 // chunks dropped for want of receive window
	ReceivedOutOfOrder     uint64
}

// New starts an association on cfg.Conn: it sends INIT (both ends of a
// WebRTC association do, RFC 8831 6.2) and reads the connection until it
// fails or the association ends.
func New(cfg Config) *Association {
	if cfg.MaxMessage == 0 {
		cfg.MaxMessage = 256 << 10
	}
	if cfg.ReceiveWindow == 0 {
		cfg.ReceiveWindow = 4 << 20
	}
	cfg.ReceiveWindow = max(cfg.ReceiveWindow, 2*cfg.MaxMessage)
	if cfg.MaxChannels <= 0 {
		cfg.MaxChannels = 64
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1200
	}
	cfg.MaxMTU = min(cfg.MaxMTU, maxMTU)
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Association{cfg: cfg, log: log, epoch: time.Now(), ready: make(chan struct{}), done: make(chan struct{}),
		chans: map[uint16]*Channel{}, accept: make(chan *Channel, 16)}
	a.myTag = nonzero32()
	a.myTSN = nonzero32()
	a.nextID = 1
	if cfg.Client {
		a.nextID = 0
	}
	a.snd.init(a)
	a.rcv.init(a)
	a.pm.timeout = probeTimeout
	a.mu.Lock()
	a.sendInit()
	a.unlockAndFlush()
	if !cfg.Input {
		go a.readLoop()
	}
	return a
}

// Input handles one packet from the peer (Config.Input), on the caller's
// goroutine; behind says more packets wait behind it (a SACK can wait for
// them).
func (a *Association) Input(b []byte, behind bool) {
	a.rcv.behind = behind
	a.handlePacket(b)
}

func nonzero32() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.BigEndian.Uint32(b[:]); v != 0 {
			return v
		}
	}
}

// now is the association's clock: nanoseconds since it started.
func (a *Association) now() int64 { return int64(time.Since(a.epoch)) }

// Ready is closed when the association is established.
func (a *Association) Ready() <-chan struct{} { return a.ready }

// Done is closed when the association ended; Err says why.
func (a *Association) Done() <-chan struct{} { return a.done }

// Err is why the association ended, nil while it runs.
func (a *Association) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Stats returns the association's counters.
func (a *Association) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Cwnd, s.Ssthresh, s.Flight, s.MTU = a.snd.cwnd, a.snd.ssthresh, a.snd.flight, a.snd.mtu
	s.SRTT, s.MinRTT = time.Duration(a.snd.srtt), time.Duration(a.snd.minRTT)
	s.ReorderWindow = time.Duration(a.snd.reoWnd())
	s.PeerWindow = a.snd.rwnd
	return s
}

func (a *Association) readLoop() {
	buf := make([]byte, 8192)
	queued, _ := a.cfg.Conn.(interface{ Queued() int })
	for {
		n, err := a.cfg.Conn.Read(buf)
		if err != nil {
			a.mu.Lock()
			a.closeLocked(err)
			a.unlockAndFlush()
			return
		}
		a.rcv.behind = queued != nil && queued.Queued() > 0
		a.handlePacket(buf[:n])
	}
}

// unlockAndFlush releases mu and writes the packets built meanwhile, then
// runs the callbacks that became due (buffered-amount-low).
func (a *Association) unlockAndFlush() {
	out, cbs := a.out, a.callbacks
	a.callbacks = nil
	if len(out) == 0 {
		a.mu.Unlock()
	} else {
		a.wmu.Lock()
		a.out, a.spare = a.spare, nil
		a.mu.Unlock()
		for _, p := range out {
			if _, err := a.cfg.Conn.Write(p); err != nil {
				a.log.Debug("sctp write", "err", err)
			}
			putBuf(p)
		}
		clear(out)
		a.spare = out[:0]
		a.wmu.Unlock()
	}
	for _, f := range cbs {
		f()
	}
}

// bufPool holds packet buffers as array pointers: putting a *[]byte made
// one allocation a packet (the slice header escaped).
var bufPool = sync.Pool{New: func() any { return new([1500]byte) }}

func getBuf() []byte { return bufPool.Get().(*[1500]byte)[:0] }

func putBuf(b []byte) {
	if cap(b) >= 1500 {
		bufPool.Put((*[1500]byte)(b[:1500]))
	}
}

// queue adds a finished packet to the ones unlockAndFlush writes.
func (a *Association) queue(w *packetWriter) {
	a.out = append(a.out, w.finish())
	a.stats.PacketsOut++
}

// control sends a packet with one control chunk.
func (a *Association) control(vtag uint32, typ, flags byte, value []byte) {
	var w packetWriter
	w.start(getBuf(), vtag)
	w.chunk(typ, flags, len(value))
	w.b = append(w.b, value...)
	w.pad()
	a.queue(&w)
}

func (a *Association) initChunk() initChunk {
	return initChunk{tag: a.myTag, rwnd: a.cfg.ReceiveWindow, outStreams: 65535, inStreams: 65535, tsn: a.myTSN}
}

func (a *Association) sendInit() {
	a.control(0, ctInit, 0, appendInit(nil, a.initChunk()))
	a.armHandshake()
}

// armHandshake resends INIT or COOKIE-ECHO every second, 10 times.
func (a *Association) armHandshake() {
	a.tries++
	if a.hsTimer != nil {
		a.hsTimer.Stop()
	}
	a.hsTimer = time.AfterFunc(time.Second, func() {
		a.mu.Lock()
		switch {
		case a.state >= stateEstablished:
		case a.tries >= 10:
			a.closeLocked(errors.New("datachan: no answer to INIT"))
		case a.state == stateCookieWait:
			a.sendInit()
		case a.state == stateCookieEchoed:
			a.control(a.peerTag, ctCookieEcho, 0, a.peer.cookie)
			a.armHandshake()
		}
		a.unlockAndFlush()
	})
}

func (a *Association) handlePacket(b []byte) {
	a.mu.Lock()
	defer a.unlockAndFlush()
	if a.state == stateClosed {
		return
	}
	a.stats.PacketsIn++
	vtag, err := checkPacket(b)
	if err != nil {
		a.drop(err)
		return
	}
	it := chunkIter{b: b[headerSize:]}
	first := true
	gotData := false
	for {
		typ, flags, v, ok := it.next()
		if !ok {
			break
		}
		switch {
		case typ == ctInit:
			if !first || vtag != 0 || len(it.b) != 0 {
				a.drop(errors.New("datachan: INIT bundled or with a tag"))
				return
			}
			a.handleInit(v)
			return
		case typ == ctAbort && flags&1 != 0 && vtag == a.peerTag, typ == ctShutdownComplete && flags&1 != 0 && vtag == a.peerTag:
		case vtag != a.myTag:
			a.drop(errors.New("datachan: wrong verification tag"))
			return
		}
		first = false
		if a.state == stateCookieEchoed && (typ == ctData || typ == ctSack || typ == ctForwardTSN || typ == ctReconfig) {
			// The peer is established (only then does it send these): our
			// COOKIE-ACK is late, or reordered behind this packet.
			a.establish()
		}
		switch typ {
		case ctInitAck:
			a.handleInitAck(v)
		case ctCookieEcho:
			a.handleCookieEcho(v)
		case ctCookieAck:
			if a.state == stateCookieEchoed {
				a.establish()
			}
		case ctData:
			if a.state != stateEstablished {
				continue
			}
			if err := a.rcv.handleData(flags, v); err != nil {
				a.abort(err)
				return
			}
			gotData = true
		case ctSack:
			if a.state == stateEstablished {
				if err := a.snd.handleSack(v); err != nil {
					a.drop(err)
					return
				}
			}
		case ctForwardTSN:
			if a.state == stateEstablished {
				if err := a.rcv.handleForwardTSN(v); err != nil {
					a.drop(err)
					return
				}
				gotData = true
			}
		case ctReconfig:
			if a.state == stateEstablished {
				a.handleReconfig(v)
			}
		case ctHeartbeat:
			if len(v) <= 512 {
				a.control(a.peerTag, ctHeartbeatAck, 0, v)
			}
		case ctHeartbeatAck:
			a.handleHeartbeatAck(v)
		case ctAbort:
			a.closeLocked(errors.New("datachan: the peer aborted the association"))
			return
		case ctShutdown:
			a.control(a.peerTag, ctShutdownAck, 0, nil)
		case ctShutdownAck:
			a.control(a.peerTag, ctShutdownComplete, 0, nil)
			a.closeLocked(io.EOF)
			return
		case ctShutdownComplete:
			a.closeLocked(io.EOF)
			return
		case ctError:
			a.log.Debug("sctp: the peer reported an error", "cause", v)
		default:
			// RFC 9260 3.2: the type's top bits say whether to go on.
			if typ&0x80 == 0 {
				return
			}
		}
	}
	if it.err != nil {
		a.drop(it.err)
	}
	if gotData {
		a.rcv.afterPacket()
	}
	if a.rcv.badStream {
		// One ERROR a packet, however many of its chunks named a stream
		// the peer may not use: Invalid Stream Identifier (RFC 9260 3.3.10.1).
		a.rcv.badStream = false
		a.control(a.peerTag, ctError, 0, []byte{0, 1, 0, 8, 0, 0, 0, 0})
	}
	a.snd.transmit()
}

func (a *Association) drop(err error) {
	a.stats.Dropped++
	if a.stats.Dropped == 1 {
		a.log.Info("sctp: dropped a packet (logged once per association)", "err", err)
	}
}

func (a *Association) handleInit(v []byte) {
	c, err := parseInit(v)
	if err != nil {
		a.drop(err)
		return
	}
	if a.state == stateEstablished {
		if c.tag != a.peerTag {
			// A restart (RFC 9260 5.2.2) is not something WebRTC does.
			a.drop(errors.New("datachan: INIT for a new association"))
			return
		}
	}
	// In COOKIE-WAIT and COOKIE-ECHOED the INIT-ACK carries our INIT's tag
	// and TSN (RFC 9260 5.2.1), so both ends' handshakes agree.
	// A second copy of the same INIT (duplicated, or resent while our
	// INIT-ACK was on its way) gets the same cookie: the peer echoes the
	// cookie of the first INIT-ACK it takes and ignores the rest.
	if a.cookie == nil || a.pending.tag != c.tag {
		a.cookie = make([]byte, 16)
		_, _ = rand.Read(a.cookie)
	}
	a.pending = c
	ack := a.initChunk()
	ack.cookie = a.cookie
	a.control(c.tag, ctInitAck, 0, appendInit(nil, ack))
}

func (a *Association) handleInitAck(v []byte) {
	if a.state != stateCookieWait {
		return
	}
	c, err := parseInit(v)
	if err != nil || c.cookie == nil {
		a.drop(errors.New("datachan: malformed INIT-ACK"))
		return
	}
	c.cookie = append([]byte(nil), c.cookie...)
	a.peer, a.peerTag = c, c.tag
	a.state = stateCookieEchoed
	a.tries = 0
	a.control(a.peerTag, ctCookieEcho, 0, c.cookie)
	a.armHandshake()
}

func (a *Association) handleCookieEcho(v []byte) {
	switch {
	case a.state == stateEstablished && a.cookie != nil && string(v) == string(a.cookie):
		// Our COOKIE-ACK was lost.
	case a.state < stateEstablished && a.cookie != nil && string(v) == string(a.cookie):
		a.peer, a.peerTag = a.pending, a.pending.tag
		a.establish()
	default:
		a.drop(errors.New("datachan: unknown cookie"))
		return
	}
	a.control(a.peerTag, ctCookieAck, 0, nil)
}

func (a *Association) establish() {
	if a.hsTimer != nil {
		a.hsTimer.Stop()
	}
	a.state = stateEstablished
	a.reconfSeq, a.peerReq = a.myTSN, a.peer.tsn // RFC 6525 5.1
	a.snd.start(a.peer)
	a.rcv.start(a.peer)
	a.startSearch()
	close(a.ready)
}

// Close ends the association with an ABORT (the connection stays open).
func (a *Association) Close() error {
	a.Abort("closed")
	return nil
}

// Abort ends the association with an ABORT that gives reason.
func (a *Association) Abort(reason string) {
	a.mu.Lock()
	a.abort(errors.New(reason))
	a.unlockAndFlush()
}

func (a *Association) abort(err error) {
	if a.state == stateClosed {
		return
	}
	if a.state == stateEstablished {
		// User-initiated abort cause (12) with the reason, or Protocol
		// Violation (13) for what the peer did.
		code := uint16(12)
		if errors.Is(err, errProtocol) {
			code = 13
		}
		cause := binary.BigEndian.AppendUint16(nil, code)
		r := err.Error()
		if len(r) > 128 {
			r = r[:128]
		}
		cause = binary.BigEndian.AppendUint16(cause, uint16(4+len(r)))
		cause = append(cause, r...)
		for len(cause)%4 != 0 {
			cause = append(cause, 0)
		}
		a.control(a.peerTag, ctAbort, 0, cause)
	}
	a.log.Debug("sctp: aborting", "err", err)
	a.closeLocked(err)
}

func (a *Association) closeLocked(err error) {
	if a.state == stateClosed {
		return
	}
	a.state = stateClosed
	a.err = err
	if a.hsTimer != nil {
		a.hsTimer.Stop()
	}
	a.snd.stop()
	a.rcv.stop()
	a.pm.stop()
	for _, c := range a.chans {
		c.closeLocked()
	}
	close(a.done)
	if f := a.cfg.OnClose; f != nil {
		a.callbacks = append(a.callbacks, func() { f(err) })
	}
}
