package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

// pcOffer makes a Pion peer connection with the given transceivers and returns
// its complete offer.
func pcOffer(t *testing.T, setup func(pc *webrtc.PeerConnection)) (*webrtc.PeerConnection, string) {
	return apiOffer(t, client.LoopbackAPI(), setup)
}

// apiOffer is pcOffer for a peer connection of api.
func apiOffer(t *testing.T, api *webrtc.API, setup func(pc *webrtc.PeerConnection)) (*webrtc.PeerConnection, string) {
	t.Helper()
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	setup(pc)
	return pc, completeOffer(t, pc)
}

// completeOffer sets pc's offer and returns it once gathering is complete.
func completeOffer(t *testing.T, pc *webrtc.PeerConnection) string {
	t.Helper()
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	done := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		t.Fatal(err)
	}
	<-done
	return pc.LocalDescription().SDP
}

func post(t *testing.T, url, ctype, token, body string) (*http.Response, string) {
	t.Helper()
	return request(t, http.MethodPost, url, ctype, token, body)
}

// request sends body with method to url and returns the response and its body.
func request(t *testing.T, method, url, ctype, token, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func errCode(t *testing.T, body string) string {
	t.Helper()
	var e struct{ Code, Message string }
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Message == "" {
		t.Fatalf("error body %q is not {code, message}", body)
	}
	return e.Code
}

func TestWHIPAndWHEP(t *testing.T) {
	e := start(t)
	pubTok := e.token("w", "obs", auth.Grants{Publish: true}, time.Hour)
	subTok := e.token("w", "viewer", auth.Grants{Subscribe: true}, time.Hour)

	// Playing an empty room is a clear 404.
	_, offer0 := pcOffer(t, func(pc *webrtc.PeerConnection) {
		_, _ = pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly})
	})
	if resp, body := post(t, e.url+"/whep/w", "application/sdp", subTok, offer0); resp.StatusCode != 404 || errCode(t, body) != protocol.CodeNotFound {
		t.Fatalf("WHEP on an empty room: %d %s", resp.StatusCode, body)
	}

	v := newVideo("v")
	a := newAudio("a")
	pub, offer := pcOffer(t, func(pc *webrtc.PeerConnection) {
		if _, err := pc.AddTrack(v.track); err != nil {
			t.Fatal(err)
		}
		if _, err := pc.AddTrack(a.track); err != nil {
			t.Fatal(err)
		}
	})
	resp, answer := post(t, e.url+"/whip/w", "application/sdp", pubTok, offer)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("WHIP: %d %s", resp.StatusCode, answer)
	}
	loc := resp.Header.Get("Location")
	if !strings.HasPrefix(loc, "/whip/w/") || resp.Header.Get("ETag") == "" {
		t.Fatalf("WHIP headers: Location %q ETag %q", loc, resp.Header.Get("ETag"))
	}
	if links := resp.Header.Values("Link"); len(links) == 0 || !strings.Contains(links[0], `rel="ice-server"`) {
		t.Fatalf("WHIP Link headers %q", links)
	}
	if err := pub.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(answer, "a=ice-lite") {
		t.Fatalf("the WHIP answer is not the session server's (ICE-lite):\n%s", answer)
	}
	v.run(t)
	a.run(t)
	waitFor(t, 5*time.Second, "WHIP tracks published", func() bool {
		r := e.srv.Manager.Room("w")
		return r != nil && len(r.Participants()) == 1 && len(r.Participants()[0].Info().Tracks) == 2
	})

	// WHEP: a recvonly offer gets the newest video and audio.
	tracks := make(chan *webrtc.TrackRemote, 2)
	viewer, voffer := pcOffer(t, func(pc *webrtc.PeerConnection) {
		for _, k := range []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo, webrtc.RTPCodecTypeAudio} {
			_, _ = pc.AddTransceiverFromKind(k, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly})
		}
		pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { tracks <- tr })
	})
	resp, vanswer := post(t, e.url+"/whep/w", "application/sdp", subTok, voffer)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("WHEP: %d %s", resp.StatusCode, vanswer)
	}
	if err := viewer.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: vanswer}); err != nil {
		t.Fatal(err)
	}
	kinds := map[webrtc.RTPCodecType]bool{}
	for i := 0; i < 2; i++ {
		select {
		case tr := <-tracks:
			kinds[tr.Kind()] = true
			readPackets(t, tr, 10, 5*time.Second)
		case <-time.After(10 * time.Second):
			t.Fatal("WHEP viewer got no track")
		}
	}
	if !kinds[webrtc.RTPCodecTypeVideo] || !kinds[webrtc.RTPCodecTypeAudio] {
		t.Fatalf("WHEP kinds %v", kinds)
	}
	// WHEP viewers are not room participants.
	if n := len(e.srv.Manager.Room("w").Participants()); n != 1 {
		t.Fatalf("%d visible participants, want 1", n)
	}

	// Trickle PATCH with the creating token; another token may not touch it.
	patch := func(token, ctype, body string) int {
		r, _ := request(t, http.MethodPatch, e.url+loc, ctype, token, body)
		return r.StatusCode
	}
	frag := "a=mid:0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 9 typ host\r\n"
	if s := patch(pubTok, "application/trickle-ice-sdpfrag", frag); s != http.StatusNoContent {
		t.Fatalf("trickle PATCH: %d", s)
	}
	if s := patch(subTok, "application/trickle-ice-sdpfrag", frag); s != http.StatusUnauthorized {
		t.Fatalf("PATCH with another token: %d", s)
	}
	if s := patch(pubTok, "text/plain", frag); s != http.StatusUnsupportedMediaType {
		t.Fatalf("PATCH with a wrong type: %d", s)
	}
	// An ICE restart: new credentials from the client, new ones back.
	r, b := request(t, http.MethodPatch, e.url+loc, "application/trickle-ice-sdpfrag", pubTok, "a=ice-ufrag:restart1\r\na=ice-pwd:restartrestartrestartrestart\r\n")
	if r.StatusCode != http.StatusOK || !strings.Contains(b, "a=ice-ufrag:") || strings.Contains(b, iceUfragOf(answer)) {
		t.Fatalf("ICE restart PATCH: %d %q", r.StatusCode, b)
	}

	del := func() int {
		req, _ := http.NewRequest(http.MethodDelete, e.url+loc, nil)
		req.Header.Set("Authorization", "Bearer "+pubTok)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	if s := del(); s != http.StatusOK {
		t.Fatalf("DELETE: %d", s)
	}
	if s := del(); s != http.StatusNotFound {
		t.Fatalf("second DELETE: %d", s)
	}
	waitFor(t, 5*time.Second, "WHIP publisher gone", func() bool {
		r := e.srv.Manager.Room("w")
		return r == nil || len(r.Participants()) == 0
	})
	// Its WHEP viewer is not left connected to nothing: the server ends it.
	waitFor(t, 10*time.Second, "WHEP session ended with its publisher", func() bool {
		s := viewer.ConnectionState()
		return s == webrtc.PeerConnectionStateClosed || s == webrtc.PeerConnectionStateFailed || s == webrtc.PeerConnectionStateDisconnected
	})
}

