package rtc

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/pion/turn/v4"

	"github.com/petrel-sfu/petrel/auth"
)

// TURNServer is the embedded TURN server (UDP and TCP on one port number). It
// accepts only the time-limited REST-API credentials handed out with joins, and
// relays only to this server's own media addresses, so it cannot be used as an
// open relay into the network it sits in.
type TURNServer struct {
	srv  *turn.Server
	Port int
}

// StartTURN listens on bindIP:port (UDP and TCP).
func StartTURN(bindIP string, port int, realm, secret string, relayIP net.IP, allowed []net.IP, log *slog.Logger) (*TURNServer, error) {
	udp, tcp, port, err := listenBoth(bindIP, port)
	if err != nil {
		return nil, err
	}
	permit := func(_ net.Addr, peer net.IP) bool {
		for _, ip := range allowed {
			if ip.Equal(peer) {
				return true
			}
		}
		log.Warn("turn permission refused", "peer", peer.String())
		return false
	}
	gen := &turn.RelayAddressGeneratorStatic{RelayAddress: relayIP, Address: bindIP}
	srv, err := turn.NewServer(turn.ServerConfig{
		Realm: realm,
		AuthHandler: func(user, realm string, src net.Addr) ([]byte, bool) {
			pass, ok := auth.CheckTURN(secret, user, time.Now())
			if !ok {
				log.Info("turn credentials refused", "src", src.String())
				return nil, false
			}
			return turn.GenerateAuthKey(user, realm, pass), true
		},
		PacketConnConfigs: []turn.PacketConnConfig{{PacketConn: udp, RelayAddressGenerator: gen, PermissionHandler: permit}},
		ListenerConfigs:   []turn.ListenerConfig{{Listener: tcp, RelayAddressGenerator: gen, PermissionHandler: permit}},
	})
	if err != nil {
		udp.Close()
		tcp.Close()
		return nil, fmt.Errorf("turn: %w", err)
	}
	log.Info("turn server", "port", port, "relay", relayIP.String())
	return &TURNServer{srv: srv, Port: port}, nil
}

// listenBoth opens UDP and TCP on one port number. With port 0 the number the
// UDP socket got may be taken for TCP: then another is tried.
func listenBoth(bindIP string, port int) (net.PacketConn, net.Listener, int, error) {
	for try := 0; ; try++ {
		udp, err := net.ListenPacket("udp4", net.JoinHostPort(bindIP, strconv.Itoa(port)))
		if err != nil {
			return nil, nil, 0, fmt.Errorf("turn udp: %w", err)
		}
		p := udp.LocalAddr().(*net.UDPAddr).Port
		tcp, err := net.Listen("tcp4", net.JoinHostPort(bindIP, strconv.Itoa(p)))
		if err == nil {
			return udp, tcp, p, nil
		}
		udp.Close()
		if port != 0 || try == 10 {
			return nil, nil, 0, fmt.Errorf("turn tcp: %w", err)
		}
	}
}

// Close stops the server and its allocations.
func (t *TURNServer) Close() error { return t.srv.Close() }
