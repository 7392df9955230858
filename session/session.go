package session

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/dtls/v3"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"
	"github.com/pion/stun/v4"

	"github.com/petrel-sfu/petrel/rtc/dtlsrec"
	"github.com/petrel-sfu/petrel/rtc/lean"
	"github.com/petrel-sfu/petrel/rtc/sctptune"
)

// Handler is told what happens to a viewer. OnRTCP runs on the server's one
// RTCP goroutine; the others on the viewer's DTLS goroutine or whoever closes
// it.
type Handler interface {
	OnICE()                    // the first ICE check was answered
	OnDTLS()                   // SRTP keys are in place: media flows from now on
	OnRTCP(pkts []rtcp.Packet) // the viewer's feedback, decrypted and parsed
	OnClose(reason string)     // the viewer is gone (consent expired, DTLS closed, Close)
}

// Session is what every client's session has: its ICE credentials, its DTLS
// session and SRTP contexts, and the write path. The roles are the types
// that embed it: Viewer (WHEP), Subscriber (offered by the server),
// DataSession and Publisher (offered by the client).
type Session struct {
	s *Server
	h Handler

	// creds are the server's ICE credentials; an ICE restart of a
	// server-offered session (offer.go) replaces them, and checks with the
	// previous ones are answered until the next restart.
	creds  atomic.Pointer[iceCreds]
	ufrags []string // every ufrag the server maps to this viewer, under s.mu
	fpAlg  string
	fp     []byte
	// off is the negotiation state of a session the server offers (a room
	// subscriber, offer.go); nil for a WHEP viewer, which offers itself.
	off *offerer
	// data is set for a session that carries data channels (data.go).
	data *dataSide
	// in is set for a publisher session, which receives media (ingest.go).
	in *ingestSide
	// client is the client's ICE credentials (from its offer, or from its
	// answer to the server's offer): the nudge is sent with them.
	client    atomic.Pointer[clientICE]
	nmu       sync.Mutex
	nudged    nudges           // the paths nudged with the current client credentials, under nmu
	nominated atomic.Bool      // a check with USE-CANDIDATE came (these credentials)
	addrs     []netip.AddrPort // checked UDP addresses, under s.mu
	tcps      []*tcpConn       // checked ICE-TCP connections (tcp.go), under s.mu
	lastCheck atomic.Int64     // unix ns of the last valid ICE check (or creation)
	iceOnce   sync.Once
	closed    atomic.Bool
	closeOnce sync.Once

	pc     *lean.PacketConn
	dmu    sync.Mutex
	dc     *dtls.Conn
	cancel context.CancelFunc

	ready atomic.Bool
	rx    atomic.Pointer[srtp.Context] // the RTCP goroutine's alone once set
	// lastDTLS is when the last DTLS record came (unix ns).
	lastDTLS atomic.Int64
	// detached: the DTLS connection was dropped once the viewer proved it
	// has the keys (detachDTLS).
	detached atomic.Bool

	// The write side, under wmu: forwarding goroutines (one per published
	// layer, fan-out workers), NACK answers on the socket reader and sender
	// reports all write here. The lock is this viewer's own. The fan-out
	// encrypts into its batch's buffers; the rest borrow one from bufs.
	wmu    sync.Mutex
	remote netip.AddrPort
	// tcp is the ICE-TCP connection media goes on, when the nominated path
	// is one (remote is then its address); nil for UDP.
	tcp       *tcpConn
	tx        *srtp.Context
	gtx       *gcmTx // AES-GCM: RTP sealed without pion/srtp (srtpgcm.go); nil for AES-CM
	rtcpHdrTx rtcp.Header

	// The read side: the server's RTCP goroutine alone.
	rtcpHdr rtcp.Header
}

