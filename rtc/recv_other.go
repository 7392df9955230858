//go:build !linux

package rtc

import (
	"net"
	"net/netip"
)

// reader reads one datagram per call where recvmmsg(2) is not available.
type reader struct {
	c   *net.UDPConn
	buf []byte
}

func newReader(c *net.UDPConn) *reader { return &reader{c: c, buf: make([]byte, 8192)} }

func (r *reader) nextDatagram() ([]byte, netip.AddrPort, error) {
	n, from, err := r.c.ReadFromUDPAddrPort(r.buf)
	return r.buf[:n], from, err
}
