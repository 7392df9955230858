package hostile

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
	"github.com/petrel-sfu/petrel/webtransport"
	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

// The attacks on authorization: every door checks the grants of the token a
// participant came with, whatever its transport; the identities the server
// uses for itself cannot be taken; sessions count against the room.

// grantsCamera is an RTP-push camera "gate" whose web interface is base: it
// joins room camera/gate at start and publishes its video track at once.
func grantsCamera(t *testing.T, base string, extra string) string {
	t.Helper()
	port := freeUDPPair(t)
	y := fmt.Sprintf("cameras:\n  - id: gate\n    rtp: {port: %d}\n", port)
	if base != "" {
		y += fmt.Sprintf("    http: {base: %q, allow: [\"/\"]}\n", base)
	}
	return y + extra
}

// secretPage is a camera web interface that counts the requests reaching it.
func secretPage(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "CAMERA-ADMIN-PAGE")
	}))
	t.Cleanup(ts.Close)
	return ts, &hits
}

// grantsDo sends a request and returns its status and body.
func grantsDo(t *testing.T, method, u, ctype, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := http.Client{Timeout: 15 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// grantsCode is the JSON code of an error body ("" when it has none).
func grantsCode(body string) string {
	var e struct{ Code, Message string }
	if json.Unmarshal([]byte(body), &e) != nil || e.Message == "" {
		return ""
	}
	return e.Code
}

// wtDial opens a WebTransport session with token, with the server's
// development certificate pinned.
func wtDial(t *testing.T, s *Server, token string) (*webtransport.Client, error) {
	t.Helper()
	_, body := grantsDo(t, "GET", s.URL+"/v1/wt-cert-hash", "", "", "")
	var info struct{ URL, Value string }
	if err := json.Unmarshal([]byte(body), &info); err != nil || info.URL == "" {
		t.Fatalf("wt-cert-hash: %q", body)
	}
	hash, err := base64.StdEncoding.DecodeString(info.Value)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := webtransport.Dial(ctx, info.URL, token, webtransport.ClientOptions{CertHash: hash, Extensions: true})
	if err == nil {
		t.Cleanup(c.Close)
	}
	return c, err
}

// wtAsk sends one data message over a WebTransport session's data track and
// returns the first data event on topic that comes back from "from".
func wtAsk(t *testing.T, c *webtransport.Client, room, identity, topic, from string, payload []byte) (map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	data := c.AddTrack("data", false)
	if err := c.Announce(ctx, []string{"petrel", room, identity}); err != nil {
		t.Fatal(err)
	}
	events, err := c.Subscribe(ctx, []string{"petrel", room}, "events", false)
	if err != nil {
		t.Fatal(err)
	}
	for data.Subscribers() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the server never subscribed to the data track")
		}
		time.Sleep(20 * time.Millisecond)
	}
	msg, _ := json.Marshal(map[string]any{"topic": topic, "to": []string{from}, "payload": payload})
	if err := data.WriteFrame(&moqt.Meta{AudioLevel: -1}, true, msg); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(8 * time.Second)
	for {
		select {
		case o := <-events.Objects:
			var ev map[string]any
			if json.Unmarshal(o.Payload, &ev) == nil && ev["type"] == "data" && ev["topic"] == topic && ev["from"] == from {
				b, _ := base64.StdEncoding.DecodeString(fmt.Sprint(ev["payload"]))
				var reply map[string]any
				_ = json.Unmarshal(b, &reply)
				return reply, true
			}
		case <-deadline:
			return nil, false
		}
	}
}