// bufs lends packet buffers (mtu+srtpOverhead bytes) to the writes that are
// not the fan-out's (NACK answers, sender reports, AES-CM's plaintext), so
// that a viewer holds none of its own: at a few a second per viewer they are
// not worth 6 KiB each of a thousand viewers.
var bufs = sync.Pool{New: func() any { b := make([]byte, mtu+srtpOverhead); return &b }}

const mtu = 1500

// srtpOverhead is the most SRTP adds to a packet (HMAC-SHA1-80 tag or GCM
// tag, plus SRTCP index).
const srtpOverhead = 32

// Viewer is a WHEP viewer's session: the client offers, and its tracks are
// fixed by that offer.
type Viewer struct {
	*Session
	// Senders says, per track given to NewViewer, the payload type and SSRC
	// to send it with.
	Senders []Sender
}

// NewViewer answers a WHEP offer for tracks. The viewer is served once the
// answer reaches the client; h hears about it.
func (s *Server) NewViewer(offerSDP string, tracks []Track, h Handler) (*Viewer, string, error) {
	if err := s.open(); err != nil {
		return nil, "", err
	}
	o, err := parseOffer(offerSDP)
	if err != nil {
		return nil, "", err
	}
	v := &Session{s: s, h: h, fpAlg: o.fpAlg, fp: o.fp}
	v.setClient(o.ufrag, o.pwd)
	c := newCreds(nil)
	c.remote = o.ufrag
	v.creds.Store(c)
	answer, senders, err := negotiate(o, tracks, answerParams{ufrag: c.ufrag, pwd: c.pwd, fingerprint: s.cert.Fingerprint,
		ips: s.ips, port: s.port, tcpPort: s.tcpPort, cname: lean.Token(16)}, randomSSRC)
	if err != nil {
		return nil, "", err
	}
	s.serve(v, lean.HandshakeQueue)
	return &Viewer{Session: v, Senders: senders}, answer, nil
}

// iceCreds are one set of the server's ICE credentials, and the set an ICE
// restart replaced (its checks are still answered: the client switches when
// it has applied the new offer).
type iceCreds struct {
	ufrag, pwd string
	// remote is the client's ufrag that goes with these credentials (a WHEP
	// viewer's: its offer's, or its ICE restart's).
	remote string
	prev   *iceCreds
}

func newCreds(prev *iceCreds) *iceCreds {
	if prev != nil {
		prev = &iceCreds{ufrag: prev.ufrag, pwd: prev.pwd, remote: prev.remote} // one generation back, no more
	}
	return &iceCreds{ufrag: lean.Token(16), pwd: lean.Token(32), prev: prev}
}

// check verifies a binding request against the current credentials, then
// against the ones before an ICE restart; it returns the set that matched.
func (c *iceCreds) check(m *stun.Message) (lean.Binding, *iceCreds, error) {
	b, err := lean.CheckBinding(m, c.ufrag, c.pwd)
	if err != nil && c.prev != nil {
		if b, err2 := lean.CheckBinding(m, c.prev.ufrag, c.prev.pwd); err2 == nil {
			return b, c.prev, nil
		}
	}
	return b, c, err
}

