package loadtest

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/dtls/v3"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"
	"github.com/pion/stun/v4"

	"github.com/petrel-sfu/petrel/rtc/lean"
)

// LeanCert is the DTLS certificate every lean peer of a process presents.
type LeanCert = lean.Cert

// NewLeanCert makes a self-signed ECDSA certificate.
func NewLeanCert() (*LeanCert, error) { return lean.NewCert() }

// leanPeer is a receive-only WebRTC endpoint without a Pion PeerConnection:
// its own UDP socket, ICE (controlling) by hand with pion/stun, a pion/dtls
// client over that socket for the SRTP keys, then one goroutine that reads,
// demultiplexes by first byte (RFC 7983), decrypts in place and counts. A
// packet crosses no channel and no other goroutine between the socket and the
// accounting; only DTLS records (the handshake, a final alert) are handed to
// the DTLS connection through a channel.
//
// One socket per peer rather than one shared socket: servers (Petrel, Pion,
// Janus) tell peers apart by remote address, so a shared socket would need a
// port per peer anyway, and a socket per peer lets the kernel do the
// demultiplexing for free.
type leanPeer struct {
	// Read for every packet, so kept together at the start: with a thousand
	// viewers a peer's state is touched once per poll interval and is out of
	// the cache by then, and each line it spans is a miss (the profile of a
	// 1000-viewer run had three, at the remote, the stream and the SRTP
	// state lookups). The first 64 bytes hold the remote, the opener and the
	// counts; streams 0 and 1 (audio and video) fill the next line.
	// TestLeanPeerLayout keeps it so. The reader goroutine alone writes
	// these once rx is set (remote: before).
	remote   netip.AddrPort
	grx      atomic.Pointer[gcmRx] // AES-GCM profiles: decrypted without pion/srtp (srtpgcm.go)
	nstreams int
	pkts     uint32
	_        [12]byte // streams start the second cache line
	streams  [8]leanStream

	p    *Peer
	tot  *Counters
	conn *net.UDPConn
	cert *LeanCert
	log  *slog.Logger

	lufrag, lpwd string
	tie          [8]byte
	ans          *leanAnswer

	pendMu  sync.Mutex
	pending [8][stun.TransactionIDSize]byte // our binding requests in flight (ring)
	npend   int
	iceOK   chan struct{}
	iceOnce sync.Once
	checked atomic.Bool // the server has checked us (its pair can succeed)

	dtlsIn   *lean.PacketConn // the DTLS client's view of the socket
	closed   chan struct{}
	closeOne sync.Once
	dconn    *dtls.Conn

	// The reader goroutine alone uses what follows once rx is set.
	rx        atomic.Pointer[srtp.Context]
	tx        *srtp.Context
	ssrc      uint32 // our RTCP sender SSRC
	hdr       rtp.Header
	dec       []byte
	rtcpPlain []byte
	rtcpOut   []byte
	rtcpHdr   rtcp.Header
	lastRR    time.Time
	garbage   uint64
	authFail  uint64
	done      chan struct{}
	started   atomic.Bool
	sh        *leanShared    // the shared socket (nil: conn and the read goroutine)
	laddr     netip.AddrPort // the peer's own address on sh
}

type leanStream struct {
	ssrc             uint32
	st               *streamRx
	priorExp, priorN uint64
}

// newLeanPeer opens the peer's socket on bind (an IPv4 address), or takes
// an address on sh when sh is not nil.
func newLeanPeer(p *Peer, cert *LeanCert, bind string, sh *leanShared) (*leanPeer, error) {
	l := &leanPeer{p: p, tot: p.tot, cert: cert, log: slog.With("peer", p.ID, "lean", true),
		lufrag: lean.Token(8), lpwd: lean.Token(24), iceOK: make(chan struct{}),
		closed: make(chan struct{}), done: make(chan struct{}),
		dec: make([]byte, 1500), rtcpPlain: make([]byte, 0, 1500), rtcpOut: make([]byte, 1500)}
	_, _ = rand.Read(l.tie[:])
	var s [4]byte
	_, _ = rand.Read(s[:])
	l.ssrc = binary.BigEndian.Uint32(s[:])
	if sh != nil {
		close(l.done) // no reader goroutine of its own
		return l, sh.reserve(l)
	}
	ip, err := netip.ParseAddr(bind)
	if err != nil || !ip.Is4() {
		return nil, fmt.Errorf("bind %q: want an IPv4 address", bind)
	}
	if l.conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0))); err != nil {
		return nil, err
	}
	// Video arrives in bursts (a keyframe is tens of packets at once).
	_ = l.conn.SetReadBuffer(1 << 20)
	return l, nil
}

