package loadtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Twenty lean WHEP viewers (no Pion PeerConnection) watch a Petrel stream
// published over WHIP and receive every packet of it.
// Both ways of reading: a socket and goroutine per peer, and one shared
// socket drained with recvmmsg for all.
func TestLeanWHEPViewers(t *testing.T) {
	url := startPetrel(t)
	for _, poll := range []time.Duration{0, time.Millisecond} {
		t.Run(fmt.Sprintf("poll=%v", poll), func(t *testing.T) { leanViewers(t, url, poll) })
	}
}

func leanViewers(t *testing.T, url string, poll time.Duration) {
	res := runSmall(t, Config{Scenario: "whep", Target: "petrel", Peer: "lean", LeanPoll: poll, URL: url, Room: fmt.Sprint("lean", poll), Peers: 20, Rate: 50, Duration: 2 * time.Second, Warmup: time.Second})
	checkAllReceived(t, res, "subscriber", 20)
	for _, p := range res.Peers {
		if p.Role != "subscriber" {
			continue
		}
		for _, s := range p.Streams {
			if s.Lost != 0 {
				t.Errorf("%s %s: lost %d of %d packets", p.ID, s.Kind, s.Lost, s.Packets+uint64(s.Lost))
			}
		}
	}
	if sm := res.Summary; sm.Connected != 21 || sm.Failed != 0 || sm.DelayMs.N == 0 {
		t.Errorf("connected %d failed %d delays %d (%v)", sm.Connected, sm.Failed, sm.DelayMs.N, sm.Errors)
	}
}

