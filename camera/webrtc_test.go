package camera_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/config"
)

func loopbackOnly(se *webrtc.SettingEngine) {
	se.SetIncludeLoopbackCandidate(true)
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetInterfaceFilter(func(n string) bool { return n == "lo" })
	se.SetIPFilter(func(ip net.IP) bool { return ip.IsLoopback() })
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
}

// A camera that is a WebRTC peer registers with its own token and offers
// H.264 with sprop-parameter-sets, nack pli and data channels; viewers decode
// it through the SFU, and a viewer's token cannot stand in for the camera.
func TestWebRTCCameraViewersDecode(t *testing.T) {
	srv := startServer(t, config.Camera{ID: "lobby", Name: "Lobby", WebRTC: true})
	st := waitStatus(t, srv, "lobby", "waiting", func(s camera.Status) bool { return s.State == camera.StateWaiting })
	if st.Ingest != "webrtc" {
		t.Fatalf("status %+v", st)
	}
	tok, err := srv.Cameras.Token("lobby", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Cameras.Token("nope", time.Hour); err == nil {
		t.Fatal("token for an unknown camera")
	}
	clip, err := emulator.LoadClip(clipDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cam, err := emulator.StartWebRTC(ctx, emulator.WebRTCOptions{URL: "ws://" + srv.HTTPAddr + "/v1/rtc", Token: tok, Clip: clip, Tune: loopbackOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer cam.Close()
	for _, want := range []string{"packetization-mode=1", "sprop-parameter-sets=", "nack pli", "webrtc-datachannel", "a=group:BUNDLE"} {
		if !strings.Contains(cam.Offer, want) {
			t.Errorf("camera offer lacks %q", want)
		}
	}
	st = waitStatus(t, srv, "lobby", "streaming", func(s camera.Status) bool { return s.State == camera.StateStreaming && s.Video != "" })
	if st.Video != "video/H264" || st.Audio != "audio/PCMU" {
		t.Fatalf("status %+v", st)
	}
	v1, res := view(t, srv, "lobby")
	t.Logf("first frame after %v", res.FirstFrame)
	waitFrames(t, v1, 50, "first viewer")
	v2, _ := view(t, srv, "lobby")
	waitFrames(t, v2, 25, "second viewer")
	if st := srv.Cameras.Camera("lobby").Status(); st.Viewers != 2 {
		t.Fatalf("viewers: %+v", st)
	}
	// The camera leaves: the gateway shows it waiting again.
	cam.Close()
	waitStatus(t, srv, "lobby", "waiting after the camera left", func(s camera.Status) bool { return s.State == camera.StateWaiting })
}
