package session

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/stun/v4"
)

// startTCPServer is startServer with an ICE-TCP port.
func startTCPServer(t testing.TB) *Server {
	s := startServer(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ServeTCP(ln)
	return s
}

// candidatePriority is the priority of the answer's first candidate of proto.
func candidatePriority(t *testing.T, answer, proto string) int {
	t.Helper()
	for _, l := range strings.Split(answer, "\r\n") {
		if f := strings.Fields(l); strings.HasPrefix(l, "a=candidate:") && len(f) > 7 && f[2] == proto {
			p, err := strconv.Atoi(f[3])
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatalf("no %s candidate in\n%s", proto, answer)
	return 0
}

// TestICETCP: a hand-made viewer that reaches the server only over TCP
// checks, handshakes and gets media written and batched onto its
// connection, sends feedback, and ends the session by closing it.
func TestICETCP(t *testing.T) {
	old := TCPPathGrace
	TCPPathGrace = 300 * time.Millisecond
	t.Cleanup(func() { TCPPathGrace = old })
	s := startTCPServer(t)
	c := newClient(t)
	c.useTCP = true
	ev := newEvents()
	v, answer, err := s.NewViewer(c.offer(), testTracks, ev)
	if err != nil {
		t.Fatal(err)
	}
	want := "1 tcp "
	if !strings.Contains(answer, "127.0.0.1 "+strconv.Itoa(s.TCPPort())+" typ host tcptype passive\r\n") || !strings.Contains(answer, want) {
		t.Fatalf("answer lacks the passive TCP candidate:\n%s", answer)
	}
	if u, tc := candidatePriority(t, answer, "udp"), candidatePriority(t, answer, "tcp"); tc >= u {
		t.Errorf("TCP candidate priority %d not below UDP's %d", tc, u)
	}
	if err := c.connect(answer); err != nil {
		t.Fatal(err)
	}
	wait(t, ev.dtls, "DTLS over TCP")
	h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 1, SSRC: v.Senders[0].SSRC}
	payload := bytes.Repeat([]byte{0xcd}, 1100)
	check := func(what string, seq uint16) {
		t.Helper()
		got := wait(t, c.media, what)
		var gh rtp.Header
		if _, err := gh.Unmarshal(got); err != nil || gh.SequenceNumber != seq || !bytes.Equal(got[12:], payload) {
			t.Fatalf("%s: %v %+v %d bytes", what, err, gh, len(got))
		}
	}
	h.SequenceNumber = 10
	if n, err := v.WriteRTP(&h, payload); err != nil || n != 12+len(payload) {
		t.Fatalf("write: %d %v", n, err)
	}
	check("media over TCP", 10)

	// The fan-out's batch does not take a TCP viewer's packet into
	// sendmmsg(2): it goes onto the connection.
	b := NewBatch()
	h.SequenceNumber = 11
	if n, err := v.QueueRTP(b, &h, payload); err != nil || n != 12+len(payload) || b.n != 0 {
		t.Fatalf("queue: %d %v, %d in the batch", n, err, b.n)
	}
	b.Flush()
	check("batched media over TCP", 11)

	// Feedback over TCP reaches the handler.
	c.sendRTCP(&rtcp.PictureLossIndication{SenderSSRC: 1, MediaSSRC: h.SSRC})
	if fb := wait(t, ev.rtcp, "RTCP over TCP"); len(fb) != 1 {
		t.Fatalf("rtcp %v", fb)
	}

	// Neither path allocates per packet.
	if a := leastAllocs(100, func() { h.SequenceNumber++; _, _ = v.WriteRTP(&h, payload) }); a != 0 {
		t.Errorf("WriteRTP over TCP allocates %.1f times per packet", a)
	}
	if a := leastAllocs(100, func() { h.SequenceNumber++; _, _ = v.QueueRTP(b, &h, payload); b.Flush() }); a != 0 {
		t.Errorf("QueueRTP over TCP allocates %.1f times per packet", a)
	}

	// A client that stops reading (its media channel is full, so its
	// reader blocks) does not hold the writer up: packets beyond the
	// connection's queue and socket buffers are dropped and counted.
	slowest := time.Duration(0)
	for i := 0; i < 20000 && s.TCPDropped() == 0; i++ {
		h.SequenceNumber++
		at := time.Now()
		if _, err := v.WriteRTP(&h, payload); err != nil {
			t.Fatal(err)
		}
		slowest = max(slowest, time.Since(at))
	}
	if s.TCPDropped() == 0 || slowest > 100*time.Millisecond {
		t.Fatalf("a client that does not read: %d dropped, slowest write %s", s.TCPDropped(), slowest)
	}

	// Closing the connection, the viewer's only path, ends the session.
	c.tcp.Close()
	if r := wait(t, ev.closed, "close"); !strings.Contains(r, "ICE-TCP") {
		t.Errorf("closed because %q", r)
	}
	if s.Viewers() != 0 {
		t.Errorf("%d viewers left", s.Viewers())
	}
}

// TestICETCPHostile: connections that do not start with a valid binding
// request for a session, frames no datagram could be, and idle connections
// are closed; too many at once are refused; a client still gets through.
func TestICETCPHostile(t *testing.T) {
	old := TCPFirstPacket
	TCPFirstPacket = 500 * time.Millisecond
	t.Cleanup(func() { TCPFirstPacket = old })
	s := startTCPServer(t)
	addr := "127.0.0.1:" + strconv.Itoa(s.TCPPort())
	closedWithin := func(what string, c net.Conn, d time.Duration) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(d))
		var b [64]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("%s: the connection is still open after %s", what, d)
				}
				return
			}
		}
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	frame := func(b []byte) []byte { return append([]byte{byte(len(b) >> 8), byte(len(b))}, b...) }
	unknown := stun.MustBuild(stun.TransactionID, stun.BindingRequest, stun.NewUsername("nosuchsession:x"),
		stun.NewShortTermIntegrity("whatever"), stun.Fingerprint)
	for name, send := range map[string][]byte{
		"HTTP":                  []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"length 65535, nothing": {0xff, 0xff},
		"length 0":              {0, 0},
		"DTLS first":            frame(append([]byte{22, 0xfe, 0xfd}, make([]byte, 40)...)),
		"unknown session":       frame(unknown.Raw),
	} {
		c := dial()
		if _, err := c.Write(send); err != nil {
			t.Fatal(err)
		}
		closedWithin(name, c, 2*time.Second)
	}
	// Silent connections are closed after TCPFirstPacket; of many at once
	// from one address, most are refused straight away.
	var idle []net.Conn
	for i := 0; i < 3*tcpMaxPendingPerIP; i++ {
		idle = append(idle, dial())
	}
	for i, c := range idle {
		closedWithin("idle connection "+strconv.Itoa(i), c, 3*time.Second)
	}
	var pending, ips int
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		s.tcpMu.Lock()
		pending, ips = s.tcpPending, len(s.tcpIPs)
		s.tcpMu.Unlock()
		if pending == 0 && ips == 0 {
			break
		}
	}
	if pending != 0 || ips != 0 {
		t.Fatalf("%d pending connections, %d addresses counted after all closed", pending, ips)
	}

	// The server still serves a client over TCP.
	c := newClient(t)
	c.useTCP = true
	ev := newEvents()
	_, answer, err := s.NewViewer(c.offer(), testTracks, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.connect(answer); err != nil {
		t.Fatal(err)
	}
	wait(t, ev.dtls, "DTLS after the attack")
}

