// Package integration starts a real Petrel server in-process (real sockets on
// 127.0.0.1) and drives it with Pion clients speaking the room protocol, WHIP and
// WHEP, asserting on what a user would observe.
package integration

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/server"
)

const apiKey = "testkey"

var apiSecret = strings.Repeat("k", 40)

type env struct {
	t   *testing.T
	srv *server.Server
	ws  string
	url string
}

func start(t *testing.T, mod ...func(*config.Config)) *env {
	t.Helper()
	cfg := config.Default()
	cfg.Loopback = true
	cfg.HTTP = "127.0.0.1:0"
	cfg.RTC.UDPPort = 0
	cfg.RTC.TCPPort = 0
	cfg.TURN.Port = 0
	cfg.TURN.RelayIP = "127.0.0.1"
	cfg.APIKey, cfg.APISecret = apiKey, apiSecret
	for _, m := range mod {
		m(&cfg)
	}
	level := slog.LevelWarn
	if os.Getenv("PETREL_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	s, err := server.Start(cfg, auth.Keys{apiKey: apiSecret}, apiKey, false, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return &env{t: t, srv: s, ws: "ws://" + s.HTTPAddr + "/v1/rtc", url: "http://" + s.HTTPAddr}
}

func (e *env) token(room, identity string, g auth.Grants, ttl time.Duration) string {
	c := auth.Claims{Room: room, Grants: g}
	c.Subject = identity
	c.RegisteredClaims = jwt.RegisteredClaims{Subject: identity}
	tok, err := auth.Keys{apiKey: apiSecret}.Sign(apiKey, c, ttl)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

var all = auth.Grants{Publish: true, Subscribe: true, PublishData: true}

func (e *env) join(room, identity string) *client.Client {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Join(ctx, e.ws, e.token(room, identity, all, time.Hour), client.Options{Name: identity})
	if err != nil {
		e.t.Fatalf("join %s: %v", identity, err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// source is a synthetic VP8 publisher: every 30th frame a keyframe, 3 packets per
// frame, 30 frames per second, the frame number in the payload.
type source struct {
	track  *webrtc.TrackLocalStaticSample
	frames atomic.Int64
	stop   chan struct{}
	// keyEvery is the keyframe interval in frames; forceKey makes the next frame
	// a keyframe, as an encoder does on a keyframe request.
	keyEvery int
	forceKey atomic.Bool
}

// sampleTrack is a client track of mime (VP8, H.264 constrained baseline,
// Opus) with id id, stream "s-"+id.
func sampleTrack(t *testing.T, mime, id string) *webrtc.TrackLocalStaticSample {
	t.Helper()
	cp := webrtc.RTPCodecCapability{MimeType: mime, ClockRate: 90000}
	switch mime {
	case webrtc.MimeTypeOpus:
		cp = webrtc.RTPCodecCapability{MimeType: mime, ClockRate: 48000, Channels: 2}
	case webrtc.MimeTypeH264:
		cp.SDPFmtpLine = "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"
	}
	tr, err := webrtc.NewTrackLocalStaticSample(cp, id, "s-"+id)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func newVideo(id string) *source {
	tr, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, id, "stream-"+id)
	if err != nil {
		panic(err)
	}
	return &source{track: tr, stop: make(chan struct{}), keyEvery: 30}
}

func newAudio(id string) *source {
	tr, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, id, "stream-"+id)
	if err != nil {
		panic(err)
	}
	return &source{track: tr, stop: make(chan struct{})}
}

func (s *source) run(t *testing.T) {
	t.Cleanup(func() { close(s.stop) })
	go func() {
		audio := s.track.Kind() == webrtc.RTPCodecTypeAudio
		d := 33 * time.Millisecond
		if audio {
			d = 20 * time.Millisecond
		}
		tick := time.NewTicker(d)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			var frame []byte
			if audio {
				frame = make([]byte, 80)
			} else {
				frame = make([]byte, 3000)
				frame[0] = 0x01 // inter frame
				if n%s.keyEvery == 0 || s.forceKey.Swap(false) {
					frame[0] = 0x00 // keyframe: VP8 frame tag bit 0 clear
				}
			}
			frame[len(frame)-1] = byte(n)
			_ = s.track.WriteSample(media.Sample{Data: frame, Duration: d})
			s.frames.Add(1)
		}
	}()
}

// readPackets reads RTP from a remote track until n packets or the deadline.
func readPackets(t *testing.T, tr *webrtc.TrackRemote, n int, within time.Duration) []rtp.Packet {
	t.Helper()
	got := make(chan []rtp.Packet, 1)
	go func() {
		var out []rtp.Packet
		for len(out) < n {
			p, _, err := tr.ReadRTP()
			if err != nil {
				break
			}
			out = append(out, *p)
		}
		got <- out
	}()
	select {
	case out := <-got:
		if len(out) < n {
			t.Fatalf("track %s ended after %d of %d packets", tr.ID(), len(out), n)
		}
		return out
	case <-time.After(within):
		t.Fatalf("track %s: fewer than %d packets in %s", tr.ID(), n, within)
	}
	return nil
}

func waitTrack(t *testing.T, c *client.Client, within time.Duration) client.Track {
	t.Helper()
	select {
	case tr := <-c.Tracks:
		return tr
	case <-time.After(within):
		t.Fatalf("no track within %s", within)
	}
	return client.Track{}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func drain(r io.Reader) { _, _ = io.Copy(io.Discard, r) }

func joinWith(e *env, room, identity string, auto *bool) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Join(ctx, e.ws, e.token(room, identity, all, time.Hour), client.Options{Name: identity, AutoSubscribe: auto})
	if err == nil {
		e.t.Cleanup(c.Close)
	}
	return c, err
}

// rawWS is a bare signaling connection for resume and bad-input tests.
type rawWS struct {
	c      *websocket.Conn
	Joined protocol.Msg
}

func dialRaw(t *testing.T, e *env) *rawWS {
	t.Helper()
	c, _, err := websocket.Dial(ctxT(t, 5*time.Second), e.ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { _ = c.CloseNow() })
	return &rawWS{c: c}
}

func (r *rawWS) send(t *testing.T, v any) {
	t.Helper()
	var b []byte
	switch x := v.(type) {
	case string:
		b = []byte(x)
	case []byte:
		b = x
	default:
		b, _ = json.Marshal(x)
	}
	if err := r.c.Write(context.Background(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

// recv returns the next message, or nil and the close status when the server closed.
func (r *rawWS) recv(t *testing.T) (protocol.Msg, websocket.StatusCode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, b, err := r.c.Read(ctx)
	if err != nil {
		return nil, websocket.CloseStatus(err)
	}
	var m protocol.Msg
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("server sent non-JSON %q", b)
	}
	return m, -1
}

func (r *rawWS) Close() { _ = r.c.CloseNow() }

func resumeJoin(e *env, room, identity, sid, resumeToken string) (*rawWS, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, e.ws, nil)
	if err != nil {
		return nil, err
	}
	r := &rawWS{c: c}
	b, _ := json.Marshal(protocol.Msg{"type": "join", "protocol": 1, "token": e.token(room, identity, all, time.Hour),
		"resume": protocol.Msg{"participantSid": sid, "resumeToken": resumeToken}})
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		return nil, err
	}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return nil, err
		}
		var m protocol.Msg
		_ = json.Unmarshal(b, &m)
		switch m["type"] {
		case "joined":
			r.Joined = m
			return r, nil
		case "error":
			c.CloseNow()
			return nil, &protocol.Error{Code: m["code"].(string), Message: m["message"].(string)}
		}
	}
}

// metric reads a counter from /metrics by name and direction label.
func (e *env) metric(name, direction string) float64 {
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	prefix := name + `{direction="` + direction + `"} `
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// checkICELite fails the test unless c's publisher connection is answered by
// the server's session server (ICE-lite), the one way the server speaks WebRTC.
func checkICELite(t *testing.T, c *client.Client) {
	t.Helper()
	if d := c.Pub.RemoteDescription(); d == nil || !strings.Contains(d.SDP, "a=ice-lite") {
		t.Fatal("the publisher connection is not answered by the session server")
	}
}
