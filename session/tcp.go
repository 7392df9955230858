package session

import (
	"bufio"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pion/stun/v4"

	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/rtc/lean"
)

// ICE-TCP (RFC 6544): the server offers a passive TCP host candidate next to
// its UDP ones, a client that cannot use UDP connects to it, and every
// datagram travels as an RFC 4571 frame (a 2-byte length, then the bytes).
// The first frame must be a binding request for a known session with valid
// credentials; from then on the connection is one more checked address of
// that session, demultiplexed as a UDP datagram is (RFC 7983), and the
// session sends over it while a check with USE-CANDIDATE made it the path.

// Limits on ICE-TCP connections. A connection costs two goroutines and its
// buffers; before it proved it belongs to a session it is anyone's.
const (
	// tcpMaxFrame is the largest frame a client may send: a UDP datagram
	// on the same path would be at most an MTU and SRTP's overhead.
	tcpMaxFrame = mtu + 100
	// tcpMaxPending bounds the connections that have not yet sent a valid
	// binding request, tcpMaxPendingPerIP those of one remote address.
	tcpMaxPending      = 128
	tcpMaxPendingPerIP = 16
	// tcpMaxPerIP bounds all connections from one address (many clients
	// behind one NAT that blocks UDP share it).
	tcpMaxPerIP = 256
	// tcpQueue is what may wait to be written to one connection: about
	// 400 ms of 2.5 Mbit/s video on top of the kernel's socket buffer. A
	// connection starts with tcpQueueStart (binding answers, a DTLS flight:
	// a client that checks TCP but uses UDP never needs more) and grows
	// once, when more is queued.
	tcpQueue      = 128 << 10
	tcpQueueStart = 4 << 10
	// tcpWriteTimeout closes a connection whose reader took nothing for
	// this long while data waited.
	tcpWriteTimeout = 10 * time.Second
)

// TCPFirstPacket is how long a new ICE-TCP connection has to send its first
// frame (a client sends its first check as soon as it is connected).
var TCPFirstPacket = 5 * time.Second

// TCPPathGrace is how long a session whose only path was an ICE-TCP
// connection that closed waits for a check on a new one before it ends: a
// client's ICE restart drops its connections and dials new ones.
var TCPPathGrace = 5 * time.Second

// ipConns counts the connections from one remote address.
type ipConns struct{ all, pending int }

// ServeTCP makes ln the server's ICE-TCP port: every SDP the server writes
// from now on offers a passive TCP candidate on it. Call it before the first
// session; Close closes ln.
func (s *Server) ServeTCP(ln net.Listener) {
	s.tcpLn = ln
	s.tcpPort = ln.Addr().(*net.TCPAddr).Port
	s.tcpIPs = map[netip.Addr]*ipConns{}
	go s.acceptTCP()
}

// TCPPort is the ICE-TCP port, 0 if the server has none.
func (s *Server) TCPPort() int { return s.tcpPort }

// TCPDropped is how many packets were dropped because an ICE-TCP
// connection's send queue was full (a client reading too slowly).
func (s *Server) TCPDropped() uint64 { return s.tcpDropped.Load() }

func (s *Server) acceptTCP() {
	backoff := time.Duration(0)
	for {
		c, err := s.tcpLn.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				s.log.Warn("webrtc session: the ICE-TCP listener closed", "err", err)
				return
			}
			// Out of file descriptors, a connection reset before it was
			// accepted: wait a little and go on, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.tcpEvent("refused", "accept: "+err.Error(), netip.AddrPort{})
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		ta, ok := c.RemoteAddr().(*net.TCPAddr)
		if !ok {
			_ = c.Close()
			continue
		}
		from := ta.AddrPort()
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		if why := s.admitTCP(from.Addr()); why != "" {
			_ = c.Close()
			s.tcpEvent("refused", why, from)
			continue
		}
		t := &tcpConn{s: s, c: c, from: from, pending: true, wake: make(chan struct{}, 1), done: make(chan struct{})}
		go t.read()
	}
}

// admitTCP counts a new connection from ip, or says why it is refused.
func (s *Server) admitTCP(ip netip.Addr) string {
	s.tcpMu.Lock()
	defer s.tcpMu.Unlock()
	n := s.tcpIPs[ip]
	switch {
	case s.tcpPending >= tcpMaxPending:
		return "too many connections without a valid binding request"
	case n != nil && n.pending >= tcpMaxPendingPerIP:
		return "too many connections without a valid binding request from one address"
	case n != nil && n.all >= tcpMaxPerIP:
		return "too many connections from one address"
	}
	if n == nil {
		n = &ipConns{}
		s.tcpIPs[ip] = n
	}
	n.all++
	n.pending++
	s.tcpPending++
	return ""
}

