// Package signal is Petrel's edge: the WebSocket room protocol, WHIP and WHEP, the
// REST admin API, metrics and health, and the embedded web app, all on one HTTP
// port. Every request is parsed as hostile input and answered with a protocol
// error code.
package signal

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/gate"
	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// Server serves the HTTP port.
type Server struct {
	cfg        config.Config
	mgr        *sfu.Manager
	keys       auth.Keys
	apiKey     string // the key dev tokens are signed with
	dev        bool
	log        *slog.Logger
	turnSecret string
	turnPort   int
	web        fs.FS
	routes     func(*http.ServeMux)
	adminExtra func(*http.ServeMux, func(http.Handler) http.Handler)
	joins      *gate.Joins
	refused    *gate.Refusals
	localHosts []string // names of this machine besides loopback ones
	wtInfo     func(host string) *protocol.WebTransportInfo
	cameras    *camera.Gateway
	pullRoom   func(ctx context.Context, room string) (release func())

	mu       sync.Mutex
	sessions map[string]*httpSession // WHIP/WHEP sessions by id
}

// Options are the parts of Server that come from outside.
type Options struct {
	Config     config.Config
	Manager    *sfu.Manager
	Keys       auth.Keys
	APIKey     string
	Dev        bool
	TURNPort   int // 0: no TURN
	TURNSecret string
	Web        fs.FS
	Log        *slog.Logger
	Cameras    *camera.Gateway // nil: no camera routes
	// WebTransport describes the WebTransport endpoint for a request host (URL,
	// development certificate hash); nil or a nil result: not served.
	WebTransport func(host string) *protocol.WebTransportInfo
	// Routes adds endpoints that authorize by themselves (recordings).
	Routes func(*http.ServeMux)
	// AdminRoutes adds endpoints to the admin API, each wrapped with its
	// checks (room recordings).
	AdminRoutes func(mux *http.ServeMux, admin func(http.Handler) http.Handler)
	// PullRoom, in a cluster, brings a room's tracks from other nodes to this
	// one for a WHEP viewer, until release (cluster.Node.Pull); nil: none.
	PullRoom func(ctx context.Context, room string) (release func())
}

// New makes the HTTP server.
func New(o Options) *Server {
	return &Server{
		cfg: o.Config, mgr: o.Manager, keys: o.Keys, apiKey: o.APIKey, dev: o.Dev,
		log: o.Log, turnSecret: o.TURNSecret, turnPort: o.TURNPort, web: o.Web, wtInfo: o.WebTransport, cameras: o.Cameras, routes: o.Routes, adminExtra: o.AdminRoutes,
		pullRoom:   o.PullRoom,
		joins:      gate.NewJoins(o.Config.Limits.JoinsPerSecond, o.Config.Limits.JoinsPerIP),
		refused:    gate.NewRefusals(o.Log, "request refused", refusalLogInterval),
		localHosts: nodeHost(o.Config.Cluster.URL),
		sessions:   map[string]*httpSession{},
	}
}

// refusalLogInterval is how often a flood of refused requests is summarized in
// the log (one line in full, then one count per interval).
const refusalLogInterval = 10 * time.Second

// nodeHost is the host of the node URL, a name of this machine.
func nodeHost(u string) []string {
	if p, err := url.Parse(u); err == nil && p.Hostname() != "" {
		return []string{p.Hostname()}
	}
	return nil
}

// Admit spends a join from r's client address and one of the server's
// budget. Every door calls it after the token is verified, so that garbage
// tokens spend nothing.
func (s *Server) Admit(r *http.Request) error {
	return s.joins.Admit(gate.Addr(r))
}

// AdmitAddr is Admit for a door that is not HTTP (the RTMP and SRT ingest):
// a join from client address a.
func (s *Server) AdmitAddr(a netip.Addr) error {
	return s.joins.Admit(a)
}

// Refused logs a refused join, summarized when they come in a flood.
func (s *Server) Refused(door string, r *http.Request, err error) {
	s.refused.Note(door, r, err)
}

