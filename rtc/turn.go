package rtc

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/pion/turn/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/lograte"
)

// TURNServer is the embedded TURN server (UDP and TCP on one port number). It
// accepts only the time-limited REST-API credentials handed out with joins, and
// relays only to this server's own media ports (turnguard.go), so it cannot be
// used as an open relay into the network or the host it sits on.
type TURNServer struct {
	srv  *turn.Server
	Port int
}

// TURNOptions configure the embedded TURN server.
type TURNOptions struct {
	BindIP string
	Port   int
	Realm  string
	Secret string
	// RelayIP is the address relayed traffic leaves from.
	RelayIP net.IP
	// Peers are the only addresses a client may relay to: the ICE UDP port on
	// each media address (Engine.RelayPeers).
	Peers []net.UDPAddr
	// MaxPerUser and MaxPerIP bound live allocations per identity and per
	// client address; 0 means no bound.
	MaxPerUser, MaxPerIP int
	Log                  *slog.Logger
}

// StartTURN listens on o.BindIP:o.Port (UDP and TCP).
func StartTURN(o TURNOptions) (*TURNServer, error) {
	udp, tcp, port, err := listenBoth(o.BindIP, o.Port)
	if err != nil {
		return nil, err
	}
	log := o.Log
	g := newTURNGuard(o)
	g.key = func(user, realm string) ([]byte, bool) {
		pass, ok := auth.CheckTURN(o.Secret, user, time.Now())
		if !ok || realm != o.Realm {
			return nil, false
		}
		return turn.GenerateAuthKey(user, realm, pass), true
	}
	var refusedCreds lograte.Limit
	gen := &relayGenerator{static: turn.RelayAddressGeneratorStatic{RelayAddress: o.RelayIP, Address: o.BindIP}, guard: g}
	srv, err := turn.NewServer(turn.ServerConfig{
		Realm: o.Realm,
		AuthHandler: func(user, realm string, src net.Addr) ([]byte, bool) {
			k, ok := g.key(user, realm)
			// Only the source is logged: never a password, nor the username it is derived from.
			if !ok {
				if n, allow := refusedCreds.Allow(refusedLogEvery); allow {
					log.Info("turn credentials refused", "src", src.String(), "since_last", n)
				}
			}
			return k, ok
		},
		QuotaHandler: g.quota.admit,
		EventHandler: turn.EventHandler{
			OnAllocationCreated: func(src, _ net.Addr, _, _, _ string, _ net.Addr, _ int) { g.quota.created(src) },
			OnAllocationDeleted: func(src, _ net.Addr, _, _, _ string) { g.quota.deleted(src) },
		},
		PacketConnConfigs: []turn.PacketConnConfig{{PacketConn: &guardedPacketConn{PacketConn: udp, g: g}, RelayAddressGenerator: gen, PermissionHandler: g.permitIP}},
		ListenerConfigs:   []turn.ListenerConfig{{Listener: guardedListener{Listener: tcp, g: g}, RelayAddressGenerator: gen, PermissionHandler: g.permitIP}},
	})
	if err != nil {
		udp.Close()
		tcp.Close()
		return nil, fmt.Errorf("turn: %w", err)
	}
	log.Info("turn server", "port", port, "relay", o.RelayIP.String(), "peers", g.peerList(),
		"max_allocations_per_user", o.MaxPerUser, "max_allocations_per_ip", o.MaxPerIP)
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
