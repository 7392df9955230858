package rtc

import (
	"net"
	"net/netip"
	"sync/atomic"
)

// PacketFilter sees every datagram on the shared UDP port before Pion's ICE
// mux does and keeps the ones it handles (the WebRTC sessions, session/).
// Handle runs on the mux's one reader goroutine; b is valid during the call.
type PacketFilter interface {
	Handle(b []byte, from netip.AddrPort) bool
}

// filterConn is the shared UDP socket as Pion's mux sees it: reads pass
// through the filter first. It implements ice.AddrPortReaderWriter so that the
// mux keeps its allocation-free reads and writes. Reads come in batches
// (recv_linux.go); only the mux's one reader goroutine reads.
type filterConn struct {
	*net.UDPConn
	f atomic.Pointer[PacketFilter]
	r *reader // nil: one ReadFromUDPAddrPort per datagram
}

func newFilterConn(c *net.UDPConn) *filterConn {
	return &filterConn{UDPConn: c, r: newReader(c)}
}

func (c *filterConn) ReadFromAddrPort(b []byte) (int, netip.AddrPort, error) {
	if c.r == nil {
		for {
			n, from, err := c.UDPConn.ReadFromUDPAddrPort(b)
			if err != nil {
				return n, from, err
			}
			if f := c.f.Load(); f != nil && (*f).Handle(b[:n], from) {
				continue
			}
			return n, from, nil
		}
	}
	for {
		d, from, err := c.r.nextDatagram()
		if err != nil {
			return 0, from, err
		}
		if f := c.f.Load(); f != nil && (*f).Handle(d, from) {
			continue
		}
		return copy(b, d), from, nil
	}
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

// UDPConn is the shared UDP socket, for writing (reads belong to the mux).
func (e *Engine) UDPConn() *net.UDPConn { return e.filter.UDPConn }
