// Package session is how the server speaks WebRTC to every client: WHEP
// viewers, WHIP publishers, both sides of room participants, over UDP,
// ICE-TCP or a TURN relay, without a Pion PeerConnection each. Its sessions
// are ICE-lite: the server answers the client's checks by hand, runs a
// pion/dtls handshake for the keys, then encrypts and decrypts SRTP itself
// and carries data channels on Petrel's own SCTP (rtc/datachan). A
// DownTrack's packet is encrypted into the session's buffer and written to
// the socket by the goroutine that forwards it; a publisher's is decrypted
// by the socket's reader and queued for its track (docs/sessions.md).
// Transport implements sfu's transport interfaces.
//
// Server.Handle sits in front of Pion's UDP mux (rtc.Engine.SetFilter, the
// node links keep it) and takes the datagrams that belong to a session, so
// the port's readers (one per socket of its SO_REUSEPORT group, each with
// its own handler: NewReader) read for both. Datagrams of no use are dropped,
// counted in petrel_webrtc_dropped_total and logged once per server.
package session

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pion/stun/v4"

	"github.com/petrel-sfu/petrel/lograte"
	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/rtc"
	"github.com/petrel-sfu/petrel/rtc/lean"
)

// ConsentTimeout drops a viewer whose ICE checks (consent freshness, RFC
// 7675) stopped: browsers send one every 5 s or so, and stop when the tab goes.
var ConsentTimeout = 30 * time.Second

// Server serves lean viewers on one UDP socket.
type Server struct {
	// MaxDataChannels bounds the channels a data session's association
	// holds at once, refused ones included until the client resets them
	// (0: datachan's default). Set before the first session.
	MaxDataChannels int

	conn *net.UDPConn    // shared with Pion's mux: writes only, Handle sees reads
	raw  syscall.RawConn // conn's, for Batch's sendmmsg(2)
	v6   bool            // conn is an IPv6 socket (IPv4 peers as mapped addresses)
	cert *lean.Cert
	ips  []net.IP
	port int
	log  *slog.Logger

	mu      sync.RWMutex
	byUfrag map[string]*Session
	byAddr  map[netip.AddrPort]*Session
	// active counts both maps' entries: with no lean viewer a datagram costs
	// Handle one atomic load.
	active  atomic.Int32
	viewers atomic.Int32

	// stunMsg is Handle's decoding buffer: Handle runs on one goroutine
	// (Serve's); each of the port's readers has its own (NewReader).
	stunMsg stun.Message

	// SRTCP is decrypted and acted on (NACKs retransmitted, keyframes
	// requested) by the rtcp goroutine, not the socket's reader: a NACK storm
	// from many viewers would otherwise hold up the publishers' packets on
	// the same socket, which lose more, which brings more NACKs.
	rtcpFree chan *rtcpBuf
	rtcpWork chan *rtcpBuf
	rtcpDec  []byte       // the rtcp goroutine's decryption buffer
	rtcpMade atomic.Int32 // buffers made so far (≤ rtcpQueue)

	// tieBreaker goes into the nudges' ICE-CONTROLLED (viewer.go).
	tieBreaker uint64

	dropped atomic.Uint64
	done    chan struct{}

	// ICE-TCP (tcp.go): the listener, and the connections per remote
	// address and not yet authenticated, under tcpMu.
	tcpLn      net.Listener
	tcpPort    int
	tcpMu      sync.Mutex
	tcpIPs     map[netip.Addr]*ipConns
	tcpPending int
	tcpLog     lograte.Limit
	tcpDropped atomic.Uint64
	once       sync.Once
}

type rtcpBuf struct {
	v *Session
	n int
	b [mtu]byte
}

// rtcpQueue is how many SRTCP datagrams may wait for the rtcp goroutine
// (viewers send a receiver report a second, NACKs in bursts).
const rtcpQueue = 512

// New returns a server that writes to conn (and reads through Handle) and
// offers a host candidate for every address in ips at conn's port.
func New(conn *net.UDPConn, ips []net.IP, log *slog.Logger) (*Server, error) {
	if len(ips) == 0 {
		return nil, errors.New("session: no address to offer as a host candidate")
	}
	cert, err := lean.NewCert()
	if err != nil {
		return nil, err
	}
	s := &Server{conn: conn, cert: cert, ips: ips, port: conn.LocalAddr().(*net.UDPAddr).Port, log: log.With("component", "webrtc"),
		byUfrag: map[string]*Session{}, byAddr: map[netip.AddrPort]*Session{}, done: make(chan struct{}),
		rtcpFree: make(chan *rtcpBuf, rtcpQueue), rtcpWork: make(chan *rtcpBuf, rtcpQueue),
		rtcpDec: make([]byte, mtu)}
	var tb [8]byte
	_, _ = rand.Read(tb[:])
	s.tieBreaker = binary.BigEndian.Uint64(tb[:])
	if s.raw, err = conn.SyscallConn(); err == nil {
		s.v6 = socketIs6(s.raw)
	}
	go s.janitor()
	go s.rtcp()
	return s, nil
}

