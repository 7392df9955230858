package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/dtls/v3"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"
	"github.com/pion/stun/v4"

	"github.com/petrel-sfu/petrel/rtc/lean"
)

// events is a Handler that records what the viewer reports.
type events struct {
	ice, dtls chan struct{}
	rtcp      chan []rtcp.Packet
	closed    chan string
	once1     sync.Once
	once2     sync.Once
}

func newEvents() *events {
	return &events{ice: make(chan struct{}), dtls: make(chan struct{}), rtcp: make(chan []rtcp.Packet, 16), closed: make(chan string, 1)}
}
func (e *events) OnICE()  { e.once1.Do(func() { close(e.ice) }) }
func (e *events) OnDTLS() { e.once2.Do(func() { close(e.dtls) }) }
func (e *events) OnRTCP(p []rtcp.Packet) {
	select {
	case e.rtcp <- p:
	default:
	}
}
func (e *events) OnClose(r string) { e.closed <- r }

// client is a receive-only WebRTC viewer made of the same pieces
// (rtc/lean) in the other role: ICE controlling, DTLS client.
type client struct {
	t      testing.TB
	conn   *net.UDPConn
	cert   *lean.Cert
	ufrag  string
	pwd    string
	sufrag string
	spwd   string
	server netip.AddrPort
	pc     *lean.PacketConn
	dc     *dtls.Conn
	rx, tx *srtp.Context
	ok     chan struct{}
	okOnce sync.Once
	media  chan []byte
	stun   chan *stun.Message // binding responses (for checkWith)
	mu     sync.Mutex
	// useTCP: connect over the server's passive ICE-TCP candidate
	// (RFC 4571 frames on tcp) instead of UDP.
	useTCP bool
	tcp    net.Conn
	tmu    sync.Mutex
	// dtlsIn, if set, gets a copy of each DTLS record datagram from the server.
	dtlsIn chan []byte
}

func newClient(t testing.TB) *client {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := lean.NewCert()
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, conn: conn, cert: cert, ufrag: lean.Token(8), pwd: lean.Token(24), ok: make(chan struct{}), media: make(chan []byte, 64), stun: make(chan *stun.Message, 16)}
	t.Cleanup(func() { conn.Close() })
	return c
}

func (c *client) offer() string {
	a := c.conn.LocalAddr().(*net.UDPAddr)
	sec := func(kind, mid, codecs string) string {
		return "m=" + kind + " 9 UDP/TLS/RTP/SAVPF " + codecs + "\r\nc=IN IP4 0.0.0.0\r\na=mid:" + mid +
			"\r\na=ice-ufrag:" + c.ufrag + "\r\na=ice-pwd:" + c.pwd + "\r\na=fingerprint:sha-256 " + c.cert.Fingerprint +
			"\r\na=setup:actpass\r\na=rtcp-mux\r\na=rtcp-rsize\r\na=recvonly\r\n"
	}
	return "v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1 2\r\n" +
		sec("video", "0", "96 102") +
		"a=rtpmap:96 VP8/90000\r\na=rtcp-fb:96 nack\r\na=rtcp-fb:96 nack pli\r\na=rtcp-fb:96 goog-remb\r\n" +
		"a=rtpmap:102 H264/90000\r\na=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r\n" +
		fmt.Sprintf("a=candidate:1 1 udp 2130706431 %s %d typ host\r\n", a.IP, a.Port) +
		sec("audio", "1", "111") + "a=rtpmap:111 opus/48000/2\r\na=fmtp:111 minptime=10;useinbandfec=1\r\n" +
		"m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:2\r\na=sctp-port:5000\r\n"
}