// publishWHIP publishes synthetic video and audio to room over WHIP.
func publishWHIP(t *testing.T, url, room string) {
	t.Helper()
	lean, err := NewLean(APIOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, a := Synthetic(false, 500, 30, 30), Synthetic(true, 500, 30, 30)
	v.Start()
	a.Start()
	var tot Counters
	p := NewPeer("publisher", "publisher", &tot)
	t.Cleanup(func() { p.Close(); v.Stop(); a.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tok, err := (&Petrel{APIKey: testKey, APISecret: testSecret}).Token(ctx, room, "publisher", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := WHIP(ctx, lean, url+"/whip/"+room, tok, p, v, a); err != nil {
		t.Fatal(err)
	}
	if err := waitMedia(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// leanViewer makes a lean peer, posts its offer and returns it with the
// server's answer (not yet applied).
func leanViewer(t *testing.T, ctx context.Context, url, room, id string, tot *Counters, sh *leanShared) (*leanPeer, *Peer, string) {
	t.Helper()
	cert, err := NewLeanCert()
	if err != nil {
		t.Fatal(err)
	}
	p := NewPeer(id, "subscriber", tot)
	l, err := newLeanPeer(p, cert, "127.0.0.1", sh)
	if err != nil {
		t.Fatal(err)
	}
	p.OnClose(l.Close)
	t.Cleanup(p.Close)
	tok, err := (&Petrel{APIKey: testKey, APISecret: testSecret}).Token(ctx, room, id, false)
	if err != nil {
		t.Fatal(err)
	}
	offer, err := l.Offer()
	if err != nil {
		t.Fatal(err)
	}
	answer, err := postOffer(ctx, url+"/whep/"+room+"?participant=publisher", tok, offer, p)
	if err != nil {
		t.Fatal(err)
	}
	return l, p, answer
}

func packetsOf(p *Peer) (n uint64) {
	for _, s := range p.Stats().Streams {
		n += s.Packets
	}
	return n
}

// A lean viewer keeps receiving while junk of every first-byte class lands
// on its socket (its own, or its address on the shared one), and drops all
// of it; a viewer given an answer whose fingerprint is not the server's
// certificate fails the DTLS handshake with an error that says so.
func TestLeanPeerHostileInput(t *testing.T) {
	url := startPetrel(t)
	publishWHIP(t, url, "h")
	t.Run("own socket", func(t *testing.T) { leanHostile(t, url, nil) })
	t.Run("shared socket", func(t *testing.T) {
		sh, err := newLeanShared("127.0.0.1", time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer sh.Close()
		leanHostile(t, url, sh)
	})
}

func leanHostile(t *testing.T, url string, sh *leanShared) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var tot Counters
	l, p, answer := leanViewer(t, ctx, url, "h", "good", &tot, sh)
	if err := l.Connect(ctx, answer); err != nil {
		t.Fatal(err)
	}
	junk, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(l.local()))
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	for i := 0; i < 400; i++ {
		b := make([]byte, 1+i%1400)
		_, _ = rand.Read(b)
		b[0] = []byte{0x00, 0x01, 0x16, 0x17, 0x80, 0x90, 0xc8, 0x7f, 0xff}[i%9]
		if i%9 == 0 && len(b) >= 20 {
			copy(b[4:], []byte{0x21, 0x12, 0xa4, 0x42}) // STUN magic cookie: a plausible header
		}
		_, _ = junk.Write(b)
	}
	before := packetsOf(p)
	for packetsOf(p) < before+50 {
		if ctx.Err() != nil {
			t.Fatalf("no media after the junk: %d packets before, %d now", before, packetsOf(p))
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Close() // waits for the reader: its counters are ours to read now
	if l.garbage == 0 {
		t.Error("junk from a foreign address was not counted as dropped")
	}
	if tot.Lost.Load() != 0 {
		t.Errorf("%d packets lost", tot.Lost.Load())
	}

	bad, bp, answer := leanViewer(t, ctx, url, "h", "badfp", &tot, sh)
	fp := regexp.MustCompile(`(?m)^a=fingerprint:sha-256 ([0-9A-F]{2})`)
	if !fp.MatchString(answer) {
		t.Fatalf("answer has no sha-256 fingerprint:\n%s", answer)
	}
	answer = fp.ReplaceAllStringFunc(answer, func(s string) string {
		if strings.HasSuffix(s, "00") {
			return s[:len(s)-2] + "01"
		}
		return s[:len(s)-2] + "00"
	})
	err = bad.Connect(ctx, answer)
	if err == nil || !strings.Contains(err.Error(), "fingerprint mismatch") {
		t.Fatalf("Connect with a wrong fingerprint: %v, want a fingerprint mismatch", err)
	}
	if bp.Up() || packetsOf(bp) != 0 {
		t.Errorf("a peer that failed DTLS is up (%v) or counted %d packets", bp.Up(), packetsOf(bp))
	}
	t.Logf("bad fingerprint: %v", err)
}

func TestLeanAnswerErrors(t *testing.T) {
	good := "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n" +
		"m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=ice-ufrag:abcd\r\na=ice-pwd:0123456789012345678901\r\n" +
		"a=fingerprint:sha-256 " + strings.Repeat("AB:", 31) + "AB\r\na=setup:passive\r\na=rtpmap:96 VP8/90000\r\n" +
		"a=candidate:1 1 udp 2130706431 127.0.0.1 5000 typ host\r\n"
	a, err := parseLeanAnswer(good, true)
	if err != nil {
		t.Fatal(err)
	}
	if a.remote.String() != "127.0.0.1:5000" || a.pts[96].kind != "video" || a.pts[96].clock != 90000 {
		t.Errorf("parsed %+v", a)
	}
	for name, bad := range map[string]string{
		"not sdp":      "hello",
		"no ufrag":     strings.Replace(good, "a=ice-ufrag:abcd\r\n", "", 1),
		"no fp":        regexp.MustCompile(`a=fingerprint:[^\r]*\r\n`).ReplaceAllString(good, ""),
		"short fp":     strings.Replace(good, strings.Repeat("AB:", 31)+"AB", "AB:CD", 1),
		"setup active": strings.Replace(good, "setup:passive", "setup:active", 1),
		"tcp only":     strings.Replace(good, " udp ", " tcp ", 1),
		"mdns only":    strings.Replace(good, "127.0.0.1 5000", "x.local 5000", 1),
		"port 0":       strings.Replace(good, "127.0.0.1 5000", "127.0.0.1 0", 1),
	} {
		if _, err := parseLeanAnswer(bad, true); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
