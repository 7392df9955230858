package camera_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/camera/probe"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/server"
)

const apiKey = "camkey"

var apiSecret = strings.Repeat("c", 40)

var clipDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "petrel-camera-clip")
	if err != nil {
		panic(err)
	}
	clipDir = dir
	out, err := exec.Command("bash", "../scripts/make-test-clip.sh", dir, "6").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "make-test-clip.sh: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func logger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("PETREL_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func startServer(t *testing.T, cams ...config.Camera) *server.Server {
	t.Helper()
	return startServerWith(t, nil, cams...)
}

// startServerWith starts a server with tweak applied to its config first.
func startServerWith(t *testing.T, tweak func(*config.Config), cams ...config.Camera) *server.Server {
	t.Helper()
	cfg := config.Default()
	if tweak != nil {
		tweak(&cfg)
	}
	cfg.Loopback = true
	cfg.HTTP = "127.0.0.1:0"
	cfg.RTC.UDPPort = 0
	cfg.RTC.TCPPort = 0
	cfg.TURN.Port = 0
	cfg.TURN.RelayIP = "127.0.0.1"
	cfg.APIKey, cfg.APISecret = apiKey, apiSecret
	cfg.Cameras = cams
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(cfg, auth.Keys{apiKey: apiSecret}, apiKey, false, logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv
}

func startEmulator(t *testing.T, addr string) *emulator.Emulator {
	t.Helper()
	clip, err := emulator.LoadClip(clipDir)
	if err != nil {
		t.Fatal(err)
	}
	e, err := emulator.Start(emulator.Options{Addr: addr, Clip: clip, Log: logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func token(t *testing.T, room, identity string, admin bool) string {
	t.Helper()
	c := auth.Claims{Room: room, Grants: auth.Grants{Subscribe: true, PublishData: true, Admin: admin}}
	c.Subject = identity
	tok, err := auth.Keys{apiKey: apiSecret}.Sign(apiKey, c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func whepURL(srv *server.Server, id string) string {
	return "http://" + srv.HTTPAddr + "/whep/" + url.PathEscape(camera.RoomOf(id))
}

// waitStatus polls the camera until cond holds.
func waitStatus(t *testing.T, srv *server.Server, id string, what string, cond func(camera.Status) bool) camera.Status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var st camera.Status
	for time.Now().Before(deadline) {
		if c := srv.Cameras.Camera(id); c != nil {
			st = c.Status()
			if cond(st) {
				return st
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("camera %s: %s never happened; last status %+v", id, what, st)
	return st
}

// view opens a WHEP viewer and waits for its first complete frame.
func view(t *testing.T, srv *server.Server, id string) (*probe.Viewer, probe.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := probe.Open(ctx, probe.Options{Endpoint: whepURL(srv, id), Token: token(t, camera.RoomOf(id), fmt.Sprintf("viewer-%d", time.Now().UnixNano()), false), API: client.LoopbackAPI()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	res, err := v.WaitFirstFrame(ctx)
	if err != nil {
		t.Fatalf("first frame: %v (so far %+v)", err, res)
	}
	return v, res
}

// waitFrames waits until v has decoded n more complete frames.
func waitFrames(t *testing.T, v *probe.Viewer, n int64, what string) {
	t.Helper()
	want := v.Frames() + n
	deadline := time.Now().Add(30 * time.Second)
	for v.Frames() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d complete frames, want %d (gaps %d)", what, v.Frames(), want, v.Gaps())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A cold RTSP camera: described at start (tracks published, state idle), its
// first viewer opens the session and decodes complete frames at once (the
// first is an IDR with parameter sets, which the camera sends only in its SDP).
// Two viewers share one upstream session.
func TestRTSPPullColdViewersDecode(t *testing.T) {
	emu := startEmulator(t, "")
	srv := startServer(t, config.Camera{ID: "door", Name: "Front door", RTSP: emu.URL()})
	st := waitStatus(t, srv, "door", "described and idle", func(s camera.Status) bool {
		return s.State == camera.StateIdle && s.Video != ""
	})
	if st.Video != "video/H264" || st.Audio != "audio/PCMU" || st.Width != 640 || st.Height != 360 {
		t.Fatalf("described as %+v", st)
	}
	if n := emu.Plays.Load(); n != 0 {
		t.Fatalf("a cold camera without viewers was played %d times", n)
	}
	v1, res := view(t, srv, "door")
	t.Logf("cold first frame after %v (%+v)", res.FirstFrame, res)
	waitFrames(t, v1, 50, "first viewer")
	v2, res2 := view(t, srv, "door")
	t.Logf("warm second viewer first frame after %v", res2.FirstFrame)
	waitFrames(t, v2, 25, "second viewer")
	st = srv.Cameras.Camera("door").Status()
	if st.State != camera.StateStreaming || st.Viewers != 2 || st.Bitrate == 0 {
		t.Fatalf("status while two watch: %+v", st)
	}
	if n := emu.Plays.Load(); n != 1 {
		t.Fatalf("two viewers made %d upstream sessions, want 1", n)
	}
	sessions := srv.Cameras.Sessions(camera.RoomOf("door"))
	if len(sessions) < 2 || sessions[0].Steps["first_rtp"] == 0 || sessions[0].Steps["ice_connected"] == 0 {
		t.Fatalf("time-to-stream records: %+v", sessions)
	}
}

// A warm camera that drops (the emulator stops) goes to backoff and, once the
// camera is back, viewers keep decoding on the same connection.
func TestRTSPReconnectAfterCameraRestart(t *testing.T) {
	emu := startEmulator(t, "")
	addr := emu.Addr()
	srv := startServer(t, config.Camera{ID: "yard", RTSP: emu.URL(), Warm: true})
	waitStatus(t, srv, "yard", "streaming", func(s camera.Status) bool { return s.State == camera.StateStreaming })
	v, _ := view(t, srv, "yard")
	waitFrames(t, v, 25, "before the drop")
	emu.Close()
	st := waitStatus(t, srv, "yard", "backoff after the drop", func(s camera.Status) bool { return s.State == camera.StateBackoff })
	if st.LastError == "" {
		t.Fatalf("no error after the drop: %+v", st)
	}
	time.Sleep(300 * time.Millisecond)
	startEmulator(t, addr)
	waitStatus(t, srv, "yard", "streaming again", func(s camera.Status) bool { return s.State == camera.StateStreaming && s.Reconnects >= 1 })
	waitFrames(t, v, 50, "after the camera came back")
}

// An unreachable camera reports why and keeps retrying; a camera with a bad
// declaration is refused with a clear error, from config and from REST.
func TestRTSPUnreachableAndBadConfig(t *testing.T) {
	srv := startServer(t, config.Camera{ID: "gone", RTSP: "rtsp://127.0.0.1:1/stream", Warm: true})
	st := waitStatus(t, srv, "gone", "backoff", func(s camera.Status) bool {
		return s.State == camera.StateBackoff && strings.Contains(s.LastError, "connect")
	})
	t.Logf("unreachable: %s", st.LastError)

	for _, c := range []struct {
		cam  config.Camera
		want string
	}{
		{config.Camera{ID: "Bad_ID", RTSP: "rtsp://x/y"}, "must match"},
		{config.Camera{ID: "a", RTSP: "http://x/y"}, "rtsp:// URL"},
		{config.Camera{ID: "a"}, "exactly one"},
		{config.Camera{ID: "a", RTSP: "rtsp://x/y", WebRTC: true}, "exactly one"},
		{config.Camera{ID: "a", RTP: &config.RTPPush{Port: 70000}}, "rtp.port"},
		{config.Camera{ID: "a", RTP: &config.RTPPush{Port: 5000, Audio: "aac"}}, "opus, pcmu or pcma"},
		{config.Camera{ID: "a", WebRTC: true, HTTP: config.HTTPTo{Base: "ftp://cam"}}, "http(s) URL"},
	} {
		err := c.cam.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.cam, err, c.want)
		}
	}
	dup := config.Default()
	dup.Cameras = []config.Camera{{ID: "a", WebRTC: true}, {ID: "a", WebRTC: true}}
	if err := dup.Validate(); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate ids: %v", err)
	}

	admin := token(t, "", "admin", true)
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+srv.HTTPAddr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do("POST", "/v1/cameras", `{"id":"x","rtsp":"not a url"}`); code != 400 || !strings.Contains(body, "rtsp") {
		t.Errorf("bad camera: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/cameras", `{"id":`); code != 400 {
		t.Errorf("malformed JSON: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/cameras", `{"id":"lobby","webrtc":true}`); code != 200 {
		t.Fatalf("add: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/cameras", `{"id":"lobby","webrtc":true}`); code != 400 || !strings.Contains(body, "exists") {
		t.Errorf("duplicate: %d %s", code, body)
	}
	code, body := do("GET", "/v1/cameras", "")
	var list []camera.Status
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list) != 2 {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, body := do("DELETE", "/v1/cameras/lobby", ""); code != 200 {
		t.Errorf("delete: %d %s", code, body)
	}
	if code, _ := do("DELETE", "/v1/cameras/lobby", ""); code != 404 {
		t.Errorf("delete twice: %d", code)
	}
	req, _ := http.NewRequest("GET", "http://"+srv.HTTPAddr+"/v1/cameras", nil)
	req.Header.Set("Authorization", "Bearer "+token(t, "camera/gone", "viewer", false))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("viewer token on the admin API: %d", resp.StatusCode)
	}
	_ = filepath.Join
}
