package hostile

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
)

// The attacks every server must already hold against: bad tokens on every
// door, malformed and oversized input, floods over one WebSocket, idle
// sockets. Each asserts what the attacker sees, that /healthz stays up, that
// a witness in another room keeps its media, and that the server's footprint
// returns to its baseline once the attackers are gone.

// Footprint is what an attack may cost the server while it lasts.
type Footprint struct {
	RSS               int64
	Goroutines, Files int
}

func (f Footprint) String() string {
	return fmt.Sprintf("RSS %.1f MB, %d goroutines, %d open files", float64(f.RSS)/(1<<20), f.Goroutines, f.Files)
}

// Footprint samples the server's RSS, goroutines and open files.
func (s *Server) Footprint(t *testing.T) Footprint {
	t.Helper()
	return Footprint{RSS: s.RSS(t), Goroutines: s.Goroutines(t), Files: s.OpenFiles(t)}
}

// Settle waits (polling, up to 30 s) until the footprint is back near base:
// goroutines and open files within +20, RSS within 1.5× + 20 MB (Go hands
// freed memory back to the OS slowly, so RSS gets the generous bound).
func (s *Server) Settle(t *testing.T, base Footprint) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var now Footprint
	for {
		now = s.Footprint(t)
		if now.Goroutines <= base.Goroutines+20 && now.Files <= base.Files+20 && now.RSS <= base.RSS*3/2+20<<20 {
			t.Logf("footprint back near its baseline: %s (baseline %s)", now, base)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("footprint did not return to its baseline in 30 s: %s (baseline %s)", now, base)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Witness is a legitimate publisher and subscriber in a room of their own
// whose video must keep flowing while the server is attacked.
type Witness struct {
	s        *Server
	packets  atomic.Int64
	maxGap   atomic.Int64 // longest time without a packet, ns
	last     atomic.Int64 // unix ns of the last packet
	stop     chan struct{}
	stopped  sync.WaitGroup
	pub, sub *client.Client
}

// StartWitness joins room "witness" with a VP8 publisher and a subscriber
// and waits for the first packets.
func (s *Server) StartWitness(t *testing.T) *Witness {
	t.Helper()
	w := &Witness{s: s, stop: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all := auth.Grants{Publish: true, Subscribe: true, PublishData: true}
	var err error
	if w.pub, err = client.Join(ctx, s.WS, s.Token(t, "witness", "witness-pub", all), client.Options{Name: "witness-pub"}); err != nil {
		t.Fatalf("witness publisher: %v", err)
	}
	if w.sub, err = client.Join(ctx, s.WS, s.Token(t, "witness", "witness-sub", all), client.Options{Name: "witness-sub"}); err != nil {
		w.pub.Close()
		t.Fatalf("witness subscriber: %v", err)
	}
	track, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, "witness", "witness")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.pub.Publish(ctx, track, "camera"); err != nil {
		t.Fatalf("witness publish: %v", err)
	}
	w.stopped.Add(2)
	go func() {
		defer w.stopped.Done()
		tick := time.NewTicker(33 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			frame := make([]byte, 1200)
			frame[0] = 0x01
			if n%30 == 0 {
				frame[0] = 0x00 // keyframe
			}
			_ = track.WriteSample(media.Sample{Data: frame, Duration: 33 * time.Millisecond})
		}
	}()
	go func() {
		defer w.stopped.Done()
		for {
			select {
			case <-w.stop:
				return
			case tr := <-w.sub.Tracks:
				go func() {
					buf := make([]byte, 1600)
					for {
						if _, _, err := tr.Remote.Read(buf); err != nil {
							return
						}
						now := time.Now().UnixNano()
						if prev := w.last.Swap(now); prev != 0 && now-prev > w.maxGap.Load() {
							w.maxGap.Store(now - prev)
						}
						w.packets.Add(1)
					}
				}()
			case <-w.sub.Events:
			case <-w.pub.Events:
			}
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for w.packets.Load() < 30 {
		if time.Now().After(deadline) {
			w.Close()
			t.Fatal("the witness received no video")
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.maxGap.Store(0)
	t.Cleanup(w.Close)
	return w
}

// Check fails the test unless the witness's video is flowing now and never
// paused for a second or more since it started (or since the last Check).
func (w *Witness) Check(t *testing.T) {
	t.Helper()
	before := w.packets.Load()
	deadline := time.Now().Add(3 * time.Second)
	for w.packets.Load() < before+10 {
		if time.Now().After(deadline) {
			t.Fatalf("the witness's video stopped (%d packets in all)", before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if gap := time.Duration(w.maxGap.Swap(0)); gap > time.Second {
		t.Fatalf("the witness's video paused for %s", gap)
	}
}

// Close ends the witness.
func (w *Witness) Close() {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	w.stopped.Wait()
	w.pub.Close()
	w.sub.Close()
}

// underAttack starts a server with opt, a witness and a baseline, runs
// attack, and checks health, the witness and the footprint afterwards.
func underAttack(t *testing.T, opt Options, attack func(t *testing.T, s *Server, w *Witness)) {
	s := Start(t, opt)
	w := s.StartWitness(t)
	// The baseline is taken once the server has served one join and some
	// media: lazily made pools and caches are part of it.
	time.Sleep(time.Second)
	base := s.Footprint(t)
	attack(t, s, w)
	s.Healthy(t)
	w.Check(t)
	s.Settle(t, base)
	w.Check(t)
}

// --- HTTP helpers ---

var plainHTTP = &http.Client{Timeout: 15 * time.Second}

type reply struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, url, ctype, token string, body io.Reader) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := plainHTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// expectError fails unless r is status with a JSON {code, message} body.
func expectError(t *testing.T, what string, r reply, status int, code string) {
	t.Helper()
	var e struct{ Code, Message string }
	if r.status != status || json.Unmarshal([]byte(r.body), &e) != nil || e.Code != code || e.Message == "" {
		t.Errorf("%s: %d %q, want %d with code %q", what, r.status, strings.TrimSpace(r.body), status, code)
	}
}

// offer makes an SDP offer from a Pion peer connection: sendonly video for
// WHIP, recvonly video and audio for WHEP.
func offer(t *testing.T, whip bool) string {
	t.Helper()
	pc, err := client.LoopbackAPI().NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	if whip {
		tr, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, "v", "s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pc.AddTrack(tr); err != nil {
			t.Fatal(err)
		}
	} else {
		for _, k := range []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo, webrtc.RTPCodecTypeAudio} {
			if _, err := pc.AddTransceiverFromKind(k, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
				t.Fatal(err)
			}
		}
	}
	o, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	done := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(o); err != nil {
		t.Fatal(err)
	}
	<-done
	return pc.LocalDescription().SDP
}

// --- WebSocket helpers ---

type wsClient struct {
	c *websocket.Conn
}

func dialWS(t *testing.T, s *Server) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, s.WS, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", s.WS, err)
	}
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { _ = c.CloseNow() })
	return &wsClient{c: c}
}

func (w *wsClient) send(t *testing.T, typ websocket.MessageType, b []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, typ, b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func (w *wsClient) sendJSON(t *testing.T, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	w.send(t, websocket.MessageText, b)
}

// next is the next server message, or nil and the close status.
func (w *wsClient) next(d time.Duration) (protocol.Msg, websocket.StatusCode, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, b, err := w.c.Read(ctx)
	if err != nil {
		return nil, websocket.CloseStatus(err), err
	}
	var m protocol.Msg
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, -1, fmt.Errorf("server sent non-JSON %q", b)
	}
	return m, -1, nil
}

// expectWSError reads past room events to the next error and checks its
// code, then (when closed) that the server closes the socket.
func (w *wsClient) expectError(t *testing.T, what, code string, closed bool) {
	t.Helper()
	for {
		m, st, err := w.next(5 * time.Second)
		if err != nil {
			t.Errorf("%s: no error %q, the socket ended (%v, close status %d)", what, code, err, st)
			return
		}
		if m["type"] != "error" {
			continue
		}
		if m["code"] != code || m["message"] == "" {
			t.Errorf("%s: error %v, want code %q", what, m, code)
			return
		}
		break
	}
	if !closed {
		return
	}
	for {
		m, _, err := w.next(5 * time.Second)
		if err != nil {
			return
		}
		if m["type"] == "error" {
			t.Errorf("%s: after %q the socket stays open (got %v)", what, code, m)
			return
		}
	}
}

// --- tokens ---

// badTokens are tokens for room with identity that must not get in:
// the code the server must answer with, by name.
func badTokens(t *testing.T, s *Server, room, identity string, g auth.Grants) map[string]struct{ token, code string } {
	t.Helper()
	claims := func() auth.Claims {
		return auth.Claims{Room: room, Grants: g, RegisteredClaims: jwt.RegisteredClaims{Subject: identity}}
	}
	sign := func(keys auth.Keys, key string, c auth.Claims, ttl time.Duration) string {
		tok, err := keys.Sign(key, c, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	expired := sign(s.Keys, s.APIKey, claims(), -time.Hour)
	early := claims()
	early.NotBefore = jwt.NewNumericDate(time.Now().Add(time.Hour))
	notYet := sign(s.Keys, s.APIKey, early, 2*time.Hour)
	wrongSecret := sign(auth.Keys{s.APIKey: strings.Repeat("x", 40)}, s.APIKey, claims(), time.Hour)
	unknownKey := sign(auth.Keys{"otherkey": strings.Repeat("h", 40)}, "otherkey", claims(), time.Hour)

	full := claims()
	full.Issuer = s.APIKey
	full.ExpiresAt = jwt.NewNumericDate(time.Now().Add(time.Hour))
	none := jwt.NewWithClaims(jwt.SigningMethodNone, &full)
	none.Header["kid"] = s.APIKey
	algNone, err := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rs := jwt.NewWithClaims(jwt.SigningMethodRS256, &full)
	rs.Header["kid"] = s.APIKey
	rs256, err := rs.SignedString(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	// The algorithm confusion: RS256 in the header, the signature an HMAC
	// with the server's own secret, as a verifier that trusts the header
	// would check it.
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, &full)
	hs.Header["kid"] = s.APIKey
	hsTok, err := hs.SignedString([]byte(apiSecret))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(hsTok, ".")
	hdr, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": s.APIKey})
	confused := base64.RawURLEncoding.EncodeToString(hdr) + "." + parts[1] + "." + parts[2]
	good := s.Token(t, room, identity, g)
	tampered := good[:len(good)-6] + "AAAAAA"
	claimsPart := strings.Split(good, ".")
	rich := claims()
	rich.Grants = auth.Grants{Publish: true, Subscribe: true, PublishData: true, Admin: true, PTZ: true}
	rich.Issuer = s.APIKey
	rich.ExpiresAt = jwt.NewNumericDate(time.Now().Add(time.Hour))
	richJSON, _ := json.Marshal(rich)
	escalated := claimsPart[0] + "." + base64.RawURLEncoding.EncodeToString(richJSON) + "." + claimsPart[2]

	return map[string]struct{ token, code string }{
		"garbage":          {"not-a-token", protocol.CodeUnauthorized},
		"three dots":       {"a.b.c", protocol.CodeUnauthorized},
		"huge":             {strings.Repeat("A", 9000), protocol.CodeUnauthorized},
		"expired":          {expired, protocol.CodeTokenExpired},
		"not yet valid":    {notYet, protocol.CodeTokenExpired},
		"wrong secret":     {wrongSecret, protocol.CodeUnauthorized},
		"unknown key":      {unknownKey, protocol.CodeUnauthorized},
		"alg none":         {algNone, protocol.CodeUnauthorized},
		"RS256":            {rs256, protocol.CodeUnauthorized},
		"RS256 confusion":  {confused, protocol.CodeUnauthorized},
		"tampered":         {tampered, protocol.CodeUnauthorized},
		"escalated grants": {escalated, protocol.CodeUnauthorized},
	}
}

const cameraYAML = `cameras:
  - id: door
    rtp:
      port: %d
`

// TestBaselineTokens: every door refuses bad, expired, not-yet-valid and
// forged tokens, and tokens for another room, with the documented status
// and code.
func TestBaselineTokens(t *testing.T) {
	camPort := freeBoth(t)
	underAttack(t, Options{YAML: fmt.Sprintf(cameraYAML, camPort)}, func(t *testing.T, s *Server, w *Witness) {
		whipOffer, whepOffer := offer(t, true), offer(t, false)
		pubGrants := auth.Grants{Publish: true, Subscribe: true, PublishData: true}

		// A live WHIP session in room "a", to aim PATCH and DELETE at.
		owner := s.Token(t, "a", "owner", pubGrants)
		r := do(t, http.MethodPost, s.URL+"/whip/a", "application/sdp", owner, strings.NewReader(whipOffer))
		if r.status != http.StatusCreated {
			t.Fatalf("legitimate WHIP: %d %s", r.status, r.body)
		}
		session := s.URL + r.header.Get("Location")

		for name, bad := range badTokens(t, s, "a", "mallory", pubGrants) {
			t.Run(name, func(t *testing.T) {
				ws := dialWS(t, s)
				ws.sendJSON(t, protocol.Msg{"type": "join", "protocol": 1, "token": bad.token})
				ws.expectError(t, "WebSocket join", bad.code, true)

				expectError(t, "WHIP", do(t, http.MethodPost, s.URL+"/whip/a", "application/sdp", bad.token, strings.NewReader(whipOffer)), 401, bad.code)
				expectError(t, "WHEP", do(t, http.MethodPost, s.URL+"/whep/a", "application/sdp", bad.token, strings.NewReader(whepOffer)), 401, bad.code)
				expectError(t, "admin", do(t, http.MethodGet, s.URL+"/v1/admin/rooms", "", bad.token, nil), 401, bad.code)
				expectError(t, "admin POST", do(t, http.MethodPost, s.URL+"/v1/admin/rooms", "application/json", bad.token, strings.NewReader(`{"name":"x"}`)), 401, bad.code)
				expectError(t, "camera status", do(t, http.MethodGet, s.URL+"/v1/cameras/door/status", "", bad.token, nil), 401, bad.code)
				expectError(t, "live.mp4", do(t, http.MethodGet, s.URL+"/v1/cameras/door/live.mp4", "", bad.token, nil), 401, bad.code)
				// Sessions answer only the token that made them.
				expectError(t, "PATCH session", do(t, http.MethodPatch, session, "application/trickle-ice-sdpfrag", bad.token, strings.NewReader("a=end-of-candidates\r\n")), 401, protocol.CodeUnauthorized)
				expectError(t, "DELETE session", do(t, http.MethodDelete, session, "", bad.token, nil), 401, protocol.CodeUnauthorized)
				// OPTIONS tells anyone what it accepts, but TURN credentials
				// only to a valid token.
				if o := do(t, http.MethodOptions, s.URL+"/whip/a", "", bad.token, nil); o.status != http.StatusNoContent || len(o.header.Values("Link")) != 0 {
					t.Errorf("OPTIONS: %d, Link %q", o.status, o.header.Values("Link"))
				}
			})
		}
		w.Check(t)

		t.Run("no token", func(t *testing.T) {
			ws := dialWS(t, s)
			ws.sendJSON(t, protocol.Msg{"type": "join", "protocol": 1})
			ws.expectError(t, "WebSocket join", protocol.CodeUnauthorized, true)
			expectError(t, "WHIP", do(t, http.MethodPost, s.URL+"/whip/a", "application/sdp", "", strings.NewReader(whipOffer)), 401, protocol.CodeUnauthorized)
			expectError(t, "WHEP", do(t, http.MethodPost, s.URL+"/whep/a", "application/sdp", "", strings.NewReader(whepOffer)), 401, protocol.CodeUnauthorized)
			expectError(t, "admin", do(t, http.MethodGet, s.URL+"/v1/admin/rooms", "", "", nil), 401, protocol.CodeUnauthorized)
			expectError(t, "live.mp4", do(t, http.MethodGet, s.URL+"/v1/cameras/door/live.mp4", "", "", nil), 401, protocol.CodeUnauthorized)
			expectError(t, "DELETE session", do(t, http.MethodDelete, session, "", "", nil), 401, protocol.CodeUnauthorized)
		})

		t.Run("another room", func(t *testing.T) {
			b := s.Token(t, "b", "mallory", auth.Grants{Publish: true, Subscribe: true, PublishData: true, PTZ: true})
			expectError(t, "WHIP", do(t, http.MethodPost, s.URL+"/whip/a", "application/sdp", b, strings.NewReader(whipOffer)), 403, protocol.CodeForbidden)
			expectError(t, "WHEP", do(t, http.MethodPost, s.URL+"/whep/a", "application/sdp", b, strings.NewReader(whepOffer)), 403, protocol.CodeForbidden)
			expectError(t, "camera status", do(t, http.MethodGet, s.URL+"/v1/cameras/door/status", "", b, nil), 403, protocol.CodeForbidden)
			expectError(t, "live.mp4", do(t, http.MethodGet, s.URL+"/v1/cameras/door/live.mp4", "", b, nil), 403, protocol.CodeForbidden)
			expectError(t, "PATCH session", do(t, http.MethodPatch, session, "application/trickle-ice-sdpfrag", b, strings.NewReader("a=end-of-candidates\r\n")), 401, protocol.CodeUnauthorized)
			expectError(t, "DELETE session", do(t, http.MethodDelete, session, "", b, nil), 401, protocol.CodeUnauthorized)
			// A session of room a addressed through room b's path is not found.
			loc := strings.Replace(r.header.Get("Location"), "/whip/a/", "/whip/b/", 1)
			expectError(t, "DELETE through another room", do(t, http.MethodDelete, s.URL+loc, "", b, nil), 404, protocol.CodeNotFound)
			// A viewer token is no admin token, whatever room it names.
			expectError(t, "admin", do(t, http.MethodGet, s.URL+"/v1/admin/rooms", "", b, nil), 403, protocol.CodeForbidden)
			// Over the WebSocket the room is the token's: the witness's room
			// is not joined by a token for b, and b is not the witness's room.
			c, err := client.Join(context.Background(), s.WS, b, client.Options{Name: "mallory"})
			if err != nil {
				t.Fatalf("a valid token for room b: %v", err)
			}
			defer c.Close()
			if room, _ := c.Joined["room"].(map[string]any); room["name"] != "b" {
				t.Errorf("joined %v, want room b", c.Joined["room"])
			}
			if ps := asList(c.Joined["participants"]); len(ps) != 0 {
				t.Errorf("room b shows participants of another room: %v", ps)
			}
		})

		// The legitimate session is untouched by all of the above.
		if d := do(t, http.MethodDelete, session, "", owner, nil); d.status != http.StatusOK {
			t.Errorf("the owner's DELETE: %d %s", d.status, d.body)
		}
	})
}

func asList(v any) []any { l, _ := v.([]any); return l }
