package rtc

import (
	"context"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenUDPGroup binds n UDP sockets to one address and port with
// SO_REUSEPORT: the kernel hashes each sender's address and port to one of
// them, so each has its own reader and a client's datagrams stay on one. The
// port is first bound alone, so that a port in use fails as it would without
// the option and a port-0 bind cannot land on another process's group.
// Where the option or a bind fails, the group is one socket.
func listenUDPGroup(network, addr string, n int) ([]*net.UDPConn, error) {
	probe, err := net.ListenPacket(network, addr)
	if err != nil {
		return nil, err
	}
	if n <= 1 {
		return []*net.UDPConn{probe.(*net.UDPConn)}, nil
	}
	bound := probe.LocalAddr().String()
	_ = probe.Close()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	var conns []*net.UDPConn
	for range n {
		pc, err := lc.ListenPacket(context.Background(), network, bound)
		if err != nil {
			break
		}
		conns = append(conns, pc.(*net.UDPConn))
	}
	if len(conns) > 0 {
		return conns, nil
	}
	// SO_REUSEPORT refused: the port alone, as the probe had it.
	pc, err := net.ListenPacket(network, bound)
	if err != nil {
		return nil, err
	}
	return []*net.UDPConn{pc.(*net.UDPConn)}, nil
}