// connect reads the answer, then runs ICE and DTLS against the server.
func (c *client) connect(answer string) error {
	for _, l := range strings.Split(answer, "\r\n") {
		switch {
		case strings.HasPrefix(l, "a=ice-ufrag:"):
			c.sufrag = strings.TrimPrefix(l, "a=ice-ufrag:")
		case strings.HasPrefix(l, "a=ice-pwd:"):
			c.spwd = strings.TrimPrefix(l, "a=ice-pwd:")
		case strings.HasPrefix(l, "a=candidate:"):
			f := strings.Fields(l)
			if (f[2] == "tcp") != c.useTCP || c.server.IsValid() {
				continue
			}
			port, _ := strconv.Atoi(f[5])
			c.server = netip.AddrPortFrom(netip.MustParseAddr(f[4]), uint16(port))
		}
	}
	if c.sufrag == "" || !c.server.IsValid() {
		return errors.New("answer without ICE credentials or candidate")
	}
	if c.useTCP {
		tc, err := net.Dial("tcp4", c.server.String())
		if err != nil {
			return err
		}
		c.t.Cleanup(func() { tc.Close() })
		c.tcp = tc
	}
	c.pc = lean.NewPacketConn(c.send, c.conn.LocalAddr(), net.UDPAddrFromAddrPort(c.server))
	go c.read()
	for i := 0; ; i++ {
		if err := c.check(true); err != nil {
			return err
		}
		select {
		case <-c.ok:
		case <-time.After(100 * time.Millisecond):
			if i > 100 {
				return errors.New("no answer to binding requests")
			}
			continue
		}
		break
	}
	dc, err := dtls.ClientWithOptions(c.pc, net.UDPAddrFromAddrPort(c.server), dtls.WithCertificates(c.cert.TLS),
		dtls.WithInsecureSkipVerify(true), dtls.WithSRTPProtectionProfiles(lean.SRTPProfiles...),
		dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := dc.HandshakeContext(ctx); err != nil {
		return err
	}
	rx, tx, err := lean.SRTPContexts(dc, true)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.dc, c.rx, c.tx = dc, rx, tx
	c.mu.Unlock()
	return nil
}

func (c *client) check(nominate bool) error {
	setters := []stun.Setter{stun.BindingRequest, stun.TransactionID, stun.NewUsername(c.sufrag + ":" + c.ufrag),
		stun.RawAttribute{Type: stun.AttrICEControlling, Value: make([]byte, 8)},
		stun.RawAttribute{Type: stun.AttrPriority, Value: []byte{0x6e, 0, 0, 1}}}
	if nominate {
		setters = append(setters, stun.RawAttribute{Type: stun.AttrUseCandidate})
	}
	setters = append(setters, stun.NewShortTermIntegrity(c.spwd), stun.Fingerprint)
	m, err := stun.Build(setters...)
	if err != nil {
		return err
	}
	_, err = c.send(m.Raw)
	return err
}

// send writes one datagram to the server: over UDP, or as an RFC 4571
// frame over TCP.
func (c *client) send(b []byte) (int, error) {
	if c.tcp == nil {
		return c.conn.WriteToUDPAddrPort(b, c.server)
	}
	c.tmu.Lock()
	defer c.tmu.Unlock()
	if _, err := c.tcp.Write(append([]byte{byte(len(b) >> 8), byte(len(b))}, b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (c *client) read() {
	buf := make([]byte, 1<<16)
	for {
		var b []byte
		if c.tcp != nil {
			if _, err := io.ReadFull(c.tcp, buf[:2]); err != nil {
				return
			}
			n := int(buf[0])<<8 | int(buf[1])
			if _, err := io.ReadFull(c.tcp, buf[:n]); err != nil {
				return
			}
			b = buf[:n]
		} else {
			n, _, err := c.conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			b = buf[:n]
		}
		if len(b) == 0 {
			continue
		}
		switch {
		case b[0] < 4:
			m := &stun.Message{Raw: append([]byte(nil), b...)}
			if m.Decode() == nil && m.Type == stun.BindingSuccess && stun.NewShortTermIntegrity(c.spwd).Check(m) == nil {
				c.okOnce.Do(func() { close(c.ok) })
			}
			if m.Decode() == nil {
				select {
				case c.stun <- m:
				default:
				}
			}
		case b[0] >= 20 && b[0] < 64:
			if c.dtlsIn != nil {
				select {
				case c.dtlsIn <- append([]byte(nil), b...):
				default:
				}
			}
			c.pc.Push(b)
		case b[0] >= 128 && b[0] < 192:
			c.mu.Lock()
			rx := c.rx
			c.mu.Unlock()
			if rx == nil || b[1]&0x7f >= 64 && b[1]&0x7f < 96 {
				continue // before keys, or sender reports
			}
			var h rtp.Header
			if out, err := rx.DecryptRTP(nil, b, &h); err == nil {
				c.media <- out
			}
		}
	}
}

func (c *client) sendRTCP(pkts ...rtcp.Packet) {
	plain, err := rtcp.Marshal(pkts)
	if err != nil {
		c.t.Fatal(err)
	}
	out, err := c.tx.EncryptRTCP(nil, plain, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	_, _ = c.send(out)
}

func startServer(t testing.TB) *Server {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(conn, []net.IP{net.IPv4(127, 0, 0, 1)}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	t.Cleanup(func() { s.Close(); conn.Close() })
	return s
}

var testTracks = []Track{
	{Kind: "video", MimeType: "video/VP8", ClockRate: 90000, ID: "TR_v", StreamID: "PA_x"},
	{Kind: "audio", MimeType: "audio/opus", ClockRate: 48000, Fmtp: "minptime=10;useinbandfec=1", ID: "TR_a", StreamID: "PA_x"},
}

func wait[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// TestViewer connects a hand-made viewer, receives forwarded packets, sends
// feedback, and survives malformed datagrams from its own address.
func TestViewer(t *testing.T) {
	s := startServer(t)
	c := newClient(t)
	ev := newEvents()
	v, answer, err := s.NewViewer(c.offer(), testTracks, ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a=ice-lite", "a=setup:passive", "a=group:BUNDLE 0 1\r\n", "m=application 0 ", "a=rtpmap:96 VP8/90000",
		"a=rtcp-fb:96 nack pli", "a=rtpmap:111 opus/48000/2", "a=fmtp:111 minptime=10;useinbandfec=1", "typ host", "a=sendonly", "a=rtcp-mux"} {
		if !strings.Contains(answer, want) {
			t.Errorf("answer lacks %q:\n%s", want, answer)
		}
	}
	if strings.Contains(answer, "goog-remb") || strings.Contains(answer, "H264") {
		t.Errorf("answer has feedback or codecs the server does not use:\n%s", answer)
	}
	if v.Senders[0].PT != 96 || v.Senders[1].PT != 111 || v.Senders[0].SSRC == v.Senders[1].SSRC {
		t.Fatalf("senders %+v", v.Senders)
	}
	// Before the keys, nothing goes out and the DownTrack is told so (n = 0).
	h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 1, SSRC: v.Senders[0].SSRC}
	if n, err := v.WriteRTP(&h, []byte{1, 2, 3}); n != 0 || err != nil {
		t.Fatalf("write before DTLS: %d %v", n, err)
	}
	if err := c.connect(answer); err != nil {
		t.Fatal(err)
	}
	wait(t, ev.dtls, "DTLS")
	payload := bytes.Repeat([]byte{0xab}, 1100)
	send := func(seq uint16) {
		h.SequenceNumber = seq
		if n, err := v.WriteRTP(&h, payload); err != nil || n != 12+len(payload) {
			t.Fatalf("write: %d %v", n, err)
		}
	}
	send(10)
	got := wait(t, c.media, "media")
	var gh rtp.Header
	if _, err := gh.Unmarshal(got); err != nil || gh.SSRC != h.SSRC || gh.SequenceNumber != 10 || !bytes.Equal(got[12:], payload) {
		t.Fatalf("received %v %+v %d bytes", err, gh, len(got))
	}

	// Feedback reaches the handler, decrypted and parsed.
	c.sendRTCP(&rtcp.TransportLayerNack{SenderSSRC: 1, MediaSSRC: h.SSRC, Nacks: []rtcp.NackPair{{PacketID: 10}}},
		&rtcp.PictureLossIndication{SenderSSRC: 1, MediaSSRC: h.SSRC})
	fb := wait(t, ev.rtcp, "RTCP")
	if len(fb) != 2 {
		t.Fatalf("rtcp %v", fb)
	}
	if _, ok := fb[0].(*rtcp.TransportLayerNack); !ok {
		t.Fatalf("rtcp %T", fb[0])
	}

	// Malformed or unexpected datagrams from the viewer's address: each is
	// dropped and counted, and the viewer keeps receiving. A binding
	// indication (an ICE keepalive, aiortc sends them) is neither.
	before := s.Dropped()
	if ind, err := stun.Build(stun.TransactionID, bindingIndication, stun.Fingerprint); err != nil {
		t.Fatal(err)
	} else {
		_, _ = c.send(ind.Raw)
	}
	junk := [][]byte{
		{0x00, 0x01, 0x00, 0x08, 0x21, 0x12},                       // truncated STUN
		append([]byte{0x80, 0xc9}, bytes.Repeat([]byte{7}, 40)...), // SRTCP that does not authenticate
		append([]byte{0x80, 0x60}, bytes.Repeat([]byte{7}, 40)...), // RTP from a receive-only viewer
		{0xff, 0xfe, 0xfd}, // nothing RFC 7983 knows
	}
	for _, j := range junk {
		_, _ = c.send(j)
	}
	// A binding request with a wrong password is dropped too.
	pwd := c.spwd
	c.spwd = "wrong password of some length"
	if err := c.check(false); err != nil {
		t.Fatal(err)
	}
	c.spwd = pwd
	want := uint64(len(junk) + 1)
	deadline := time.Now().Add(10 * time.Second)
	for s.Dropped() < before+want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if d := s.Dropped() - before; d != want {
		t.Fatalf("dropped %d datagrams, want %d", d, want)
	}
	send(11)
	if got := wait(t, c.media, "media after junk"); len(got) != 12+len(payload) {
		t.Fatalf("after junk: %d bytes", len(got))
	}
	select {
	case r := <-ev.closed:
		t.Fatalf("viewer closed by junk: %s", r)
	default:
	}

	// The forwarding path allocates nothing.
	if a := leastAllocs(200, func() { h.SequenceNumber++; _, _ = v.WriteRTP(&h, payload) }); a != 0 {
		t.Errorf("WriteRTP allocates %.1f times per packet", a)
	}

	// Closing sends close_notify: the client's DTLS session ends.
	v.Close("test")
	if r := wait(t, ev.closed, "close"); r != "test" {
		t.Errorf("closed: %q", r)
	}
	if s.Viewers() != 0 {
		t.Errorf("%d viewers left", s.Viewers())
	}
}

// TestConsent drops a viewer whose ICE checks stop.
func TestConsent(t *testing.T) {
	old := ConsentTimeout
	ConsentTimeout = 2 * time.Second
	t.Cleanup(func() { ConsentTimeout = old })
	s := startServer(t)
	c := newClient(t)
	ev := newEvents()
	_, answer, err := s.NewViewer(c.offer(), testTracks, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.connect(answer); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, ev.closed, "consent expiry"); !strings.Contains(r, "consent") {
		t.Errorf("closed because %q", r)
	}
}

// TestDTLSNoCookieRoundTrip: the server answers the viewer's first
// ClientHello with its ServerHello flight, not a HelloVerifyRequest: ICE has
// proved the address already, and the cookie's round trip would only delay
// the first frame.
func TestDTLSNoCookieRoundTrip(t *testing.T) {
	s := startServer(t)
	c := newClient(t)
	c.dtlsIn = make(chan []byte, 32)
	ev := newEvents()
	_, answer, err := s.NewViewer(c.offer(), testTracks, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.connect(answer); err != nil {
		t.Fatal(err)
	}
	wait(t, ev.dtls, "DTLS")
	first := wait(t, c.dtlsIn, "the server's first DTLS record")
	// Record header: type, version (2), epoch (2), sequence (6), length (2); then the handshake type.
	if len(first) < 14 || first[0] != 22 {
		t.Fatalf("first record from the server is not a handshake: % x", first[:min(len(first), 16)])
	}
	if first[13] != 2 {
		t.Fatalf("the server's first handshake message is type %d, want 2 (ServerHello; 3 is HelloVerifyRequest)", first[13])
	}
}

// TestBadOffers: offers the server cannot serve get an error, not a viewer.
func TestBadOffers(t *testing.T) {
	s := startServer(t)
	c := newClient(t)
	good := c.offer()
	for name, offer := range map[string]string{
		"garbage":        "v=0\r\nthis is not sdp",
		"no ice":         strings.ReplaceAll(good, "a=ice-ufrag:"+c.ufrag+"\r\n", ""),
		"no fingerprint": strings.ReplaceAll(good, "a=fingerprint:sha-256 "+c.cert.Fingerprint+"\r\n", ""),
		"passive":        strings.ReplaceAll(good, "a=setup:actpass", "a=setup:passive"),
		"sendonly":       strings.ReplaceAll(good, "a=recvonly", "a=sendonly"),
		"no vp8":         strings.ReplaceAll(good, "VP8/90000", "VP9/90000"),
	} {
		if _, _, err := s.NewViewer(offer, testTracks, newEvents()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if s.Viewers() != 0 {
		t.Errorf("%d viewers after refused offers", s.Viewers())
	}
}

// TestAudioOnly: a viewer offering video and audio of an audio-only
// publication keeps its video section (the BUNDLE tag) inactive in the group.
func TestAudioOnly(t *testing.T) {
	s := startServer(t)
	c := newClient(t)
	v, answer, err := s.NewViewer(c.offer(), testTracks[1:], newEvents())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(answer, "a=group:BUNDLE 0 1\r\n") || !strings.Contains(answer, "m=video 9 ") || !strings.Contains(answer, "a=inactive") ||
		len(v.Senders) != 1 || v.Senders[0].Mid != "1" {
		t.Errorf("senders %+v, answer:\n%s", v.Senders, answer)
	}
}
