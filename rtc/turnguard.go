package rtc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/pion/stun/v3"
	"github.com/pion/turn/v4"

	"github.com/petrel-sfu/petrel/lograte"
)

// turnGuard decides what a TURN client may reach: exactly the media ports in
// peers. TURN permissions are per IP address (RFC 8656 §9), so it checks
// twice: CreatePermission and ChannelBind naming any other address and port
// get 403 Forbidden, and the relay socket refuses to send anywhere else (a
// Send indication names a port of its own).
type turnGuard struct {
	peers   []net.UDPAddr
	relayIP net.IP
	// relays are the live allocations' relayed addresses: two clients that
	// both need a relay (a direct session to a camera) reach each other
	// through them. Copied on write: allocations are rare, packets are not.
	relays  atomic.Pointer[map[netip.AddrPort]bool]
	relayMu sync.Mutex
	key     func(user, realm string) ([]byte, bool)
	quota   *turnQuota
	log     *slog.Logger
	refused lograte.Limit
}

func newTURNGuard(o TURNOptions) *turnGuard {
	g := &turnGuard{log: o.Log, relayIP: o.RelayIP}
	g.relays.Store(&map[netip.AddrPort]bool{})
	for _, p := range o.Peers {
		if ip4 := p.IP.To4(); ip4 != nil {
			p.IP = ip4
		}
		g.peers = append(g.peers, p)
	}
	g.quota = &turnQuota{perUser: o.MaxPerUser, perIP: o.MaxPerIP, log: o.Log,
		users: map[string]int{}, ips: map[netip.Addr]int{}, pending: map[string]quotaEntry{}, live: map[string]quotaEntry{}}
	return g
}

// permit reports whether ip:port is one of the media ports or a live
// allocation's relayed address.
func (g *turnGuard) permit(ip net.IP, port int) bool {
	for i := range g.peers {
		if g.peers[i].Port == port && g.peers[i].IP.Equal(ip) {
			return true
		}
	}
	a, ok := netip.AddrFromSlice(ip)
	return ok && (*g.relays.Load())[netip.AddrPortFrom(a.Unmap(), uint16(port))]
}

// permitIP is Pion's PermissionHandler, which sees only the address.
func (g *turnGuard) permitIP(src net.Addr, ip net.IP) bool {
	for i := range g.peers {
		if g.peers[i].IP.Equal(ip) {
			return true
		}
	}
	if g.relayIP != nil && g.relayIP.Equal(ip) {
		return true
	}
	g.logRefused(src, ip.String())
	return false
}

// setRelay adds or removes a relayed address.
func (g *turnGuard) setRelay(a net.Addr, live bool) {
	ua, ok := a.(*net.UDPAddr)
	if !ok {
		return
	}
	ap := ua.AddrPort()
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	g.relayMu.Lock()
	defer g.relayMu.Unlock()
	old := *g.relays.Load()
	next := make(map[netip.AddrPort]bool, len(old)+1)
	for k := range old {
		next[k] = true
	}
	if live {
		next[ap] = true
	} else {
		delete(next, ap)
	}
	g.relays.Store(&next)
}

func (g *turnGuard) peerList() []string {
	out := make([]string, len(g.peers))
	for i := range g.peers {
		out[i] = g.peers[i].String()
	}
	return out
}

func (g *turnGuard) logRefused(src net.Addr, peer string) {
	if n, ok := g.refused.Allow(refusedLogEvery); ok {
		g.log.Warn("turn relay refused: not a media port of this server", "src", src.String(), "peer", peer, "since_last", n)
	}
}

const (
	stunCreatePermissionRequest = 0x0008
	stunChannelBindRequest      = 0x0009
	stunHeaderLen               = 20
)

// forbid answers an authenticated CreatePermission or ChannelBind request that
// names a peer outside the media ports: it returns the 403 response to send
// instead of passing the request on, or nil for everything else (which Pion
// handles, unauthenticated requests included).
func (g *turnGuard) forbid(b []byte, src net.Addr) []byte {
	if len(b) < stunHeaderLen || b[0]&0xc0 != 0 {
		return nil
	}
	if t := binary.BigEndian.Uint16(b); t != stunCreatePermissionRequest && t != stunChannelBindRequest {
		return nil
	}
	m := &stun.Message{Raw: append([]byte(nil), b...)}
	if m.Decode() != nil {
		return nil
	}
	bad := ""
	_ = m.ForEach(stun.AttrXORPeerAddress, func(m *stun.Message) error {
		var a stun.XORMappedAddress
		if err := a.GetFromAs(m, stun.AttrXORPeerAddress); err == nil && !g.permit(a.IP, a.Port) && bad == "" {
			bad = a.String()
		}
		return nil
	})
	if bad == "" {
		return nil
	}
	var user stun.Username
	var realm stun.Realm
	if user.GetFrom(m) != nil || realm.GetFrom(m) != nil {
		return nil
	}
	key, ok := g.key(user.String(), realm.String())
	if !ok || stun.MessageIntegrity(key).Check(m) != nil {
		return nil
	}
	g.logRefused(src, bad)
	resp, err := stun.Build(stun.NewTransactionIDSetter(m.TransactionID),
		stun.NewType(m.Type.Method, stun.ClassErrorResponse),
		&stun.ErrorCodeAttribute{Code: stun.CodeForbidden, Reason: []byte("Forbidden: peer is not a media address of this server")},
		stun.MessageIntegrity(key), stun.Fingerprint)
	if err != nil {
		return nil
	}
	return resp.Raw
}

