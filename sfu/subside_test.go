package sfu

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/egress"
)

// TestSubChoice: without ICE-TCP on the lean server, the lean egress for a
// client that showed a UDP candidate, a PeerConnection for one that showed
// only TCP ones (after a moment for its UDP ones) or none in time, and no
// decision before either.
func TestSubChoice(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name     string
		cands    []string
		sdp      string
		joined   time.Time
		tcpAgo   time.Duration
		lean, ok bool
	}{
		{name: "host udp", cands: []string{"candidate:1 1 udp 2130706431 127.0.0.1 5000 typ host"}, joined: now, lean: true, ok: true},
		{name: "relay over TURN/TCP is udp to the server", cands: []string{"candidate:3 1 UDP 16777215 10.0.0.1 6000 typ relay raddr 0.0.0.0 rport 0"}, joined: now, lean: true, ok: true},
		{name: "in the offer", sdp: "v=0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 5000 typ host\r\n", joined: now, lean: true, ok: true},
		{name: "tcp only, just now", cands: []string{"candidate:2 1 tcp 1518280447 127.0.0.1 9 typ host tcptype active"}, joined: now, ok: false},
		{name: "tcp only, a while ago", cands: []string{"candidate:2 1 tcp 1518280447 127.0.0.1 9 typ host tcptype active"}, joined: now, tcpAgo: time.Second, lean: false, ok: true},
		{name: "tcp then udp", cands: []string{"candidate:2 1 tcp 1518280447 127.0.0.1 9 typ host tcptype active", "a=candidate:1 1 udp 1 127.0.0.1 5000 typ host"}, joined: now, lean: true, ok: true},
		{name: "nothing yet", joined: now, ok: false},
		{name: "nothing in time", joined: now.Add(-2 * subChoiceWait), lean: false, ok: true},
		{name: "junk", cands: []string{"", "candidate:", "candidate:1 1"}, joined: now, ok: false},
	} {
		var sc subChoice
		for _, s := range c.cands {
			sc.saw(s)
		}
		sc.sawSDP(c.sdp)
		sc.tcpAt = sc.tcpAt.Add(-c.tcpAgo)
		lean, ok := sc.decide(c.joined)
		if lean != c.lean || ok != c.ok {
			t.Errorf("%s: lean %v ok %v, want %v %v", c.name, lean, ok, c.lean, c.ok)
		}
	}
}

// TestSubChoiceWithICETCP: a lean server with ICE-TCP serves a client that
// showed only a TCP candidate at once, and one that showed none in time.
func TestSubChoiceWithICETCP(t *testing.T) {
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	srv, err := egress.New(udp, []net.IP{net.IPv4(127, 0, 0, 1)}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.ServeTCP(ln)
	now := time.Now()
	for _, c := range []struct {
		name     string
		cands    []string
		joined   time.Time
		lean, ok bool
	}{
		{name: "tcp only, just now", cands: []string{"candidate:2 1 tcp 1518280447 127.0.0.1 9 typ host tcptype active"}, joined: now, lean: true, ok: true},
		{name: "nothing yet", joined: now, ok: false},
		{name: "nothing in time", joined: now.Add(-2 * subChoiceWait), lean: true, ok: true},
	} {
		sc := subChoice{srv: srv}
		for _, s := range c.cands {
			sc.saw(s)
		}
		lean, ok := sc.decide(c.joined)
		if lean != c.lean || ok != c.ok {
			t.Errorf("%s: lean %v ok %v, want %v %v", c.name, lean, ok, c.lean, c.ok)
		}
	}
}
