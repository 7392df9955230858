package datachan

import (
	"encoding/binary"
	"time"
)

// Path MTU discovery (RFC 8899, with SCTP's probe packet of its 6.2.1). An
// association starts at Config.MTU, a size every WebRTC path carries, and
// searches for larger packets up to Config.MaxMTU: the receiver's cost is
// per packet (a system call, a DTLS record, an SCTP packet), and a browser's
// UDP socket buffer holds a number of datagrams, not of bytes, so 1428-byte
// packets carry 19% more per packet than 1200-byte ones.
//
// A probe is a HEARTBEAT padded to the size under test by a PAD chunk (RFC
// 4820). PAD's type, 0x84, tells every stack to skip the chunk and go on
// with the packet, so the peer answers the HEARTBEAT (whose information it
// echoes, without the padding) whatever it makes of PAD, and the answer
// proves the path carried a packet of that size. A stack that drops the
// whole packet instead never answers, and the association stays at MTU.
//
// The search tries MaxMTU first (on an Ethernet path it passes at once),
// then bisects between the largest size confirmed and the smallest that
// failed (maxProbes probes unanswered, probeTimeout apart) until they are
// within probeStep. A search that stopped short of MaxMTU runs again after
// probeRaise (RFC 8899's PMTU_RAISE_TIMER). A retransmission timeout at a
// raised size goes back to MTU and searches again (black-hole detection),
// and so does PathChanged, which the owner calls when ICE moved the
// association to another path: the new one may not carry the larger
// packets. Chunks waiting to be sent are cut again; those in flight keep
// their size (a TSN cannot be cut), and pass only where the kernel
// fragments them, which it does once an ICMP message taught it the path's
// MTU (Linux's default for UDP sockets, IP_PMTUDISC_WANT). The same default
// would let a probe pass in fragments where the sender's own interface is
// smaller than MaxMTU, so the owner keeps MaxMTU within it
// (session.SCTPMaxMTU).

const (
	probeTimeout = time.Second // RFC 8899 PROBE_TIMER's floor
	maxProbes    = 3           // MAX_PROBES
	probeRaise   = 10 * time.Minute
	probeStep    = 32
	probeInfo    = 12 // "pmtu", the probe's number, its size
	maxMTU       = 8192
	ctPad        = 0x84 // RFC 4820
	ptHBInfo     = 1    // Heartbeat Info (RFC 9260 3.3.5)
)

type pmtu struct {
	lo, hi  int // the largest size confirmed; the smallest failed (max+1 at first)
	size    int // of the probe in flight, 0 when none
	tries   int
	seq     uint32 // of the last probe sent; those of this size are seq-tries+1 onwards
	timer   *time.Timer
	timeout time.Duration // probeTimeout; tests shorten it
}

// startSearch begins a search from the current packet size. The caller
// holds mu.
func (a *Association) startSearch() {
	p := &a.pm
	if a.cfg.MaxMTU <= a.cfg.MTU || p.size != 0 || a.state != stateEstablished {
		return
	}
	p.lo, p.hi = a.snd.mtu, a.cfg.MaxMTU+1
	a.probeNext()
}

// probeNext starts probing the next size of the search, or ends it.
func (a *Association) probeNext() {
	p := &a.pm
	p.size, p.tries = 0, 0
	if p.hi-p.lo <= probeStep {
		if p.lo < a.cfg.MaxMTU {
			a.armProbe(probeRaise)
		}
		return
	}
	size := a.cfg.MaxMTU
	if p.hi <= a.cfg.MaxMTU {
		size = (p.lo + p.hi) / 2
	}
	p.size = size &^ 3
	a.sendProbe()
}

// sendProbe writes one probe of pm.size bytes.
func (a *Association) sendProbe() {
	p := &a.pm
	p.tries++
	p.seq++
	var info [probeInfo]byte
	copy(info[:], "pmtu")
	binary.BigEndian.PutUint32(info[4:], p.seq)
	binary.BigEndian.PutUint32(info[8:], uint32(p.size))
	var w packetWriter
	w.start(getBuf(), a.peerTag)
	w.chunk(ctHeartbeat, 0, 4+probeInfo)
	w.b = appendParam(w.b, ptHBInfo, info[:])
	w.chunk(ctPad, 0, p.size-w.len()-chunkHeader)
	w.b = append(w.b, make([]byte, p.size-w.len())...)
	a.queue(&w)
	a.armProbe(p.timeout)
}

func (a *Association) armProbe(d time.Duration) {
	if a.pm.timer == nil {
		a.pm.timer = time.AfterFunc(d, a.onProbeTimer)
	} else {
		a.pm.timer.Reset(d)
	}
}

func (p *pmtu) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}

// onProbeTimer sends the probe again, gives its size up after maxProbes,
// or (with no probe in flight) starts the search again after probeRaise.
func (a *Association) onProbeTimer() {
	a.mu.Lock()
	defer a.unlockAndFlush()
	p := &a.pm
	switch {
	case a.state != stateEstablished:
	case p.size == 0:
		a.startSearch()
	case p.tries < maxProbes:
		a.sendProbe()
	default:
		p.hi = p.size
		a.probeNext()
	}
}

// handleHeartbeatAck confirms the probe it answers; other answers (to a
// probe that timed out, or forged) change nothing.
func (a *Association) handleHeartbeatAck(v []byte) {
	p := &a.pm
	if p.size == 0 {
		return
	}
	_ = params(v, func(typ uint16, info []byte) {
		if typ != ptHBInfo || len(info) != probeInfo || string(info[:4]) != "pmtu" ||
			p.seq-binary.BigEndian.Uint32(info[4:]) >= uint32(p.tries) || binary.BigEndian.Uint32(info[8:]) != uint32(p.size) {
			return
		}
		p.stop()
		p.lo = p.size
		a.snd.mtu = max(a.snd.mtu, p.size)
		a.probeNext()
	})
}

// PathChanged tells the association that its packets now take another
// path (ICE nominated another candidate pair): it goes back to MTU and
// searches again, as after a black hole.
func (a *Association) PathChanged() {
	a.mu.Lock()
	defer a.unlockAndFlush()
	if a.state == stateEstablished {
		a.blackHole()
	}
}

// blackHole is called on a retransmission timeout: at a raised size, the
// association goes back to MTU and searches again.
func (a *Association) blackHole() {
	if a.snd.mtu <= a.cfg.MTU {
		return
	}
	a.snd.mtu = a.cfg.MTU
	a.snd.recut()
	a.pm.stop()
	a.pm.size = 0
	a.startSearch()
}