// TestICETCPNomination: a viewer connected over UDP that checks over TCP
// too gets its media on whichever path its last USE-CANDIDATE named, and
// when the TCP connection closes the media goes back to UDP instead of the
// session ending.
func TestICETCPNomination(t *testing.T) {
	s := startTCPServer(t)
	c := newClient(t)
	ev := newEvents()
	v, answer, err := s.NewViewer(c.offer(), testTracks, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.connect(answer); err != nil {
		t.Fatal(err)
	}
	wait(t, ev.dtls, "DTLS over UDP")
	h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 1, SSRC: v.Senders[0].SSRC}
	payload := bytes.Repeat([]byte{0xef}, 500)
	if _, err := v.WriteRTP(&h, payload); err != nil {
		t.Fatal(err)
	}
	wait(t, c.media, "media over UDP")

	tc, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(s.TCPPort()))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	readFrame := func() []byte {
		t.Helper()
		_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		var hdr [2]byte
		if _, err := io.ReadFull(tc, hdr[:]); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, int(hdr[0])<<8|int(hdr[1]))
		if _, err := io.ReadFull(tc, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	m, err := stun.Build(stun.BindingRequest, stun.TransactionID, stun.NewUsername(c.sufrag+":"+c.ufrag),
		stun.RawAttribute{Type: stun.AttrICEControlling, Value: make([]byte, 8)},
		stun.RawAttribute{Type: stun.AttrPriority, Value: []byte{0x6e, 0, 0, 1}},
		stun.RawAttribute{Type: stun.AttrUseCandidate},
		stun.NewShortTermIntegrity(c.spwd), stun.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Write(append([]byte{byte(len(m.Raw) >> 8), byte(len(m.Raw))}, m.Raw...)); err != nil {
		t.Fatal(err)
	}
	resp := &stun.Message{Raw: readFrame()}
	if err := resp.Decode(); err != nil || resp.Type != stun.BindingSuccess {
		t.Fatalf("answer over TCP: %v %v", resp.Type, err)
	}
	h.SequenceNumber++
	if _, err := v.WriteRTP(&h, payload); err != nil {
		t.Fatal(err)
	}
	if b := readFrame(); len(b) < 12+len(payload) || b[0]&0xc0 != 0x80 {
		t.Fatalf("media over the nominated TCP path: %d bytes", len(b))
	}

	tc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.SequenceNumber++
		if _, err := v.WriteRTP(&h, payload); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.media:
		case r := <-ev.closed:
			t.Fatalf("the session ended with its TCP path though UDP remained: %s", r)
		case <-time.After(50 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("media did not go back to UDP")
			}
			continue
		}
		break
	}
}

