// Package webtransport is Petrel's WebTransport media path: an HTTP/3 endpoint on
// the HTTP server's port number (UDP) whose sessions speak MoQ Transport
// draft-18 (webtransport/moqt) with Petrel's datagram extensions, and the bridge
// that makes a WebTransport publisher a local participant of a room (frames
// packetized to RTP for WebRTC subscribers) and feeds WebRTC publishers' tracks
// to WebTransport subscribers (RTP depacketized into frames). docs/protocol.md
// has the wire format, docs/webtransport.md the design.
package webtransport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	wt "github.com/quic-go/webtransport-go"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

// Path is where sessions are opened.
const Path = "/v1/moq"

// Protocol is the MoQT version offered in WT-Available-Protocols.
const Protocol = "moqt-18"

// Options configure the endpoint.
type Options struct {
	// Addr is the UDP address (the HTTP server's host and port).
	Addr    string
	Manager *sfu.Manager
	Keys    auth.Keys
	Log     *slog.Logger
	// CertFile/KeyFile: a configured certificate; empty means a generated
	// development certificate whose hash browsers pin.
	CertFile, KeyFile string
	// AllowedOrigins are accepted besides same-host origins; "*" accepts any.
	AllowedOrigins []string
	// MaxSessions bounds concurrent sessions (0: 1000).
	MaxSessions int
	// Door admits a session whose token is verified and logs refusals (the
	// HTTP server's, shared by every door); nil: admit all, log each.
	Door Door
}

// Door admits a verified client (per address, then the server's join
// budget) and logs refusals without flooding the log.
type Door interface {
	Admit(r *http.Request) error
	Refused(door string, r *http.Request, err error)
}

// Server is the running WebTransport endpoint.
type Server struct {
	opt  Options
	log  *slog.Logger
	h3   *http3.Server
	wt   *wt.Server
	conn net.PacketConn
	// Port is the bound UDP port.
	Port int

	certHash    []byte
	certExpires time.Time

	mu       sync.Mutex
	sessions map[*session]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// Start binds the UDP socket and serves sessions.
func Start(opt Options) (*Server, error) {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.MaxSessions <= 0 {
		opt.MaxSessions = 1000
	}
	s := &Server{opt: opt, log: opt.Log.With("component", "webtransport"), sessions: map[*session]struct{}{}}
	var cert tls.Certificate
	var err error
	if opt.CertFile != "" {
		if cert, err = tls.LoadX509KeyPair(opt.CertFile, opt.KeyFile); err != nil {
			return nil, fmt.Errorf("webtransport certificate: %w", err)
		}
	} else {
		if cert, s.certHash, s.certExpires, err = DevCertificate(10 * 24 * time.Hour); err != nil {
			return nil, err
		}
	}
	udp, err := net.ListenPacket("udp", opt.Addr)
	if err != nil {
		return nil, fmt.Errorf("webtransport: %w", err)
	}
	s.conn = udp
	s.Port = udp.LocalAddr().(*net.UDPAddr).Port
	mux := http.NewServeMux()
	s.h3 = &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}),
		QUICConfig: &quic.Config{
			EnableDatagrams:                  true,
			EnableStreamResetPartialDelivery: true,
			MaxIdleTimeout:                   30 * time.Second,
			KeepAlivePeriod:                  10 * time.Second,
			MaxIncomingStreams:               1000,
			MaxIncomingUniStreams:            4000,
		},
		Handler: mux,
	}
	wt.ConfigureHTTP3Server(s.h3)
	s.wt = &wt.Server{H3: s.h3, ApplicationProtocols: []string{Protocol}, CheckOrigin: s.checkOrigin}
	mux.HandleFunc(Path, s.serveConnect)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.wt.Serve(udp); err != nil && !s.isClosed() {
			s.log.Error("webtransport server stopped", "err", err)
		}
	}()
	s.log.Info("webtransport listening", "udp", udp.LocalAddr().String(), "path", Path, "dev_cert", opt.CertFile == "")
	return s, nil
}

