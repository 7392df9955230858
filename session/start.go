package session

import (
	"log/slog"
	"net"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/rtc"
)

// Start puts the session server in front of Pion's ICE mux on the
// shared UDP port (Pion keeps the node links: cluster/). Its host candidates
// are the engine's: 127.0.0.1 with --loopback, the node IP if one is set,
// else the machine's non-loopback addresses.
func Start(cfg config.Config, e *rtc.Engine, log *slog.Logger) (*Server, error) {
	var ips []net.IP
	switch {
	case cfg.Loopback:
		ips = []net.IP{net.IPv4(127, 0, 0, 1)}
	case cfg.RTC.NodeIP != "":
		ips = []net.IP{net.ParseIP(cfg.RTC.NodeIP)}
	default:
		for _, ip := range e.LocalIPs {
			if !ip.IsLoopback() {
				ips = append(ips, ip)
			}
		}
	}
	srv, err := New(e.UDPConn(), ips, log)
	if err != nil {
		return nil, err
	}
	srv.MaxDataChannels = cfg.Limits.MaxDataChannels
	if ln := e.TCPListener(); ln != nil {
		srv.ServeTCP(ln) // passive ICE-TCP candidates in every SDP it writes
	}
	e.SetFilter(srv)
	log.Info("webrtc sessions", "candidates", ips, "ice_tcp_port", srv.TCPPort())
	return srv, nil
}
