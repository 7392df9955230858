package hostile

import (
	"bytes"
	"context"
	endian "encoding/binary"
	"encoding/json"
	"hash/crc32"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/dtls/v3"
	"github.com/pion/stun/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/rtc/lean"
)

// TestRepeatedDataChannels: a participant that opens the room's data
// channel label again and again, and channels of labels the room does not
// use, gets each of them closed by the server; the server holds no reader
// for them, and the first channels go on carrying the room's messages.
func TestRepeatedDataChannels(t *testing.T) {
	s := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := auth.Grants{Publish: true, Subscribe: true, PublishData: true}
	alice, err := client.Join(ctx, s.WS, s.Token(t, "dc", "alice", g), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	mallory, err := client.Join(ctx, s.WS, s.Token(t, "dc", "mallory", g), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mallory.Close()
	time.Sleep(300 * time.Millisecond)
	before := s.Goroutines(t)

	const n = 60
	var closed atomic.Int32
	for i := 0; i < n; i++ {
		label := "_reliable"
		if i%3 == 1 {
			label = "_lossy"
		} else if i%3 == 2 {
			label = "mine"
		}
		dc, err := mallory.Pub.CreateDataChannel(label, nil)
		if err != nil {
			t.Fatal(err)
		}
		dc.OnClose(func() { closed.Add(1) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for closed.Load() < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if c := closed.Load(); c < n {
		t.Errorf("the server closed %d of %d channels it has no use for", c, n)
	}
	time.Sleep(300 * time.Millisecond)
	if after := s.Goroutines(t); after > before+10 {
		t.Errorf("goroutines went from %d to %d", before, after)
	}

	// The first channels still carry the room's messages, both ways.
	for _, m := range []struct {
		from, to *client.Client
		text     string
	}{{alice, mallory, "to mallory"}, {mallory, alice, "to alice"}} {
		if err := m.from.SendData([]byte(m.text), true, true); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-m.to.DataIn:
			if string(d.Payload) != m.text {
				t.Errorf("got %q, want %q", d.Payload, m.text)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q did not arrive", m.text)
		}
	}
	if !strings.Contains(s.Logs(), "data channel refused") {
		t.Error("no log line for the refused channels")
	}
	s.Healthy(t)
}

// sctpPeer is a hand-made WebRTC data client: its own signaling, ICE check,
// DTLS and SCTP packets, so it can send what no stack would.
type sctpPeer struct {
	t    *testing.T
	ws   *websocket.Conn
	dc   *dtls.Conn
	tag  uint32 // the server's verification tag
	tsn  uint32 // our next TSN
	done atomic.Bool
}

// dialSCTP joins room as a participant that may only send data, offers a
// data section with a host candidate (so the session server serves it), checks
// the server's address, connects DTLS and runs the SCTP handshake.
func dialSCTP(t *testing.T, s *Server, room, identity string) *sctpPeer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, s.WS, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(1 << 20)
	t.Cleanup(func() { _ = ws.CloseNow() })
	p := &sctpPeer{t: t, ws: ws, tsn: 5000}
	p.request(ctx, protocol.Msg{"type": "join", "token": s.Token(t, room, identity, auth.Grants{Subscribe: true, PublishData: true}),
		"protocol": protocol.Version})
	cert, err := lean.NewCert()
	if err != nil {
		t.Fatal(err)
	}
	server := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: s.UDPPort}
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	ufrag, pwd := "hostileufrag", "hostilepasswordhostilepw"
	offer := "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n" +
		"m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\n" +
		"a=ice-ufrag:" + ufrag + "\r\na=ice-pwd:" + pwd + "\r\na=fingerprint:sha-256 " + cert.Fingerprint + "\r\n" +
		"a=setup:actpass\r\na=sctp-port:5000\r\na=max-message-size:262144\r\n" +
		"a=candidate:1 1 udp 2130706431 127.0.0.1 " + strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port) + " typ host\r\n"
	ans := p.request(ctx, protocol.Msg{"type": "offer", "sdp": offer})
	answer, _ := ans["sdp"].(string)
	if !strings.Contains(answer, "a=ice-lite") {
		t.Fatalf("the data session is not the session server's:\n%s", answer)
	}
	var sufrag, spwd string
	for _, l := range strings.Split(answer, "\n") {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "a=ice-ufrag:"); ok {
			sufrag = v
		}
		if v, ok := strings.CutPrefix(l, "a=ice-pwd:"); ok {
			spwd = v
		}
	}
	m, err := stun.Build(stun.BindingRequest, stun.TransactionID, stun.NewUsername(sufrag+":"+ufrag),
		stun.RawAttribute{Type: stun.AttrICEControlling, Value: make([]byte, 8)},
		stun.RawAttribute{Type: stun.AttrPriority, Value: []byte{0x6e, 0, 0x1e, 0xff}},
		stun.RawAttribute{Type: stun.AttrUseCandidate}, stun.NewShortTermIntegrity(spwd), stun.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	for ok := false; !ok; {
		if _, err := udp.WriteTo(m.Raw, server); err != nil {
			t.Fatal(err)
		}
		_ = udp.SetReadDeadline(time.Now().Add(time.Second))
		n, err := udp.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatal("no answer to the ICE check")
			}
			continue
		}
		r := &stun.Message{Raw: append([]byte(nil), buf[:n]...)}
		ok = r.Decode() == nil && r.Type == stun.BindingSuccess
	}
	_ = udp.SetReadDeadline(time.Time{})
	dc, err := dtls.ClientWithOptions(udp, server, dtls.WithCertificates(cert.TLS), dtls.WithInsecureSkipVerify(true),
		dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret))
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.HandshakeContext(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	p.dc = dc

	// SCTP: our INIT (the server's own we leave unanswered), its INIT-ACK,
	// our COOKIE-ECHO, its COOKIE-ACK.
	const myTag = 0x600d7a9
	init := endian.BigEndian.AppendUint32(nil, myTag)
	init = endian.BigEndian.AppendUint32(init, 1<<20)
	init = endian.BigEndian.AppendUint16(init, 1024)
	init = endian.BigEndian.AppendUint16(init, 1024)
	init = endian.BigEndian.AppendUint32(init, p.tsn)
	p.write(0, sctpChunk(1, 0, init))
	v := p.await(2)
	// INIT-ACK: the server's tag, then parameters; the cookie is type 7.
	p.tag = endian.BigEndian.Uint32(v)
	var cookie []byte
	for b := v[16:]; len(b) >= 4; {
		n := int(endian.BigEndian.Uint16(b[2:]))
		if n < 4 || n > len(b) {
			break
		}
		if endian.BigEndian.Uint16(b) == 7 {
			cookie = b[4:n]
		}
		b = b[min((n+3)&^3, len(b)):]
	}
	p.write(p.tag, sctpChunk(10, 0, cookie))
	p.await(11)
	go func() { // the server's SACKs, until an ABORT
		for {
			n, err := dc.Read(buf)
			if err != nil {
				return
			}
			if n > 12 && buf[12] == 6 {
				p.done.Store(true)
			}
		}
	}()
	return p
}