// onBinding answers an ICE check (ICE-lite, controlled: RFC 8445 2.5) that
// came from from over UDP, or over the ICE-TCP connection tc. A check with
// valid credentials makes its path the viewer's; the first one starts DTLS,
// USE-CANDIDATE moves the media to the nominated path. It reports whether
// the check was valid.
func (v *Session) onBinding(m *stun.Message, from netip.AddrPort, tc *tcpConn) bool {
	if m.Type == bindingIndication {
		return tc == nil // a keepalive (RFC 8445 11): nothing to answer, nothing wrong
	}
	if m.Type.Class == stun.ClassSuccessResponse || m.Type.Class == stun.ClassErrorResponse {
		return true // the client's answer to the nudge: nothing depends on it
	}
	b, gen, err := v.creds.Load().check(m)
	// A WHEP viewer's ufrag is known from its offer (or ICE restart), one for
	// each set of the server's credentials. A client the server offered to
	// checks as soon as it has applied the offer, often before its answer
	// (and ufrag) arrives here; the integrity check with the server's
	// password is what proves it read the offer.
	want := gen.remote
	if v.data != nil {
		want = v.remoteUfrag()
	}
	if err == nil && v.off == nil && b.RemoteUfrag != want {
		err = errors.New("binding request from another ICE session (remote ufrag)")
	}
	if err != nil {
		v.s.drop("stun", err.Error(), from, len(m.Raw))
		return false
	}
	if !v.s.addPath(v, from, tc) {
		v.s.drop("stun", "binding request from one address too many", from, len(m.Raw))
		return false
	}
	resp, err := lean.BindingSuccess(m, from, gen.pwd)
	if err != nil {
		return false
	}
	if tc != nil {
		_ = tc.send(resp)
	} else {
		_, _ = v.s.conn.WriteToUDPAddrPort(resp, from)
	}
	v.lastCheck.Store(time.Now().UnixNano())
	v.wmu.Lock()
	moved := false
	if !v.remote.IsValid() || (b.UseCandidate && (v.remote != from || v.tcp != tc)) {
		moved = v.remote.IsValid()
		v.remote, v.tcp = from, tc
	}
	v.wmu.Unlock()
	if moved {
		if a := v.association(); a != nil {
			a.PathChanged() // the new path may carry smaller packets than the old
		}
	}
	if b.UseCandidate {
		v.nominated.Store(true)
	} else {
		v.nudge(from, tc)
	}
	v.iceOnce.Do(func() {
		v.h.OnICE()
		go v.handshake()
	})
	return true
}

// clientICE is a client's ICE credentials.
type clientICE struct{ ufrag, pwd string }

// setClient records the client's credentials; new ones (an ICE restart)
// call for a new nomination.
func (v *Session) setClient(ufrag, pwd string) {
	old := v.client.Load()
	if old != nil && old.ufrag == ufrag && old.pwd == pwd {
		return
	}
	if old != nil {
		v.nominated.Store(false)
	}
	v.client.Store(&clientICE{ufrag: ufrag, pwd: pwd})
}

// nudges records which paths got a nudge with which client credentials: at
// most maxAddrs paths, since only a path addPath took is nudged.
type nudges struct {
	client *clientICE
	paths  []nudgePath
}

type nudgePath struct {
	addr netip.AddrPort
	tcp  *tcpConn
}

// nudge sends the client that checked from one binding request of the
// server's, once per path and client credentials, unless it has nominated
// already. An ICE-lite server otherwise sends none, and a full agent that
// nominates on its own check timer rather than on a check's success (Pion,
// every 200 ms) starts DTLS that much later; an incoming check on a pair that
// succeeded makes it nominate at once, but only if that pair is its best
// (UDP, not the ICE-TCP pair it may have checked first): hence every path
// (docs/sessions.md, "Setup").
func (v *Session) nudge(from netip.AddrPort, tc *tcpConn) {
	c := v.client.Load()
	if c == nil || v.nominated.Load() {
		return
	}
	path := nudgePath{from, tc}
	v.nmu.Lock()
	if v.nudged.client != c {
		v.nudged = nudges{client: c}
	}
	done := slices.Contains(v.nudged.paths, path)
	if !done {
		v.nudged.paths = append(v.nudged.paths, path)
	}
	v.nmu.Unlock()
	if done {
		return
	}
	msg, err := lean.Nudge(c.ufrag, v.creds.Load().ufrag, c.pwd, v.s.tieBreaker)
	if err != nil {
		return
	}
	if tc != nil {
		_ = tc.send(msg)
		return
	}
	_, _ = v.s.conn.WriteToUDPAddrPort(msg, from)
}