func TestWHIPBadInput(t *testing.T) {
	e := start(t)
	good := e.token("w", "obs", auth.Grants{Publish: true}, time.Hour)
	_, offer := pcOffer(t, func(pc *webrtc.PeerConnection) {
		_, _ = pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly})
	})
	for name, tc := range map[string]struct {
		path, ctype, token, body string
		status                   int
		code                     string
	}{
		"no token":      {"/whip/w", "application/sdp", "", offer, 401, protocol.CodeUnauthorized},
		"forged token":  {"/whip/w", "application/sdp", good[:len(good)-4] + "AAAA", offer, 401, protocol.CodeUnauthorized},
		"expired token": {"/whip/w", "application/sdp", e.token("w", "obs", auth.Grants{Publish: true}, -time.Hour), offer, 401, protocol.CodeTokenExpired},
		"other room":    {"/whip/x", "application/sdp", good, offer, 403, protocol.CodeForbidden},
		"no publish":    {"/whip/w", "application/sdp", e.token("w", "v", auth.Grants{Subscribe: true}, time.Hour), offer, 403, protocol.CodeForbidden},
		"wrong type":    {"/whip/w", "application/json", good, offer, 415, protocol.CodeBadRequest},
		"not sdp":       {"/whip/w", "application/sdp", good, "hello", 400, protocol.CodeSDPInvalid},
		"broken sdp":    {"/whip/w", "application/sdp", good, "v=0\r\nm=video x\r\n", 400, protocol.CodeSDPInvalid},
		"huge sdp":      {"/whip/w", "application/sdp", good, "v=0\r\n" + strings.Repeat("a=x\r\n", 40000), 413, protocol.CodeTooLarge},
		"whep no grant": {"/whep/w", "application/sdp", good, offer, 403, protocol.CodeForbidden},
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := post(t, e.url+tc.path, tc.ctype, tc.token, tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			if c := errCode(t, body); c != tc.code {
				t.Fatalf("code %q, want %q", c, tc.code)
			}
		})
	}
}

