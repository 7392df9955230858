package webtransport_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/server"
	"github.com/petrel-sfu/petrel/webtransport"
	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

const (
	apiKey    = "wtkey"
	apiSecret = "wt-secret-wt-secret-wt-secret-wt-secret"
)

// logBuf collects the server's log lines so tests can assert on them.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

type env struct {
	t    *testing.T
	srv  *server.Server
	wt   *webtransport.Server
	logs *logBuf
}

func start(t *testing.T) *env {
	t.Helper()
	cfg := config.Default()
	cfg.Loopback = true
	cfg.HTTP = "127.0.0.1:0"
	cfg.RTC.UDPPort = 0
	cfg.RTC.TCPPort = 0
	cfg.TURN.Enabled = false
	cfg.APIKey, cfg.APISecret = apiKey, apiSecret
	logs := &logBuf{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	keys := auth.Keys{apiKey: apiSecret}
	s, err := server.Start(cfg, keys, apiKey, false, log)
	if err != nil {
		t.Fatal(err)
	}
	w := s.WebTransport
	if w == nil {
		// A server built without the endpoint: start one beside it.
		if w, err = webtransport.Start(webtransport.Options{Addr: "127.0.0.1:0", Manager: s.Manager, Keys: keys, Log: log}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		if t.Failed() {
			t.Logf("server log:\n%s", logs.b.String())
		}
	})
	return &env{t: t, srv: s, wt: w, logs: logs}
}

func (e *env) token(room, identity string) string {
	tok, err := auth.Keys{apiKey: apiSecret}.Sign(apiKey, auth.Claims{Room: room, Grants: auth.Grants{Publish: true, Subscribe: true, PublishData: true},
		RegisteredClaims: jwtSubject(identity)}, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

func (e *env) url() string { return e.wt.Info("127.0.0.1").URL }

func (e *env) dial(room, identity string) *webtransport.Client {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := webtransport.Dial(ctx, e.url(), e.token(room, identity), webtransport.ClientOptions{CertHash: e.wt.CertHash(), Extensions: true})
	if err != nil {
		e.t.Fatalf("dial %s: %v", identity, err)
	}
	e.t.Cleanup(c.Close)
	return c
}

func (e *env) join(room, identity string) *client.Client {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Join(ctx, "ws://"+e.srv.HTTPAddr+"/v1/rtc", e.token(room, identity), client.Options{Name: identity})
	if err != nil {
		e.t.Fatalf("join %s: %v", identity, err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// every calls fn(n) for n = 0, 1, … every interval until the test ends: the
// frame clock of the test publishers.
func every(t testing.TB, interval time.Duration, fn func(n int)) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			fn(n)
		}
	}()
}

// rtcPublisher joins room as a Pion WebRTC client publishing a camera track
// of codec (VP8 or H.264), fed with frame(n) at 30 fps until the test ends.
func (e *env) rtcPublisher(room, identity string, codec webrtc.RTPCodecCapability, frame func(n int) []byte) *client.Client {
	e.t.Helper()
	pc := e.join(room, identity)
	track, err := webrtc.NewTrackLocalStaticRTP(codec, "v", "s")
	if err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := pc.Publish(context.Background(), track, "camera"); err != nil {
		e.t.Fatal(err)
	}
	kind := "vp8"
	if codec.MimeType == webrtc.MimeTypeH264 {
		kind = "h264"
	}
	pk, err := webtransport.NewPacketizer(kind, 90000, 96, 0x5555, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	every(e.t, 33*time.Millisecond, func(n int) {
		pk.Packetize(uint64(n)*33333, frame(n), func(p *rtp.Packet) { _ = track.WriteRTP(p) })
	})
	return pc
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// vp8Frame makes a recognizable VP8 frame: the frame tag's bit 0 marks
// keyframes (what the SFU and decoders look at), the rest numbers the frame.
func vp8Frame(n int, key bool) []byte {
	b := make([]byte, 2500+(n%7)*300)
	rand.New(rand.NewSource(int64(n))).Read(b)
	if key {
		b[0] &^= 1
		b[3], b[4], b[5] = 0x9d, 0x01, 0x2a
	} else {
		b[0] |= 1
	}
	b[1], b[2] = byte(n>>8), byte(n)
	return b
}

// A WebTransport publisher's VP8 frames reach a Pion WebRTC subscriber whole and
// in order; the subscriber's keyframe request reaches the WebTransport publisher;
// the publisher's data track reaches the WebRTC client, and the WebRTC
// client's data and the room's events reach the WebTransport client.
func TestWebTransportPublisherToWebRTCSubscriber(t *testing.T) {
	e := start(t)
	pub := e.dial("mix", "wtpub")
	if pub.Petrel["identity"] != "wtpub" {
		t.Fatalf("server SETUP: %v", pub.Petrel)
	}
	video := pub.AddTrack("video", false)
	data := pub.AddTrack("data", false)
	var keyReqs atomic.Int64
	var forceKey atomic.Bool
	video.OnKeyframeRequest(func() { keyReqs.Add(1); forceKey.Store(true) })
	if err := pub.Announce(context.Background(), []string{"petrel", "mix", "wtpub"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to subscribe to the publisher's video", 30*time.Second, func() bool { return video.Subscribers() > 0 })
	events, err := pub.Subscribe(context.Background(), []string{"petrel", "mix"}, "events", false)
	if err != nil {
		t.Fatal(err)
	}

	sent := sync.Map{} // frame number -> bytes
	every(t, 33*time.Millisecond, func(n int) {
		key := n%60 == 0 || forceKey.Swap(false)
		f := vp8Frame(n, key)
		sent.Store(n, f)
		m := moqt.Meta{TimestampUs: uint64(n) * 33333, Keyframe: key, AudioLevel: -1, WallclockMs: uint64(time.Now().UnixMilli())}
		if key {
			m.Codec, m.Width, m.Height = "vp8", 640, 360
		}
		_ = video.WriteFrame(&m, key, f)
	})

	viewer := e.join("mix", "viewer")
	var tr client.Track
	select {
	case tr = <-viewer.Tracks:
	case <-time.After(30 * time.Second):
		t.Fatal("the WebRTC viewer never got the WebTransport publisher's track")
	}
	dp, _ := webtransport.NewDepacketizer("vp8", 90000)
	var frames [][]byte
	var lastTS uint64
	keys := 0
	deadline := time.Now().Add(30 * time.Second)
	for len(frames) < 30 && time.Now().Before(deadline) {
		_ = tr.Remote.SetReadDeadline(time.Now().Add(5 * time.Second))
		p, _, err := tr.Remote.ReadRTP()
		if err != nil {
			t.Fatalf("read: %v after %d frames", err, len(frames))
		}
		key := len(p.Payload) > 4 && vp8Key(p.Payload)
		dp.Push(&p.Header, p.Payload, key, func(ts uint64, k bool, f []byte) {
			if len(frames) > 0 && ts <= lastTS {
				t.Errorf("timestamps go back: %d after %d", ts, lastTS)
			}
			lastTS = ts
			if k {
				keys++
			}
			frames = append(frames, append([]byte(nil), f...))
		})
	}
	if len(frames) < 30 {
		t.Fatalf("viewer decoded %d whole frames", len(frames))
	}
	if tr.Remote.Codec().MimeType != webrtc.MimeTypeVP8 {
		t.Fatalf("codec %s", tr.Remote.Codec().MimeType)
	}
	if keys == 0 {
		t.Fatal("no keyframe reached the viewer")
	}
	prev := -1
	for i, f := range frames {
		n := int(f[1])<<8 | int(f[2])
		want, ok := sent.Load(n)
		if !ok || !bytes.Equal(want.([]byte), f) {
			t.Fatalf("frame %d (number %d) differs from what was published", i, n)
		}
		if n <= prev {
			t.Fatalf("frame %d after %d", n, prev)
		}
		prev = n
	}
	if keyReqs.Load() == 0 {
		t.Error("the WebRTC subscriber's keyframe request never reached the WebTransport publisher")
	}

	// Data: WebTransport -> WebRTC.
	msg, _ := json.Marshal(map[string]any{"topic": "chat", "payload": []byte("hello from quic")})
	waitFor(t, "the server to subscribe to the data track", 30*time.Second, func() bool { return data.Subscribers() > 0 })
	if err := data.WriteFrame(&moqt.Meta{AudioLevel: -1}, true, msg); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-viewer.DataIn:
		if string(d.Payload) != "hello from quic" || d.Header.From != "wtpub" || d.Header.Topic != "chat" {
			t.Fatalf("viewer got %+v %q", d.Header, d.Payload)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("data from the WebTransport client never reached the WebRTC client")
	}
	// Data: WebRTC -> WebTransport, on the events track, after joined.
	if err := viewer.SendData([]byte("hello from rtc"), true, true, "wtpub"); err != nil {
		t.Fatal(err)
	}
	sawJoined, sawData := false, false
	deadline = time.Now().Add(30 * time.Second)
	for !sawData && time.Now().Before(deadline) {
		select {
		case o := <-events.Objects:
			var ev map[string]any
			if err := json.Unmarshal(o.Payload, &ev); err != nil {
				t.Fatalf("event is not JSON: %q", o.Payload)
			}
			switch ev["type"] {
			case "joined":
				sawJoined = true
			case "data":
				sawData = ev["from"] == "viewer" && ev["payload"] == "aGVsbG8gZnJvbSBydGM=" // base64("hello from rtc")
			}
		case <-time.After(time.Second):
		}
	}
	if !sawJoined || !sawData {
		t.Fatalf("events track: joined %v, data %v", sawJoined, sawData)
	}
}

func vp8Key(p []byte) bool {
	// RFC 7741 descriptor with X/I/M as the packetizer writes them.
	i := 1
	if p[0]&0x80 != 0 {
		x := p[1]
		i = 2
		if x&0x80 != 0 {
			if p[i]&0x80 != 0 {
				i += 2
			} else {
				i++
			}
		}
		if x&0x40 != 0 {
			i++
		}
		if x&0x30 != 0 {
			i++
		}
	}
	return p[0]&0x10 != 0 && p[0]&0x07 == 0 && i < len(p) && p[i]&1 == 0
}

// A WebRTC publisher's VP8 track reaches a WebTransport subscriber as frames
// (objects in groups, a group per keyframe), over streams and over datagrams.
func TestWebRTCPublisherToWebTransportSubscriber(t *testing.T) {
	e := start(t)
	sent := sync.Map{}
	pc := e.rtcPublisher("mix2", "rtcpub", webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, func(n int) []byte {
		f := vp8Frame(n, n%15 == 0)
		sent.Store(n, f)
		return f
	})
	sub := e.dial("mix2", "wtsub")
	var err error
	ns := []string{"petrel", "mix2", "rtcpub"}
	var s *webtransport.ClientSub
	waitFor(t, "the WebRTC publisher's track", 30*time.Second, func() bool {
		s, err = sub.Subscribe(context.Background(), ns, "video", false)
		return err == nil
	})
	check := func(s *webtransport.ClientSub, mode string) {
		t.Helper()
		got, groups := 0, map[uint64]bool{}
		var codec string
		deadline := time.Now().Add(30 * time.Second)
		for got < 30 && time.Now().Before(deadline) {
			select {
			case o := <-s.Objects:
				n := int(o.Payload[1])<<8 | int(o.Payload[2])
				want, ok := sent.Load(n)
				if !ok || !bytes.Equal(want.([]byte), o.Payload) {
					t.Fatalf("%s: object %d/%d is not frame %d as published", mode, o.Group, o.ID, n)
				}
				if o.Meta.Keyframe != (o.ID == 0) {
					t.Fatalf("%s: object %d/%d keyframe=%v", mode, o.Group, o.ID, o.Meta.Keyframe)
				}
				if o.Meta.Codec != "" {
					codec = o.Meta.Codec
				}
				groups[o.Group] = true
				got++
			case <-time.After(time.Second):
			}
		}
		if got < 30 || codec != "vp8" || len(groups) < 2 {
			t.Fatalf("%s: %d objects in %d groups, codec %q", mode, got, len(groups), codec)
		}
	}
	check(s, "streams")
	s.Unsubscribe()
	d, err := sub.Subscribe(context.Background(), ns, "video", true)
	if err != nil {
		t.Fatal(err)
	}
	check(d, "datagrams")

	// The publisher leaves: the subscription ends with PUBLISH_DONE.
	pc.Close()
	select {
	case <-d.Done:
		if !strings.Contains(d.Reason, "publisher left") && !strings.Contains(d.Reason, "unpublished") {
			t.Fatalf("subscription ended: %q", d.Reason)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no PUBLISH_DONE after the WebRTC publisher left")
	}
}

// Hostile input: a bad token, garbage on the control stream, a data stream for
// an unknown track alias, an oversized object. Each gets a clear error and a
// log line; none takes the server down.
func TestWebTransportBadInput(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := webtransport.Dial(ctx, e.url(), "not-a-token", webtransport.ClientOptions{CertHash: e.wt.CertHash()})
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("bad token: %v", err)
	}
	waitFor(t, "a log line for the bad token", 30*time.Second, func() bool { return e.logs.has("door=webtransport") })

	// Garbage after SETUP on the control stream.
	c := e.dial("bad", "garbage")
	st, err := c.Session.OpenUniStream()
	if err != nil {
		t.Fatal(err)
	}
	setup, _ := moqt.AppendMessage(nil, moqt.Setup{})
	_, _ = st.Write(append(setup, 0x7f, 0x00, 0x02, 0xde, 0xad))
	select {
	case <-c.Done():
		// Which of the two control streams the server takes first is a race;
		// either way the session ends naming the control-stream violation.
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), "control") {
			t.Fatalf("session ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a second control stream did not end the session")
	}

	c2 := e.dial("bad", "garbage2")
	// Unknown track alias on a data stream: the stream is refused, the session lives.
	ds, err := c2.Session.OpenUniStream()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = ds.Write(moqt.AppendSubgroupHeader(nil, moqt.SubgroupHeader{TrackAlias: 999, Group: 1}))
	waitFor(t, "a log line for the unknown alias", 30*time.Second, func() bool { return e.logs.has("unknown track alias") })

	// Oversized object on a real track.
	v := c2.AddTrack("video", false)
	if err := c2.Announce(ctx, []string{"petrel", "bad", "garbage2"}); err != nil {
		t.Fatal(err)
	}
	// Publishing in someone else's namespace is refused.
	var re *webtransport.RequestError
	if err := c2.Announce(ctx, []string{"petrel", "bad", "someone-else"}); !errors.As(err, &re) || re.Code != moqt.ErrCodeUnauthorized {
		t.Fatalf("foreign namespace: %v", err)
	}
	waitFor(t, "the server's subscription", 30*time.Second, func() bool { return v.Subscribers() > 0 })
	alias := v.Aliases()[0]
	big, _ := c2.Session.OpenUniStream()
	b := moqt.AppendSubgroupHeader(nil, moqt.SubgroupHeader{TrackAlias: alias, Group: 0})
	b = moqt.AppendVI(b, 0)
	b = moqt.AppendVI(b, 0) // no extensions
	b = moqt.AppendVI(b, 100<<20)
	_, _ = big.Write(b)
	waitFor(t, "a log line for the oversized object", 30*time.Second, func() bool { return e.logs.has("object too large") })
	select {
	case <-c2.Done():
		t.Fatalf("session ended: %v", c2.Err())
	default:
	}

	// Garbage control message (an unknown type) ends the session with a reason.
	c3 := e.dial("bad", "garbage3")
	req, err := c3.Session.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = req.Write([]byte{0x03, 0x00, 0x03, 0xff, 0xff, 0xff}) // SUBSCRIBE with a truncated body
	select {
	case <-c3.Done():
		if err := c3.Err(); err == nil || !strings.Contains(err.Error(), "bad request") {
			t.Fatalf("session ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a malformed request did not end the session")
	}
	if !e.logs.has("webtransport session closed") {
		t.Fatal("no log line for the closed session")
	}
}

func jwtSubject(s string) jwt.RegisteredClaims { return jwt.RegisteredClaims{Subject: s} }

// A WebTransport publisher sending Petrel fragment datagrams (the browser's
// datagram mode) over a path that loses 10% of them reaches a WebRTC
// subscriber whole: the server NACKs what is missing, reassembles, orders and
// packetizes. (Without NACKs about a third of the frames would be incomplete and
// every GOP broken.)
func TestWebTransportDatagramPublisher(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := webtransport.Dial(ctx, e.url(), e.token("dg", "wtpub"), webtransport.ClientOptions{CertHash: e.wt.CertHash(), Extensions: true, DatagramLoss: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	video := pub.AddTrack("video", true)
	var forceKey atomic.Bool
	video.OnKeyframeRequest(func() { forceKey.Store(true) })
	if err := pub.Announce(context.Background(), []string{"petrel", "dg", "wtpub"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server's subscription", 30*time.Second, func() bool { return video.Subscribers() > 0 })
	var sentFrames atomic.Int64
	every(t, 33*time.Millisecond, func(n int) {
		key := n%60 == 0 || forceKey.Swap(false)
		m := moqt.Meta{TimestampUs: uint64(n) * 33333, Keyframe: key, AudioLevel: -1}
		if key {
			m.Codec = "vp8"
		}
		_ = video.WriteFrame(&m, key, vp8Frame(n, key))
		sentFrames.Add(1)
	})
	viewer := e.join("dg", "viewer")
	var tr client.Track
	select {
	case tr = <-viewer.Tracks:
	case <-time.After(30 * time.Second):
		t.Fatal("no track")
	}
	dp, _ := webtransport.NewDepacketizer("vp8", 90000)
	// Count the whole frames among the 90 after the first one decoded (frames
	// carry their number, so a loaded machine's pace does not matter).
	const window = 90
	first, frames, newest := -1, 0, -1
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && (first < 0 || newest < first+window+15); {
		_ = tr.Remote.SetReadDeadline(deadline)
		p, _, err := tr.Remote.ReadRTP()
		if err != nil {
			break
		}
		dp.Push(&p.Header, p.Payload, len(p.Payload) > 4 && vp8Key(p.Payload), func(_ uint64, _ bool, f []byte) {
			n := int(f[1])<<8 | int(f[2])
			if !bytes.Equal(f, vp8Frame(n, f[0]&1 == 0)) {
				t.Errorf("frame %d differs from what was sent", n)
				return
			}
			newest = max(newest, n)
			switch {
			case first < 0:
				first = n
			case n > first && n <= first+window:
				frames++
			}
		})
	}
	_ = sentFrames.Load()
	// NACK recovery delivers nearly every frame; without it about a third
	// would be incomplete and each break costs the rest of the GOP.
	if first < 0 || frames < window*8/10 {
		t.Fatalf("viewer decoded %d of %d frames sent as datagrams (%d fragments lost, %d resent)", frames, window, pub.Lost.Load(), pub.Resent.Load())
	}
	if pub.Lost.Load() == 0 || pub.Resent.Load() == 0 {
		t.Fatalf("%d fragments lost, %d resent: the loss path was not exercised", pub.Lost.Load(), pub.Resent.Load())
	}
	t.Logf("%d whole frames of %d; %d fragments lost, %d resent on NACK", frames, window, pub.Lost.Load(), pub.Resent.Load())
}

// A WebTransport publisher's Opus frames with audio levels reach a WebRTC
// subscriber as an audio track, and its levels make it the room's dominant
// speaker (the speaker event crosses from WebTransport to WebRTC); the
// WebTransport client sees the same event on its events track.
func TestWebTransportAudioAndSpeaker(t *testing.T) {
	e := start(t)
	viewer := e.join("sp", "viewer")
	pub := e.dial("sp", "talker")
	sid, _ := pub.Petrel["participantSid"].(string)
	audio := pub.AddTrack("audio", false)
	if err := pub.Announce(context.Background(), []string{"petrel", "sp", "talker"}); err != nil {
		t.Fatal(err)
	}
	events, err := pub.Subscribe(context.Background(), []string{"petrel", "sp"}, "events", false)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server's subscription", 30*time.Second, func() bool { return audio.Subscribers() > 0 })
	every(t, 20*time.Millisecond, func(n int) {
		frame := []byte{0xfc, byte(n), byte(n >> 8), 1, 2, 3} // an Opus TOC byte and a body
		level := 35 + n%10                                    // speech, -dBov, with a pause every 300 ms
		if n%15 < 3 {
			level = 95
		}
		_ = audio.WriteFrame(&moqt.Meta{TimestampUs: uint64(n) * 20000, Keyframe: true, Codec: "opus", AudioLevel: level}, true, frame)
	})
	var tr client.Track
	select {
	case tr = <-viewer.Tracks:
	case <-time.After(30 * time.Second):
		t.Fatal("the viewer never got the audio track")
	}
	var last uint16
	for i := 0; i < 20; i++ {
		_ = tr.Remote.SetReadDeadline(time.Now().Add(20 * time.Second))
		p, _, err := tr.Remote.ReadRTP()
		if err != nil {
			t.Fatalf("audio: %v after %d packets", err, i)
		}
		if len(p.Payload) != 6 || p.Payload[0] != 0xfc {
			t.Fatalf("audio packet %x", p.Payload)
		}
		n := uint16(p.Payload[1]) | uint16(p.Payload[2])<<8
		if i > 0 && n <= last {
			t.Fatalf("audio frame %d after %d", n, last)
		}
		last = n
	}
	if tr.Remote.Codec().MimeType != webrtc.MimeTypeOpus {
		t.Fatalf("codec %s", tr.Remote.Codec().MimeType)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		m, err := viewer.WaitEvent(ctx, "dominantSpeaker")
		if err != nil {
			t.Fatalf("the WebRTC viewer never saw the WebTransport talker as dominant speaker: %v", err)
		}
		if m["participantSid"] == sid {
			break
		}
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case o := <-events.Objects:
			var ev map[string]any
			if json.Unmarshal(o.Payload, &ev) == nil && ev["type"] == "dominantSpeaker" && ev["participantSid"] == sid {
				return
			}
		case <-deadline:
			t.Fatal("the events track never named the talker dominant speaker")
		}
	}
}

// The web app learns the endpoint and the development certificate's hash over
// HTTP and in joined; the hash is the certificate the endpoint presents.
func TestCertHashRoute(t *testing.T) {
	e := start(t)
	rsp, err := http.Get("http://" + e.srv.HTTPAddr + "/v1/wt-cert-hash")
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	var info map[string]any
	if err := json.NewDecoder(rsp.Body).Decode(&info); err != nil || rsp.StatusCode != 200 {
		t.Fatalf("status %d: %v", rsp.StatusCode, err)
	}
	want := base64.StdEncoding.EncodeToString(e.wt.CertHash())
	if info["value"] != want || info["algorithm"] != "sha-256" || !strings.HasPrefix(info["url"].(string), "https://127.0.0.1:") {
		t.Fatalf("wt-cert-hash: %v", info)
	}
	exp, err := time.Parse(time.RFC3339, info["expires"].(string))
	if err != nil || time.Until(exp) > 14*24*time.Hour || time.Until(exp) < time.Hour {
		t.Fatalf("certificate expiry %v: browsers accept at most 14 days", info["expires"])
	}
	c := e.join("hash", "someone")
	wt, _ := c.Joined["webtransport"].(map[string]any)
	if wt == nil || wt["value"] != want {
		t.Fatalf("joined carries webtransport %v", c.Joined["webtransport"])
	}
	// Pinning a different hash fails the dial (the pin is what protects the
	// self-signed certificate).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := make([]byte, 32)
	if _, err := webtransport.Dial(ctx, e.url(), e.token("hash", "x"), webtransport.ClientOptions{CertHash: bad}); err == nil {
		t.Fatal("dial with a wrong certificate hash succeeded")
	}
}

// h264Frame is an access unit in Annex B: SPS, PPS and an IDR slice for
// keyframes, one non-IDR slice otherwise; bytes 6-7 of the slice number it.
func h264Frame(n int, key bool) []byte {
	nal := func(hdr byte, size int, seed int64) []byte {
		b := make([]byte, size)
		rand.New(rand.NewSource(seed)).Read(b)
		for i := range b {
			if b[i] == 0 {
				b[i] = 1 // no start codes inside
			}
		}
		b[0] = hdr
		return append([]byte{0, 0, 0, 1}, b...)
	}
	var out []byte
	if key {
		out = append(out, nal(0x67, 10, 1)...)
		out = append(out, nal(0x68, 4, 2)...)
		out = append(out, nal(0x65, 4000, int64(n))...)
	} else {
		out = append(out, nal(0x41, 1500+(n%5)*200, int64(n))...)
	}
	i := len(out) - 10
	out[i], out[i+1] = byte(n>>8)|0x80, byte(n)|1 // never zero bytes
	return out
}

// A WebRTC H.264 publisher (FU-A, STAP-A) reaches a WebTransport subscriber as
// Annex B access units with the codec named as WebCodecs does.
func TestWebRTCH264ToWebTransport(t *testing.T) {
	e := start(t)
	sent := sync.Map{}
	e.rtcPublisher("h264", "rtcpub", webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
		SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"}, func(n int) []byte {
		f := h264Frame(n, n%15 == 0)
		sent.Store(string(f[len(f)-10:len(f)-8]), f)
		return f
	})
	sub := e.dial("h264", "wtsub")
	var s *webtransport.ClientSub
	var err error
	waitFor(t, "the H.264 track", 30*time.Second, func() bool {
		s, err = sub.Subscribe(context.Background(), []string{"petrel", "h264", "rtcpub"}, "video", false)
		return err == nil
	})
	got, codec := 0, ""
	for deadline := time.Now().Add(30 * time.Second); got < 20 && time.Now().Before(deadline); {
		select {
		case o := <-s.Objects:
			p := o.Payload
			want, ok := sent.Load(string(p[len(p)-10 : len(p)-8]))
			if !ok || !bytes.Equal(want.([]byte), p) {
				t.Fatalf("object %d/%d (%d bytes) is not an access unit as published", o.Group, o.ID, len(p))
			}
			if o.Meta.Codec != "" {
				codec = o.Meta.Codec
			}
			got++
		case <-time.After(time.Second):
		}
	}
	if got < 20 || codec != "avc1.42e01f" {
		t.Fatalf("%d access units, codec %q", got, codec)
	}
}