// onDatagram handles a non-STUN datagram from one of the viewer's addresses.
func (v *Session) onDatagram(b []byte) {
	switch c := b[0]; {
	case c >= 20 && c < 64:
		if v.detached.Load() {
			// Only alerts come after the handshake; without the connection
			// they cannot be read (and a forged one must not end the
			// viewer): consent freshness or DELETE ends it.
			v.s.drop("dtls", "DTLS record after the handshake", v.remoteAddr(), len(b))
			return
		}
		v.lastDTLS.Store(time.Now().UnixNano())
		if !v.pc.Push(b) {
			v.s.drop("dtls", "DTLS flood (queue full)", v.remoteAddr(), len(b))
		}
		if v.data != nil {
			v.kickSCTP()
		}
	case c >= 128 && c < 192:
		isRTCP := len(b) >= 2 && b[1]&0x7f >= 64 && b[1]&0x7f < 96 // RFC 5761 4
		switch {
		case isRTCP && (v.data == nil || v.in != nil):
			v.s.queueRTCP(v, b)
		case v.in != nil:
			v.in.onRTP(v, b)
		case v.data != nil:
			v.s.drop("rtp", "RTP or RTCP on a data session", v.remoteAddr(), len(b))
		default:
			v.s.drop("rtp", "RTP from a receive-only viewer", v.remoteAddr(), len(b))
		}
	default:
		v.s.drop("other", "not STUN, DTLS or SRTP", v.remoteAddr(), len(b))
	}
}

func (v *Session) remoteAddr() netip.AddrPort {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	return v.remote
}

func (v *Session) onSRTCP(b []byte) {
	rx := v.rx.Load()
	if rx == nil {
		v.s.drop("srtcp", "SRTCP before the DTLS handshake finished", v.remoteAddr(), len(b))
		return
	}
	out, err := rx.DecryptRTCP(v.s.rtcpDec[:0], b, &v.rtcpHdr)
	if err != nil {
		v.s.drop("srtcp", "SRTCP: "+err.Error(), v.remoteAddr(), len(b))
		return
	}
	v.s.rtcpDec = out[:cap(out)]
	if !v.detached.Load() && v.data == nil {
		go v.detachDTLS()
	}
	pkts, err := rtcp.Unmarshal(out)
	if err != nil {
		v.s.drop("srtcp", "RTCP: "+err.Error(), v.remoteAddr(), len(b))
		return
	}
	if v.in != nil {
		v.in.onRTCP(out, pkts)
	}
	v.h.OnRTCP(pkts)
}

