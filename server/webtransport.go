package server

import (
	"log/slog"
	"net"
	"strconv"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/webtransport"
)

// startWebTransport serves WebTransport on UDP at the HTTP server's host and
// port number. A failure is logged, not fatal: WebRTC keeps working.
func (s *Server) startWebTransport(cfg config.Config, keys auth.Keys, door webtransport.Door, log *slog.Logger) {
	if !cfg.WebTransport.Enabled {
		return
	}
	host, port, _ := net.SplitHostPort(s.HTTPAddr)
	opt := webtransport.Options{Addr: net.JoinHostPort(host, port), Manager: s.Manager, Keys: keys, Log: log,
		CertFile: cfg.WebTransport.CertFile, KeyFile: cfg.WebTransport.KeyFile, AllowedOrigins: cfg.WebTransport.AllowedOrigins, Door: door}
	w, err := webtransport.Start(opt)
	if err != nil && cfg.HTTP != "" && portOf(cfg.HTTP) == 0 {
		// An ephemeral HTTP port whose number is taken on UDP (tests): any port.
		opt.Addr = net.JoinHostPort(host, "0")
		w, err = webtransport.Start(opt)
	}
	if err != nil {
		log.Warn("webtransport disabled: the UDP port could not be bound", "err", err)
		return
	}
	s.WebTransport = w
}

func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return -1
	}
	n, _ := strconv.Atoi(p)
	return n
}

// webTransportInfo is what the web app needs to open a session.
func (s *Server) webTransportInfo(host string) *protocol.WebTransportInfo {
	if s.WebTransport == nil {
		return nil
	}
	return s.WebTransport.Info(host)
}

func (s *Server) stopWebTransport() {
	if s.WebTransport != nil {
		_ = s.WebTransport.Close()
	}
}
