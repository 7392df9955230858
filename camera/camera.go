package camera

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bluenviron/mediacommon/pkg/codecs/mpeg4audio"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// State is where a camera's upstream session is.
type State string

const (
	StateIdle       State = "idle"       // no viewer and not warm: upstream closed
	StateConnecting State = "connecting" // opening the upstream session
	StateStreaming  State = "streaming"  // media flowing
	StateBackoff    State = "backoff"    // the last attempt failed; waiting to retry
	StateError      State = "error"      // cannot work until reconfigured (bad port)
	StateWaiting    State = "waiting"    // WebRTC camera not joined yet
)

// Status is a camera as the REST API and the app show it.
type Status struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	Room      string    `json:"room"`
	Ingest    string    `json:"ingest"` // rtsp, rtp or webrtc
	Warm      bool      `json:"warm"`
	State     State     `json:"state"`
	LastError string    `json:"lastError,omitempty"`
	Since     time.Time `json:"since"`
	Viewers   int       `json:"viewers"`
	// WallViewers watch the camera in the wall room (wall.go).
	WallViewers int `json:"wallViewers"`
	// LiveViewers watch the camera's HTTP live stream (live.go).
	LiveViewers int    `json:"liveViewers"`
	Bitrate     int64  `json:"bitrate"` // bits per second into the server, last second
	Video       string `json:"video,omitempty"`
	Audio       string `json:"audio,omitempty"`
	// AudioNote says what happens to the camera's audio when it is not
	// forwarded as it comes: AAC transcoded to Opus, or why there is none.
	AudioNote string `json:"audioNote,omitempty"`
	// VideoNote says how an H.265 camera reaches browsers without H.265
	// (transcoded to H.264 by ffmpeg: hevc.go), or why it cannot.
	VideoNote string `json:"videoNote,omitempty"`
	// Transcoded is the codec of the camera's transcoded video track, if
	// it has one (video/H264 for an H.265 camera).
	Transcoded string `json:"transcoded,omitempty"`
	Width      int    `json:"width,omitempty"`
	Height     int    `json:"height,omitempty"`
	// Reconnects counts upstream sessions opened after the first.
	Reconnects int `json:"reconnects"`
}

// Camera is one camera of the gateway.
type Camera struct {
	g   *Gateway
	cfg Config
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup

	part *sfu.Participant // local participant "camera" (nil for WebRTC cameras)
	// liveViewers counts the HTTP live streams being served (live.go).
	liveViewers atomic.Int32
	msgs        chan message

	// demand is signalled when a viewer (or a sink) asks for a keyframe: a cold
	// camera opens its upstream session on it.
	demand chan struct{}

	// The ptz, talk and http topics' state (ptz.go, backchannel.go,
	// tunnel.go), made on first use and dropped when it ends.
	devMu  sync.Mutex
	ptz    *ptzWorker
	floor  *talkFloor
	tunnel *tunnel

	mu         sync.Mutex
	state      State
	lastErr    string
	since      time.Time
	reconnects int
	hadSession bool
	warned     map[string]bool
	aac        *aacTranscoder // AAC cameras (aac.go)
	aacConf    *mpeg4audio.AudioSpecificConfig
	aacTaps    atomic.Pointer[[]*aacTap]
	audioNote  string
	videoNote  string
	hevc       *hevcTranscoder // H.265 cameras' H.264 track (hevc.go)
	video      *sfu.LocalTrack
	audio      *sfu.LocalTrack
	videoCodec string
	audioCodec string
	width      int
	height     int

	wallMu sync.Mutex
	wall   *wallFeed // wall.go

	bytesIn atomic.Uint64
	bitrate atomic.Int64

	refusedLog atomic.Int64 // unix ns of the last log line about a refused request
}

type message struct {
	from     string
	grants   auth.Grants // the sender's, when it sent
	topic    string
	reliable bool
	payload  []byte
}

func newCamera(g *Gateway, cfg Config) *Camera {
	c := &Camera{g: g, cfg: cfg, log: g.log.With("camera", cfg.ID), msgs: make(chan message, 64),
		demand: make(chan struct{}, 1), state: StateIdle, since: time.Now()}
	c.ctx, c.cancel = context.WithCancel(g.ctx())
	return c
}

// ID is the camera's id.
func (c *Camera) ID() string { return c.cfg.ID }

// Config is the camera's declaration (with ONVIF and HTTP settings).
func (c *Camera) Config() Config { return c.cfg }

// Room is the name of the camera's room.
func (c *Camera) Room() string { return RoomOf(c.cfg.ID) }

// Participant is the camera's local participant (nil for a WebRTC camera).
func (c *Camera) Participant() *sfu.Participant { return c.part }

