//go:build !linux

package rtc

import "net"

// listenUDPGroup is one socket where SO_REUSEPORT's hashing of senders
// across sockets is not relied on.
func listenUDPGroup(network, addr string, _ int) ([]*net.UDPConn, error) {
	pc, err := net.ListenPacket(network, addr)
	if err != nil {
		return nil, err
	}
	return []*net.UDPConn{pc.(*net.UDPConn)}, nil
}
