package session

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/stun/v4"

	"github.com/petrel-sfu/petrel/rtc/lean"
)

// checkWith sends a binding request with these credentials (the server's
// ufrag and password, the client's ufrag) and reports whether the server
// answered it, integrity-protected with spwd, within 300 ms.
func (c *client) checkWith(sufrag, spwd, ufrag string) bool {
	m, err := stun.Build(stun.BindingRequest, stun.TransactionID, stun.NewUsername(sufrag+":"+ufrag),
		stun.RawAttribute{Type: stun.AttrICEControlling, Value: make([]byte, 8)},
		stun.RawAttribute{Type: stun.AttrPriority, Value: []byte{0x6e, 0, 0, 1}},
		stun.NewShortTermIntegrity(spwd), stun.Fingerprint)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.conn.WriteToUDPAddrPort(m.Raw, c.server); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.After(300 * time.Millisecond)
	for {
		select {
		case r := <-c.stun:
			if r.TransactionID == m.TransactionID {
				return r.Type == stun.BindingSuccess && stun.NewShortTermIntegrity(spwd).Check(r) == nil
			}
		case <-deadline:
			return false
		}
	}
}

// TestRestartICE: a WHEP viewer's ICE restart gives the server new
// credentials for the client's new ones; checks with the previous pair are
// still answered (the client switches when it has applied them) and media
// goes on over the same SRTP session; a second restart retires the first
// pair; malformed credentials are refused.
func TestRestartICE(t *testing.T) {
	s := startServer(t)
	c := newClient(t)
	ev := newEvents()
	v, answer, err := s.NewViewer(c.offer(), testTracks, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.connect(answer); err != nil {
		t.Fatal(err)
	}
	// The client's handshake can end before the server has its keys.
	wait(t, ev.dtls, "DTLS")
	payload := bytes.Repeat([]byte{0xcd}, 200)
	h := rtp.Header{Version: 2, PayloadType: 96, SSRC: v.Senders[0].SSRC}
	receives := func(seq uint16) {
		t.Helper()
		h.SequenceNumber = seq
		if _, err := v.WriteRTP(&h, payload); err != nil {
			t.Fatal(err)
		}
		got := wait(t, c.media, "media")
		var gh rtp.Header
		if _, err := gh.Unmarshal(got); err != nil || gh.SequenceNumber != seq {
			t.Fatalf("received %v %+v", err, gh)
		}
	}
	receives(1)

	old := [3]string{c.sufrag, c.spwd, c.ufrag}
	ufrag1, pwd1 := lean.Token(8), lean.Token(24)
	frag, err := v.RestartICE(ufrag1, pwd1)
	if err != nil {
		t.Fatal(err)
	}
	var sufrag1, spwd1 string
	for _, l := range strings.Split(frag, "\r\n") {
		if x, ok := strings.CutPrefix(l, "a=ice-ufrag:"); ok {
			sufrag1 = x
		}
		if x, ok := strings.CutPrefix(l, "a=ice-pwd:"); ok {
			spwd1 = x
		}
	}
	if sufrag1 == "" || spwd1 == "" || sufrag1 == old[0] || !strings.Contains(frag, "typ host") {
		t.Fatalf("restart fragment %q", frag)
	}
	if v.RemoteUfrag() != ufrag1 {
		t.Fatalf("remote ufrag %q after the restart", v.RemoteUfrag())
	}
	if !c.checkWith(old[0], old[1], old[2]) {
		t.Fatal("a check with the previous credentials is not answered after the restart")
	}
	if !c.checkWith(sufrag1, spwd1, ufrag1) {
		t.Fatal("a check with the new credentials is not answered")
	}
	dropped := s.Dropped()
	if c.checkWith(sufrag1, spwd1, old[2]) || s.Dropped() != dropped+1 {
		t.Fatal("the server's new credentials with the client's previous ufrag are answered")
	}
	receives(2) // the same SRTP session

	if _, err := v.RestartICE(lean.Token(8), lean.Token(24)); err != nil {
		t.Fatal(err)
	}
	if c.checkWith(old[0], old[1], old[2]) {
		t.Fatal("the first credentials are still answered after a second restart")
	}
	if !c.checkWith(sufrag1, spwd1, ufrag1) {
		t.Fatal("the credentials of the first restart are not answered after the second")
	}
	for _, bad := range [][2]string{{"", lean.Token(24)}, {"abc", lean.Token(24)}, {lean.Token(8), "short"},
		{"ab:cd", lean.Token(24)}, {lean.Token(8), strings.Repeat("x", 257)}} {
		if _, err := v.RestartICE(bad[0], bad[1]); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("RestartICE(%q, %q): %v", bad[0], bad[1], err)
		}
	}
	receives(3)
}