// Reply sends a data message from the camera to one viewer. A WebRTC
// camera's replies go out in its name, as if it had sent them.
func (c *Camera) Reply(to, topic string, payload []byte) {
	p := c.part
	if p == nil {
		p = c.webrtcParticipant()
	}
	if p == nil {
		c.log.Info("reply dropped: the camera is not in its room", "topic", topic, "to", to)
		return
	}
	p.PublishData(true, topic, []string{to}, payload)
}

func (c *Camera) kind() string {
	switch {
	case c.cfg.RTSP != "":
		return "rtsp"
	case c.cfg.RTP != nil:
		return "rtp"
	}
	return "webrtc"
}

// Status reports the camera's state.
func (c *Camera) Status() Status {
	c.mu.Lock()
	s := Status{ID: c.cfg.ID, Name: c.cfg.Name, Room: c.Room(), Ingest: c.kind(), Warm: c.cfg.Warm,
		State: c.state, LastError: c.lastErr, Since: c.since, Video: c.videoCodec, Audio: c.audioCodec,
		Width: c.width, Height: c.height, Reconnects: c.reconnects, AudioNote: c.audioNote}
	s.VideoNote = c.videoNote
	tc, hv := c.aac, c.hevc
	c.mu.Unlock()
	if tc != nil {
		s.AudioNote = tc.Note()
	}
	if hv != nil {
		s.VideoNote = hv.Note()
		s.Transcoded = webrtc.MimeTypeH264
	}
	s.Viewers = c.viewers()
	s.WallViewers = c.wallViewers()
	s.LiveViewers = int(c.liveViewers.Load())
	s.Bitrate = c.bitrate.Load()
	return s
}

func (c *Camera) setState(s State, err error) {
	c.mu.Lock()
	if c.state != s {
		c.since = time.Now()
	}
	c.state = s
	if err != nil {
		c.lastErr = c.redact(err.Error())
	}
	c.mu.Unlock()
	if err != nil {
		c.log.Info("camera state", "state", s, "err", err)
	} else {
		c.log.Debug("camera state", "state", s)
	}
}

// start joins the room and starts the ingest.
func (c *Camera) start() error {
	if c.cfg.WebRTC {
		c.setState(StateWaiting, nil)
		c.done.Add(2)
		go c.watchWebRTC()
		go c.dispatch() // topics the gateway serves for the camera (direct.go)
		return nil
	}
	// The camera publishes, answers its viewers and hears talk-back audio
	// (through sinks); it is the server's own, under the reserved identity.
	p, err := c.g.o.Manager.JoinLocal(sfu.LocalOptions{Room: c.Room(), Identity: Identity, Name: c.cfg.Name,
		Grants: auth.Grants{Publish: true, PublishData: true, Subscribe: true}, Origin: sfu.Server})
	if err != nil {
		return fmt.Errorf("camera %s: join room: %w", c.cfg.ID, err)
	}
	c.part = p
	p.OnData(c.onData)
	c.done.Add(2)
	go c.dispatch()
	go c.measure()
	switch {
	case c.cfg.RTSP != "":
		c.done.Add(1)
		go c.runRTSP()
	case c.cfg.RTP != nil:
		if err := c.startRTPPush(); err != nil {
			c.setState(StateError, err)
			return err
		}
	}
	return nil
}

func (c *Camera) stop() {
	c.cancel()
	c.syncWall(nil)
	c.mu.Lock()
	v, a := c.video, c.audio
	var alt *sfu.LocalTrack
	if c.hevc != nil {
		alt = c.hevc.track
	}
	c.mu.Unlock()
	for _, t := range []*sfu.LocalTrack{v, a, alt} {
		if t != nil {
			t.Close()
		}
	}
	if c.part != nil {
		c.part.Close("camera_removed")
	}
	c.done.Wait()
}

// onData runs on the sender's goroutine: queue, never block. The sender's
// grants are taken now, while it is surely in the room.
func (c *Camera) onData(reliable bool, h sfu.DataHeader, payload []byte) {
	if len(h.To) == 0 && h.Topic == "" {
		return
	}
	var grants auth.Grants
	if r := c.g.o.Manager.Room(c.Room()); r != nil {
		if p := r.BySid(h.FromSid); p != nil {
			grants = p.Grants()
		}
	}
	m := message{from: h.From, grants: grants, topic: h.Topic, reliable: reliable, payload: append([]byte(nil), payload...)}
	select {
	case c.msgs <- m:
	default:
		c.log.Warn("camera message dropped: handlers fall behind", "topic", h.Topic, "from", h.From)
	}
}

