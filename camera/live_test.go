package camera_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/camera/probe"
	"github.com/petrel-sfu/petrel/config"
)

// The HTTP live fallback streams fragmented MP4 that starts at a keyframe and
// that ffmpeg decodes frame after frame; tokens for another room or none are
// refused.
func TestLiveMP4Fallback(t *testing.T) {
	emu := startEmulator(t, "")
	srv := startServer(t, config.Camera{ID: "gate", RTSP: emu.URL(), Warm: true})
	waitStatus(t, srv, "gate", "streaming", func(s camera.Status) bool { return s.State == camera.StateStreaming })
	url := "http://" + srv.HTTPAddr + "/v1/cameras/gate/live.mp4"

	for _, c := range []struct {
		token string
		want  int
	}{{"", 401}, {"garbage", 401}, {token(t, "camera/other", "v", false), 403}} {
		req, _ := http.NewRequest("GET", url+"?token="+c.token, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("token %q: %d, want %d", c.token, resp.StatusCode, c.want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok := token(t, camera.RoomOf("gate"), "http-viewer", false)
	res, n, err := probe.HTTPLiveFrames(ctx, url, tok, 50)
	if err != nil || n < 50 {
		t.Fatalf("%d fragments: %v", n, err)
	}
	t.Logf("first fragment after %v", res.FirstFrame)

	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"?token="+tok, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "live.mp4")
	out, _ := os.Create(file)
	go func() { time.Sleep(2500 * time.Millisecond); resp.Body.Close() }()
	_, _ = io.Copy(out, resp.Body)
	out.Close()
	b, err := exec.Command("ffmpeg", "-nostdin", "-hide_banner", "-v", "error", "-i", file, "-f", "null", "-").CombinedOutput()
	m := regexp.MustCompile(`frame=\s*(\d+)`).FindSubmatch(b)
	if out, _ := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", file).Output(); len(out) > 0 {
		m = [][]byte{nil, []byte(regexp.MustCompile(`\d+`).Find(out))}
	}
	if m == nil {
		t.Fatalf("ffmpeg decoded nothing: %v %s", err, b)
	}
	frames, _ := strconv.Atoi(string(m[1]))
	if frames < 25 {
		t.Fatalf("ffmpeg decoded %d frames of 2.5 s of live.mp4 (%s)", frames, b)
	}
	if len(b) > 0 {
		t.Logf("ffmpeg said (the cut at the end may truncate a fragment): %s", b)
	}
	t.Logf("ffmpeg decoded %d frames", frames)
}