// TestTCPSendQueue: frames queued while the writer drains them, through the
// ring's wrap-around and its growth, come out whole and in order.
func TestTCPSendQueue(t *testing.T) {
	s := &Server{}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	tc := &tcpConn{s: s, c: a, wake: make(chan struct{}, 1), done: make(chan struct{}), ring: make([]byte, tcpQueueStart)}
	go tc.write()
	defer close(tc.done)
	const frames = 3000
	got := make(chan error, 1)
	go func() {
		var hdr [2]byte
		for i := 0; i < frames; i++ {
			if _, err := io.ReadFull(b, hdr[:]); err != nil {
				got <- err
				return
			}
			p := make([]byte, int(hdr[0])<<8|int(hdr[1]))
			if _, err := io.ReadFull(b, p); err != nil {
				got <- err
				return
			}
			if len(p) != 1+i%700 || p[0] != byte(i) || p[len(p)-1] != byte(i) {
				got <- fmt.Errorf("frame %d: %d bytes, first %d last %d", i, len(p), p[0], p[len(p)-1])
				return
			}
			if i%50 == 0 {
				time.Sleep(time.Millisecond) // a reader slower than the sender: the queue fills and wraps
			}
		}
		got <- nil
	}()
	for i := 0; i < frames; {
		p := bytes.Repeat([]byte{byte(i)}, 1+i%700)
		before := s.TCPDropped()
		if err := tc.send(p); err != nil {
			t.Fatal(err)
		}
		if s.TCPDropped() != before {
			time.Sleep(time.Millisecond) // full: this test wants every frame, so it waits and resends
			continue
		}
		i++
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if len(tc.ring) != tcpQueue {
		t.Errorf("the queue did not grow: %d bytes", len(tc.ring))
	}
}