// A WebTransport session is a client like any other: without the ptz grant
// its request for the camera's web interface is refused (it joins as a
// client, not as a server-local participant the camera trusts), and with the
// grant it is served.
func TestGrantsWebTransportNeedsPTZGrant(t *testing.T) {
	page, hits := secretPage(t)
	s := Start(t, Options{YAML: grantsCamera(t, page.URL, "")})
	room := "camera/gate"
	req := []byte(`{"id":1,"method":"GET","path":"/"}`)

	c, err := wtDial(t, s, s.Token(t, room, "intruder", auth.Grants{Publish: true, PublishData: true, Subscribe: true}))
	if err != nil {
		t.Fatal(err)
	}
	reply, ok := wtAsk(t, c, room, "intruder", "http", "camera", req)
	if !ok {
		t.Fatal("no answer from the camera to the refused request")
	}
	if reply["error"] == nil || strings.Contains(fmt.Sprint(reply), "CAMERA-ADMIN-PAGE") || hits.Load() != 0 {
		t.Fatalf("a WebTransport session without the ptz grant reached the camera's web interface: %v (%d requests)", reply, hits.Load())
	}
	if !strings.Contains(fmt.Sprint(reply["error"]), "ptz") {
		t.Fatalf("refusal does not say what is missing: %v", reply)
	}

	op, err := wtDial(t, s, s.Token(t, room, "operator", auth.Grants{Publish: true, PublishData: true, Subscribe: true, PTZ: true}))
	if err != nil {
		t.Fatal(err)
	}
	reply, ok = wtAsk(t, op, room, "operator", "http", "camera", req)
	if !ok || reply["status"] != float64(200) || hits.Load() != 1 {
		t.Fatalf("with the ptz grant: %v, %v (%d requests)", reply, ok, hits.Load())
	}
	s.Healthy(t)
}

// A token without publishData cannot send data over WebTransport either:
// the room, not the transport, refuses it.
func TestGrantsWebTransportNeedsDataGrant(t *testing.T) {
	page, hits := secretPage(t)
	s := Start(t, Options{YAML: grantsCamera(t, page.URL, "")})
	c, err := wtDial(t, s, s.Token(t, "camera/gate", "mute", auth.Grants{Subscribe: true, Publish: true, PTZ: true}))
	if err != nil {
		t.Fatal(err)
	}
	if reply, ok := wtAsk(t, c, "camera/gate", "mute", "http", "camera", []byte(`{"id":1,"method":"GET","path":"/"}`)); ok || hits.Load() != 0 {
		t.Fatalf("a token without publishData had a data message answered: %v", reply)
	}
}

