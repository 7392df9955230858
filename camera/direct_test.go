package camera_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/camera/probe"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/sfu"
)

// A viewer asks a WebRTC camera for a direct session: the camera answers on a
// peer connection of its own, the video arrives over a candidate pair between
// the viewer and the camera (not the server's media port), the viewer's
// microphone reaches the camera's loudspeaker on the same connection, a second
// viewer is refused (the camera serves one direct session), and a viewer
// forced to relay gets the camera through the server's TURN.
func TestWebRTCCameraDirect(t *testing.T) {
	srv := startServer(t, config.Camera{ID: "porch", WebRTC: true})
	tok, err := srv.Cameras.Token("porch", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clip, err := emulator.LoadClip(clipDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(clip.Opus) < 50 {
		t.Fatalf("clip.opus has %d packets", len(clip.Opus))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ws := "ws://" + srv.HTTPAddr + "/v1/rtc"
	cam, err := emulator.StartWebRTC(ctx, emulator.WebRTCOptions{URL: ws, Token: tok, Clip: clip, Tune: loopbackOnly, MaxDirect: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cam.Close()
	waitStatus(t, srv, "porch", "streaming", func(s camera.Status) bool { return s.State == camera.StateStreaming && s.Video != "" })
	room := camera.RoomOf("porch")

	v, err := probe.OpenDirect(ctx, probe.DirectOptions{URL: ws, Token: token(t, room, "direct-1", false), API: client.LoopbackAPI(), Talk: clip.Opus})
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.WaitFirstFrame(ctx)
	if err != nil {
		t.Fatalf("direct session: %v (%+v)", err, res)
	}
	waitFrames(t, v, 25, "direct viewer")
	res = v.Result()
	t.Logf("direct: first frame after %v, pair %s -> %s", res.FirstFrame, res.Candidate, res.Remote)
	remote := strings.Fields(res.Remote)
	addrs := cam.DirectAddrs()
	if len(remote) == 0 || len(addrs) != 1 || remote[0] != addrs[0] {
		t.Fatalf("viewer's selected remote %q is not the camera's direct address %v", res.Remote, addrs)
	}
	if pair, err := cam.Client.Pub.SCTP().Transport().ICETransport().GetSelectedCandidatePair(); err != nil || pair == nil {
		t.Fatalf("camera's server connection has no pair: %v", err)
	} else if server := pair.Remote.Address + ":" + strconv.Itoa(int(pair.Remote.Port)); server == remote[0] {
		t.Fatalf("direct media came from the server's port %s", server)
	}
	if n := srv.Cameras.Camera("porch").Status().Viewers; n != 0 {
		t.Fatalf("the SFU has %d viewers of the camera; the direct viewer should not be one", n)
	}
	// Talk-back on the direct connection: Opus packets reach the camera.
	waitTalk(t, &cam.TalkDirect, 25, "direct")

	// The camera serves one direct session: a second viewer is told why.
	_, err = probe.OpenDirect(ctx, probe.DirectOptions{URL: ws, Token: token(t, room, "direct-2", false), API: client.LoopbackAPI()})
	if !errors.Is(err, probe.ErrRefused) || !strings.Contains(err.Error(), "max direct sessions (1)") {
		t.Fatalf("second direct session: %v, want a refusal naming the limit", err)
	}

	// The camera measured its side and told the viewer.
	steps := v.Result().CameraSteps
	for _, k := range []string{"offer_applied", "answer_created", "ice_connected", "dtls_connected", "first_rtp"} {
		if _, ok := steps[k]; !ok {
			t.Errorf("camera's steps lack %s: %v", k, steps)
		}
	}
	// The server keeps a record of the session too, tagged direct.
	var rec *sfu.SessionTimingInfo
	for deadline := time.Now().Add(10 * time.Second); rec == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, x := range srv.Cameras.Sessions(room) {
			if x.Kind == "direct" && x.Identity == "direct-1" && x.Steps["first_rtp"] > 0 {
				rec = &x
			}
		}
	}
	if rec == nil {
		t.Fatalf("no direct session record with first_rtp: %+v", srv.Cameras.Sessions(room))
	}
	if rec.Steps["answer_created"] <= 0 || rec.Steps["first_rtp"] < rec.Steps["answer_created"] || rec.Steps["dtls_connected"] > rec.Steps["first_rtp"] {
		t.Fatalf("direct record's steps out of order: %v", rec.Steps)
	}
	t.Logf("server's record of the direct session: %v", rec.Steps)
	v.Close()
	deadline := time.Now().Add(10 * time.Second)
	for cam.DirectSessions() != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := cam.DirectSessions(); n != 0 {
		t.Fatalf("camera still has %d direct sessions after the viewer left", n)
	}

	// Relay only: through the server's TURN, still one session with the camera.
	rv, err := probe.OpenDirect(ctx, probe.DirectOptions{URL: ws, Token: token(t, room, "direct-relay", false), API: client.LoopbackAPI(), Relay: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	if res, err := rv.WaitFirstFrame(ctx); err != nil {
		t.Fatalf("relayed direct session: %v (%+v)", err, res)
	}
	waitFrames(t, rv, 25, "relayed direct viewer")
	if res := rv.Result(); res.Candidate != "relay" {
		t.Fatalf("relayed session's local candidate is %q", res.Candidate)
	}
}

func waitTalk(t *testing.T, s *emulator.TalkStats, n int64, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.Opus.Load() < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if s.Opus.Load() < n || s.BadOpus.Load() != 0 {
		t.Fatalf("talk (%s): %d packets, %d good Opus, %d bad, %d other codec", path, s.Packets.Load(), s.Opus.Load(), s.BadOpus.Load(), s.Other.Load())
	}
}

// Through the server, a WebRTC camera gets what the gateway serves RTSP
// cameras: topic talk subscribes the camera to the talker's microphone (the
// camera joins without auto-subscription, so nothing else would), and topic
// http reaches its web interface through the gateway's tunnel; the gateway's
// replies come from identity camera.
func TestWebRTCCameraTalkAndTunnelThroughSFU(t *testing.T) {
	web := emulator.NewONVIF("admin", "pw")
	u, err := web.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer web.Close()
	base := strings.TrimSuffix(u, "/onvif/device_service")
	srv := startServer(t, config.Camera{ID: "yard", WebRTC: true,
		HTTP: config.HTTPTo{Base: base, Allow: []string{"/axis-cgi/param.cgi"}, User: "admin", Password: "pw"}})
	tok, err := srv.Cameras.Token("yard", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clip, err := emulator.LoadClip(clipDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ws := "ws://" + srv.HTTPAddr + "/v1/rtc"
	cam, err := emulator.StartWebRTC(ctx, emulator.WebRTCOptions{URL: ws, Token: tok, Clip: clip, Tune: loopbackOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer cam.Close()
	waitStatus(t, srv, "yard", "streaming", func(s camera.Status) bool { return s.State == camera.StateStreaming })

	c := auth.Claims{Room: camera.RoomOf("yard"), Grants: auth.Grants{Publish: true, Subscribe: true, PublishData: true, PTZ: true}}
	c.Subject = "talker"
	vtok, err := auth.Keys{apiKey: apiSecret}.Sign(apiKey, c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	no := false
	v, err := client.Join(ctx, ws, vtok, client.Options{API: client.LoopbackAPI(), AutoSubscribe: &no})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ask := func(topic, req string) map[string]any {
		t.Helper()
		if err := v.SendDataRaw(sfu.EncodeData(sfu.DataHeader{To: []string{camera.Identity}, Topic: topic, Text: true}, []byte(req))); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case d := <-v.DataIn:
				var m map[string]any
				if d.Header.Topic != topic || json.Unmarshal(d.Payload, &m) != nil || m["id"] == nil {
					continue
				}
				if d.Header.From != camera.Identity {
					t.Fatalf("%s reply from %q, want the camera", topic, d.Header.From)
				}
				return m
			case <-ctx.Done():
				t.Fatalf("no %s reply to %s", topic, req)
			}
		}
	}

	// The web interface through the tunnel, and its allow-list.
	if r := ask("http", `{"id":1,"method":"GET","path":"/axis-cgi/param.cgi?action=list"}`); r["status"] != float64(200) {
		t.Fatalf("tunnelled GET: %v", r)
	}
	if r := ask("http", `{"id":2,"method":"GET","path":"/axis-cgi/admin/restart.cgi"}`); r["status"] != float64(403) {
		t.Fatalf("a path off the allow-list: %v", r)
	}

	// Talk: the floor, then the microphone reaches the camera through the SFU.
	if r := ask("talk", `{"id":3,"op":"start"}`); r["error"] != nil {
		t.Fatalf("talk start: %v", r)
	}
	mic, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "mic", "talker")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Publish(ctx, mic, "microphone"); err != nil {
		t.Fatal(err)
	}
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			<-tick.C
			if mic.WriteSample(media.Sample{Data: clip.Opus[i%len(clip.Opus)], Duration: 20 * time.Millisecond}) != nil {
				return
			}
		}
	}()
	waitTalk(t, &cam.TalkSFU, 25, "through the SFU")
	if n := cam.TalkDirect.Packets.Load(); n != 0 {
		t.Fatalf("%d packets on a direct path nobody opened", n)
	}
	if r := ask("talk", `{"id":4,"op":"stop"}`); r["error"] != nil {
		t.Fatalf("talk stop: %v", r)
	}
}

// Trickle ICE in a direct session: the viewer's offer goes without
// candidates and they follow as relay messages, which the camera adds; the
// camera answers at once and trickles its own; a malformed candidate is
// refused with an error to its sender while the session goes on; a viewer
// that does not trickle still connects (every candidate in its offer).
func TestWebRTCCameraDirectTrickle(t *testing.T) {
	srv := startServer(t, config.Camera{ID: "shed", WebRTC: true})
	tok, err := srv.Cameras.Token("shed", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clip, err := emulator.LoadClip(clipDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws := "ws://" + srv.HTTPAddr + "/v1/rtc"
	cam, err := emulator.StartWebRTC(ctx, emulator.WebRTCOptions{URL: ws, Token: tok, Clip: clip, Tune: loopbackOnly, MaxDirect: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cam.Close()
	waitStatus(t, srv, "shed", "streaming", func(s camera.Status) bool { return s.State == camera.StateStreaming && s.Video != "" })
	room := camera.RoomOf("shed")

	v, err := probe.OpenDirect(ctx, probe.DirectOptions{URL: ws, Token: token(t, room, "trickler", false), API: client.LoopbackAPI()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.WaitFirstFrame(ctx)
	if err != nil {
		t.Fatalf("trickle session: %v (%+v)", err, res)
	}
	t.Logf("trickle: first frame after %v (offer %v, answer %v, ICE %v)", res.FirstFrame, res.OfferCreated, res.AnswerApplied, res.ICEConnected)
	// Media may flow before the trickled candidates land: the first checks
	// make peer-reflexive pairs on loopback.
	for deadline := time.Now().Add(5 * time.Second); (cam.DirectCandidates.Load() == 0 || cam.DirectCandidatesSent.Load() == 0) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	if n := cam.DirectCandidates.Load(); n == 0 {
		t.Fatal("the camera added no trickled candidate: the viewer did not trickle")
	}
	if n := cam.DirectCandidatesSent.Load(); n == 0 {
		t.Fatal("the camera trickled no candidate: it gathered before answering")
	}
	// Hostile input: malformed candidates get an error back, and the session streams on.
	before := v.Frames()
	for _, bad := range []map[string]any{
		{"direct": "candidate", "candidate": map[string]any{"candidate": "candidate:1 1 udp 1 127.0.0.1 9 typ host\r\na=evil", "sdpMid": "0"}},
		{"direct": "candidate", "candidate": map[string]any{"candidate": "hello", "sdpMid": "0"}},
		{"direct": "candidate", "candidate": map[string]any{"candidate": strings.Repeat("x", 600)}},
		{"direct": "candidate"},
	} {
		if err := v.SendSignal(bad); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); len(v.SignalErrors()) < 4; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("errors back for 4 malformed candidates: %q", v.SignalErrors())
		}
	}
	for _, e := range v.SignalErrors() {
		if !strings.Contains(e, "candidate refused") {
			t.Fatalf("error %q", e)
		}
	}
	if n := cam.DirectCandidateErrors.Load(); n != 4 {
		t.Fatalf("camera refused %d candidates, want 4", n)
	}
	waitFrames(t, v, 10, "after malformed candidates")
	if v.Frames() <= before {
		t.Fatal("the session stopped")
	}
	v.Close()

	added, sent := cam.DirectCandidates.Load(), cam.DirectCandidatesSent.Load()
	nv, err := probe.OpenDirect(ctx, probe.DirectOptions{URL: ws, Token: token(t, room, "gatherer", false), API: client.LoopbackAPI(), NoTrickle: true})
	if err != nil {
		t.Fatal(err)
	}
	defer nv.Close()
	if res, err := nv.WaitFirstFrame(ctx); err != nil {
		t.Fatalf("session without trickle: %v (%+v)", err, res)
	}
	if n := cam.DirectCandidates.Load(); n != added {
		t.Fatalf("a viewer that does not trickle sent %d candidates", n-added)
	}
	if n := cam.DirectCandidatesSent.Load(); n != sent {
		t.Fatalf("the camera trickled %d candidates to a viewer that did not offer trickle", n-sent)
	}
}