// tcpEvent counts a refused or closed connection and logs it, one line per
// interval: a client can cause these at will.
func (s *Server) tcpEvent(event, why string, from netip.AddrPort) {
	metrics.SessionTCP.WithLabelValues(event).Inc()
	if held, ok := s.tcpLog.Allow(10 * time.Second); ok {
		s.log.Warn("webrtc session: ICE-TCP connection "+event, "from", from.String(), "why", why, "since_last_line", held)
	}
}

// tcpConn is one ICE-TCP connection. Its reader goroutine reads the frames;
// once it belongs to a session, a writer goroutine writes what the session
// queued (send), so that a slow client never holds up the goroutine that
// forwards a packet to many viewers.
type tcpConn struct {
	s    *Server
	c    net.Conn
	from netip.AddrPort
	// v is the session; set by the reader when the first check passed.
	v       *Session
	pending bool // not yet counted out of tcpPending (under s.tcpMu)
	msg     stun.Message

	// The send queue: a ring of frames (length prefix included), written by
	// send under mu and drained by the writer.
	mu      sync.Mutex
	ring    []byte
	head, n int
	closing bool // no more sends; the writer closes once the ring is empty
	wake    chan struct{}
	done    chan struct{} // closed by close
	once    sync.Once
}

var errTCPClosed = errors.New("session: ICE-TCP connection closed")

var tcpSendDropped = metrics.SessionTCP.WithLabelValues("send_dropped")

// read reads frames until the connection ends.
func (t *tcpConn) read() {
	reason := "closed by the client"
	defer func() { t.close(reason) }()
	_ = t.c.SetReadDeadline(time.Now().Add(TCPFirstPacket))
	br := bufio.NewReaderSize(t.c, 4096)
	for {
		h, err := br.Peek(2)
		if err != nil {
			if t.v == nil {
				reason = "no binding request in time: " + err.Error()
			}
			return
		}
		n := int(h[0])<<8 | int(h[1])
		if n == 0 || n > tcpMaxFrame {
			reason = "a frame of a size no datagram has"
			return
		}
		b, err := br.Peek(2 + n)
		if err != nil {
			reason = "connection ended inside a frame"
			return
		}
		b = b[2:]
		if t.v == nil {
			if why := t.first(b); why != "" {
				reason = why
				return
			}
			_ = t.c.SetReadDeadline(time.Time{})
		} else if why := t.frame(b); why != "" {
			reason = why
			return
		}
		_, _ = br.Discard(2 + n)
	}
}

// first takes the connection's first frame, which must be a binding
// request that one of the sessions accepts; it says why not.
func (t *tcpConn) first(b []byte) string {
	if b[0] >= 4 {
		return "the first frame is not STUN"
	}
	m := &t.msg
	m.Raw = append(m.Raw[:0], b...)
	if m.Decode() != nil || m.Type != stun.BindingRequest {
		return "the first frame is not a binding request"
	}
	s := t.s
	s.mu.RLock()
	v := s.byUfrag[string(lean.LocalUfrag(m))]
	s.mu.RUnlock()
	if v == nil {
		return "a binding request for no session"
	}
	if !v.onBinding(m, t.from, t) {
		return "a binding request the session refused"
	}
	return ""
}

// frame handles one frame of a connection that belongs to a session, and
// says why the connection must close, if it must.
func (t *tcpConn) frame(b []byte) string {
	v := t.v
	switch c := b[0]; {
	case c < 4:
		m := &t.msg
		m.Raw = append(m.Raw[:0], b...)
		if m.Decode() != nil {
			v.s.drop("stun", "malformed STUN", t.from, len(b))
			return ""
		}
		v.onBinding(m, t.from, t)
	case c >= 20 && c < 64, c >= 128 && c < 192:
		v.onDatagram(b)
	default:
		// Over UDP a stray datagram is dropped; over TCP it means the
		// framing is lost, and every frame after it would be garbage.
		return "a frame that is not STUN, DTLS or SRTP"
	}
	return ""
}

// attach makes t a path of v: its send queue and writer start. Under s.mu.
func (t *tcpConn) attach(v *Session) {
	t.v = v
	t.mu.Lock()
	t.ring = make([]byte, tcpQueueStart)
	t.mu.Unlock()
	s := t.s
	s.tcpMu.Lock()
	if t.pending {
		t.pending = false
		s.tcpPending--
		s.tcpIPs[t.from.Addr()].pending--
	}
	s.tcpMu.Unlock()
	go t.write()
}

