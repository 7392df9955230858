package gate

import (
	"io"
	"net"
	"net/netip"
	"sync"

	"github.com/petrel-sfu/petrel/protocol"
)

// Listener caps the connections each client address holds open: the surplus
// is closed as soon as it is accepted. Trusted proxies, which carry many
// clients, are not capped.
type Listener struct {
	net.Listener
	max     int
	exempt  Proxies
	refused *Refusals

	mu   sync.Mutex
	open map[netip.Addr]int
}

// NewListener caps ln at max connections per address (0: no cap).
func NewListener(ln net.Listener, max int, exempt Proxies, refused *Refusals) *Listener {
	return &Listener{Listener: ln, max: max, exempt: exempt, refused: refused, open: map[netip.Addr]int{}}
}

// Accept returns the next connection within its address's cap.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.max <= 0 {
			return c, err
		}
		ap, perr := netip.ParseAddrPort(c.RemoteAddr().String())
		if perr != nil || l.exempt.Trusts(ap.Addr()) {
			return c, nil
		}
		a := key(ap.Addr())
		l.mu.Lock()
		full := l.open[a] >= l.max
		if !full {
			l.open[a]++
		}
		l.mu.Unlock()
		if full {
			_ = c.Close()
			if l.refused != nil {
				l.refused.NoteRemote("http", c.RemoteAddr().String(), errTooManyConns)
			}
			continue
		}
		return &capConn{Conn: c, l: l, a: a}, nil
	}
}

// Open is the number of connections a holds.
func (l *Listener) Open(a netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[key(a)]
}

func (l *Listener) release(a netip.Addr) {
	l.mu.Lock()
	if l.open[a]--; l.open[a] <= 0 {
		delete(l.open, a)
	}
	l.mu.Unlock()
}

type capConn struct {
	net.Conn
	l    *Listener
	a    netip.Addr
	once sync.Once
}

func (c *capConn) Close() error {
	c.once.Do(func() { c.l.release(c.a) })
	return c.Conn.Close()
}

// ReadFrom keeps the kernel's sendfile/splice for file responses.
func (c *capConn) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(c.Conn, r)
}

var errTooManyConns = protocol.Errorf(protocol.CodeRateLimited, "too many connections from one address")