func (c *Camera) dispatch() {
	defer c.done.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case m := <-c.msgs:
			route, ok := c.g.handler(m.topic)
			if !ok {
				c.log.Debug("no handler for topic", "topic", m.topic, "from", m.from)
				if m.topic != "" {
					c.Reply(m.from, m.topic, errorReply(m.payload, fmt.Sprintf("camera %s does not handle topic %q", c.cfg.ID, m.topic)))
				}
				continue
			}
			if route.grant != "" && !m.grants.Has(route.grant) {
				c.refused(m, route.grant)
				continue
			}
			h := route.h
			func() {
				defer func() {
					if r := recover(); r != nil {
						c.log.Error("topic handler panicked", "topic", m.topic, "panic", r)
					}
				}()
				h(c, m.from, m.reliable, m.payload)
			}()
		}
	}
}

// refused answers a request whose sender lacks the topic's grant, logging at
// most one such refusal a second per camera (a viewer can repeat it at will).
func (c *Camera) refused(m message, grant string) {
	now := time.Now().UnixNano()
	if last := c.refusedLog.Load(); now-last >= int64(time.Second) && c.refusedLog.CompareAndSwap(last, now) {
		c.log.Info("camera request refused: the sender's token lacks the grant", "topic", m.topic, "from", m.from, "grant", grant)
	}
	c.Reply(m.from, m.topic, errorReply(m.payload, "not allowed: the token has no "+grant+" grant"))
}

// measure samples the incoming bitrate once a second.
func (c *Camera) measure() {
	defer c.done.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var prev uint64
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			n := c.bytesIn.Load()
			c.bitrate.Store(int64(n-prev) * 8)
			prev = n
		}
	}
}

// viewers counts the subscribers of the camera's video (audio if no video).
func (c *Camera) viewers() int {
	c.mu.Lock()
	v, a, hv := c.video, c.audio, c.hevc
	c.mu.Unlock()
	n := 0
	if hv != nil {
		n = len(hv.track.Publication().Subscribers())
	}
	if v == nil {
		v = a
	}
	if v == nil {
		if c.cfg.WebRTC {
			return c.webrtcViewers()
		}
		return n
	}
	return n + len(v.Publication().Subscribers())
}

// wanted reports whether anyone needs the stream: a viewer or a sink (recorder).
func (c *Camera) wanted() bool {
	c.mu.Lock()
	v, a := c.video, c.audio
	var alt *sfu.LocalTrack
	if c.hevc != nil {
		alt = c.hevc.track
	}
	c.mu.Unlock()
	if c.wallViewers() > 0 {
		return true
	}
	own := c.ownSinks()
	for _, t := range []*sfu.LocalTrack{v, a, alt} {
		if t == nil {
			continue
		}
		pub := t.Publication()
		sinks := pub.SinkCount()
		if t == v {
			sinks -= own
		}
		if len(pub.Subscribers()) > 0 || sinks > 0 {
			return true
		}
	}
	return false
}

// wake signals demand without blocking (it runs on subscribers' goroutines).
func (c *Camera) wake() {
	select {
	case c.demand <- struct{}{}:
	default:
	}
}

// publish (once per kind) the camera's track for codec; later sessions reuse it.
func (c *Camera) publish(kind string, codec webrtc.RTPCodecParameters, ssrc uint32, w, h int) (*sfu.LocalTrack, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := &c.video
	source := "camera"
	if kind == "audio" {
		cur = &c.audio
		source = "microphone"
	}
	if *cur != nil {
		if (*cur).Publication().Codec().MimeType == codec.MimeType {
			return *cur, nil
		}
		// The camera changed codec: viewers must renegotiate for the new track.
		(*cur).Close()
		*cur = nil
	}
	lt, err := c.part.PublishLocal(sfu.LocalTrackOptions{
		Info: protocol.TrackInfo{Kind: kind, Source: source, Name: c.cfg.ID + " " + source, SSRC: ssrc, Width: w, Height: h},
		Codec: sfu.Codec{MimeType: codec.MimeType, ClockRate: codec.ClockRate, Channels: codec.Channels,
			SDPFmtpLine: codec.SDPFmtpLine, PayloadType: uint8(codec.PayloadType)},
	})
	if err != nil {
		return nil, err
	}
	if kind == "video" {
		lt.Publication().SetGOPStart(true)
		lt.OnKeyframeRequest(c.wake)
		c.videoCodec, c.width, c.height = codec.MimeType, w, h
		go c.syncWall(lt.Publication())
	} else {
		c.audioCodec = codec.MimeType
	}
	*cur = lt
	return lt, nil
}

// redact keeps the camera's credentials out of errors shown to viewers.
func (c *Camera) redact(s string) string {
	if u, err := url.Parse(c.cfg.RTSP); err == nil && u.User != nil {
		s = strings.ReplaceAll(s, u.User.String()+"@", "")
		if p, ok := u.User.Password(); ok && p != "" {
			s = strings.ReplaceAll(s, p, "***")
		}
	}
	return s
}

func errorReply(req []byte, text string) []byte {
	id := requestID(req)
	return []byte(fmt.Sprintf(`{"id":%s,"error":%q}`, id, text))
}

var errStopped = errors.New("camera stopped")