// send queues one datagram as a frame. It never blocks on the network: a
// datagram that does not fit is dropped and counted, as a full UDP socket
// buffer on the way would lose it. It allocates nothing.
func (t *tcpConn) send(b []byte) error {
	t.mu.Lock()
	if t.closing || t.ring == nil {
		t.mu.Unlock()
		return errTCPClosed
	}
	if 2+len(b) > len(t.ring)-t.n && len(t.ring) < tcpQueue {
		t.grow()
	}
	if 2+len(b) > len(t.ring)-t.n {
		t.mu.Unlock()
		t.s.tcpDropped.Add(1)
		tcpSendDropped.Inc()
		return nil
	}
	tail := (t.head + t.n) % len(t.ring)
	hdr := [2]byte{byte(len(b) >> 8), byte(len(b))}
	tail = t.put(tail, hdr[:])
	t.put(tail, b)
	t.n += 2 + len(b)
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
	return nil
}

// grow moves the queue into a ring of tcpQueue bytes, the queued bytes first.
// The writer may be writing a run from the old ring meanwhile: that run is
// the start of what was queued, so its advance applies to the new ring as
// well. Under mu.
func (t *tcpConn) grow() {
	r := make([]byte, tcpQueue)
	k := copy(r, t.ring[t.head:min(t.head+t.n, len(t.ring))])
	copy(r[k:], t.ring[:t.n-k])
	t.ring, t.head = r, 0
}

// put copies b into the ring at i, wrapping, and returns where it ended.
func (t *tcpConn) put(i int, b []byte) int {
	k := copy(t.ring[i:], b)
	if k < len(b) {
		k = copy(t.ring, b[k:])
		return k
	}
	return (i + k) % len(t.ring)
}

// write drains the send queue onto the connection, one contiguous run of
// frames per write(2). Only it reads the ring between head and head+n; send
// writes only past it, so the copy needs no lock.
func (t *tcpConn) write() {
	for {
		select {
		case <-t.wake:
		case <-t.done:
			return
		}
		for {
			t.mu.Lock()
			if t.n == 0 {
				done := t.closing
				t.mu.Unlock()
				if done {
					_ = t.c.Close()
					return
				}
				break
			}
			run := t.ring[t.head:min(t.head+t.n, len(t.ring))]
			closing := t.closing
			t.mu.Unlock()
			if !closing { // shutdown set a shorter one
				_ = t.c.SetWriteDeadline(time.Now().Add(tcpWriteTimeout))
			}
			if _, err := t.c.Write(run); err != nil {
				_ = t.c.Close() // the reader sees it and closes the path
				return
			}
			t.mu.Lock()
			t.head = (t.head + len(run)) % len(t.ring)
			t.n -= len(run)
			t.mu.Unlock()
		}
	}
}

// close ends the connection (its reader's last act): the session loses the
// path.
func (t *tcpConn) close(reason string) {
	t.once.Do(func() {
		_ = t.c.Close()
		t.mu.Lock()
		t.closing = true
		t.mu.Unlock()
		close(t.done)
		s := t.s
		s.tcpMu.Lock()
		if n := s.tcpIPs[t.from.Addr()]; n != nil {
			n.all--
			if t.pending {
				n.pending--
				s.tcpPending--
			}
			if n.all == 0 {
				delete(s.tcpIPs, t.from.Addr())
			}
		}
		s.tcpMu.Unlock()
		if t.v == nil {
			s.tcpEvent("closed", reason, t.from)
			return
		}
		t.v.lostTCP(t, reason)
	})
}

// shutdown closes the connection once what is queued (a DTLS close_notify)
// is written, within a second.
func (t *tcpConn) shutdown() {
	t.mu.Lock()
	t.closing = true
	t.mu.Unlock()
	_ = t.c.SetDeadline(time.Now().Add(time.Second))
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// lostTCP forgets a closed connection of v's. If it was the path media went
// on, the last path checked takes its place; with none left the session
// ends, as when consent expires, unless a check on a new path comes within
// TCPPathGrace.
func (v *Session) lostTCP(t *tcpConn, reason string) {
	s := v.s
	s.mu.Lock()
	for i, x := range v.tcps {
		if x == t {
			v.tcps = append(v.tcps[:i], v.tcps[i+1:]...)
			break
		}
	}
	var nextTCP *tcpConn
	var nextAddr netip.AddrPort
	if n := len(v.tcps); n > 0 {
		nextTCP, nextAddr = v.tcps[n-1], v.tcps[n-1].from
	} else if n := len(v.addrs); n > 0 {
		nextAddr = v.addrs[n-1]
	}
	s.mu.Unlock()
	if v.closed.Load() {
		return
	}
	v.wmu.Lock()
	was := v.tcp == t
	if was {
		v.tcp, v.remote = nextTCP, nextAddr
	}
	v.wmu.Unlock()
	if !was {
		return
	}
	if a := v.association(); a != nil {
		a.PathChanged()
	}
	if !nextAddr.IsValid() {
		time.AfterFunc(TCPPathGrace, func() {
			if !v.remoteAddr().IsValid() {
				v.Close("consent lost: its ICE-TCP connection closed (" + reason + ") and no check came on another path")
			}
		})
	}
}
