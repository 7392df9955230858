// Package camera is Petrel's camera gateway: IP cameras (RTSP pull, plain RTP
// push, or a camera that is itself a WebRTC peer) brought into rooms named
// camera/<id>, where any number of viewers subscribe through the SFU.
//
// An RTSP or RTP camera lives in its room as a local participant with identity
// "camera" publishing its video (source "camera") and audio (source
// "microphone"). A WebRTC camera joins the same room over the WebSocket protocol
// with its own token. Data messages addressed to identity "camera" reach the
// handler registered for their topic (PTZ, HTTP tunnel, playback: other files
// and packages plug in through HandleTopic).
package camera

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// Config declares one camera (config file `cameras:` or POST /v1/cameras).
type Config = config.Camera

// Identity is the participant identity of every camera in its room, reserved:
// no token but a WebRTC camera's own (Token) may hold it.
const Identity = auth.CameraIdentity

// RoomOf is the room a camera lives in.
func RoomOf(id string) string { return "camera/" + id }

// TopicHandler receives a data message addressed to identity "camera" in room
// camera/<id> with the topic it was registered for. It runs on the camera's
// message goroutine: one message at a time per camera, in order, so a slow
// handler delays only its own camera's messages.
type TopicHandler func(cam *Camera, from string, reliable bool, payload []byte)

// Options are what the gateway needs from the server.
type Options struct {
	Manager *sfu.Manager
	// Keys and APIKey sign the tokens WebRTC cameras join with.
	Keys   auth.Keys
	APIKey string
	// Loopback binds RTP push ports on 127.0.0.1 by default.
	Loopback bool
	Log      *slog.Logger
	// IdleAfter is how long a cold camera stays connected after its last viewer
	// left (default 10 s).
	IdleAfter time.Duration
}

// Gateway holds the cameras.
type Gateway struct {
	o   Options
	log *slog.Logger

	mu       sync.Mutex
	cams     map[string]*Camera
	handlers map[string]topicRoute
	closed   bool

	direct directTimings // direct.go
}

// New makes a gateway with no cameras; Add them or call Start with the config.
func New(o Options) *Gateway {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.IdleAfter <= 0 {
		o.IdleAfter = 10 * time.Second
	}
	g := &Gateway{o: o, log: o.Log.With("component", "camera"), cams: map[string]*Camera{}, handlers: map[string]topicRoute{}}
	registerDeviceTopics(g) // ptz, talk, http (ptz.go)
	if o.Manager != nil {
		o.Manager.SetRelayTap(g.onRelay)
		o.Manager.SetDataFilter(g.filterData)
	}
	return g
}

// Start adds the configured cameras. A camera that cannot start (a port in
// use) is an error: a configuration mistake should stop the server.
func (g *Gateway) Start(cams []Config) error {
	for _, c := range cams {
		if _, err := g.Add(c); err != nil {
			g.Close()
			return err
		}
	}
	return nil
}

// topicRoute is a topic's handler and the grant its senders need.
type topicRoute struct {
	grant string
	h     TopicHandler
}

// HandleTopic routes data messages with topic to h, from senders whose token
// holds grant (its JSON name, as auth.Grants.Has takes it; "" for none): the
// gateway refuses the others before h runs, whatever their transport. Register
// before cameras receive messages (at server start); a later registration
// replaces h.
func (g *Gateway) HandleTopic(topic, grant string, h TopicHandler) {
	g.mu.Lock()
	g.handlers[topic] = topicRoute{grant, h}
	g.mu.Unlock()
}

func (g *Gateway) handler(topic string) (topicRoute, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.handlers[topic]
	return r, ok
}

// Camera returns the camera with id, nil if none.
func (g *Gateway) Camera(id string) *Camera {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cams[id]
}

// Cameras lists the cameras by id.
func (g *Gateway) Cameras() []*Camera {
	g.mu.Lock()
	out := make([]*Camera, 0, len(g.cams))
	for _, c := range g.cams {
		out = append(out, c)
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].cfg.ID < out[j].cfg.ID })
	return out
}

// ErrExists is returned by Add for an id already in use.
var ErrExists = errors.New("camera exists")

// Add validates cfg and starts the camera's ingest.
func (g *Gateway) Add(cfg Config) (*Camera, error) {
	if err := cfg.Validate(); err != nil {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "%v", err)
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, errors.New("gateway closed")
	}
	if _, ok := g.cams[cfg.ID]; ok {
		g.mu.Unlock()
		return nil, fmt.Errorf("camera %q: %w", cfg.ID, ErrExists)
	}
	c := newCamera(g, cfg)
	g.cams[cfg.ID] = c
	g.mu.Unlock()
	if err := c.start(); err != nil {
		g.mu.Lock()
		delete(g.cams, cfg.ID)
		g.mu.Unlock()
		c.stop()
		return nil, err
	}
	g.log.Info("camera added", "camera", cfg.ID, "ingest", c.kind())
	return c, nil
}

// Remove stops a camera and forgets it.
func (g *Gateway) Remove(id string) error {
	g.mu.Lock()
	c := g.cams[id]
	delete(g.cams, id)
	g.mu.Unlock()
	if c == nil {
		return protocol.Errorf(protocol.CodeNotFound, "no camera %q", id)
	}
	c.stop()
	g.log.Info("camera removed", "camera", id)
	return nil
}

// Close stops every camera.
func (g *Gateway) Close() {
	g.mu.Lock()
	g.closed = true
	cams := g.cams
	g.cams = map[string]*Camera{}
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range cams {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop() }()
	}
	wg.Wait()
}

// Token signs a token for a WebRTC camera to join its room as "camera": it
// may publish media and data and subscribe (to receive viewers' talk-back
// audio), and its camera grant lets it hold the reserved identity. ttl is
// capped at the longest lifetime the server accepts.
func (g *Gateway) Token(id string, ttl time.Duration) (string, error) {
	c := g.Camera(id)
	if c == nil {
		return "", protocol.Errorf(protocol.CodeNotFound, "no camera %q", id)
	}
	if !c.cfg.WebRTC {
		return "", protocol.Errorf(protocol.CodeBadRequest, "camera %q is not a WebRTC camera", id)
	}
	claims := auth.Claims{Room: RoomOf(id), Name: c.cfg.Name, Grants: auth.Grants{Publish: true, PublishData: true, Subscribe: true, Camera: true}}
	claims.Subject = Identity
	return g.o.Keys.Sign(g.o.APIKey, claims, min(ttl, auth.MaxLifetime()))
}

// context for a camera's goroutines.
func (g *Gateway) ctx() context.Context { return context.Background() }