// Serve reads the socket itself, for a server with a socket of its own
// (rather than in front of Pion's mux): what is not a lean viewer's is
// dropped. It returns when the socket is closed.
func (s *Server) Serve() error {
	buf := make([]byte, mtu)
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		if !s.Handle(buf[:n], from) {
			s.drop("unknown", "datagram from an address no lean viewer checked from", from, n)
		}
	}
}

// Close stops the server and every viewer on it.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.done)
		if s.tcpLn != nil {
			_ = s.tcpLn.Close()
		}
		s.mu.RLock()
		vs := make([]*Session, 0, len(s.byUfrag))
		for _, v := range s.byUfrag {
			vs = append(vs, v)
		}
		s.mu.RUnlock()
		for _, v := range vs {
			v.Close("server closed")
		}
	})
}

// Dropped is how many datagrams from lean viewers' addresses were dropped.
func (s *Server) Dropped() uint64 { return s.dropped.Load() }

// Viewers is the number of viewers being served.
func (s *Server) Viewers() int {
	return int(s.viewers.Load())
}

// Handle takes a datagram that belongs to a lean viewer and reports whether
// it did; anything else is left to the caller (Pion's ICE mux). It is called
// by one goroutine, for every datagram; a port with several readers gives
// each its own handler (NewReader).
func (s *Server) Handle(b []byte, from netip.AddrPort) bool {
	return s.handle(&s.stunMsg, b, from)
}

// Reader is Handle with decoding state of its own, for one of the UDP
// port's reader goroutines (rtc.ReaderFilter).
type Reader struct {
	s       *Server
	stunMsg stun.Message
}

// NewReader returns a handler for one more goroutine that reads the port.
func (s *Server) NewReader() rtc.PacketFilter { return &Reader{s: s} }

// Handle is Server.Handle on r's goroutine.
func (r *Reader) Handle(b []byte, from netip.AddrPort) bool {
	return r.s.handle(&r.stunMsg, b, from)
}

func (s *Server) handle(m *stun.Message, b []byte, from netip.AddrPort) bool {
	if len(b) == 0 || s.active.Load() == 0 {
		return false
	}
	if c := b[0]; c < 4 { // STUN (RFC 7983)
		return s.onSTUN(m, b, from)
	}
	s.mu.RLock()
	v := s.byAddr[from]
	s.mu.RUnlock()
	if v == nil {
		return false
	}
	v.onDatagram(b)
	return true
}

func (s *Server) onSTUN(m *stun.Message, b []byte, from netip.AddrPort) bool {
	m.Raw = append(m.Raw[:0], b...)
	if m.Decode() != nil {
		s.mu.RLock()
		v := s.byAddr[from]
		s.mu.RUnlock()
		if v == nil {
			return false // not ours to judge
		}
		s.drop("stun", "malformed STUN", from, len(b))
		return true
	}
	u := lean.LocalUfrag(m)
	s.mu.RLock()
	v := s.byUfrag[string(u)]
	if v == nil {
		v = s.byAddr[from]
	}
	s.mu.RUnlock()
	if v == nil {
		return false
	}
	v.onBinding(m, from, nil)
	return true
}

// queueRTCP hands an SRTCP datagram to the rtcp goroutine, or drops it when
// the queue is full (RTCP is periodic or repeated: losing some is harmless).
func (s *Server) queueRTCP(v *Session, b []byte) {
	select {
	case rb := <-s.rtcpFree:
		rb.v, rb.n = v, copy(rb.b[:], b)
		s.rtcpWork <- rb
	default:
		// Buffers are made as the queue first grows: most servers never
		// need the whole 750 KiB.
		if s.rtcpMade.Add(1) > rtcpQueue {
			s.rtcpMade.Add(-1)
			s.drop("srtcp", "RTCP queue full", v.remoteAddr(), len(b))
			return
		}
		rb := &rtcpBuf{v: v}
		rb.n = copy(rb.b[:], b)
		s.rtcpWork <- rb
	}
}