func (v *Session) writeDTLS(b []byte) (int, error) {
	v.wmu.Lock()
	r, tc := v.remote, v.tcp
	v.wmu.Unlock()
	if !r.IsValid() {
		return 0, errors.New("session: no checked address yet")
	}
	if tc != nil {
		if err := tc.send(b); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return v.s.conn.WriteToUDPAddrPort(b, r)
}

// sendLocked writes one protected packet on the viewer's path: the UDP
// socket, or the ICE-TCP connection's queue. Under wmu.
func (v *Session) sendLocked(b []byte) error {
	if v.tcp != nil {
		return v.tcp.send(b)
	}
	_, err := v.s.conn.WriteToUDPAddrPort(b, v.remote)
	return err
}

// handshake runs the DTLS server handshake, derives SRTP, then waits for the
// connection to end (close_notify, or Close).
func (v *Session) handshake() {
	ctx, cancel := context.WithTimeout(context.Background(), ConsentTimeout)
	defer cancel()
	v.dmu.Lock()
	if v.closed.Load() {
		v.dmu.Unlock()
		return
	}
	v.cancel = cancel
	v.dmu.Unlock()
	// The server is the DTLS server unless a client it offered to answered
	// setup:passive (Pion does when the offer is ICE-lite). That needs the
	// answer: the client's first flight waits in v.pc meanwhile.
	client := false
	if v.off != nil {
		select {
		case <-v.off.answered:
		case <-ctx.Done():
			v.Close("no answer came within " + ConsentTimeout.String())
			return
		}
		client = v.off.dtlsClient.Load()
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		alg, fp, err := v.fingerprint()
		if err != nil {
			return err
		}
		return lean.VerifyFingerprint(alg, fp, raw)
	}
	var dc *dtls.Conn
	var err error
	v.dmu.Lock()
	if v.closed.Load() {
		v.dmu.Unlock()
		return
	}
	// A session with data channels reads and writes its application data
	// records itself after the handshake (rtc/dtlsrec); pion/dtls runs on
	// rec's transport and keeps the rest.
	raddr := net.UDPAddrFromAddrPort(v.remoteAddr())
	transport := net.PacketConn(v.pc)
	var rec *dtlsrec.Conn
	if v.data != nil {
		rec = dtlsrec.New(v.pc, raddr)
		transport = rec.Transport()
	}
	if client {
		dc, err = dtls.ClientWithOptions(transport, raddr,
			dtls.WithCertificates(v.s.cert.TLS),
			dtls.WithInsecureSkipVerify(true), // self-signed: the fingerprint is the check
			dtls.WithVerifyPeerCertificate(verify),
			dtls.WithSRTPProtectionProfiles(lean.SRTPProfiles...),
			dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret),
			dtls.WithFlightInterval(500*time.Millisecond),
			dtls.WithReplayProtectionWindow(replayWindow))
	} else {
		dc, err = dtls.ServerWithOptions(transport, raddr,
			dtls.WithCertificates(v.s.cert.TLS),
			dtls.WithClientAuth(dtls.RequireAnyClientCert), // self-signed: the fingerprint is the check
			dtls.WithVerifyPeerCertificate(verify),
			// No HelloVerifyRequest: records come only from paths whose ICE checks
			// proved the address (addPath), so the cookie's round trip would only delay the first frame.
			dtls.WithInsecureSkipVerifyHello(true),
			dtls.WithSRTPProtectionProfiles(lean.SRTPProfiles...),
			dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret),
			dtls.WithFlightInterval(500*time.Millisecond),
			dtls.WithReplayProtectionWindow(replayWindow))
	}
	if err == nil {
		v.dc = dc
	}
	v.dmu.Unlock()
	if err != nil {
		v.Close("dtls: " + err.Error())
		return
	}
	if err := dc.HandshakeContext(ctx); err != nil {
		v.s.log.Info("webrtc session: DTLS handshake failed", "viewer", v.creds.Load().ufrag, "err", err)
		v.Close("dtls: " + err.Error())
		return
	}
	if v.data != nil {
		// The DTLS connection stays: it carries SCTP (data.go).
		if v.in != nil {
			// A publisher session: SRTP from the client, SRTCP both ways.
			rx, tx, err := lean.SRTPContexts(dc, client)
			if err != nil {
				v.Close(err.Error())
				return
			}
			in, err := lean.SRTPReceiver(dc, client, ingestReplayWindow)
			if err != nil {
				v.Close(err.Error())
				return
			}
			v.wmu.Lock()
			v.tx = tx
			v.wmu.Unlock()
			v.rx.Store(rx)
			v.in.rx.Store(in)
		}
		v.ready.Store(true)
		v.h.OnDTLS()
		if v.data.mid != "" {
			// Once rec has closed pion/dtls, its handshake state (certificates,
			// flights) is not kept alive from here either.
			rec.OnDropped(func() {
				v.dmu.Lock()
				if v.dc == dc {
					v.dc = nil
				}
				v.dmu.Unlock()
			})
			if err := rec.Handoff(dc); err != nil {
				v.s.log.Info("webrtc session: DTLS records stay with pion/dtls", "viewer", v.creds.Load().ufrag, "err", err)
				v.runSCTP(dc, nil, client)
			} else {
				v.runSCTP(rec, rec, client)
			}
			return
		}
		var buf [256]byte
		for {
			if _, err := dc.Read(buf[:]); err != nil {
				v.Close("dtls closed")
				return
			}
		}
	}
	rx, tx, err := lean.SRTPContexts(dc, client)
	if err != nil {
		v.Close(err.Error())
		return
	}
	gtx, err := viewerGCM(dc, client)
	if err != nil {
		v.Close(err.Error())
		return
	}
	v.wmu.Lock()
	v.tx, v.gtx = tx, gtx
	v.wmu.Unlock()
	v.rx.Store(rx)
	v.ready.Store(true)
	v.h.OnDTLS()
	v.lastDTLS.Store(time.Now().UnixNano())
	time.AfterFunc(dtlsQuiet, v.detachWhenQuiet)
	// A receive-only viewer sends no application data; Read returns when the
	// viewer closes the session (close_notify) or Close shuts the adapter.
	var buf [256]byte
	for {
		if _, err := dc.Read(buf[:]); err != nil {
			if !v.detached.Load() {
				v.Close("dtls closed")
			}
			return
		}
	}
}