func (p *sctpPeer) request(ctx context.Context, m protocol.Msg) protocol.Msg {
	p.t.Helper()
	m["id"] = 1
	b, _ := json.Marshal(m)
	if err := p.ws.Write(ctx, websocket.MessageText, b); err != nil {
		p.t.Fatal(err)
	}
	for {
		_, b, err := p.ws.Read(ctx)
		if err != nil {
			p.t.Fatalf("%s: %v", m["type"], err)
		}
		var r protocol.Msg
		if json.Unmarshal(b, &r) != nil {
			continue
		}
		if id, _ := r["id"].(float64); id == 1 {
			if r["type"] == "error" {
				p.t.Fatalf("%s: %v", m["type"], r)
			}
			return r
		}
	}
}

// await reads SCTP packets until one has a chunk of type typ.
func (p *sctpPeer) await(typ byte) []byte {
	p.t.Helper()
	buf := make([]byte, 1500)
	_ = p.dc.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer p.dc.SetReadDeadline(time.Time{})
	for {
		n, err := p.dc.Read(buf)
		if err != nil {
			p.t.Fatalf("waiting for SCTP chunk %d: %v", typ, err)
		}
		for b := buf[12:n]; len(b) >= 4; {
			l := int(endian.BigEndian.Uint16(b[2:]))
			if l < 4 || l > len(b) {
				break
			}
			if b[0] == typ {
				return append([]byte(nil), b[4:l]...)
			}
			b = b[min((l+3)&^3, len(b)):]
		}
	}
}