func (s *Server) rtcp() {
	for {
		select {
		case <-s.done:
			return
		case rb := <-s.rtcpWork:
			rb.v.onSRTCP(rb.b[:rb.n])
			rb.v = nil
			s.rtcpFree <- rb
		}
	}
}

// drop counts a datagram a lean viewer's address sent that is of no use, and
// logs the first one of the server's life.
func (s *Server) drop(why, detail string, from netip.AddrPort, n int) {
	metrics.SessionDropped.WithLabelValues(why).Inc()
	if s.dropped.Add(1) == 1 {
		s.log.Warn("webrtc session: dropped a datagram (later ones are counted in petrel_webrtc_dropped_total, not logged)",
			"from", from.String(), "len", n, "why", detail)
	}
}

// open reports whether the server still takes sessions.
func (s *Server) open() error {
	select {
	case <-s.done:
		return errors.New("session: server closed")
	default:
		return nil
	}
}

// serve starts v's consent clock, gives it the adapter its DTLS connection
// reads from (queue records long) and lets its ICE checks reach it.
func (s *Server) serve(v *Session, queue int) {
	v.lastCheck.Store(time.Now().UnixNano())
	v.pc = lean.NewPacketConnSize(v.writeDTLS, s.conn.LocalAddr(), &net.UDPAddr{}, queue)
	s.add(v)
}

func (s *Server) add(v *Session) {
	s.addUfrag(v, v.creds.Load().ufrag)
	s.viewers.Add(1)
	metrics.Sessions.Inc()
}

// addUfrag lets binding requests for ufrag reach v. Of the ufrags an ICE
// restart replaced, only the last one stays.
func (s *Server) addUfrag(v *Session, ufrag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v.closed.Load() {
		return
	}
	for len(v.ufrags) >= 2 {
		if s.byUfrag[v.ufrags[0]] == v {
			delete(s.byUfrag, v.ufrags[0])
			s.active.Add(-1)
		}
		v.ufrags = v.ufrags[1:]
	}
	s.byUfrag[ufrag] = v
	v.ufrags = append(v.ufrags, ufrag)
	s.active.Add(1)
}

// addPath lets datagrams from a (checked) UDP address, or the frames of an
// ICE-TCP connection (tc), reach v.
func (s *Server) addPath(v *Session, a netip.AddrPort, tc *tcpConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tc != nil {
		if tc.v == v {
			return true
		}
		if tc.v != nil || len(v.addrs)+len(v.tcps) >= maxAddrs || v.closed.Load() {
			return false
		}
		tc.attach(v)
		v.tcps = append(v.tcps, tc)
		return true
	}
	if s.byAddr[a] != nil || len(v.addrs)+len(v.tcps) >= maxAddrs || v.closed.Load() {
		return s.byAddr[a] == v
	}
	s.byAddr[a] = v
	v.addrs = append(v.addrs, a)
	s.active.Add(1)
	return true
}

// maxAddrs bounds the paths one viewer may check from (a browser has a
// few host and server-reflexive candidates, and ICE-TCP connections).
const maxAddrs = 8

// remove forgets v's ufrags and addresses and returns its ICE-TCP
// connections, for the caller to close.
func (s *Server) remove(v *Session) []*tcpConn {
	s.mu.Lock()
	if len(v.ufrags) > 0 {
		s.viewers.Add(-1)
		metrics.Sessions.Dec()
	}
	for _, u := range v.ufrags {
		if s.byUfrag[u] == v {
			delete(s.byUfrag, u)
			s.active.Add(-1)
		}
	}
	v.ufrags = nil
	for _, a := range v.addrs {
		if s.byAddr[a] == v {
			delete(s.byAddr, a)
			s.active.Add(-1)
		}
	}
	tcps := v.tcps
	v.tcps = nil
	s.mu.Unlock()
	return tcps
}

// janitor drops viewers whose consent expired or that never connected.
func (s *Server) janitor() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var vs []*Session
	for {
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
		n := time.Now().UnixNano()
		vs = vs[:0]
		s.mu.RLock()
		for _, v := range s.byUfrag {
			if v.off != nil && !v.off.wasAnswered() {
				continue // nothing was offered yet, or the answer is to come
			}
			if n-v.lastCheck.Load() > int64(ConsentTimeout) {
				vs = append(vs, v)
			}
		}
		s.mu.RUnlock()
		for _, v := range vs {
			if v.ready.Load() {
				v.Close("consent expired (no ICE check for " + ConsentTimeout.String() + ")")
			} else {
				v.Close("ICE or DTLS did not complete in " + ConsentTimeout.String())
			}
		}
	}
}

func randomSSRC() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:]) | 1 // never 0
}