// detachDTLS drops the DTLS connection once SRTCP from the viewer decrypted:
// the viewer has the keys, so it will not ask for the last flight again, and
// a lean viewer then keeps no DTLS state or goroutines (three per viewer, a
// good part of its memory). The close_notify is not sent.
func (v *Session) detachDTLS() {
	v.dmu.Lock()
	if v.detached.Swap(true) {
		v.dmu.Unlock()
		return
	}
	dc := v.dc
	v.dc = nil
	v.dmu.Unlock()
	v.pc.Mute()
	v.pc.Shutdown()
	if dc != nil {
		_ = dc.Close()
	}
}

// dtlsQuiet is how long DTLS stays after the handshake when the viewer
// sends no SRTCP (the load generator's peers send none): a client that
// missed the server's last flight sends its own again within a second or
// two, so one that has been quiet this long has it.
const dtlsQuiet = 5 * time.Second

func (v *Session) detachWhenQuiet() {
	if v.detached.Load() || v.closed.Load() {
		return
	}
	if left := time.Duration(v.lastDTLS.Load() + int64(dtlsQuiet) - time.Now().UnixNano()); left > 0 {
		time.AfterFunc(left, v.detachWhenQuiet)
		return
	}
	v.detachDTLS()
}

// replayWindow is the DTLS replay window: only a data session's DTLS
// carries records after the handshake, and a reordering link delivers them
// far behind the newest (rtc/sctptune).
var replayWindow = int(sctptune.Petrel.DTLSReplayWindow)

var errClosed = errors.New("session: viewer closed")

