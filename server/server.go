// Package server assembles a running Petrel: media engine, rooms, TURN and the
// HTTP edge. `petrel serve` and the integration tests start it the same way.
package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/petrel-sfu/petrel/audio/mix"
	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/cluster"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/egress"
	"github.com/petrel-sfu/petrel/gate"
	"github.com/petrel-sfu/petrel/ingest"
	"github.com/petrel-sfu/petrel/record"
	"github.com/petrel-sfu/petrel/rtc"
	"github.com/petrel-sfu/petrel/session"
	"github.com/petrel-sfu/petrel/sfu"
	"github.com/petrel-sfu/petrel/signal"
	"github.com/petrel-sfu/petrel/web"
	"github.com/petrel-sfu/petrel/webhook"
	"github.com/petrel-sfu/petrel/webtransport"
)

// Server is a running Petrel.
type Server struct {
	Config   config.Config
	Keys     auth.Keys
	APIKey   string
	Dev      bool
	Engine   *rtc.Engine
	Manager  *sfu.Manager
	HTTPAddr string
	TURNPort int
	// Cameras is the camera gateway (cameras of the config and of the REST API).
	Cameras *camera.Gateway
	// WebTransport is the HTTP/3 media endpoint; nil when disabled.
	WebTransport *webtransport.Server
	// Recorder records cameras and plays recordings back; nil unless recording.dir is set.
	Recorder *record.Recorder
	// Mixer mixes the audio of rooms set to audioMix.
	Mixer *mix.Mixer
	// Cluster is this server's cluster membership; nil without cluster.redis.
	Cluster *cluster.Node
	// Sessions serves every client's WebRTC sessions on the ICE ports
	// (session/, docs/sessions.md).
	Sessions *session.Server
	// Ingest takes RTMP and SRT publishers into rooms; nil unless ingest.rtmp
	// or ingest.srt is set.
	Ingest *ingest.Server
	// Webhooks notifies webhook.urls of room events; nil without them.
	Webhooks *webhook.Notifier
	// HLS serves rooms' tracks and cameras as LL-HLS (egress/).
	HLS *egress.HLS
	// Pushes runs the admin API's RTMP egresses (egress/push.go).
	Pushes *egress.Pushes

	turn *rtc.TURNServer
	http *http.Server
	errc chan error
}

