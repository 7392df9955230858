package rtc

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// PacketFilter sees every datagram on the shared UDP port before Pion's ICE
// mux does and keeps the ones it handles (the WebRTC sessions, session/).
// Handle runs on a reader goroutine of the port; b is valid during the call.
type PacketFilter interface {
	Handle(b []byte, from netip.AddrPort) bool
}

// ReaderFilter is a PacketFilter with per-goroutine decoding state: each of
// the port's readers gets a handler of its own from NewReader, and calls
// only that one.
type ReaderFilter interface {
	PacketFilter
	NewReader() PacketFilter
}

// filterConn is the shared UDP port as Pion's mux sees it: reads pass
// through the filter first. It implements ice.AddrPortReaderWriter so that the
// mux keeps its allocation-free reads and writes. Reads come in batches
// (recv_linux.go); the mux's goroutine reads the first socket of the port's
// group, a goroutine each the others (extra), whose datagrams the filter
// leaves wait in spill for the mux. Writes all go out of the first socket.
type filterConn struct {
	*net.UDPConn
	f atomic.Pointer[PacketFilter]
	r *reader      // nil: one ReadFromUDPAddrPort per datagram
	h handlerCache // the mux goroutine's

	extra []*net.UDPConn
	spill chan *spilled // datagrams of the extra sockets for the mux
	free  chan *spilled
	made  atomic.Int32
	dlMu  sync.Mutex
	dl    time.Time // the read deadline the mux's side set (SetReadDeadline)
}

// spillQueue bounds the extra sockets' datagrams waiting for the mux (node
// links' ICE and DTLS, and strays): beyond it they are dropped, as a full
// socket would.
const spillQueue = 64

type spilled struct {
	n    int
	from netip.AddrPort
	b    [8192]byte
}

// handlerCache is one reader's handler for the filter it last saw.
type handlerCache struct {
	f *PacketFilter
	h PacketFilter
}

func (hc *handlerCache) get(f *PacketFilter) PacketFilter {
	if f != hc.f {
		hc.f, hc.h = f, *f
		if rf, ok := (*f).(ReaderFilter); ok {
			hc.h = rf.NewReader()
		}
	}
	return hc.h
}

// newFilterConn reads c on the mux's goroutine and every extra socket (bound
// to c's address with SO_REUSEPORT) on a goroutine of its own.
func newFilterConn(c *net.UDPConn, extra ...*net.UDPConn) *filterConn {
	fc := &filterConn{UDPConn: c, r: newReader(c), extra: extra}
	if len(extra) > 0 {
		fc.spill = make(chan *spilled, spillQueue)
		fc.free = make(chan *spilled, spillQueue)
		for _, u := range extra {
			go fc.readExtra(u)
		}
	}
	return fc
}

func (c *filterConn) ReadFromAddrPort(b []byte) (int, netip.AddrPort, error) {
	for {
		if c.spill != nil {
			select {
			case s := <-c.spill:
				n, from := copy(b, s.b[:s.n]), s.from
				c.free <- s
				return n, from, nil
			default:
			}
		}
		var d []byte
		var from netip.AddrPort
		var err error
		if c.r != nil {
			d, from, err = c.r.nextDatagram()
		} else {
			var n int
			n, from, err = c.UDPConn.ReadFromUDPAddrPort(b)
			d = b[:n]
		}
		if err != nil {
			if c.spill != nil && errors.Is(err, os.ErrDeadlineExceeded) && c.woken() {
				continue
			}
			return 0, from, err
		}
		if f := c.f.Load(); f != nil && c.h.get(f).Handle(d, from) {
			continue
		}
		return copy(b, d), from, nil
	}
}

// readExtra is the reader of one extra socket: what the filter leaves goes
// to the mux's goroutine, which it wakes with a read deadline in the past.
func (c *filterConn) readExtra(u *net.UDPConn) {
	r := newReader(u)
	var hc handlerCache
	var buf []byte
	if r == nil {
		buf = make([]byte, 8192)
	}
	for {
		var d []byte
		var from netip.AddrPort
		var err error
		if r != nil {
			d, from, err = r.nextDatagram()
		} else {
			var n int
			n, from, err = u.ReadFromUDPAddrPort(buf)
			d = buf[:n]
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(time.Millisecond) // an error that repeats must not spin
			continue
		}
		if f := c.f.Load(); f != nil && hc.get(f).Handle(d, from) {
			continue
		}
		var s *spilled
		select {
		case s = <-c.free:
		default:
			if c.made.Add(1) > spillQueue {
				c.made.Add(-1)
				continue // the mux is behind: dropped
			}
			s = new(spilled)
		}
		s.n, s.from = copy(s.b[:], d), from
		c.spill <- s // never blocks: no more buffers than room
		_ = c.UDPConn.SetReadDeadline(time.Unix(1, 0))
	}
}

// woken reports whether a deadline error was an extra reader's wake-up (the
// mux's own deadline put back) rather than the mux's own deadline passing.
func (c *filterConn) woken() bool {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	if !c.dl.IsZero() && !time.Now().Before(c.dl) {
		return false
	}
	_ = c.UDPConn.SetReadDeadline(c.dl)
	return true
}

func (c *filterConn) SetReadDeadline(t time.Time) error {
	c.dlMu.Lock()
	c.dl = t
	err := c.UDPConn.SetReadDeadline(t)
	c.dlMu.Unlock()
	if c.spill != nil && len(c.spill) > 0 {
		_ = c.UDPConn.SetReadDeadline(time.Unix(1, 0)) // a wake-up this overwrote
	}
	return err
}

func (c *filterConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.UDPConn.SetWriteDeadline(t)
}

// Close closes every socket of the port's group.
func (c *filterConn) Close() error {
	for _, u := range c.extra {
		_ = u.Close()
	}
	return c.UDPConn.Close()
}

func (c *filterConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, from, err := c.ReadFromAddrPort(b)
	if err != nil {
		return n, nil, err
	}
	return n, net.UDPAddrFromAddrPort(from), nil
}

func (c *filterConn) WriteToAddrPort(b []byte, to netip.AddrPort) (int, error) {
	return c.UDPConn.WriteToUDPAddrPort(b, to)
}

// SetFilter puts f in front of Pion's ICE mux on the shared UDP port.
func (e *Engine) SetFilter(f PacketFilter) { e.filter.f.Store(&f) }

// UDPConn is the shared UDP port's first socket, for writing (reads belong
// to the port's readers).
func (e *Engine) UDPConn() *net.UDPConn { return e.filter.UDPConn }

// Readers is how many sockets, each with its reader goroutine, the UDP port
// has.
func (e *Engine) Readers() int { return 1 + len(e.filter.extra) }
