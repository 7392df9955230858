package server

import (
	"log/slog"
	"net"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/egress"
	"github.com/petrel-sfu/petrel/rtc"
	"github.com/petrel-sfu/petrel/sfu"
)

// startLeanEgress puts the lean egress in front of Pion's ICE mux on the
// shared UDP port and gives it WHEP viewers. Its host candidates are the
// engine's: 127.0.0.1 with --loopback, the node IP if one is set, else the
// machine's non-loopback addresses (as Pion gathers them).
func startLeanEgress(cfg config.Config, e *rtc.Engine, m *sfu.Manager, log *slog.Logger) (*egress.Server, error) {
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
	srv, err := egress.New(e.UDPConn(), ips, log)
	if err != nil {
		return nil, err
	}
	srv.MaxDataChannels = cfg.Limits.MaxDataChannels
	if ln := e.TCPListener(); ln != nil {
		srv.ServeTCP(ln) // passive ICE-TCP candidates in every SDP it writes
	}
	e.SetFilter(srv)
	m.SetLeanEgress(srv)
	log.Info("lean egress: WHEP viewers and room subscribers are served without PeerConnections", "candidates", ips, "ice_tcp_port", srv.TCPPort())
	return srv, nil
}