// roomParticipants lists a room's visible participants through the admin API.
func roomParticipants(t *testing.T, s *Server, room string) []protocol.ParticipantInfo {
	t.Helper()
	c := auth.Claims{Grants: auth.Grants{Admin: true}, RegisteredClaims: jwt.RegisteredClaims{Subject: "admin"}}
	tok, err := s.Keys.Sign(s.APIKey, c, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	st, body := grantsDo(t, "GET", s.URL+"/v1/admin/rooms/"+url.PathEscape(room)+"/participants", "", tok, "")
	if st != 200 {
		t.Fatalf("participants of %s: %d %s", room, st, body)
	}
	var out []protocol.ParticipantInfo
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func cameraSid(t *testing.T, s *Server) string {
	t.Helper()
	for _, p := range roomParticipants(t, s, "camera/gate") {
		if p.Identity == "camera" {
			return p.Sid
		}
	}
	t.Fatal("the camera is not in its room")
	return ""
}

// whepOffer is a complete receive-only offer for video and audio.
func whepOffer(t *testing.T) string {
	t.Helper()
	return pcOffer(t, recvAV(t))
}

// Identities the server uses for its own participants cannot be taken with a
// token, over any door; the camera stays in its room and keeps answering.
func TestGrantsReservedIdentities(t *testing.T) {
	page, _ := secretPage(t)
	s := Start(t, Options{YAML: grantsCamera(t, page.URL, "")})
	room := "camera/gate"
	sid := cameraSid(t, s)
	all := auth.Grants{Publish: true, Subscribe: true, PublishData: true, PTZ: true}
	offer := whepOffer(t)
	for _, id := range []string{"camera", "camera-gate", "playback-alice", "Camera"} {
		// Signed as an application's backend would, with any JWT library:
		// Petrel's own Sign refuses these identities.
		tok := signRaw(t, s, auth.Claims{Room: room, Grants: all, RegisteredClaims: jwt.RegisteredClaims{Subject: id,
			IssuedAt: jwt.NewNumericDate(time.Now()), ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := client.Join(ctx, s.WS, tok, client.Options{})
		cancel()
		if code := protocol.CodeOf(err); err == nil || code != protocol.CodeIdentityReserved {
			t.Errorf("websocket join as %q: %v (code %s), want %s", id, err, code, protocol.CodeIdentityReserved)
		}
		for _, door := range []string{"whip", "whep"} {
			st, body := grantsDo(t, "POST", s.URL+"/"+door+"/"+url.PathEscape(room), "application/sdp", tok, offer)
			if st != 403 || grantsCode(body) != protocol.CodeIdentityReserved {
				t.Errorf("%s as %q: %d %s", door, id, st, body)
			}
		}
		for _, p := range []string{"/v1/cameras/gate/live.mp4", "/v1/cameras/gate/status"} {
			if st, body := grantsDo(t, "GET", s.URL+p, "", tok, ""); st != 403 || grantsCode(body) != protocol.CodeIdentityReserved {
				t.Errorf("GET %s as %q: %d %s", p, id, st, body)
			}
		}
		if c, err := wtDial(t, s, tok); err == nil {
			select {
			case <-c.Done():
			case <-time.After(3 * time.Second):
				t.Errorf("webtransport session as %q accepted", id)
			}
		}
	}
	// A token the gateway would give a WebRTC camera does not displace the
	// server's own camera either.
	dev := auth.Claims{Room: room, Grants: auth.Grants{Publish: true, Subscribe: true, PublishData: true, Camera: true},
		RegisteredClaims: jwt.RegisteredClaims{Subject: "camera"}}
	tok, err := s.Keys.Sign(s.APIKey, dev, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = client.Join(ctx, s.WS, tok, client.Options{})
	cancel()
	if code := protocol.CodeOf(err); err == nil || code != protocol.CodeIdentityReserved {
		t.Errorf("camera token in an RTP camera's room: %v", err)
	}
	if got := cameraSid(t, s); got != sid {
		t.Fatalf("the camera participant was replaced: %s, was %s", got, sid)
	}
	// The camera still answers its viewers.
	v, err := client.Join(context.Background(), s.WS, s.Token(t, room, "viewer", all), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.SendDataRaw(sfu.EncodeData(sfu.DataHeader{Topic: "http", To: []string{"camera"}}, []byte(`{"id":7,"method":"GET","path":"/"}`))); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-v.DataIn:
		if d.Header.From != "camera" || !strings.Contains(string(d.Payload), `"status":200`) {
			t.Fatalf("viewer got %+v %s", d.Header, d.Payload)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the camera no longer answers")
	}
	s.Healthy(t)
}

// whepMany posts n WHEP offers with tokens from tok(i) and counts the statuses
// and error codes.
func whepMany(t *testing.T, s *Server, room string, n int, tok func(i int) string) (ok int, codes map[string]int) {
	t.Helper()
	offer := whepOffer(t)
	codes = map[string]int{}
	for i := 0; i < n; i++ {
		st, body := grantsDo(t, "POST", s.URL+"/whep/"+url.PathEscape(room), "application/sdp", tok(i), offer)
		switch {
		case st == 201:
			ok++
		case st == 429 || st == 403:
			codes[grantsCode(body)]++
		default:
			t.Fatalf("whep %d: %d %s", i, st, body)
		}
	}
	return ok, codes
}

// 150 WHEP sessions on one token: only limits.max_sessions_per_identity (10
// by default) are admitted, the rest get 429 with code too_many_sessions.
func TestGrantsWHEPSessionsPerToken(t *testing.T) {
	// Join budgets that 150 quick requests from one address do not exhaust:
	// the cap, not the budgets, is under test.
	s := Start(t, Options{YAML: grantsCamera(t, "", "limits:\n  joins_per_second: 1000\n  joins_per_ip_per_second: 1000\n")})
	tok := s.Token(t, "camera/gate", "kiosk", auth.Grants{Subscribe: true})
	ok, codes := whepMany(t, s, "camera/gate", 150, func(int) string { return tok })
	if ok != 10 || codes[protocol.CodeTooManySessions] != 140 {
		t.Fatalf("150 WHEP sessions on one token: %d admitted, refusals %v", ok, codes)
	}
	s.Healthy(t)
}

// WHEP viewers count against the room's participant limit like everyone else.
func TestGrantsWHEPCountsAgainstRoom(t *testing.T) {
	s := Start(t, Options{YAML: grantsCamera(t, "", "limits:\n  max_participants_per_room: 5\n")})
	ok, codes := whepMany(t, s, "camera/gate", 12, func(i int) string {
		return s.Token(t, "camera/gate", fmt.Sprintf("v%d", i), auth.Grants{Subscribe: true})
	})
	if ok != 5 || codes[protocol.CodeRoomFull] != 7 {
		t.Fatalf("12 WHEP viewers in a room of 5: %d admitted, refusals %v", ok, codes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := client.Join(ctx, s.WS, s.Token(t, "camera/gate", "late", auth.Grants{Subscribe: true}), client.Options{})
	if protocol.CodeOf(err) != protocol.CodeRoomFull {
		t.Fatalf("a websocket join into a room full of WHEP viewers: %v", err)
	}
}

// Recordings and exports need the subscribe grant, as live video does, and
// every refusal carries the API's JSON code.
func TestGrantsRecordingsNeedSubscribe(t *testing.T) {
	s := Start(t, Options{YAML: grantsCamera(t, "", "recording:\n  dir: rec\n")})
	room := "camera/gate"
	noSub := s.Token(t, room, "peek", auth.Grants{PublishData: true})
	sub := s.Token(t, room, "viewer", auth.Grants{Subscribe: true})
	other := s.Token(t, "camera/other", "viewer", auth.Grants{Subscribe: true})
	for _, tc := range []struct {
		path, token string
		status      int
		code        string
	}{
		{"/v1/cameras/gate/recordings", noSub, 403, protocol.CodeForbidden},
		{"/v1/cameras/gate/export?from=1&to=2", noSub, 403, protocol.CodeForbidden},
		{"/v1/cameras/gate/recordings?token=" + noSub, "", 403, protocol.CodeForbidden},
		{"/v1/cameras/gate/recordings", other, 403, protocol.CodeForbidden},
		{"/v1/cameras/gate/recordings", "garbage", 401, protocol.CodeUnauthorized},
		{"/v1/cameras/gate/recordings", "", 401, protocol.CodeUnauthorized},
		{"/v1/cameras/bad..id/recordings", sub, 400, protocol.CodeBadRequest},
		{"/v1/cameras/gate/export?from=x", sub, 400, protocol.CodeBadRequest},
		{"/v1/cameras/gate/export?from=1&to=2", sub, 404, protocol.CodeNotFound},
	} {
		st, body := grantsDo(t, "GET", s.URL+tc.path, "", tc.token, "")
		if st != tc.status || grantsCode(body) != tc.code {
			t.Errorf("GET %s: %d %s, want %d %s", strings.Split(tc.path, "?")[0], st, body, tc.status, tc.code)
		}
	}
	if st, body := grantsDo(t, "GET", s.URL+"/v1/cameras/gate/recordings", "", sub, ""); st != 200 {
		t.Fatalf("with the subscribe grant: %d %s", st, body)
	}
}

// signRaw signs claims as they are, with the server's key.
func signRaw(t *testing.T, s *Server, c auth.Claims) string {
	t.Helper()
	c.Issuer = s.APIKey
	tk := jwt.NewWithClaims(jwt.SigningMethodHS256, &c)
	tk.Header["kid"] = s.APIKey
	tok, err := tk.SignedString([]byte(s.Keys[s.APIKey]))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// signLifetime signs a token valid from iat for ttl.
func signLifetime(t *testing.T, s *Server, identity string, iat time.Time, ttl time.Duration) string {
	t.Helper()
	return signRaw(t, s, auth.Claims{Room: "life", Grants: auth.Grants{Subscribe: true, PublishData: true},
		RegisteredClaims: jwt.RegisteredClaims{Subject: identity, IssuedAt: jwt.NewNumericDate(iat), ExpiresAt: jwt.NewNumericDate(iat.Add(ttl))}})
}

// Tokens valid for longer than limits.max_token_lifetime (24 h by default)
// are refused, as are tokens whose expiry lies further ahead than that.
func TestGrantsTokenLifetime(t *testing.T) {
	s := Start(t, Options{})
	now := time.Now()
	join := func(tok string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := client.Join(ctx, s.WS, tok, client.Options{})
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := join(signLifetime(t, s, "day", now, 23*time.Hour)); err != nil {
		t.Fatalf("a 23 h token: %v", err)
	}
	for name, tok := range map[string]string{
		"48 h":              signLifetime(t, s, "long", now, 48*time.Hour),
		"a year":            signLifetime(t, s, "year", now, 365*24*time.Hour),
		"backdated iat":     signLifetime(t, s, "back", now.Add(-47*time.Hour), 48*time.Hour),
		"iat in the future": signLifetime(t, s, "future", now.Add(30*time.Hour), time.Hour),
	} {
		err := join(tok)
		if protocol.CodeOf(err) != protocol.CodeUnauthorized || !strings.Contains(err.Error(), "lifetime") {
			t.Errorf("%s token: %v", name, err)
		}
		if st, body := grantsDo(t, "POST", s.URL+"/whep/life", "application/sdp", tok, "v=0"); st != 401 || grantsCode(body) != protocol.CodeUnauthorized {
			t.Errorf("%s token over WHEP: %d %s", name, st, body)
		}
	}

	short := Start(t, Options{YAML: "limits:\n  max_token_lifetime: 1h\n"})
	tok := signLifetime(t, short, "two", now, 2*time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Join(ctx, short.WS, tok, client.Options{}); protocol.CodeOf(err) != protocol.CodeUnauthorized {
		t.Fatalf("a 2 h token with max_token_lifetime 1h: %v", err)
	}
}

// A token passed as ?token= (download links, <video src>, WebTransport) never
// reaches the log, whatever the request and however it fails.
func TestGrantsTokenNeverLogged(t *testing.T) {
	page, _ := secretPage(t)
	s := Start(t, Options{Args: []string{"--log-level", "debug"}, YAML: grantsCamera(t, page.URL, "recording:\n  dir: rec\n")})
	good := s.Token(t, "camera/gate", "viewer", auth.Grants{Subscribe: true, PublishData: true})
	noSub := s.Token(t, "camera/gate", "peek", auth.Grants{PublishData: true})
	wrong := s.Token(t, "camera/other", "viewer", auth.Grants{Subscribe: true})
	expired := func() string {
		c := auth.Claims{Room: "camera/gate", RegisteredClaims: jwt.RegisteredClaims{Subject: "old"}}
		tok, err := s.Keys.Sign(s.APIKey, c, -time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}()
	toks := []string{good, noSub, wrong, expired}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tok := range toks {
		q := "token=" + url.QueryEscape(tok)
		for _, p := range []string{
			"/v1/cameras/gate/recordings?" + q,
			"/v1/cameras/gate/export?from=1&to=2&" + q,
			"/v1/cameras/gate/export?from=bad&" + q,
			"/v1/cameras/gate/status?" + q,
			"/v1/cameras/nope/recordings?" + q,
		} {
			grantsDo(t, "GET", s.URL+p, "", "", "")
		}
		// live.mp4 streams until the client goes: a short read is enough.
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/cameras/gate/live.mp4?"+q, nil)
		lc := http.Client{Timeout: 2 * time.Second}
		if resp, err := lc.Do(req); err == nil {
			_, _ = io.CopyN(io.Discard, resp.Body, 1024)
			resp.Body.Close()
		}
		grantsDo(t, "POST", s.URL+"/whep/camera%2Fgate?"+q, "application/sdp", "", "v=0")
		if c, err := wtDial(t, s, tok); err == nil {
			c.Close()
		}
	}
	time.Sleep(300 * time.Millisecond)
	logs := s.Logs()
	for i, tok := range toks {
		sig := tok[strings.LastIndexByte(tok, '.')+1:]
		if strings.Contains(logs, sig) || strings.Contains(logs, url.QueryEscape(sig)) {
			t.Errorf("token %d appears in the log", i)
		}
	}
	if strings.Contains(logs, "token=ey") {
		t.Error("a token query parameter appears in the log")
	}
}

// Without API keys the server keeps a development secret in the user's
// config directory; with none it refuses to start instead of putting the
// secret in a shared temporary directory.
func TestGrantsDevSecretNeedsConfigDir(t *testing.T) {
	dir := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HOME" || k == "XDG_CONFIG_HOME" || strings.HasPrefix(k, "PETREL_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "TMPDIR="+dir)
	hp, udp, tcp, turn := freeBoth(t), freeBoth(t), freeBoth(t), freeBoth(t)
	cmd := exec.Command(Binary, "serve", "--loopback", "--http", "127.0.0.1:"+strconv.Itoa(hp),
		"--rtc-udp-port", strconv.Itoa(udp), "--rtc-tcp-port", strconv.Itoa(tcp), "--turn-port", strconv.Itoa(turn))
	cmd.Dir, cmd.Env = dir, env
	var out syncBuffer
	cmd.Stderr, cmd.Stdout = &out, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("serve exited 0 without a secret:\n%s", out.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("serve started without API keys and without a config directory:\n%s", tail(out.String(), 2000))
	}
	if !strings.Contains(out.String(), "api_secret") {
		t.Fatalf("the error does not say what to set:\n%s", out.String())
	}
	if _, err := os.Stat(dir + "/petrel/dev-secret"); err == nil {
		t.Fatal("a development secret was written to the temporary directory")
	}
}