func (l *leanPeer) local() netip.AddrPort {
	if l.sh != nil {
		return l.laddr
	}
	return l.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// send writes one datagram from the peer's address.
func (l *leanPeer) send(b []byte, to netip.AddrPort) error {
	if l.sh != nil {
		return l.sh.send(b, l.laddr, to)
	}
	_, err := l.conn.WriteToUDPAddrPort(b, to)
	return err
}

// Offer is the SDP offer for this peer.
func (l *leanPeer) Offer() (string, error) {
	return leanOffer(l.lufrag, l.lpwd, "sha-256", l.cert.Fingerprint, l.local())
}

// Close stops the peer: DTLS close_notify, then the socket.
func (l *leanPeer) Close() {
	l.closeOne.Do(func() {
		// The DTLS connection's own reader waits in leanDTLS.ReadFrom, and
		// its Close waits for that reader: release it first.
		close(l.closed)
		if l.dtlsIn != nil {
			l.dtlsIn.Shutdown()
		}
		if l.dconn != nil {
			_ = l.dconn.Close() // close_notify still goes out: the socket is open
		}
		if l.sh != nil {
			l.sh.remove(l)
		} else {
			_ = l.conn.Close()
		}
		if !l.started.Load() {
			return
		}
		<-l.done // the reader owns the streams until it returns
		for i := 0; i < l.nstreams; i++ {
			st := l.streams[i].st
			st.mu.Lock()
			st.ended = true
			st.mu.Unlock()
		}
	})
}

// Connect takes the server's answer, runs ICE and DTLS and starts counting
// media. It returns when SRTP keys are in place or on the first error.
func (l *leanPeer) Connect(ctx context.Context, answer string) error {
	a, err := parseLeanAnswer(answer, true)
	if err != nil {
		return err
	}
	l.ans, l.remote = a, a.remote
	l.dtlsIn = lean.NewPacketConn(func(b []byte) (int, error) { return len(b), l.send(b, l.remote) },
		net.UDPAddrFromAddrPort(l.local()), net.UDPAddrFromAddrPort(l.remote))
	l.started.Store(true)
	if l.sh != nil {
		l.sh.activate(l)
	} else {
		go l.read()
	}

	// ICE: checks with USE-CANDIDATE (aggressive nomination) every 50 ms
	// until our check has succeeded and the server has checked us, which is
	// when a controlled agent accepts the nomination; a few more after that
	// (a nomination can arrive before the server's own check succeeded). An
	// ICE-lite server never checks: the success of a check that nominated is
	// enough, and DTLS starts on it, as a browser's does.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var liteOK <-chan struct{}
	if l.ans.lite {
		liteOK = l.iceOK
	}
	for extra := 0; extra < 3; {
		if err := l.sendCheck(); err != nil {
			return fmt.Errorf("ice: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ice: no answer to binding requests from %s: %w", l.remote, ctx.Err())
		case <-l.closed:
			return net.ErrClosed
		case <-liteOK:
			extra = 3
		case <-tick.C:
		}
		select {
		case <-l.iceOK:
			if l.checked.Load() {
				extra++
			}
		default:
		}
	}
	l.p.mark(&l.p.iceAt)
	l.p.emit("ice-state", map[string]any{"state": "connected"})
	l.p.emit("selected-pair", map[string]any{"local": l.local().String(), "remote": l.remote.String()})

	dc, err := dtls.ClientWithOptions(l.dtlsIn, net.UDPAddrFromAddrPort(l.remote),
		dtls.WithCertificates(l.cert.TLS),
		dtls.WithInsecureSkipVerify(true), // self-signed: the fingerprint below is the check
		dtls.WithVerifyPeerCertificate(func(raw [][]byte, _ [][]*x509.Certificate) error {
			return lean.VerifyFingerprint(l.ans.fpAlg, l.ans.fp, raw)
		}),
		dtls.WithSRTPProtectionProfiles(lean.SRTPProfiles...),
		dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret),
		dtls.WithFlightInterval(500*time.Millisecond))
	if err != nil {
		return fmt.Errorf("dtls: %w", err)
	}
	l.dconn = dc
	if err := dc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("dtls: %w", err)
	}
	rx, tx, err := lean.SRTPContexts(dc, true)
	if err != nil {
		return err
	}
	if g, err := leanGCM(dc); err != nil {
		return err
	} else if g != nil {
		l.grx.Store(g)
	}
	l.tx = tx
	l.lastRR = time.Now()
	l.rx.Store(rx) // publishes tx and lastRR to the reader
	l.p.mark(&l.p.dtlsAt)
	if l.p.up.CompareAndSwap(false, true) {
		l.p.emit("webrtcup", nil)
	}
	return nil
}