// WriteRTP encrypts one packet into the viewer's buffer and sends it. Before
// the SRTP keys are in place it sends nothing and returns 0 (as Pion does):
// the DownTrack then waits for the next keyframe. It allocates nothing.
func (v *Session) WriteRTP(h *rtp.Header, payload []byte) (int, error) {
	if !v.ready.Load() {
		if v.closed.Load() {
			return 0, errClosed
		}
		return 0, nil
	}
	buf := bufs.Get().(*[]byte)
	v.wmu.Lock()
	out, n, err := v.protect(*buf, h, payload)
	if err == nil {
		err = v.sendLocked(out)
	}
	v.wmu.Unlock()
	bufs.Put(buf)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// protect builds the RTP packet (h, payload and h's padding) and its SRTP
// protection in dst, which has room for mtu+srtpOverhead bytes, and returns
// the SRTP packet and the RTP packet's size. Under wmu, keys in place.
func (v *Session) protect(dst []byte, h *rtp.Header, payload []byte) ([]byte, int, error) {
	pad := 0
	if h.Padding {
		pad = int(h.PaddingSize)
	}
	buf := dst
	if v.gtx == nil {
		plain := bufs.Get().(*[]byte) // pion/srtp encrypts from a second buffer
		defer bufs.Put(plain)
		buf = *plain
	}
	n, err := h.MarshalTo(buf)
	if err != nil {
		return nil, 0, err
	}
	hl := n
	if n+len(payload)+pad > mtu {
		return nil, 0, fmt.Errorf("session: packet of %d bytes over the MTU", n+len(payload)+pad)
	}
	n += copy(buf[n:], payload)
	if pad > 0 {
		clear(buf[n : n+pad-1])
		buf[n+pad-1] = byte(pad)
		n += pad
	}
	if v.gtx != nil {
		return v.gtx.seal(buf, n, hl), n, nil
	}
	out, err := v.tx.EncryptRTP(dst[:0], buf[:n], h)
	if err != nil {
		return nil, 0, err
	}
	if len(out) > 0 && &out[0] != &dst[0] {
		return nil, 0, fmt.Errorf("session: SRTP packet of %d bytes does not fit its buffer", len(out))
	}
	return out, n, nil
}

// WriteRTCP sends RTCP (sender reports) to the viewer.
func (v *Session) WriteRTCP(pkts []rtcp.Packet) error {
	if !v.ready.Load() {
		return nil
	}
	plain, cipher := bufs.Get().(*[]byte), bufs.Get().(*[]byte)
	defer bufs.Put(plain)
	defer bufs.Put(cipher)
	n := 0
	for _, p := range pkts {
		b, err := p.Marshal()
		if err != nil {
			return err
		}
		if n+len(b) > mtu {
			return errors.New("session: RTCP compound packet over the MTU")
		}
		n += copy((*plain)[n:], b)
	}
	v.wmu.Lock()
	defer v.wmu.Unlock()
	out, err := v.tx.EncryptRTCP((*cipher)[:0], (*plain)[:n], &v.rtcpHdrTx)
	if err != nil {
		return err
	}
	if len(out) > 0 && &out[0] != &(*cipher)[0] {
		return fmt.Errorf("session: SRTCP packet of %d bytes does not fit its buffer", len(out))
	}
	return v.sendLocked(out)
}

// Offered reports whether the server offers to this session (a room
// subscriber) rather than answering it (a WHEP viewer).
func (v *Session) Offered() bool { return v.off != nil }

// RemoteUfrag is the ICE ufrag of the client's (last) offer.
func (v *Session) RemoteUfrag() string { return v.remoteUfrag() }

// fingerprint is the client's certificate fingerprint (from its offer, or
// from its answer, which the handshake of an offered session waits for).
func (v *Session) fingerprint() (string, []byte, error) {
	if v.off == nil {
		return v.fpAlg, v.fp, nil
	}
	v.off.mu.Lock()
	defer v.off.mu.Unlock()
	if v.fp == nil {
		return "", nil, errors.New("dtls: no answer named the client's fingerprint")
	}
	return v.fpAlg, v.fp, nil
}

// Ready reports whether media flows (the SRTP keys are in place).
func (v *Session) Ready() bool { return v.ready.Load() }

// Close ends the viewer: the DTLS session gets a close_notify, the server
// forgets its addresses, and the handler hears why.
func (v *Session) Close(reason string) {
	v.closeOnce.Do(func() {
		v.closed.Store(true)
		v.ready.Store(false)
		tcps := v.s.remove(v)
		v.pc.Shutdown()
		v.dmu.Lock()
		dc, cancel := v.dc, v.cancel
		v.dmu.Unlock()
		if cancel != nil {
			cancel()
		}
		v.closeData()
		if v.in != nil {
			v.in.close()
		}
		if dc != nil {
			_ = dc.Close()
		}
		for _, t := range tcps {
			t.shutdown() // after the close_notify
		}
		v.h.OnClose(reason)
	})
}

// bindingIndication is the STUN message type of an ICE keepalive.
var bindingIndication = stun.NewType(stun.MethodBinding, stun.ClassIndication)