// Start opens every socket and starts serving. keys with apiKey sign and verify
// tokens; dev enables development tokens for the web app.
func Start(cfg config.Config, keys auth.Keys, apiKey string, dev bool, log *slog.Logger) (*Server, error) {
	// The collector is process-wide; GOGC, when set, has been applied by the runtime.
	if os.Getenv("GOGC") == "" && cfg.GCPercent > 0 {
		debug.SetGCPercent(cfg.GCPercent)
	}
	s := &Server{Config: cfg, Keys: keys, APIKey: apiKey, Dev: dev, errc: make(chan error, 1)}
	auth.SetMaxLifetime(cfg.Limits.MaxTokenLifetime)
	var err error
	if s.Engine, err = rtc.NewEngine(cfg, log); err != nil {
		return nil, err
	}
	if s.Sessions, err = session.Start(cfg, s.Engine, log); err != nil {
		s.Engine.Close()
		return nil, err
	}
	s.Manager = sfu.NewManager(cfg, session.NewTransport(s.Sessions, sfu.MaxDataMessage(cfg)), log)
	if len(cfg.Webhook.URLs) > 0 {
		key := cfg.Webhook.APIKey
		if key == "" {
			key = apiKey
		}
		secret, ok := keys[key]
		if !ok {
			s.Sessions.Close()
			s.Engine.Close()
			return nil, fmt.Errorf("webhook.api_key: no secret for key %q", key)
		}
		// Before the cameras: their rooms are reported too.
		s.Webhooks = webhook.New(cfg.Webhook, key, secret, log)
		s.Manager.SetObserver(s.Webhooks.Emit)
	}
	turnSecret := cfg.TURN.Secret
	if turnSecret == "" {
		// Derived, so that the API secret itself never reaches a TURN server.
		m := hmac.New(sha256.New, []byte(keys[apiKey]))
		m.Write([]byte("petrel turn"))
		turnSecret = hex.EncodeToString(m.Sum(nil))
	}
	if cfg.TURN.Enabled {
		bind := "0.0.0.0"
		if cfg.Loopback {
			bind = "127.0.0.1"
		}
		relay := net.ParseIP(cfg.TURN.RelayIP)
		if relay == nil {
			for _, ip := range s.Engine.LocalIPs {
				if !ip.IsLoopback() {
					relay = ip
					break
				}
			}
		}
		if relay == nil {
			log.Warn("turn disabled: no relay address (set turn.relay_ip or rtc.node_ip)")
		} else {
			s.turn, err = rtc.StartTURN(rtc.TURNOptions{BindIP: bind, Port: cfg.TURN.Port, Realm: cfg.TURN.Realm, Secret: turnSecret,
				RelayIP: relay, Peers: s.Engine.RelayPeers(), MaxPerUser: cfg.TURN.MaxAllocationsPerUser,
				MaxPerIP: cfg.TURN.MaxAllocationsPerIP, Log: log})
			if err != nil {
				s.Engine.Close()
				return nil, err
			}
			s.TURNPort = s.turn.Port
		}
	}
	s.Cameras = camera.New(camera.Options{Manager: s.Manager, Keys: keys, APIKey: apiKey, Loopback: cfg.Loopback, Log: log})
	if err := s.Cameras.Start(cfg.Cameras); err != nil {
		s.closeMedia()
		return nil, fmt.Errorf("cameras: %w", err)
	}
	s.Mixer = mix.Start(s.Manager, log)
	var routes func(*http.ServeMux)
	var adminRoutes func(*http.ServeMux, func(http.Handler) http.Handler)
	if cfg.Recording.Dir != "" {
		if s.Recorder, err = record.New(s.Manager, cfg.Recording, log); err != nil {
			s.Cameras.Close()
			s.closeMedia()
			return nil, fmt.Errorf("recording: %w", err)
		}
		rec := s.Recorder
		cams := s.Cameras
		// AAC cameras are recorded as they send (their rooms carry Opus).
		rec.SetAudioSource(func(id string, deliver func(uint32, []byte)) (record.AudioConf, func(), bool) {
			rate, ch, asc, stop, ok := cams.AACSource(id, deliver)
			return record.AudioConf{Codec: "aac", Rate: rate, Channels: ch, ASC: asc}, stop, ok
		})
		// Recorded AAC plays back as Opus through the gateway's transcoder.
		rec.SetAACPlayer(func(asc []byte, track *sfu.LocalTrack, ssrc uint32) (record.AACPlayer, error) {
			p, err := cams.NewAACPlayer(asc, track, ssrc)
			if err != nil {
				return nil, err
			}
			return p, nil
		})
		// Playing a recording back is watching the camera: subscribe.
		s.Cameras.HandleTopic(record.Topic, "subscribe", func(cam *camera.Camera, from string, _ bool, payload []byte) {
			rec.HandlePlayback(cam.ID(), from, payload, func(b []byte) { cam.Reply(from, record.Topic, b) })
		})
		routes = func(mux *http.ServeMux) { rec.Routes(mux, keys) }
		// Room recording: the admin API, and participants with the record grant.
		adminRoutes = rec.AdminRoutes
		s.Manager.SetRecordControl(rec.Control)
	}
	// HLS egress: rooms' tracks and cameras for passive viewers (docs/egress.md).
	s.HLS = egress.New(egress.Options{Config: cfg.HLS, FFmpeg: cfg.Egress.FFmpeg, Manager: s.Manager, Cameras: s.Cameras, Keys: keys, Log: log})
	// RTMP push egress: started and stopped through the admin API.
	s.Pushes = egress.NewPushes(egress.PushOptions{Manager: s.Manager, Max: cfg.Egress.MaxRTMP, FFmpeg: cfg.Egress.FFmpeg,
		CAFile: cfg.Egress.CAFile, Log: log})
	recAdmin := adminRoutes
	adminRoutes = func(mux *http.ServeMux, admin func(http.Handler) http.Handler) {
		if recAdmin != nil {
			recAdmin(mux, admin)
		}
		s.Pushes.AdminRoutes(mux, admin)
	}
	recRoutes := routes
	routes = func(mux *http.ServeMux) {
		if recRoutes != nil {
			recRoutes(mux)
		}
		s.HLS.Routes(mux)
	}
	// The ingest starts after the edge (it spends the edge's join allowance)
	// but its admin calls are routes of the edge: they reach it through ing.
	var ing *ingest.Server
	if cfg.Ingest.RTMP != "" || cfg.Ingest.SRT != "" {
		recRoutes := adminRoutes
		adminRoutes = func(mux *http.ServeMux, admin func(http.Handler) http.Handler) {
			if recRoutes != nil {
				recRoutes(mux, admin)
			}
			ing.AdminRoutes(mux, admin)
		}
	}
	edge := signal.New(signal.Options{Config: cfg, Manager: s.Manager, Keys: keys, APIKey: apiKey, Dev: dev, Cameras: s.Cameras, Routes: routes, AdminRoutes: adminRoutes,
		TURNPort: s.TURNPort, TURNSecret: turnSecret, Web: web.Dist(), Log: log, WebTransport: s.webTransportInfo,
		PullRoom: s.pullRoom})
	if cfg.Ingest.RTMP != "" || cfg.Ingest.SRT != "" {
		// Publishers spend joins from the same allowance as every other door.
		// Ingress stream keys live in memory: a restart forgets them.
		if s.Ingest, err = ingest.Start(ingest.Options{RTMP: loopbackAddr(cfg.Ingest.RTMP, cfg.Loopback),
			SRT: loopbackAddr(cfg.Ingest.SRT, cfg.Loopback), MaxConns: cfg.Ingest.MaxConns,
			Manager: s.Manager, Keys: keys, Ingress: auth.NewIngressKeys(), Cameras: s.Cameras, Admit: edge.AdmitAddr, Log: log}); err != nil {
			if s.Recorder != nil {
				s.Recorder.Close()
			}
			s.Cameras.Close()
			s.closeMedia()
			return nil, err
		}
		ing = s.Ingest
	}
	ln, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		s.closeIngest()
		s.closeMedia()
		return nil, fmt.Errorf("http: %w", err)
	}
	s.HTTPAddr = ln.Addr().String()
	s.startWebTransport(cfg, keys, edge, log)
	handler := edge.Handler()
	if cfg.Cluster.Redis != "" {
		if handler, err = s.startCluster(cfg, keys[apiKey], handler, log); err != nil {
			ln.Close()
			s.closeIngest()
			s.Cameras.Close()
			s.closeMedia()
			return nil, err
		}
	}
	proxies, _ := gate.ParseProxies(cfg.TrustedProxies) // config.Validate checked them
	timeouts := gate.Timeouts{Body: cfg.Limits.HTTPBodyTimeout, Write: cfg.Limits.HTTPWriteTimeout}
	handler = proxies.Handler(timeouts.Handler(handler, timing))
	// No server-wide ReadTimeout or WriteTimeout: gate.Timeouts sets them per
	// request, so that streams and WebSockets are excepted.
	s.http = &http.Server{Handler: handler, ReadHeaderTimeout: cfg.Limits.HTTPHeaderTimeout,
		IdleTimeout: cfg.Limits.HTTPIdleTimeout, MaxHeaderBytes: 64 << 10}
	capped := gate.NewListener(ln, cfg.Limits.MaxConnsPerIP, proxies, gate.NewRefusals(log, "connection refused", 10*time.Second))
	go func() { s.errc <- s.http.Serve(capped) }()
	log.Info("listening", "http", s.HTTPAddr, "rtc_udp", s.Engine.UDPPort, "rtc_tcp", s.Engine.TCPPort, "turn", s.TURNPort, "dev", dev)
	return s, nil
}