// sendCheck sends one ICE connectivity check with USE-CANDIDATE.
func (l *leanPeer) sendCheck() error {
	m, err := stun.Build(stun.BindingRequest, stun.TransactionID,
		stun.NewUsername(l.ans.ufrag+":"+l.lufrag),
		stun.RawAttribute{Type: stun.AttrICEControlling, Value: l.tie[:]},
		stun.RawAttribute{Type: stun.AttrPriority, Value: []byte{0x6e, 0x7f, 0x1e, 0xff}}, // peer-reflexive type preference, RFC 8445 7.1.1
		stun.RawAttribute{Type: stun.AttrUseCandidate},
		stun.NewShortTermIntegrity(l.ans.pwd), stun.Fingerprint)
	if err != nil {
		return err
	}
	l.pendMu.Lock()
	l.pending[l.npend%len(l.pending)] = m.TransactionID
	l.npend++
	l.pendMu.Unlock()
	return l.send(m.Raw, l.remote)
}

// read is the peer's only goroutine once set up.
func (l *leanPeer) read() {
	defer close(l.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := l.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		l.handle(buf[:n], from, time.Now())
	}
}

// handle demultiplexes one datagram, received at now, by its first byte
// (RFC 7983). b is the reader's: it is decrypted in place.
func (l *leanPeer) handle(b []byte, from netip.AddrPort, now time.Time) {
	if len(b) == 0 {
		l.junk(b, from, "empty datagram")
		return
	}
	switch c := b[0]; {
	case c < 4:
		l.onSTUN(b, from)
	case from != l.remote:
		l.junk(b, from, "not from the server's selected address")
	case c >= 20 && c < 64:
		l.dtlsIn.Push(b)
	case c >= 128 && c < 192:
		if len(b) >= 2 && b[1]&0x7f >= 64 && b[1]&0x7f < 96 {
			return // SRTCP (sender reports): nothing the generator needs
		}
		l.onRTP(b, now)
	default:
		l.junk(b, from, "not STUN, DTLS or SRTP")
	}
}

// junk counts a datagram the peer cannot use and logs the first one.
func (l *leanPeer) junk(b []byte, from netip.AddrPort, why string) {
	l.garbage++
	if l.garbage == 1 {
		l.log.Warn("lean peer: dropped a datagram (later ones are counted, not logged)", "from", from.String(), "len", len(b), "why", why)
	}
}

func (l *leanPeer) onSTUN(b []byte, from netip.AddrPort) {
	m := &stun.Message{Raw: append([]byte(nil), b...)}
	if err := m.Decode(); err != nil {
		l.junk(b, from, "bad STUN: "+err.Error())
		return
	}
	switch m.Type {
	case stun.BindingRequest:
		// The server's check or consent request: answer if it is for us.
		if _, err := lean.CheckBinding(m, l.lufrag, l.lpwd); err != nil {
			l.junk(b, from, err.Error())
			return
		}
		resp, err := lean.BindingSuccess(m, from, l.lpwd)
		if err != nil {
			return
		}
		_ = l.send(resp, from)
		if from == l.remote {
			l.checked.Store(true)
		}
	case stun.BindingSuccess:
		l.pendMu.Lock()
		ours := false
		for i := range min(l.npend, len(l.pending)) {
			if l.pending[i] == m.TransactionID {
				ours = true
			}
		}
		l.pendMu.Unlock()
		if !ours || stun.NewShortTermIntegrity(l.ans.pwd).Check(m) != nil {
			l.junk(b, from, "binding response that answers no request of ours")
			return
		}
		l.iceOnce.Do(func() { close(l.iceOK) })
	case stun.BindingError:
		var ec stun.ErrorCodeAttribute
		_ = ec.GetFrom(m)
		l.log.Warn("lean peer: binding error from the server", "from", from.String(), "code", ec.Code, "reason", string(ec.Reason))
	}
}

