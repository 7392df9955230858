package hostile

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/stun/v4"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/bench/soak/soak"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/webtransport"
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
	if whip {
		return pcOffer(t, sendTrack(t, webrtc.MimeTypeVP8))
	}
	return pcOffer(t, recvAV(t))
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
	// The camera takes the RTP port and the next one (RTCP).
	camPort, err := soak.FreeUDPPair()
	if err != nil {
		t.Fatal(err)
	}
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

		// WebTransport's development certificate, pinned by its hash.
		var wt struct{ Value, URL string }
		if r := do(t, http.MethodGet, s.URL+"/v1/wt-cert-hash", "", "", nil); r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &wt) != nil {
			t.Fatalf("wt-cert-hash: %d %s", r.status, r.body)
		}
		certHash, err := base64.StdEncoding.DecodeString(wt.Value)
		if err != nil {
			t.Fatal(err)
		}
		wtDial := func(t *testing.T, token string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := webtransport.Dial(ctx, wt.URL, token, webtransport.ClientOptions{CertHash: certHash})
			if err == nil {
				c.Close()
				t.Errorf("WebTransport: a session with a bad token")
			} else if !strings.Contains(err.Error(), "401") {
				t.Errorf("WebTransport: %v, want 401", err)
			}
		}

		// The door opens for a good token: the refusals below are the token's.
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := webtransport.Dial(ctx, wt.URL, s.Token(t, "a", "wt-ok", pubGrants), webtransport.ClientOptions{CertHash: certHash})
			if err != nil {
				t.Fatalf("WebTransport with a good token: %v", err)
			}
			c.Close()
		}()

		for name, bad := range badTokens(t, s, "a", "mallory", pubGrants) {
			t.Run(name, func(t *testing.T) {
				wtDial(t, bad.token)
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
			wtDial(t, "")
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

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func asList(v any) []any { l, _ := v.([]any); return l }

// tenMB is a body of 10 MB that is not worth reading.
func tenMB(prefix string) io.Reader {
	return io.MultiReader(strings.NewReader(prefix), io.LimitReader(zeros{}, 10<<20))
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// doBig sends a body the server should refuse before reading it all: the
// answer, or (the server may close while the client still writes) a
// connection error, which is then not counted as an answer.
func doBig(t *testing.T, method, url, ctype, token string, body io.Reader) (reply, bool) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := plainHTTP.Do(req)
	if err != nil {
		t.Logf("%s %s with 10 MB: %v", method, url, err)
		return reply{}, false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return reply{resp.StatusCode, resp.Header, string(b)}, true
}

// TestBaselineMalformed: malformed, truncated, deeply nested, mistyped and
// oversized SDP and JSON get the documented status and code.
func TestBaselineMalformed(t *testing.T) {
	underAttack(t, Options{}, func(t *testing.T, s *Server, w *Witness) {
		all := auth.Grants{Publish: true, Subscribe: true, PublishData: true}
		pub := s.Token(t, "m", "pub", all)
		admin := s.Token(t, "", "root", auth.Grants{Admin: true})
		whipOffer := offer(t, true)
		nested := strings.Repeat("[", 60000) + strings.Repeat("]", 60000)

		t.Run("WHIP and WHEP", func(t *testing.T) {
			for _, door := range []string{"/whip/m", "/whep/m"} {
				post := func(ctype, body string) reply {
					return do(t, http.MethodPost, s.URL+door, ctype, pub, strings.NewReader(body))
				}
				expectError(t, door+" JSON body", post("application/json", `{"sdp":"v=0"}`), 415, protocol.CodeBadRequest)
				expectError(t, door+" no type", post("", whipOffer), 415, protocol.CodeBadRequest)
				expectError(t, door+" not SDP", post("application/sdp", "hello"), 400, protocol.CodeSDPInvalid)
				expectError(t, door+" empty", post("application/sdp", ""), 400, protocol.CodeSDPInvalid)
				expectError(t, door+" nested", post("application/sdp", nested[:60000]), 400, protocol.CodeSDPInvalid)
				expectError(t, door+" over the SDP limit", post("application/sdp", "v=0\r\n"+strings.Repeat("a=x\r\n", 20000)), 413, protocol.CodeTooLarge)
				if r, ok := doBig(t, http.MethodPost, s.URL+door, "application/sdp", pub, tenMB("v=0\r\n")); ok {
					expectError(t, door+" 10 MB", r, 413, protocol.CodeTooLarge)
				}
			}
			expectError(t, "WHIP broken m-line", do(t, http.MethodPost, s.URL+"/whip/m", "application/sdp", pub, strings.NewReader("v=0\r\nm=video x\r\n")), 400, protocol.CodeSDPInvalid)
			// Truncated in the middle of a line: no session and no media.
			r := do(t, http.MethodPost, s.URL+"/whip/m", "application/sdp", pub, strings.NewReader(whipOffer[:len(whipOffer)/2]))
			expectError(t, "truncated WHIP offer", r, 400, protocol.CodeSDPInvalid)
		})

		t.Run("WHIP session PATCH", func(t *testing.T) {
			r := do(t, http.MethodPost, s.URL+"/whip/m", "application/sdp", pub, strings.NewReader(whipOffer))
			if r.status != http.StatusCreated {
				t.Fatalf("WHIP: %d %s", r.status, r.body)
			}
			session := s.URL + r.header.Get("Location")
			patch := func(ctype, body string) reply {
				return do(t, http.MethodPatch, session, ctype, pub, strings.NewReader(body))
			}
			expectError(t, "PATCH wrong type", patch("application/sdp", "a=end-of-candidates\r\n"), 415, protocol.CodeBadRequest)
			expectError(t, "PATCH bad candidate", patch("application/trickle-ice-sdpfrag", "a=mid:0\r\na=candidate:garbage\r\n"), 400, protocol.CodeBadRequest)
			expectError(t, "PATCH over 16 KiB", patch("application/trickle-ice-sdpfrag", strings.Repeat("a=x\r\n", 5000)), 413, protocol.CodeTooLarge)
			if r, ok := doBig(t, http.MethodPatch, session, "application/trickle-ice-sdpfrag", pub, tenMB("a=")); ok {
				expectError(t, "PATCH 10 MB", r, 413, protocol.CodeTooLarge)
			}
			if d := do(t, http.MethodDelete, session, "", pub, nil); d.status != http.StatusOK {
				t.Errorf("DELETE: %d %s", d.status, d.body)
			}
		})

		t.Run("admin JSON", func(t *testing.T) {
			post := func(body string) reply {
				return do(t, http.MethodPost, s.URL+"/v1/admin/rooms", "application/json", admin, strings.NewReader(body))
			}
			expectError(t, "truncated", post(`{"name":"x`), 400, protocol.CodeBadRequest)
			expectError(t, "wrong type", post(`{"name":5}`), 400, protocol.CodeBadRequest)
			expectError(t, "array", post(`[1,2,3]`), 400, protocol.CodeBadRequest)
			expectError(t, "nested", post(`{"name":`+nested[:20000]), 400, protocol.CodeBadRequest)
			if r, ok := doBig(t, http.MethodPost, s.URL+"/v1/admin/rooms", "application/json", admin, tenMB(`{"name":"`)); ok {
				expectError(t, "10 MB", r, 413, protocol.CodeTooLarge)
			}
			if r := post(`{"name":"fine"}`); r.status != http.StatusOK {
				t.Errorf("a good request after the bad ones: %d %s", r.status, r.body)
			}
		})

		t.Run("WebSocket before join", func(t *testing.T) {
			ws := dialWS(t, s)
			for _, c := range []struct{ name, msg, code string }{
				{"truncated", `{"type": "join", "tok`, protocol.CodeInvalidJSON},
				{"array", `[1,2,3]`, protocol.CodeInvalidJSON},
				{"null", `null`, protocol.CodeInvalidJSON},
				{"nested", `{"type":"join","token":` + nested[:30000], protocol.CodeInvalidJSON},
				{"nested deeper than the decoder goes", `{"type":"join","metadata":` + strings.Repeat(`[`, 12000) + strings.Repeat("]", 12000) + `}`, protocol.CodeInvalidJSON},
				{"nested a wrong type", `{"type":"join","metadata":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat("}", 5000) + `}`, protocol.CodeBadRequest},
				{"protocol a string", `{"type":"join","protocol":"one","token":"x"}`, protocol.CodeBadRequest},
				{"type a number", `{"type":5}`, protocol.CodeBadRequest},
			} {
				ws.send(t, websocket.MessageText, []byte(c.msg))
				ws.expectError(t, c.name, c.code, false)
			}
			ws.send(t, websocket.MessageBinary, []byte{1, 2, 3})
			ws.expectError(t, "binary", protocol.CodeBadRequest, false)
			// Still usable: a good join after all of that.
			ws.sendJSON(t, protocol.Msg{"type": "join", "protocol": 1, "token": s.Token(t, "m", "late", all)})
			for {
				m, _, err := ws.next(5 * time.Second)
				if err != nil {
					t.Fatalf("no joined after bad input: %v", err)
				}
				if m["type"] == "joined" {
					break
				}
			}
			for _, c := range []struct{ name, msg, code string }{
				{"offer sdp a number", `{"type":"offer","sdp":5}`, protocol.CodeBadRequest},
				{"offer not SDP", `{"type":"offer","sdp":"v=0\r\nthis is not sdp"}`, protocol.CodeSDPInvalid},
				{"offer truncated", string(must(json.Marshal(protocol.Msg{"type": "offer", "sdp": whipOffer[:len(whipOffer)/2]}))), protocol.CodeSDPInvalid},
				{"offer one long line", `{"type":"offer","sdp":"v=0\r\na=` + strings.Repeat("x", 50000) + `\r\n"}`, protocol.CodeSDPInvalid},
				{"subscribe a string", `{"type":"subscribe","trackSids":"TR_x","subscribe":true}`, protocol.CodeBadRequest},
				{"unknown type", `{"type":"dance"}`, protocol.CodeUnknownType},
				{"unknown track", `{"type":"unpublishTrack","trackSid":"TR_nope"}`, protocol.CodeNotFound},
			} {
				ws.send(t, websocket.MessageText, []byte(c.msg))
				ws.expectError(t, c.name, c.code, false)
			}
		})

		t.Run("WebSocket frame over the limit", func(t *testing.T) {
			ws := dialWS(t, s)
			ws.send(t, websocket.MessageText, []byte(`{"type":"join","token":"`+strings.Repeat("a", 100<<10)+`"}`))
			ws.expectError(t, "100 KiB frame", protocol.CodeTooLarge, false)
			if _, st, _ := ws.next(5 * time.Second); st != websocket.StatusMessageTooBig {
				t.Errorf("close status %d, want 1009", st)
			}
		})

		t.Run("WebSocket 10 MB frame", func(t *testing.T) {
			ws := dialWS(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// The server closes on the frame's header: the write may fail.
			_ = ws.c.Write(ctx, websocket.MessageText, append([]byte(`{"type":"join","token":"`), make([]byte, 10<<20)...))
			for {
				m, st, err := ws.next(5 * time.Second)
				if err != nil {
					if st != websocket.StatusMessageTooBig {
						t.Errorf("close status %d (%v), want 1009", st, err)
					}
					break
				}
				if m["type"] == "error" && m["code"] != protocol.CodeTooLarge {
					t.Errorf("error %v, want %s", m, protocol.CodeTooLarge)
				}
			}
		})
	})
}

// TestBaselineFlood: a client flooding signaling messages over one
// WebSocket gets rate_limited, then is closed and removed from its room; a
// client within the limit is not; the witness never notices.
func TestBaselineFlood(t *testing.T) {
	underAttack(t, Options{}, func(t *testing.T, s *Server, w *Witness) {
		all := auth.Grants{Publish: true, Subscribe: true, PublishData: true}
		admin := s.Token(t, "", "root", auth.Grants{Admin: true})
		// A joined flooder sends pings; one before join sends broken JSON
		// (anything else before join is not_joined, and closed at once).
		flood := func(t *testing.T, identity string, join bool) {
			ws := dialWS(t, s)
			if join {
				ws.sendJSON(t, protocol.Msg{"type": "join", "protocol": 1, "token": s.Token(t, "flood", identity, all)})
				for {
					m, _, err := ws.next(5 * time.Second)
					if err != nil {
						t.Fatalf("join: %v", err)
					}
					if m["type"] == "joined" {
						break
					}
				}
			}
			// Read while writing: the server must not block on a reader
			// that does not keep up, and the errors are what we look for.
			codes := make(chan string, 4096)
			closed := make(chan websocket.StatusCode, 1)
			go func() {
				for {
					m, st, err := ws.next(15 * time.Second)
					if err != nil {
						closed <- st
						close(codes)
						return
					}
					if m["type"] == "error" {
						codes <- fmt.Sprint(m["code"])
					}
				}
			}()
			ping := []byte(`{"type":"ping","t":1}`)
			if !join {
				ping = []byte(`{"type":`)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sent := 0
			for ; sent < 5000; sent++ {
				if ws.c.Write(ctx, websocket.MessageText, ping) != nil {
					break
				}
			}
			var st websocket.StatusCode
			select {
			case st = <-closed:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: the socket stays open after %d pings", identity, sent)
			}
			limited := 0
			for c := range codes {
				switch {
				case c == protocol.CodeRateLimited:
					limited++
				case c == protocol.CodeInvalidJSON && !join:
				default:
					t.Errorf("%s: error %q in a ping flood", identity, c)
				}
			}
			if limited == 0 {
				t.Errorf("%s: closed (%d) after %d pings without rate_limited", identity, st, sent)
			}
			t.Logf("%s: %d pings written, %d rate_limited, closed with %d", identity, sent, limited, st)
		}
		t.Run("joined", func(t *testing.T) {
			flood(t, "flooder", true)
			// A flooder is removed at once, not kept for resumption.
			deadline := time.Now().Add(5 * time.Second)
			for {
				r := do(t, http.MethodGet, s.URL+"/v1/admin/rooms/flood/participants", "", admin, nil)
				if r.status == http.StatusNotFound || !strings.Contains(r.body, "flooder") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the flooder is still in its room: %s", r.body)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
		t.Run("before join", func(t *testing.T) { flood(t, "anonymous", false) })
		t.Run("eight at once", func(t *testing.T) {
			var wg sync.WaitGroup
			for i := 0; i < 8; i++ {
				wg.Add(1)
				go func() { defer wg.Done(); flood(t, fmt.Sprintf("flooder-%d", i), i%2 == 0) }()
			}
			wg.Wait()
		})
		w.Check(t)

		t.Run("within the limit", func(t *testing.T) {
			ws := dialWS(t, s)
			ws.sendJSON(t, protocol.Msg{"type": "join", "protocol": 1, "token": s.Token(t, "flood", "polite", all)})
			// 30 a second for 3 s, under the default 50.
			pongs := 0
			done := make(chan struct{})
			go func() {
				defer close(done)
				for pongs < 90 {
					m, _, err := ws.next(5 * time.Second)
					if err != nil {
						return
					}
					switch m["type"] {
					case "pong":
						pongs++
					case "error":
						t.Errorf("a polite client got %v", m)
						return
					}
				}
			}()
			tick := time.NewTicker(time.Second / 30)
			defer tick.Stop()
			for i := 0; i < 90; i++ {
				<-tick.C
				ws.sendJSON(t, protocol.Msg{"type": "ping", "t": i})
			}
			<-done
			if pongs != 90 {
				t.Errorf("%d pongs of 90", pongs)
			}
		})
	})
}

// TestBaselineIdleSockets: 500 idle TCP connections to the HTTP port and 500
// WebSocket upgrades that never join cost the server only while they last,
// and do not keep a legitimate client from joining. The attackers come from
// 127.0.0.2 and 127.0.0.3, so that a per-address limit may refuse them
// without refusing the checks from 127.0.0.1.
func TestBaselineIdleSockets(t *testing.T) {
	underAttack(t, Options{}, func(t *testing.T, s *Server, w *Witness) {
		legit := func(t *testing.T, identity string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			c, err := client.Join(ctx, s.WS, s.Token(t, "other", identity, auth.Grants{Subscribe: true, PublishData: true}), client.Options{Name: identity})
			if err != nil {
				t.Fatalf("a legitimate join during the attack: %v", err)
			}
			c.Close()
		}
		addr := s.URL[len("http://"):]

		t.Run("500 idle TCP", func(t *testing.T) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			failed := 0
			for i := 0; i < 500; i++ {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					failed++
					continue
				}
				conns = append(conns, c)
			}
			t.Logf("%d idle connections dialed (the server may close some at once), %d refused; %s", len(conns), failed, s.Footprint(t))
			s.Healthy(t)
			legit(t, "during-tcp")
			w.Check(t)
		})

		t.Run("500 WebSocket upgrades without join", func(t *testing.T) {
			hc := &http.Client{Transport: &http.Transport{
				DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}).DialContext,
				DisableKeepAlives: true,
			}}
			var mu sync.Mutex
			var socks []*websocket.Conn
			defer func() {
				for _, c := range socks {
					_ = c.CloseNow()
				}
			}()
			var wg sync.WaitGroup
			var failed atomic.Int64
			start := time.Now()
			for i := 0; i < 500; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					c, _, err := websocket.Dial(ctx, s.WS, &websocket.DialOptions{HTTPClient: hc})
					if err != nil {
						failed.Add(1)
						return
					}
					mu.Lock()
					socks = append(socks, c)
					mu.Unlock()
				}()
				if i%50 == 49 {
					wg.Wait()
				}
			}
			wg.Wait()
			t.Logf("%d upgrades open, %d refused, in %s; %s", len(socks), failed.Load(), time.Since(start).Round(time.Millisecond), s.Footprint(t))
			if len(socks) == 0 {
				t.Fatal("no upgrade succeeded")
			}
			s.Healthy(t)
			legit(t, "during-ws")
			w.Check(t)
			// Every one is told join_timeout and closed, 10 s after it opened.
			var timedOut, other atomic.Int64
			for _, c := range socks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					for {
						_, b, err := c.Read(ctx)
						if err != nil {
							return
						}
						var m protocol.Msg
						if json.Unmarshal(b, &m) == nil && m["code"] == protocol.CodeJoinTimeout {
							timedOut.Add(1)
						} else {
							other.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if int(timedOut.Load()) != len(socks) || other.Load() != 0 {
				t.Errorf("%d of %d upgrades got join_timeout, %d other messages", timedOut.Load(), len(socks), other.Load())
			}
			if d := time.Since(start); d > 25*time.Second {
				t.Errorf("the last join_timeout came %s after the upgrades", d)
			}
		})
	})
}

// TestBaselineGarbageOnMediaPorts: random datagrams, STUN, DTLS- and
// RTP-looking packets to the media and TURN ports, and garbage or silence
// on ICE-TCP and TURN over TCP, from another address than the witness's,
// cost the server nothing that stays; an unauthenticated TURN allocation
// gets 401.
func TestBaselineGarbageOnMediaPorts(t *testing.T) {
	underAttack(t, Options{}, func(t *testing.T, s *Server, w *Witness) {
		from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 4)}
		rnd := func(n int) []byte {
			b := make([]byte, n)
			_, _ = rand.Read(b)
			return b
		}
		shapes := func(i int) []byte {
			b := rnd(3 + i%1400)
			switch i % 4 {
			case 0: // STUN binding request with a made-up username
				m := stun.MustBuild(stun.TransactionID, stun.BindingRequest, stun.NewUsername(fmt.Sprintf("x%d:y", i)), stun.Fingerprint)
				return m.Raw
			case 1: // DTLS handshake record header
				b[0], b[1], b[2] = 22, 0xfe, 0xfd
			case 2: // RTP version 2
				b[0] = 0x80
			}
			return b
		}
		for _, port := range []int{s.UDPPort, s.TURNPort} {
			c, err := net.DialUDP("udp", from, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 20000; i++ {
				_, _ = c.Write(shapes(i))
				if i%500 == 0 {
					time.Sleep(time.Millisecond) // about 20000 a second, not a socket-buffer test
				}
			}
			c.Close()
		}
		w.Check(t)

		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 4)}, Timeout: 5 * time.Second}
		var conns []net.Conn
		for _, port := range []int{s.TCPPort, s.TURNPort} {
			for i := 0; i < 100; i++ {
				c, err := d.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					continue
				}
				conns = append(conns, c)
				if i%2 == 0 {
					_ = c.SetWriteDeadline(time.Now().Add(time.Second))
					_, _ = c.Write(rnd(2000)) // garbage, also as a huge RFC 4571 length
				}
			}
		}
		t.Logf("%d TCP connections to ICE-TCP and TURN; %s", len(conns), s.Footprint(t))
		s.Healthy(t)
		w.Check(t)
		for _, c := range conns {
			c.Close()
		}

		// TURN without credentials: 401 with a realm and nonce, not an allocation.
		c, err := net.DialUDP("udp", from, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: s.TURNPort})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		req := stun.MustBuild(stun.TransactionID, stun.NewType(stun.MethodAllocate, stun.ClassRequest),
			stun.RawAttribute{Type: stun.AttrRequestedTransport, Value: []byte{17, 0, 0, 0}}, stun.Fingerprint)
		if _, err := c.Write(req.Raw); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no answer to an unauthenticated TURN allocation: %v", err)
		}
		res := &stun.Message{Raw: buf[:n]}
		var code stun.ErrorCodeAttribute
		if err := res.Decode(); err != nil || res.Type.Class != stun.ClassErrorResponse || code.GetFrom(res) != nil || code.Code != stun.CodeUnauthorized {
			t.Errorf("unauthenticated TURN allocation answered %v %v (decode: %v)", res.Type, code, err)
		}
	})
}