func TestSignalingBadInput(t *testing.T) {
	e := start(t, func(c *config.Config) {
		c.Limits.MaxParticipantsPerRoom = 3
		c.Limits.MaxTracksPerParticipant = 2
		c.Limits.MessagesPerSecond = 20
	})
	// A healthy pair keeps exchanging media while everything below happens.
	alice := e.join("bad", "alice")
	bob := e.join("bad", "bob")
	ctx := ctxT(t, 30*time.Second)
	v := newVideo("cam")
	if _, _, err := alice.Publish(ctx, v.track, "camera"); err != nil {
		t.Fatal(err)
	}
	v.run(t)
	tr := waitTrack(t, bob, 10*time.Second)
	readPackets(t, tr.Remote, 10, 5*time.Second)

	// expectErr skips room events (a joined raw socket gets offers and the like).
	expectErr := func(t *testing.T, r *rawWS, code string, closed bool) {
		t.Helper()
		m, _ := r.recv(t)
		for m != nil && m["type"] != "error" {
			m, _ = r.recv(t)
		}
		if m == nil || m["code"] != code || m["message"] == "" {
			t.Fatalf("got %v, want error %s", m, code)
		}
		if closed {
			if m, st := r.recv(t); m != nil || st == -1 {
				t.Fatalf("socket still open after %s (got %v)", code, m)
			}
		}
	}
	t.Run("before join", func(t *testing.T) {
		r := dialRaw(t, e)
		r.send(t, `{"type":"offer","sdp":"v=0"}`)
		expectErr(t, r, protocol.CodeNotJoined, true)
	})
	t.Run("not json, then a join still works", func(t *testing.T) {
		r := dialRaw(t, e)
		r.send(t, `{"type": "join", "tok`)
		expectErr(t, r, protocol.CodeInvalidJSON, false)
		r.send(t, `[1,2,3]`)
		expectErr(t, r, protocol.CodeInvalidJSON, false)
		r.send(t, `{"type":"join","protocol":"one","token":"x"}`)
		expectErr(t, r, protocol.CodeBadRequest, false)
		r.send(t, protocol.Msg{"type": "join", "protocol": 1, "token": e.token("bad", "late", all, time.Hour)})
		if m, _ := r.recv(t); m["type"] != "joined" {
			t.Fatalf("join after bad input: %v", m)
		}
		r.send(t, `{"type":"dance"}`)
		expectErr(t, r, protocol.CodeUnknownType, false)
		r.send(t, `{"type":"offer","sdp":"v=0\r\nthis is not sdp"}`)
		expectErr(t, r, protocol.CodeSDPInvalid, false)
		r.send(t, `{"type":"muteTrack","trackSid":"TR_x"}`)
		expectErr(t, r, protocol.CodeBadRequest, false)
		r.send(t, `{"type":"unpublishTrack","trackSid":"TR_x"}`)
		expectErr(t, r, protocol.CodeNotFound, false)
		r.send(t, `{"type":"ping","id":7,"t":1.5}`)
		m, _ := r.recv(t)
		for m != nil && m["type"] != "pong" {
			m, _ = r.recv(t)
		}
		if m == nil || m["t"] != 1.5 || m["id"] != 7.0 {
			t.Fatalf("pong %v", m)
		}
		r.send(t, `{"type":"leave"}`)
	})
	t.Run("forged token", func(t *testing.T) {
		r := dialRaw(t, e)
		tok := e.token("bad", "mallory", all, time.Hour)
		r.send(t, protocol.Msg{"type": "join", "protocol": 1, "token": tok[:len(tok)-3] + "abc"})
		expectErr(t, r, protocol.CodeUnauthorized, true)
	})
	t.Run("expired token", func(t *testing.T) {
		r := dialRaw(t, e)
		r.send(t, protocol.Msg{"type": "join", "protocol": 1, "token": e.token("bad", "old", all, -time.Minute)})
		expectErr(t, r, protocol.CodeTokenExpired, true)
	})
	t.Run("protocol version", func(t *testing.T) {
		r := dialRaw(t, e)
		r.send(t, protocol.Msg{"type": "join", "protocol": 99, "token": e.token("bad", "future", all, time.Hour)})
		expectErr(t, r, protocol.CodeProtocolVersion, true)
	})
	t.Run("oversized", func(t *testing.T) {
		r := dialRaw(t, e)
		r.send(t, `{"type":"join","token":"`+strings.Repeat("a", 100<<10)+`"}`)
		expectErr(t, r, protocol.CodeTooLarge, false)
		if _, st := r.recv(t); st != websocket.StatusMessageTooBig {
			t.Fatalf("close status %v, want 1009", st)
		}
	})
	t.Run("binary frame", func(t *testing.T) {
		r := dialRaw(t, e)
		if err := r.c.Write(ctx, websocket.MessageBinary, []byte{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		expectErr(t, r, protocol.CodeBadRequest, false)
	})
	t.Run("flood", func(t *testing.T) {
		r := dialRaw(t, e)
		r.send(t, protocol.Msg{"type": "join", "protocol": 1, "token": e.token("bad", "flooder", all, time.Hour)})
		if m, _ := r.recv(t); m["type"] != "joined" {
			t.Fatalf("join: %v", m)
		}
		for i := 0; i < 200; i++ {
			if err := r.c.Write(ctx, websocket.MessageText, []byte(`{"type":"ping"}`)); err != nil {
				break // closed for flooding
			}
		}
		limited := false
		for {
			m, st := r.recv(t)
			if m == nil {
				if st != websocket.StatusPolicyViolation {
					t.Fatalf("flood closed with %v", st)
				}
				break
			}
			if m["code"] == protocol.CodeRateLimited {
				limited = true
			}
		}
		if !limited {
			t.Fatal("no rate_limited error for a flood")
		}
	})
	t.Run("room full", func(t *testing.T) {
		// Sockets closed by the subtests above leave the room asynchronously.
		for deadline := time.Now().Add(5 * time.Second); len(e.srv.Manager.Room("bad").Participants()) > 2 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		third := e.join("bad", "carol")
		defer third.Close()
		_, err := joinWith(e, "bad", "dave", nil)
		if protocol.CodeOf(err) != protocol.CodeRoomFull {
			t.Fatalf("fourth join: %v", err)
		}
	})
	t.Run("too many tracks", func(t *testing.T) {
		for i, want := range []string{"", "", protocol.CodeTooManyTracks} {
			_, err := bob.Request(ctx, protocol.Msg{"type": "publishTrack", "cid": "c" + string(rune('a'+i)), "kind": "audio", "source": "microphone"})
			if protocol.CodeOf(err) != want && !(want == "" && err == nil) {
				t.Fatalf("track %d: %v, want %q", i, err, want)
			}
		}
	})
	t.Run("forbidden publish", func(t *testing.T) {
		c, err := client.Join(ctx, e.ws, e.token("bad2", "viewer", auth.Grants{Subscribe: true}, time.Hour), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.Request(ctx, protocol.Msg{"type": "publishTrack", "cid": "x", "kind": "video", "source": "camera"})
		if protocol.CodeOf(err) != protocol.CodeForbidden {
			t.Fatalf("publish without grant: %v", err)
		}
	})
	t.Run("malformed data messages", func(t *testing.T) {
		for _, b := range [][]byte{{}, {9}, {1, 0xff, 0xff, '{'}, {1, 0, 3, 'n', 'o', 't'}, {1, 0, 2, '{', '}'}} {
			if err := bob.SendDataRaw(append([]byte{}, b...)); err != nil && len(b) > 0 {
				t.Fatal(err)
			}
		}
		if err := bob.SendData([]byte("still here"), true, true); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(5 * time.Second)
		for {
			select {
			case d := <-alice.DataIn:
				if string(d.Payload) == "still here" {
					return
				}
				if len(d.Payload) != 0 {
					t.Fatalf("unexpected data %q", d.Payload)
				}
			case <-deadline:
				t.Fatal("valid data message lost after malformed ones")
			}
		}
	})
	// Through all of it, media kept flowing.
	readPackets(t, tr.Remote, 30, 5*time.Second)
}

func TestAdminAPI(t *testing.T) {
	e := start(t)
	admin := e.token("", "ops", auth.Grants{Admin: true}, time.Hour)
	call := func(method, path, token, body string) (int, string) {
		req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if s, _ := call("GET", "/v1/admin/rooms", e.token("a", "u", all, time.Hour), ""); s != 403 {
		t.Fatalf("rooms with a non-admin token: %d", s)
	}
	if s, b := call("POST", "/v1/admin/rooms", admin, `{"name":"a","maxParticipants":5}`); s != 200 || !strings.Contains(b, `"maxParticipants":5`) {
		t.Fatalf("create room: %d %s", s, b)
	}
	alice := e.join("a", "alice")
	bob := e.join("a", "bob")
	ctx := ctxT(t, 20*time.Second)
	v := newVideo("cam")
	sid, _, err := alice.Publish(ctx, v.track, "camera")
	if err != nil {
		t.Fatal(err)
	}
	v.run(t)
	waitTrack(t, bob, 10*time.Second)
	if s, b := call("GET", "/v1/admin/rooms/a/participants", admin, ""); s != 200 || !strings.Contains(b, `"identity":"alice"`) || !strings.Contains(b, sid) {
		t.Fatalf("participants: %d %s", s, b)
	}
	if s, b := call("POST", "/v1/admin/rooms/a/participants/alice/tracks/"+sid+"/mute", admin, `{"muted":true}`); s != 200 {
		t.Fatalf("mute: %d %s", s, b)
	}
	if ev, err := alice.WaitEvent(ctx, "trackMuted"); err != nil || ev["trackSid"] != sid {
		t.Fatalf("owner not told of the mute: %v %v", ev, err)
	}
	if s, _ := call("DELETE", "/v1/admin/rooms/a/participants/nobody", admin, ""); s != 404 {
		t.Fatalf("kick unknown: %d", s)
	}
	if s, b := call("DELETE", "/v1/admin/rooms/a/participants/bob", admin, ""); s != 200 {
		t.Fatalf("kick: %d %s", s, b)
	}
	if ev, err := bob.WaitEvent(ctx, "leave"); err != nil || ev["reason"] != "kicked" {
		t.Fatalf("kicked client got %v %v", ev, err)
	}
	if ev, err := alice.WaitEvent(ctx, "participantLeft"); err != nil || ev["identity"] != "bob" {
		t.Fatalf("room not told of the kick: %v %v", ev, err)
	}
	if s, _ := call("DELETE", "/v1/admin/rooms/a", admin, ""); s != 200 {
		t.Fatalf("close room: %d", s)
	}
	if ev, err := alice.WaitEvent(ctx, "leave"); err != nil || ev["reason"] != "room_closed" {
		t.Fatalf("room close: %v %v", ev, err)
	}
	// Go's profiles: admin token only.
	if s, _ := call("GET", "/v1/admin/debug/pprof/goroutine?debug=1", e.token("a", "u", all, time.Hour), ""); s != 403 {
		t.Fatalf("pprof with a non-admin token: %d", s)
	}
	if s, b := call("GET", "/v1/admin/debug/pprof/goroutine?debug=1", admin, ""); s != 200 || !strings.Contains(b, "goroutine profile:") {
		t.Fatalf("goroutine profile: %d %.200s", s, b)
	}
	if s, b := call("GET", "/v1/admin/debug/pprof/profile?seconds=1", admin, ""); s != 200 || len(b) < 100 {
		t.Fatalf("cpu profile: %d, %d bytes", s, len(b))
	}
	// The metrics endpoint answers on loopback and counts what happened.
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"petrel_packets_total", "petrel_rooms", "petrel_participants", "petrel_plis_total", "petrel_joins_total"} {
		if !strings.Contains(string(b), m) {
			t.Fatalf("/metrics lacks %s", m)
		}
	}
}

func TestForcedRelayThroughEmbeddedTURN(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 20*time.Second)
	alice := e.join("t", "alice")
	bob, err := client.Join(ctx, e.ws, e.token("t", "bob", all, time.Hour), client.Options{Relay: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	v := newVideo("cam")
	if _, _, err := alice.Publish(ctx, v.track, "camera"); err != nil {
		t.Fatal(err)
	}
	v.run(t)
	tr := waitTrack(t, bob, 10*time.Second)
	readPackets(t, tr.Remote, 20, 5*time.Second)
	// The subscriber connection has no SCTP; its ICE transport is the receiver's.
	ice := tr.Receiver.Transport().ICETransport()
	p, err := ice.GetSelectedCandidatePair()
	if err != nil || p == nil {
		t.Fatalf("selected pair: %v", err)
	}
	if p.Local.Typ != webrtc.ICECandidateTypeRelay {
		t.Fatalf("local candidate is %s, want relay", p.Local.Typ)
	}
}

func TestJoinFloodIsRefusedWithServerBusy(t *testing.T) {
	e := start(t, func(c *config.Config) { c.Limits.JoinsPerSecond = 2 })
	busy := 0
	for i := 0; i < 8; i++ {
		r := dialRaw(t, e)
		r.send(t, protocol.Msg{"type": "join", "protocol": 1, "token": e.token("f", "p"+string(rune('a'+i)), all, time.Hour)})
		m, _ := r.recv(t)
		if m["type"] == "error" {
			if m["code"] != protocol.CodeServerBusy {
				t.Fatalf("join %d: %v", i, m)
			}
			busy++
		}
		r.Close()
	}
	if busy == 0 {
		t.Fatal("eight joins at once against a limit of 2/s (burst 4) were all admitted")
	}
}

// TestICETCPAndTURNOverTCP covers networks where UDP is blocked: media over the
// server's ICE-TCP port, and relayed through the embedded TURN server over TCP.
func TestICETCPAndTURNOverTCP(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 30*time.Second)
	alice := e.join("tcp", "alice")
	v := newVideo("cam")
	if _, _, err := alice.Publish(ctx, v.track, "camera"); err != nil {
		t.Fatal(err)
	}
	v.run(t)

	tcpOnly := client.LoopbackAPI(func(se *webrtc.SettingEngine) {
		se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeTCP4})
	})
	bob, err := client.Join(ctx, e.ws, e.token("tcp", "bob", all, time.Hour), client.Options{API: tcpOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	tr := waitTrack(t, bob, 10*time.Second)
	readPackets(t, tr.Remote, 20, 5*time.Second)
	p, err := tr.Receiver.Transport().ICETransport().GetSelectedCandidatePair()
	if err != nil || p == nil || p.Local.Protocol != webrtc.ICEProtocolTCP {
		t.Fatalf("selected pair %v (%v), want ICE-TCP", p, err)
	}

	carol, err := client.Join(ctx, e.ws, e.token("tcp", "carol", all, time.Hour), client.Options{Relay: true, TURNTransport: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	defer carol.Close()
	tr = waitTrack(t, carol, 10*time.Second)
	readPackets(t, tr.Remote, 20, 5*time.Second)
	p, err = tr.Receiver.Transport().ICETransport().GetSelectedCandidatePair()
	if err != nil || p == nil || p.Local.Typ != webrtc.ICECandidateTypeRelay {
		t.Fatalf("selected pair %v (%v), want relay", p, err)
	}
}

// A client that reconnects with the same identity replaces its old session, even
// when that session was alone in the room (the room must not vanish under it).
func TestSameIdentityReplacesTheOldSession(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 15*time.Second)
	first := e.join("solo", "alice")
	second := e.join("solo", "alice")
	if ev, err := first.WaitEvent(ctx, "leave"); err != nil || ev["reason"] != "duplicate_identity" {
		t.Fatalf("old session: %v %v", ev, err)
	}
	r := e.srv.Manager.Room("solo")
	if r == nil {
		t.Fatal("the room vanished")
	}
	ps := r.Participants()
	if len(ps) != 1 || ps[0].Sid() != sidOf(second) {
		t.Fatalf("room holds %d participants", len(ps))
	}
	// And it works: a viewer sees what the new session publishes.
	v := newVideo("cam")
	if _, _, err := second.Publish(ctx, v.track, "camera"); err != nil {
		t.Fatal(err)
	}
	v.run(t)
	bob := e.join("solo", "bob")
	readPackets(t, waitTrack(t, bob, 10*time.Second).Remote, 10, 5*time.Second)
}

func iceUfragOf(sdp string) string {
	for _, l := range strings.Split(sdp, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "a=ice-ufrag:"); ok {
			return "a=ice-ufrag:" + v
		}
	}
	return "\x00"
}