// Handler routes every HTTP request.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", s.adminOnly(promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{})))
	mux.HandleFunc("GET /v1/rtc", s.serveWS)
	mux.HandleFunc("POST /v1/dev/token", s.devToken)
	mux.HandleFunc("GET /v1/wt-cert-hash", s.wtCertHash)

	mux.HandleFunc("POST /whip/{room}", s.whipPost)
	mux.HandleFunc("POST /whep/{room}", s.whepPost)
	mux.HandleFunc("PATCH /whip/{room}/{session}", s.sessionPatch)
	mux.HandleFunc("PATCH /whep/{room}/{session}", s.sessionPatch)
	mux.HandleFunc("DELETE /whip/{room}/{session}", s.sessionDelete)
	mux.HandleFunc("DELETE /whep/{room}/{session}", s.sessionDelete)
	mux.HandleFunc("OPTIONS /whip/{room}", s.whipOptions)
	mux.HandleFunc("OPTIONS /whep/{room}", s.whipOptions)

	s.adminRoutes(mux)
	if s.routes != nil {
		s.routes(mux)
	}
	if s.web != nil {
		mux.Handle("GET /", s.webHandler())
	}
	return s.cors(mux)
}

// cors lets WHIP/WHEP players on other origins use the standard endpoints.
func (s *Server) cors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/whip/") || strings.HasPrefix(r.URL.Path, "/whep/") {
			w.Header().Set("Access-Control-Allow-Origin", "*")
			w.Header().Set("Access-Control-Allow-Methods", "POST, PATCH, DELETE, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type, If-Match")
			w.Header().Set("Access-Control-Expose-Headers", "Location, ETag, Link")
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) webHandler() http.Handler {
	files := http.FileServerFS(s.web)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := fs.Stat(s.web, "index.html"); err != nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("Petrel is running, but this binary was built without the web app (run `make run`).\n"))
			return
		}
		if r.URL.Path == "/" && s.cameraPage(w, r) {
			return
		}
		files.ServeHTTP(w, r)
	})
}

// cameraPage serves index.html for a camera page (?camera=…&token=…) with
// the TURN servers its token gets from the WHEP OPTIONS inlined before
// early.js, which then makes its peer connection with them and applies its
// offer at once: no OPTIONS round trip on the way to the first frame. early.js
// itself is inlined too: the session starts without a request of its own. It
// reports false (the file is served as it is) for any other page, or a token
// refused or without TURN servers: the page's own requests report that.
func (s *Server) cameraPage(w http.ResponseWriter, r *http.Request) bool {
	q := r.URL.Query()
	if q.Get("camera") == "" || q.Get("token") == "" {
		return false
	}
	c, err := s.verify(q.Get("token"))
	if err != nil {
		return false
	}
	servers := s.iceServers(r, c.Identity(), c.Grants)
	if len(servers) == 0 {
		return false
	}
	page, err := fs.ReadFile(s.web, "index.html")
	if err != nil {
		return false
	}
	const early = `<script src="early.js">`
	i := strings.Index(string(page), early)
	if i < 0 {
		return false
	}
	js, err := json.Marshal(servers) // escapes <, > and &: nothing closes the element
	if err != nil {
		return false
	}
	rest := string(page[i:])
	// A script that could close its element stays a file.
	if code, err := fs.ReadFile(s.web, "early.js"); err == nil && !strings.Contains(strings.ToLower(string(code)), "</script") {
		rest = "<script>" + string(code) + strings.TrimPrefix(rest, early)
	}
	out := string(page[:i]) + `<script id="petrel-ice-servers" type="application/json">` + string(js) + "</script>\n    " + rest
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store") // TURN credentials
	_, _ = io.WriteString(w, out)
	return true
}