// onRTP decrypts one SRTP packet in place (AES-GCM: b itself; otherwise
// into the peer's one plaintext buffer) and counts it. No allocation, no
// lock but the stream's own.
func (l *leanPeer) onRTP(b []byte, now time.Time) {
	var out []byte
	var err error
	if g := l.grx.Load(); g != nil {
		out, err = g.open(b)
	} else if ctx := l.rx.Load(); ctx != nil {
		out, err = ctx.DecryptRTP(l.dec, b, &l.hdr)
	} else {
		return // media before the keys: the server is early, drop
	}
	if err != nil {
		l.authFail++ // replays, forgeries, garbage shaped like RTP
		if l.authFail == 1 {
			l.log.Warn("lean peer: SRTP packet failed to decrypt (later ones are counted, not logged)", "err", err)
		}
		return
	}
	s := l.stream(binary.BigEndian.Uint32(out[8:]), out[1]&0x7f)
	if s == nil {
		return
	}
	if gapFrom, gapN := s.st.onPacketAt(out, l.tot, l.p.onFirst, now); gapN > 0 {
		l.sendNACK(s.ssrc, gapFrom, gapN)
	}
	if l.pkts++; l.pkts&63 == 0 {
		if now.Sub(l.lastRR) >= time.Second {
			l.lastRR = now
			l.sendRR()
		}
	}
}

// stream finds or adds the stream of ssrc (authenticated by now).
func (l *leanPeer) stream(ssrc uint32, pt uint8) *leanStream {
	for i := 0; i < l.nstreams; i++ {
		if l.streams[i].ssrc == ssrc {
			return &l.streams[i]
		}
	}
	if l.nstreams == len(l.streams) {
		return nil
	}
	info := l.ans.pts[pt&0x7f]
	kind, clock := info.kind, float64(info.clock)
	if kind == "" {
		kind, clock = l.ans.ssrcKind[ssrc], 90000
		if kind == "" {
			kind = "unknown"
		}
	}
	st := &streamRx{kind: kind, clock: clock, start: l.p.start}
	l.p.mu.Lock()
	l.p.streams = append(l.p.streams, st)
	l.p.mu.Unlock()
	l.streams[l.nstreams] = leanStream{ssrc: ssrc, st: st}
	l.nstreams++
	return &l.streams[l.nstreams-1]
}

// sendNACK asks for the gap (up to 17 packets: one PID and its bitmask).
func (l *leanPeer) sendNACK(ssrc, gapFrom, gapN uint32) {
	var blp uint16
	for i := uint32(1); i < min(gapN, 17); i++ {
		blp |= 1 << (i - 1)
	}
	b := l.rtcpPlain[:16]
	b[0], b[1] = 0x81, 205 // V=2, FMT=1 generic NACK
	binary.BigEndian.PutUint16(b[2:], 3)
	binary.BigEndian.PutUint32(b[4:], l.ssrc)
	binary.BigEndian.PutUint32(b[8:], ssrc)
	binary.BigEndian.PutUint16(b[12:], uint16(gapFrom))
	binary.BigEndian.PutUint16(b[14:], blp)
	l.sendRTCP(b)
}