// DevCertificate makes a self-signed ECDSA P-256 certificate valid for ttl (the
// W3C serverCertificateHashes rule: at most 14 days) and returns its SHA-256.
func DevCertificate(ttl time.Duration) (tls.Certificate, []byte, time.Time, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, time.Time{}, err
	}
	now := time.Now()
	tmpl := x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		Subject:               pkix.Name{CommonName: "petrel-dev"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(ttl - time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, time.Time{}, err
	}
	h := sha256.Sum256(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, h[:], tmpl.NotAfter, nil
}

// CertHash is the development certificate's SHA-256 (nil with a configured one).
func (s *Server) CertHash() []byte { return s.certHash }

// Info is what a web app needs to connect: the URL for the given request host,
// and with a development certificate its hash for serverCertificateHashes.
func (s *Server) Info(host string) *protocol.WebTransportInfo {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "" || host == "localhost" {
		host = "127.0.0.1" // Chromium tries ::1 for localhost
	}
	info := &protocol.WebTransportInfo{URL: "https://" + net.JoinHostPort(host, strconv.Itoa(s.Port)) + Path, Protocols: []string{Protocol}}
	if s.certHash != nil {
		info.Algorithm = "sha-256"
		info.Value = base64.StdEncoding.EncodeToString(s.certHash)
		info.Hex = hex.EncodeToString(s.certHash)
		info.Expires = s.certExpires.UTC().Format(time.RFC3339)
	}
	return info
}

// checkOrigin accepts requests without an Origin (native clients), the same
// host on any port (the app is served over TCP from the same host and port
// number, which the default check would refuse only for the port), and
// configured origins.
func (s *Server) checkOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	for _, a := range s.opt.AllowedOrigins {
		if a == "*" || strings.EqualFold(a, o) {
			return true
		}
	}
	u, err := http.NewRequest("GET", o, nil)
	if err != nil {
		return false
	}
	oh := u.URL.Hostname()
	rh := r.Host
	if h, _, err := net.SplitHostPort(rh); err == nil {
		rh = h
	}
	loop := func(h string) bool { return h == "localhost" || h == "127.0.0.1" || h == "::1" }
	return strings.EqualFold(oh, rh) || (loop(oh) && loop(rh))
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// serveConnect authenticates an extended CONNECT and runs the session.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("token")
	if token == "" {
		if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
			token = strings.TrimPrefix(a, "Bearer ")
		}
	}
	claims, err := s.opt.Keys.Verify(token)
	if err != nil {
		s.refused(r, err)
		status := http.StatusUnauthorized
		if errors.Is(err, auth.ErrReserved) {
			status = http.StatusForbidden
		}
		http.Error(w, err.Error(), status)
		return
	}
	if claims.Room == "" || claims.Identity() == "" {
		s.refused(r, errors.New("token without room or identity"))
		http.Error(w, "unauthorized: token names no room or identity", http.StatusUnauthorized)
		return
	}
	if offered := r.Header.Get("WT-Available-Protocols"); offered != "" && !strings.Contains(offered, `"`+Protocol+`"`) {
		s.refused(r, fmt.Errorf("no common MoQT version (offered %.100s)", offered))
		http.Error(w, "no mutually supported MoQT version (this server speaks "+Protocol+")", http.StatusBadRequest)
		return
	}
	if s.opt.Door != nil {
		if err := s.opt.Door.Admit(r); err != nil {
			s.refused(r, err)
			status := http.StatusServiceUnavailable
			if protocol.CodeOf(err) == protocol.CodeRateLimited {
				status = http.StatusTooManyRequests
			}
			http.Error(w, err.Error(), status)
			return
		}
	}
	s.mu.Lock()
	full := len(s.sessions) >= s.opt.MaxSessions || s.closed
	s.mu.Unlock()
	if full {
		http.Error(w, "too many sessions", http.StatusServiceUnavailable)
		return
	}
	ws, err := s.wt.Upgrade(w, r)
	if err != nil {
		s.log.Warn("webtransport upgrade failed", "remote", r.RemoteAddr, "err", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sess := newSession(s, ws, claims, r.RemoteAddr)
	s.mu.Lock()
	s.sessions[sess] = struct{}{}
	s.mu.Unlock()
	go func() {
		sess.run()
		s.mu.Lock()
		delete(s.sessions, sess)
		s.mu.Unlock()
	}()
}

func (s *Server) refused(r *http.Request, err error) {
	if s.opt.Door != nil {
		s.opt.Door.Refused("webtransport", r, err)
		return
	}
	s.log.Warn("webtransport session refused", "remote", r.RemoteAddr, "err", err)
}

// publisherOf finds the live session in room that announced ns or PUBLISHed
// track in it.
func (s *Server) publisherOf(room string, ns []string, track string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	for x := range s.sessions {
		if x.room == room && x.serves(ns, track) {
			return x
		}
	}
	return nil
}

// roomSessions lists the live sessions in room.
func (s *Server) roomSessions(room string) []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*session
	for x := range s.sessions {
		if x.room == room {
			out = append(out, x)
		}
	}
	return out
}

// Close ends every session and the endpoint.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	list := make([]*session, 0, len(s.sessions))
	for x := range s.sessions {
		list = append(list, x)
	}
	s.mu.Unlock()
	for _, x := range list {
		x.close(moqt.CloseNoError, "server shutting down")
	}
	err := s.wt.Close()
	_ = s.conn.Close()
	s.wg.Wait()
	return err
}

var errClosed = errors.New("session closed")

// ctxTimeout is a helper for bounded waits on the network.
func ctxTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