func sctpChunk(typ, flags byte, v []byte) []byte {
	c := []byte{typ, flags, 0, 0}
	endian.BigEndian.PutUint16(c[2:], uint16(4+len(v)))
	c = append(c, v...)
	for len(c)%4 != 0 {
		c = append(c, 0)
	}
	return c
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// write sends one SCTP packet of chunks.
func (p *sctpPeer) write(vtag uint32, chunks ...[]byte) {
	b := []byte{0x13, 0x88, 0x13, 0x88}
	b = endian.BigEndian.AppendUint32(b, vtag)
	b = append(b, 0, 0, 0, 0)
	for _, c := range chunks {
		b = append(b, c...)
	}
	endian.LittleEndian.PutUint32(b[8:], crc32.Checksum(b, castagnoli))
	_, _ = p.dc.Write(b)
}

// data sends one DATA chunk of a whole message with the next TSN, or skips
// a TSN (the gap the rest waits behind) if skip.
func (p *sctpPeer) data(stream, ssn uint16, ppid uint32, payload []byte, unordered bool) {
	v := endian.BigEndian.AppendUint32(nil, p.tsn)
	v = endian.BigEndian.AppendUint16(v, stream)
	v = endian.BigEndian.AppendUint16(v, ssn)
	v = endian.BigEndian.AppendUint32(v, ppid)
	flags := byte(3)
	if unordered {
		flags |= 4
	}
	p.tsn++
	p.write(p.tag, sctpChunk(0, flags, append(v, payload...)))
}

// TestHostileSCTPMemory: a data client that sends ordered messages behind
// a missing one, or chunks past a gap in TSNs, up to 66 MB of either, raises the
// server's RSS by less than twice its 4 MiB receive window and is aborted
// (for parking too many messages, or for sending past the closed window);
// the server stays healthy.
func TestHostileSCTPMemory(t *testing.T) {
	const window = 4 << 20
	s := Start(t, Options{})
	payload := bytes.Repeat([]byte{'x'}, 1100)
	for i, attack := range []struct {
		name string
		send func(p *sctpPeer, i int)
	}{
		{"ordered behind a gap", func(p *sctpPeer, i int) { p.data(0, uint16(i+2), 53, payload, false) }},
		{"past a gap", func(p *sctpPeer, i int) {
			if i == 0 {
				p.tsn++
			}
			p.data(0, uint16(i+1), 53, payload, false)
		}},
	} {
		t.Run(attack.name, func(t *testing.T) {
			p := dialSCTP(t, s, "sctp", "mallory"+strconv.Itoa(i))
			open := []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0}
			p.data(0, 0, 50, append(open, "_reliable"...), false)
			time.Sleep(300 * time.Millisecond)
			before := s.RSS(t)
			for i := 0; i < 60000 && !p.done.Load(); i++ {
				attack.send(p, i)
				if i%64 == 0 {
					time.Sleep(time.Millisecond) // what the server's socket buffer holds
				}
			}
			time.Sleep(time.Second)
			grown := s.RSS(t) - before
			t.Logf("RSS grew by %d bytes (window %d)", grown, window)
			if grown > 2*window {
				t.Errorf("RSS grew by %d bytes, over twice the %d-byte window", grown, window)
			}
			if !p.done.Load() {
				t.Error("the server did not abort the association")
			}
			s.Healthy(t)
		})
	}
}