// httpError writes a protocol error as JSON with the status that fits its code.
func httpError(w http.ResponseWriter, err error) {
	code := protocol.CodeOf(err)
	status := map[string]int{
		protocol.CodeBadRequest: 400, protocol.CodeInvalidJSON: 400, protocol.CodeSDPInvalid: 400,
		protocol.CodeUnauthorized: 401, protocol.CodeTokenExpired: 401, protocol.CodeForbidden: 403,
		protocol.CodeNotFound: 404, protocol.CodeTooLarge: 413, protocol.CodeRateLimited: 429,
		protocol.CodeRoomFull: 429, protocol.CodeServerBusy: 503, protocol.CodeTooManyTracks: 429,
		protocol.CodeIdentityReserved: 403, protocol.CodeTooManySessions: 429,
	}[code]
	if status == 0 {
		status = 500
	}
	metrics.SignalErrors.WithLabelValues(code).Inc()
	msg := protocol.MessageOf(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}

// verify checks a token and maps its failure to a protocol error.
func (s *Server) verify(token string) (*auth.Claims, error) {
	c, err := s.keys.Verify(token)
	if err == nil {
		return c, nil
	}
	// The code carries the kind; the message only the reason.
	msg := err.Error()
	for _, prefix := range []string{auth.ErrExpired.Error() + ": ", auth.ErrUnauthorized.Error() + ": ", auth.ErrReserved.Error() + ": "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	_, code := protocol.TokenRefusal(err)
	return nil, protocol.Errorf(code, "%s", msg)
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func (s *Server) adminOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Admin.AllowRemote {
			h.ServeHTTP(w, r)
			return
		}
		if err := gate.Local(r, s.localHosts...); err != nil {
			s.refused.Note("admin", r, err)
			httpError(w, protocol.Errorf(protocol.CodeForbidden, "admin endpoints answer only local clients (admin.allow_remote): %v", err))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// iceServers lists TURN for a client that reached us at host. Only a token
// that may publish or subscribe gets credentials: nothing else needs a relay.
func (s *Server) iceServers(r *http.Request, identity string, g auth.Grants) []protocol.ICEServer {
	var out []protocol.ICEServer
	if !g.Publish && !g.Subscribe {
		return out
	}
	user, pass := auth.TURNCredentials(s.turnSecret, identity, s.cfg.TURN.CredentialTTL, time.Now())
	if s.turnPort > 0 {
		host := s.cfg.TURN.Host
		if host == "" {
			host = r.Host
			if h, _, err := net.SplitHostPort(r.Host); err == nil {
				host = h
			}
			if s.cfg.Loopback || host == "localhost" {
				host = "127.0.0.1"
			}
		}
		hp := net.JoinHostPort(host, strconv.Itoa(s.turnPort))
		out = append(out, protocol.ICEServer{
			URLs:     []string{"turn:" + hp + "?transport=udp", "turn:" + hp + "?transport=tcp"},
			Username: user, Credential: pass,
		})
	}
	for _, u := range s.cfg.TURN.External {
		out = append(out, protocol.ICEServer{URLs: []string{u}, Username: user, Credential: pass})
	}
	return out
}

// devToken hands out tokens to the web app in development mode, on loopback only.
func (s *Server) devToken(w http.ResponseWriter, r *http.Request) {
	if !s.dev {
		httpError(w, protocol.Errorf(protocol.CodeForbidden, "development tokens are off (API keys are configured)"))
		return
	}
	if err := gate.Local(r, s.localHosts...); err != nil {
		s.refused.Note("dev token", r, err)
		httpError(w, protocol.Errorf(protocol.CodeForbidden, "development tokens are for local clients only: %v", err))
		return
	}
	var req struct {
		Room     string `json:"room"`
		Identity string `json:"identity"`
		Name     string `json:"name"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil || req.Room == "" || req.Identity == "" {
		httpError(w, protocol.Errorf(protocol.CodeBadRequest, "body must be {room, identity, name?}"))
		return
	}
	// Development tokens may do everything a room allows, camera control included.
	c := auth.Claims{Room: req.Room, Name: req.Name, Grants: auth.Grants{Publish: true, Subscribe: true, PublishData: true, PTZ: true}}
	c.Subject = req.Identity
	tok, err := s.keys.Sign(s.apiKey, c, 6*time.Hour)
	if errors.Is(err, auth.ErrReserved) {
		err = protocol.Errorf(protocol.CodeIdentityReserved, "identity %q is reserved for the server's own participants", req.Identity)
	}
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"token": tok})
}

// wtCertHash tells the web app where the WebTransport endpoint is and, with a
// development certificate, the hash to pass as serverCertificateHashes.
func (s *Server) wtCertHash(w http.ResponseWriter, r *http.Request) {
	var info *protocol.WebTransportInfo
	if s.wtInfo != nil {
		info = s.wtInfo(r.Host)
	}
	if info == nil {
		http.Error(w, "webtransport is not enabled", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(info)
}
