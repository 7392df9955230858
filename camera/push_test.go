package camera_test

import (
	"context"
	"encoding/base64"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/config"
)

// freeUDPPair finds an even port p with p and p+1 free (RTP and RTCP).
func freeUDPPair(t *testing.T) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		p := c.LocalAddr().(*net.UDPAddr).Port &^ 1
		c.Close()
		a, err1 := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
		b, err2 := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p + 1})
		if a != nil {
			a.Close()
		}
		if b != nil {
			b.Close()
		}
		if err1 == nil && err2 == nil {
			return p
		}
	}
	t.Fatal("no free UDP port pair")
	return 0
}

// ffmpeg pushes H.264 and Opus as plain RTP to the camera's ports; a viewer
// decodes complete frames. Junk sent to the port first (not RTP, RTP with an
// unknown payload type, an oversize datagram) is dropped without harm.
func TestRTPPushFromFFmpeg(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed (scripts/install-deps.sh installs it)")
	}
	vport, aport := freeUDPPair(t), 0
	for aport == 0 || aport == vport {
		aport = freeUDPPair(t)
	}
	clip, err := emulator.LoadClip(clipDir)
	if err != nil {
		t.Fatal(err)
	}
	sprop := base64.StdEncoding.EncodeToString(clip.SPS) + "," + base64.StdEncoding.EncodeToString(clip.PPS)
	srv := startServer(t, config.Camera{ID: "push", RTP: &config.RTPPush{Port: vport, AudioPort: aport, Audio: "opus", Sprop: sprop}})
	st := waitStatus(t, srv, "push", "listening", func(s camera.Status) bool { return s.State == camera.StateIdle })
	if st.Video != "video/H264" || st.Audio != "audio/opus" || st.Width != 640 {
		t.Fatalf("tracks: %+v", st)
	}

	var junk *net.UDPConn
	junk, err = net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: vport})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{{1, 2, 3}, append([]byte{0x80, 0x7f, 0, 1, 0, 0, 0, 1, 0, 0, 0, 9}, make([]byte, 100)...), make([]byte, 1800), {0x80}} {
		if _, err := junk.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	junk.Close()
	time.Sleep(100 * time.Millisecond)
	if st := srv.Cameras.Camera("push").Status(); st.State == camera.StateError {
		t.Fatalf("junk broke the camera: %+v", st)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ff := exec.CommandContext(ctx, "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1",
		"-f", "h264", "-framerate", "25", "-i", filepath.Join(clipDir, "clip.h264"),
		"-re", "-stream_loop", "-1", "-i", filepath.Join(clipDir, "clip.opus"),
		"-map", "0:v", "-c:v", "copy", "-payload_type", "96", "-f", "rtp", "rtp://127.0.0.1:"+strconv.Itoa(vport)+"?pkt_size=1200",
		"-map", "1:a", "-c:a", "copy", "-payload_type", "111", "-f", "rtp", "rtp://127.0.0.1:"+strconv.Itoa(aport))
	var stderr strings.Builder
	ff.Stderr = &stderr
	if err := ff.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = ff.Wait() }()
	waitStatus(t, srv, "push", "streaming", func(s camera.Status) bool { return s.State == camera.StateStreaming })
	v, res := view(t, srv, "push")
	t.Logf("first frame after %v (%+v)", res.FirstFrame, res)
	waitFrames(t, v, 50, "rtp push viewer")
	if st := srv.Cameras.Camera("push").Status(); st.Bitrate == 0 || st.Viewers != 1 {
		t.Fatalf("status: %+v (ffmpeg: %s)", st, stderr.String())
	}
}