// sendRR sends a receiver report for every stream (RFC 3550 6.4.2; no LSR:
// the generator does not read sender reports).
func (l *leanPeer) sendRR() {
	n := l.nstreams
	if n == 0 {
		return
	}
	b := l.rtcpPlain[:8+24*n]
	b[0], b[1] = 0x80|byte(n), 201
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)/4-1))
	binary.BigEndian.PutUint32(b[4:], l.ssrc)
	for i := 0; i < n; i++ {
		s := &l.streams[i]
		blk := b[8+24*i : 8+24*(i+1)]
		s.st.mu.Lock()
		exp := uint64(s.st.maxSeq-s.st.baseSeq) + 1
		got, maxSeq, jit := s.st.packets, s.st.maxSeq, uint32(s.st.jitter)
		s.st.mu.Unlock()
		lost := int64(exp) - int64(got)
		expI, gotI := exp-s.priorExp, int64(got)-int64(s.priorN)
		s.priorExp, s.priorN = exp, got
		var frac byte
		if li := int64(expI) - gotI; expI > 0 && li > 0 {
			frac = byte(li << 8 / int64(expI))
		}
		lost = min(max(lost, -0x800000), 0x7fffff)
		binary.BigEndian.PutUint32(blk[0:], s.ssrc)
		binary.BigEndian.PutUint32(blk[4:], uint32(frac)<<24|uint32(lost)&0xffffff)
		binary.BigEndian.PutUint32(blk[8:], maxSeq)
		binary.BigEndian.PutUint32(blk[12:], jit)
		binary.BigEndian.PutUint32(blk[16:], 0)
		binary.BigEndian.PutUint32(blk[20:], 0)
	}
	l.sendRTCP(b)
}

func (l *leanPeer) sendRTCP(plain []byte) {
	out, err := l.tx.EncryptRTCP(l.rtcpOut[:0], plain, &l.rtcpHdr)
	if err != nil {
		return
	}
	l.rtcpOut = out[:cap(out)]
	_ = l.send(out, l.remote)
}

// LeanRx is what a run's lean peers share: the certificate, the local
// address and, when polling, the one socket every peer shares.
type LeanRx struct {
	Cert   *LeanCert
	Bind   string
	shared *leanShared
}

// NewLeanRx sets up lean peers on bind. poll > 0 puts every peer on one
// shared socket (its own loopback address each, bind must be loopback) that
// one goroutine drains with recvmmsg every poll interval (see leanShared);
// 0, or a bind address off loopback, gives each peer its own socket and
// reader goroutine.
func NewLeanRx(bind string, poll time.Duration) (*LeanRx, error) {
	if bind == "" {
		bind = "127.0.0.1"
	}
	cert, err := NewLeanCert()
	if err != nil {
		return nil, err
	}
	lr := &LeanRx{Cert: cert, Bind: bind}
	if poll > 0 {
		// Off loopback (a namespace's veth toward Janus) peers cannot take
		// addresses of their own: a socket each.
		if lr.shared, err = newLeanShared(bind, poll); err != nil {
			slog.Info("lean viewers: a socket and a reader per viewer", "why", err.Error())
		}
	}
	return lr, nil
}

// Close stops the shared socket's reader; every peer must be closed first.
func (lr *LeanRx) Close() {
	if lr.shared != nil {
		lr.shared.Close()
	}
}

// LeanWHEP plays from a WHEP endpoint with a lean peer (no Pion
// PeerConnection): recvonly video and audio, counted into p.
func LeanWHEP(ctx context.Context, lr *LeanRx, endpoint, token string, p *Peer) error {
	l, err := newLeanPeer(p, lr.Cert, lr.Bind, lr.shared)
	if err != nil {
		return err
	}
	p.OnClose(l.Close) // runs after the WHEP DELETE postOffer adds (reverse order)
	offer, err := l.Offer()
	if err != nil {
		return err
	}
	answer, err := postOffer(ctx, endpoint, token, offer, p)
	if err != nil {
		return err
	}
	if err := l.Connect(ctx, answer); err != nil {
		p.emit("hangup", map[string]any{"reason": err.Error()})
		return err
	}
	return nil
}

// leanGCM is the AES-GCM receiver for a finished handshake (nil for the
// AES-CM profile, which pion/srtp decrypts).
func leanGCM(dc *dtls.Conn) (*gcmRx, error) {
	k, err := lean.GCMFromDTLS(dc, true, false)
	if k == nil || err != nil {
		return nil, err
	}
	return &gcmRx{GCM: *k}, nil
}