// timing tells the HTTP requests that are long by design: the signaling
// WebSocket and profiles time themselves, live video and exports are
// streams.
func timing(r *http.Request) gate.Kind {
	p := r.URL.Path
	switch {
	case p == "/v1/rtc" || strings.HasPrefix(p, "/v1/admin/debug/pprof/"):
		return gate.Open
	case strings.HasPrefix(p, "/v1/cameras/") && (strings.HasSuffix(p, "/live.mp4") || strings.HasSuffix(p, "/export")),
		strings.HasPrefix(p, "/v1/admin/recordings/") && (strings.HasSuffix(p, "/export") || strings.HasSuffix(p, "/composite.mp4")):
		return gate.Stream
	}
	return gate.Bounded
}

// webhookDrain is how long a shutdown waits for the last webhook events
// (the departures it caused) to be delivered.
const webhookDrain = 2 * time.Second

// Err reports the HTTP server's failure.
func (s *Server) Err() <-chan error { return s.errc }

// Shutdown tells every participant to leave, then stops.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopWebTransport()
	if s.Cluster != nil {
		// Leave first: the other nodes drop their mirrors of this node's
		// participants at once instead of waiting for the heartbeat to expire.
		s.Cluster.Close()
	}
	s.closeIngest()
	// The egresses end (egress_ended) while the rooms and webhooks are there.
	s.Pushes.Close()
	s.Cameras.Close()
	s.Mixer.Close()
	if s.Recorder != nil {
		// Before the rooms go: every open segment is closed and indexed.
		s.Recorder.Close()
	}
	s.Manager.Shutdown()
	if s.Webhooks != nil {
		// The participants' and rooms' last events go out, within a bound.
		wctx, cancel := context.WithTimeout(ctx, webhookDrain)
		s.Webhooks.Close(wctx)
		cancel()
	}
	err := s.http.Shutdown(ctx)
	s.closeMedia()
	return err
}

// closeIngest ends the RTMP publishers before the rooms and the transcoders go.
func (s *Server) closeIngest() {
	if s.Ingest != nil {
		s.Ingest.Close()
	}
}

func (s *Server) closeMedia() {
	if s.HLS != nil {
		s.HLS.Close()
	}
	if s.Mixer != nil {
		s.Mixer.Close() // idempotent: Shutdown closed it first
	}
	if s.Sessions != nil {
		s.Sessions.Close()
	}
	if s.turn != nil {
		s.turn.Close()
	}
	s.Engine.Close()
}

// loopbackAddr binds a listen address without a host to 127.0.0.1 when the
// server is loopback-only.
func loopbackAddr(addr string, loopback bool) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" && loopback {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}
