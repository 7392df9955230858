package rtc

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/pion/stun/v3"
	"github.com/pion/turn/v4"

	"github.com/petrel-sfu/petrel/auth"
)

const testTURNSecret = "turn-test-secret"

// udpListener is a UDP socket on loopback whose datagrams the test can wait for.
func udpListener(t *testing.T) (*net.UDPConn, int) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, c.LocalAddr().(*net.UDPAddr).Port
}

// received reports whether want arrives on c within d.
func received(c *net.UDPConn, want string, d time.Duration) bool {
	buf := make([]byte, 1500)
	deadline := time.Now().Add(d)
	for {
		_ = c.SetReadDeadline(deadline)
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return false
		}
		if string(buf[:n]) == want {
			return true
		}
	}
}

// turnClient allocates on the TURN server at port with fresh credentials for identity.
func turnClient(t *testing.T, port int, identity string) (*turn.Client, net.PacketConn, error) {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return turnClientOn(t, conn, port, identity)
}

// turnClientTCP is turnClient over TURN's TCP transport.
func turnClientTCP(t *testing.T, port int, identity string) (*turn.Client, net.PacketConn, error) {
	t.Helper()
	tc, err := net.Dial("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	return turnClientOn(t, turn.NewSTUNConn(tc), port, identity)
}

func turnClientOn(t *testing.T, conn net.PacketConn, port int, identity string) (*turn.Client, net.PacketConn, error) {
	t.Helper()
	user, pass := auth.TURNCredentials(testTURNSecret, identity, time.Hour, time.Now())
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
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
	return c, relay, err
}

func startTestTURN(t *testing.T, mediaPort int, perUser, perIP int) *TURNServer {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lo := net.IPv4(127, 0, 0, 1)
	s, err := StartTURN(TURNOptions{BindIP: "127.0.0.1", Realm: "petrel", Secret: testTURNSecret, RelayIP: lo,
		Peers: []net.UDPAddr{{IP: lo, Port: mediaPort}}, MaxPerUser: perUser, MaxPerIP: perIP, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func isForbidden(err error) bool {
	var te *stun.TurnError
	return errors.As(err, &te) && te.ErrorCodeAttr.Code == stun.CodeForbidden
}

// TestTURNRelaysOnlyToMediaPorts: with the media address on loopback (as in
// --loopback), a client may reach the media port and nothing else on the host.
func TestTURNRelaysOnlyToMediaPorts(t *testing.T) {
	for _, tr := range []struct {
		name string
		dial func(*testing.T, int, string) (*turn.Client, net.PacketConn, error)
	}{{"udp", turnClient}, {"tcp", turnClientTCP}} {
		t.Run(tr.name, func(t *testing.T) { testTURNRelaysOnlyToMediaPorts(t, tr.dial) })
	}
}

func testTURNRelaysOnlyToMediaPorts(t *testing.T, dial func(*testing.T, int, string) (*turn.Client, net.PacketConn, error)) {
	media, mediaPort := udpListener(t)
	other, otherPort := udpListener(t)
	s := startTestTURN(t, mediaPort, 0, 0)
	c, relay, err := dial(t, s.Port, "alice")
	if err != nil {
		t.Fatal(err)
	}
	otherAddr := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: otherPort}
	if err := c.CreatePermission(otherAddr); !isForbidden(err) {
		t.Errorf("CreatePermission to a non-media port: %v, want 403 Forbidden", err)
	}
	if err := c.CreatePermission(&net.UDPAddr{IP: net.IPv4(10, 9, 8, 7), Port: mediaPort}); !isForbidden(err) {
		t.Errorf("CreatePermission to another host: %v, want 403 Forbidden", err)
	}
	mediaAddr := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: mediaPort}
	if _, err := relay.WriteTo([]byte("to media"), mediaAddr); err != nil {
		t.Fatal(err)
	}
	if !received(media, "to media", 3*time.Second) {
		t.Fatal("the media port did not get the relayed datagram")
	}
	// TURN permissions are per IP: with one for 127.0.0.1 a Send indication
	// still names a port, and only the media port may be it.
	msg, err := stun.Build(stun.TransactionID, stun.NewType(stun.MethodSend, stun.ClassIndication),
		turnData("to other"), peerAddress{otherAddr}, stun.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteTo(msg.Raw, c.TURNServerAddr()); err != nil {
		t.Fatal(err)
	}
	if received(other, "to other", 500*time.Millisecond) {
		t.Error("a Send indication reached a non-media port")
	}
}

// TestTURNAllocationQuota: allocations are bounded per identity and per source address.
func TestTURNAllocationQuota(t *testing.T) {
	_, mediaPort := udpListener(t)
	s := startTestTURN(t, mediaPort, 2, 3)
	for i := 0; i < 2; i++ {
		if _, _, err := turnClient(t, s.Port, "bob"); err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
	}
	if _, _, err := turnClient(t, s.Port, "bob"); err == nil {
		t.Error("a third allocation for one identity was accepted (limit 2)")
	}
	if _, _, err := turnClient(t, s.Port, "carol"); err != nil {
		t.Fatalf("another identity: %v", err)
	}
	if _, _, err := turnClient(t, s.Port, "dave"); err == nil {
		t.Error("a fourth allocation from one address was accepted (limit 3)")
	}
}

type turnData []byte

func (d turnData) AddTo(m *stun.Message) error {
	m.Add(stun.AttrData, d)
	return nil
}

type peerAddress struct{ *net.UDPAddr }

func (p peerAddress) AddTo(m *stun.Message) error {
	a := &stun.XORMappedAddress{IP: p.IP, Port: p.Port}
	return a.AddToAs(m, stun.AttrXORPeerAddress)
}

// TestTURNRelayToRelay: two clients that both need a relay (a direct session
// to a camera) reach each other through their relayed addresses; a relayed
// address that no longer exists is refused again.
func TestTURNRelayToRelay(t *testing.T) {
	_, mediaPort := udpListener(t)
	s := startTestTURN(t, mediaPort, 0, 0)
	a, relayA, err := turnClient(t, s.Port, "viewer")
	if err != nil {
		t.Fatal(err)
	}
	b, relayB, err := turnClient(t, s.Port, "camera")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CreatePermission(relayA.LocalAddr()); err != nil {
		t.Fatalf("camera permits the viewer's relay: %v", err)
	}
	if _, err := relayA.WriteTo([]byte("hello camera"), relayB.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	_ = relayB.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, _, err := relayB.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "hello camera" {
		t.Fatalf("relay to relay: %q, %v", buf[:n], err)
	}
	gone := relayB.LocalAddr()
	if err := relayB.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := a.CreatePermission(&net.UDPAddr{IP: gone.(*net.UDPAddr).IP, Port: gone.(*net.UDPAddr).Port})
		if isForbidden(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed allocation's relayed address: %v, want 403 Forbidden", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