// guardedPacketConn is the TURN server's UDP socket with forbid applied.
type guardedPacketConn struct {
	net.PacketConn
	g *turnGuard
}

func (c *guardedPacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(p)
		if err != nil {
			return n, addr, err
		}
		if resp := c.g.forbid(p[:n], addr); resp != nil {
			_, _ = c.PacketConn.WriteTo(resp, addr)
			continue
		}
		return n, addr, nil
	}
}

// guardedListener applies forbid to TURN over TCP.
type guardedListener struct {
	net.Listener
	g *turnGuard
}

// streamBuffer holds one frame for inspection: larger ones exceed Pion's
// inbound MTU (1600) and are dropped by Pion itself.
const streamBuffer = 2048

func (l guardedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &guardedStream{Conn: c, g: l.g, br: bufio.NewReaderSize(c, streamBuffer)}, nil
}

// guardedStream frames a TURN TCP stream (RFC 8656 §12.5: STUN messages and
// ChannelData padded to 4 bytes) just enough to drop forbidden requests; the
// bytes it passes on are unchanged.
type guardedStream struct {
	net.Conn
	g   *turnGuard
	br  *bufio.Reader
	rem int  // bytes left of the frame being passed on
	raw bool // not TURN framing: pass everything (Pion closes the connection)
}

func (s *guardedStream) Read(p []byte) (int, error) {
	for s.rem == 0 && !s.raw {
		h, err := s.br.Peek(4)
		if err != nil {
			return 0, err
		}
		switch h[0] & 0xc0 {
		case 0x40: // ChannelData
			s.rem = 4 + (int(binary.BigEndian.Uint16(h[2:]))+3)&^3
		case 0x00:
			s.rem = stunHeaderLen + int(binary.BigEndian.Uint16(h[2:]))
			t := binary.BigEndian.Uint16(h)
			if (t == stunCreatePermissionRequest || t == stunChannelBindRequest) && s.rem <= streamBuffer {
				frame, err := s.br.Peek(s.rem)
				if err != nil {
					s.rem = 0
					return 0, err
				}
				if resp := s.g.forbid(frame, s.Conn.RemoteAddr()); resp != nil {
					_, _ = s.br.Discard(s.rem)
					s.rem = 0
					if _, err := s.Conn.Write(resp); err != nil {
						return 0, err
					}
				}
			}
		default:
			s.raw = true
		}
	}
	if !s.raw && len(p) > s.rem {
		p = p[:s.rem]
	}
	n, err := s.br.Read(p)
	if !s.raw {
		s.rem -= n
	}
	return n, err
}

var errRelayRefused = errors.New("turn: peer is not a media port of this server")

// relayGenerator hands out relay sockets that send only to the media ports.
type relayGenerator struct {
	static turn.RelayAddressGeneratorStatic
	guard  *turnGuard
}

func (r *relayGenerator) Validate() error { return r.static.Validate() }

func (r *relayGenerator) AllocatePacketConn(network string, port int) (net.PacketConn, net.Addr, error) {
	c, a, err := r.static.AllocatePacketConn(network, port)
	if err != nil {
		return nil, nil, err
	}
	r.guard.setRelay(a, true)
	return &relayConn{PacketConn: c, g: r.guard, addr: a}, a, nil
}

// AllocateConn is for TCP relays (RFC 6062), which Pion's server does not make.
func (r *relayGenerator) AllocateConn(string, int) (net.Conn, net.Addr, error) {
	return nil, nil, errRelayRefused
}

// relayConn is an allocation's relay socket.
type relayConn struct {
	net.PacketConn
	g    *turnGuard
	addr net.Addr
	once sync.Once
}

func (c *relayConn) Close() error {
	c.once.Do(func() { c.g.setRelay(c.addr, false) })
	return c.PacketConn.Close()
}

func (c *relayConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if ua, ok := addr.(*net.UDPAddr); !ok || !c.g.permit(ua.IP, ua.Port) {
		c.g.logRefused(c.LocalAddr(), addr.String())
		return 0, errRelayRefused
	}
	return c.PacketConn.WriteTo(p, addr)
}
