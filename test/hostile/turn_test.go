package hostile

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/stun/v3"
	"github.com/pion/turn/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera/probe"
	"github.com/petrel-sfu/petrel/protocol"
)

// turnCredentials are those an OPTIONS on a WHIP endpoint hands to token.
func turnCredentials(t *testing.T, s *Server, token string) (user, pass string, ok bool) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodOptions, s.URL+"/whip/turnroom", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, ice := range probe.ParseLinks(resp.Header.Values("Link")) {
		if strings.HasPrefix(ice.URLs[0], "turn:") {
			return ice.Username, ice.Credential.(string), true
		}
	}
	return "", "", false
}

// allocate makes a TURN allocation over transport ("udp" or "tcp").
func allocate(t *testing.T, s *Server, transport, user, pass string) (*turn.Client, net.PacketConn) {
	t.Helper()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.TURNPort))
	var conn net.PacketConn
	if transport == "tcp" {
		tc, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn = turn.NewSTUNConn(tc)
	} else {
		var err error
		if conn, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	c, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: addr, TURNServerAddr: addr, Conn: conn,
		Username: user, Password: pass, Realm: "petrel"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); conn.Close() })
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	relay, err := c.Allocate()
	if err != nil {
		t.Fatalf("allocate over %s: %v", transport, err)
	}
	return c, relay
}

func forbidden(err error) bool {
	var te *stun.TurnError
	return errors.As(err, &te) && te.ErrorCodeAttr.Code == stun.CodeForbidden
}

// arrives reports whether want reaches c within d.
func arrives(c net.PacketConn, want string, d time.Duration) bool {
	buf := make([]byte, 1500)
	_ = c.SetReadDeadline(time.Now().Add(d))
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return false
		}
		if string(buf[:n]) == want {
			return true
		}
	}
}

type sendData []byte

func (d sendData) AddTo(m *stun.Message) error { m.Add(stun.AttrData, d); return nil }

type xorPeer struct{ *net.UDPAddr }

func (p xorPeer) AddTo(m *stun.Message) error {
	return (&stun.XORMappedAddress{IP: p.IP, Port: p.Port}).AddToAs(m, stun.AttrXORPeerAddress)
}

// TestTURNRelaysOnlyToMediaPort: credentials from a publishing token reach
// the server's ICE UDP port through the embedded TURN, and nothing else on
// the host: not a loopback-only service (a camera's RTP-push port), not the
// HTTP port, not the TURN port itself.
func TestTURNRelaysOnlyToMediaPort(t *testing.T) {
	s := Start(t, Options{Args: []string{"--turn=true"}})
	user, pass, ok := turnCredentials(t, s, s.Token(t, "turnroom", "pub", auth.Grants{Publish: true}))
	if !ok {
		t.Fatalf("a publishing token got no TURN credentials\n%s", s.Logs())
	}
	service, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer service.Close()
	lo := net.IPv4(127, 0, 0, 1)
	serviceAddr := &net.UDPAddr{IP: lo, Port: service.LocalAddr().(*net.UDPAddr).Port}
	media := &net.UDPAddr{IP: lo, Port: s.UDPPort}

	for _, transport := range []string{"udp", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			c, relay := allocate(t, s, transport, user, pass)
			for _, to := range []*net.UDPAddr{serviceAddr, {IP: lo, Port: s.HTTPPort}, {IP: lo, Port: s.TURNPort}, {IP: lo, Port: s.TCPPort}} {
				if err := c.CreatePermission(to); !forbidden(err) {
					t.Errorf("CreatePermission %s: %v, want 403 Forbidden", to, err)
				}
			}
			if _, err := relay.WriteTo([]byte("through turn"), serviceAddr); err == nil && arrives(service, "through turn", 500*time.Millisecond) {
				t.Error("a relayed datagram reached a loopback service")
			}
			// The media port is allowed (a ChannelBind follows the first send).
			if err := c.CreatePermission(media); err != nil {
				t.Fatalf("CreatePermission to the media port: %v", err)
			}
			if _, err := relay.WriteTo([]byte("to media"), media); err != nil {
				t.Fatalf("relay to the media port: %v", err)
			}
			// The permission for 127.0.0.1 is per address; a Send indication
			// names a port of its own, and must not reach the service either.
			msg, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodSend, stun.ClassIndication),
				sendData("by indication"), xorPeer{serviceAddr}, stun.Fingerprint)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.WriteTo(msg.Raw, c.TURNServerAddr()); err != nil {
				t.Fatal(err)
			}
			if arrives(service, "by indication", 500*time.Millisecond) {
				t.Error("a Send indication reached a loopback service")
			}
		})
	}
	s.Healthy(t)
}

// TestTURNCredentialsNeedMediaGrant: a token that may neither publish nor
// subscribe gets no TURN credentials, from WHIP's OPTIONS or from a join.
func TestTURNCredentialsNeedMediaGrant(t *testing.T) {
	s := Start(t, Options{Args: []string{"--turn=true"}})
	for name, g := range map[string]auth.Grants{"none": {}, "data": {PublishData: true}} {
		tok := s.Token(t, "turnroom", "idle-"+name, g)
		if _, _, ok := turnCredentials(t, s, tok); ok {
			t.Errorf("grants %s: OPTIONS /whip handed out TURN credentials", name)
		}
		if ice := joinedICEServers(t, s, tok); len(ice) > 0 {
			t.Errorf("grants %s: the joined message carries iceServers %v", name, ice)
		}
	}
	if _, _, ok := turnCredentials(t, s, s.Token(t, "turnroom", "viewer", auth.Grants{Subscribe: true})); !ok {
		t.Error("a subscribing token got no TURN credentials")
	}
	s.Healthy(t)
}

// joinedICEServers joins over the WebSocket and returns the joined message's
// iceServers (none if the join is refused).
func joinedICEServers(t *testing.T, s *Server, token string) []any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, s.WS, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	join, _ := json.Marshal(protocol.Msg{"type": "join", "token": token, "protocol": protocol.Version, "id": 1})
	if err := ws.Write(ctx, websocket.MessageText, join); err != nil {
		t.Fatal(err)
	}
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return nil
		}
		var m map[string]any
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		switch m["type"] {
		case "joined":
			ice, _ := m["iceServers"].([]any)
			return ice
		case "error":
			return nil
		}
	}
}

// TestTURNAllocationQuota: one identity's credentials cannot take every relay
// port: past turn.max_allocations_per_user the answer is 486.
func TestTURNAllocationQuota(t *testing.T) {
	s := Start(t, Options{Args: []string{"--turn=true", "--turn-max-allocations-per-user=2"}})
	user, pass, ok := turnCredentials(t, s, s.Token(t, "turnroom", "hog", auth.Grants{Subscribe: true}))
	if !ok {
		t.Fatal("no TURN credentials")
	}
	allocate(t, s, "udp", user, pass)
	allocate(t, s, "tcp", user, pass)
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.TURNPort))
	c, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: addr, TURNServerAddr: addr, Conn: conn,
		Username: user, Password: pass, Realm: "petrel"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Allocate()
	var te *stun.TurnError
	if !errors.As(err, &te) || te.ErrorCodeAttr.Code != stun.CodeAllocQuotaReached {
		t.Fatalf("third allocation: %v, want 486 Allocation Quota Reached", err)
	}
	s.WaitLog(t, "turn allocation quota reached", 2*time.Second)
	s.Healthy(t)
}
