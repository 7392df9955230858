package session

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pion/stun/v4"
)

// readSTUN reads the client's socket until d passes and returns the STUN
// messages that came.
func readSTUN(t *testing.T, c *client, d time.Duration) []*stun.Message {
	t.Helper()
	var out []*stun.Message
	buf := make([]byte, 1500)
	deadline := time.Now().Add(d)
	for {
		_ = c.conn.SetReadDeadline(deadline)
		n, _, err := c.conn.ReadFromUDPAddrPort(buf)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 || buf[0] >= 4 {
			continue
		}
		m := &stun.Message{Raw: append([]byte(nil), buf[:n]...)}
		if m.Decode() != nil {
			t.Fatalf("undecodable STUN from the server")
		}
		out = append(out, m)
	}
}

// viewerFor makes a WHEP viewer for c and reads its answer's credentials.
func viewerFor(t *testing.T, s *Server, c *client) {
	t.Helper()
	_, answer, err := s.NewViewer(c.offer(), testTracks, newEvents())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(answer, "\r\n") {
		switch {
		case strings.HasPrefix(l, "a=ice-ufrag:"):
			c.sufrag = strings.TrimPrefix(l, "a=ice-ufrag:")
		case strings.HasPrefix(l, "a=ice-pwd:"):
			c.spwd = strings.TrimPrefix(l, "a=ice-pwd:")
		}
	}
	c.server = s.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// TestNudge: a client whose first check does not nominate gets one binding
// request back, with its own credentials, so that an agent that nominates
// on an incoming check (Pion) does so at once instead of at its next
// check tick; its answer to it is no dropped datagram, and later checks
// bring no more. A client that nominates with its first check gets none.
func TestNudge(t *testing.T) {
	s := startServer(t)
	c := newClient(t)
	viewerFor(t, s, c)
	if err := c.check(false); err != nil {
		t.Fatal(err)
	}
	var req *stun.Message
	ok := 0
	for _, m := range readSTUN(t, c, 500*time.Millisecond) {
		switch m.Type {
		case stun.BindingSuccess:
			ok++
		case stun.BindingRequest:
			if req != nil {
				t.Fatal("two binding requests for one check")
			}
			req = m
		}
	}
	if ok != 1 || req == nil {
		t.Fatalf("after a check without USE-CANDIDATE: %d success responses and request %v; want 1 and a request", ok, req != nil)
	}
	var u stun.Username
	if err := u.GetFrom(req); err != nil || u.String() != c.ufrag+":"+c.sufrag {
		t.Fatalf("request USERNAME %q, want %q", u.String(), c.ufrag+":"+c.sufrag)
	}
	if err := stun.NewShortTermIntegrity(c.pwd).Check(req); err != nil {
		t.Fatalf("request integrity with the client's password: %v", err)
	}
	if err := stun.Fingerprint.Check(req); err != nil {
		t.Fatalf("request fingerprint: %v", err)
	}
	if !req.Contains(stun.AttrICEControlled) || req.Contains(stun.AttrICEControlling) || !req.Contains(stun.AttrPriority) || req.Contains(stun.AttrUseCandidate) {
		t.Fatal("request: want ICE-CONTROLLED and PRIORITY, no ICE-CONTROLLING or USE-CANDIDATE")
	}
	resp, err := stun.Build(req, stun.BindingSuccess, &stun.XORMappedAddress{IP: net.IPv4(127, 0, 0, 1), Port: int(c.server.Port())},
		stun.NewShortTermIntegrity(c.pwd), stun.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.conn.WriteToUDPAddrPort(resp.Raw, c.server); err != nil {
		t.Fatal(err)
	}
	if err := c.check(false); err != nil {
		t.Fatal(err)
	}
	for _, m := range readSTUN(t, c, 300*time.Millisecond) {
		if m.Type == stun.BindingRequest {
			t.Fatal("a second binding request for the same client credentials")
		}
	}
	if d := s.Dropped(); d != 0 {
		t.Fatalf("%d datagrams dropped: the answer to the request is the client's due", d)
	}

	c2 := newClient(t)
	viewerFor(t, s, c2)
	if err := c2.check(true); err != nil {
		t.Fatal(err)
	}
	if err := c2.check(false); err != nil {
		t.Fatal(err)
	}
	for _, m := range readSTUN(t, c2, 300*time.Millisecond) {
		if m.Type == stun.BindingRequest {
			t.Fatal("a binding request to a client that nominated")
		}
	}
}

// TestNudgeEachPath: the nudge goes to each path a client checks from before
// it nominates, not only to the first. Pion checks its ICE-TCP and UDP pairs
// at once; when the TCP check came first, a nudge to it alone left the best
// pair (UDP) to Pion's next 200 ms tick.
func TestNudgeEachPath(t *testing.T) {
	s := startServer(t)
	c := newClient(t)
	viewerFor(t, s, c)
	// other checks with c's credentials from another address (another of its candidates).
	other := newClient(t)
	other.ufrag, other.pwd, other.sufrag, other.spwd, other.server = c.ufrag, c.pwd, c.sufrag, c.spwd, c.server
	requests := func(c *client) int {
		n := 0
		for _, m := range readSTUN(t, c, 300*time.Millisecond) {
			if m.Type == stun.BindingRequest {
				n++
			}
		}
		return n
	}
	if err := other.check(false); err != nil {
		t.Fatal(err)
	}
	if n := requests(other); n != 1 {
		t.Fatalf("first path: %d binding requests, want 1", n)
	}
	if err := c.check(false); err != nil {
		t.Fatal(err)
	}
	if n := requests(c); n != 1 {
		t.Fatalf("second path: %d binding requests, want 1", n)
	}
	// Each path once.
	if err := other.check(false); err != nil {
		t.Fatal(err)
	}
	if err := c.check(false); err != nil {
		t.Fatal(err)
	}
	if n := requests(other) + requests(c); n != 0 {
		t.Fatalf("%d binding requests for paths already nudged", n)
	}
}
