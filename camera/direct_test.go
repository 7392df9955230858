package camera_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

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
		for _, x := range camera.Sessions(room) {
			if x.Kind == "direct" && x.Identity == "direct-1" && x.Steps["first_rtp"] > 0 {
				rec = &x
			}
		}
	}
	if rec == nil {
		t.Fatalf("no direct session record with first_rtp: %+v", camera.Sessions(room))
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
