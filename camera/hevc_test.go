package camera_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/gortsplib/v4/pkg/format/rtph264"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/server"
)

// startH265Emulator is a camera sending the clip as H.265.
func startH265Emulator(t *testing.T) *emulator.Emulator {
	t.Helper()
	clip, err := emulator.LoadClip(clipDir)
	if err != nil {
		t.Fatal(err)
	}
	if clip.H265 == nil {
		t.Skip("no clip.h265: this ffmpeg has no libx265")
	}
	e, err := emulator.Start(emulator.Options{Clip: clip, H265: true, NoAudio: true, Log: logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// h264Viewer is a WHEP viewer whose offer has VP8 and H.264 only (as every
// browser's: none receives H.265 over WebRTC). It keeps the H.264 access
// units it receives, Annex-B.
type h264Viewer struct {
	pc       *webrtc.PeerConnection
	location string
	token    string
	mu       sync.Mutex
	codec    string
	annexB   bytes.Buffer
	sps, pps bool
	idrAt    time.Time
}

func openH264Viewer(t *testing.T, srv *server.Server, id string) *h264Viewer {
	t.Helper()
	m := &webrtc.MediaEngine{}
	for _, c := range []webrtc.RTPCodecParameters{
		{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, PayloadType: 96},
		{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000, SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"}, PayloadType: 102},
	} {
		if err := m.RegisterCodec(c, webrtc.RTPCodecTypeVideo); err != nil {
			t.Fatal(err)
		}
	}
	var se webrtc.SettingEngine
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetIPFilter(func(ip net.IP) bool { return ip.IsLoopback() })
	se.SetIncludeLoopbackCandidate(true)
	api := webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithSettingEngine(se))
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	v := &h264Viewer{pc: pc}
	t.Cleanup(func() { v.close() })
	if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
		t.Fatal(err)
	}
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { v.read(tr) })
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		t.Fatal(err)
	}
	<-gathered
	if strings.Contains(pc.LocalDescription().SDP, "H265") {
		t.Fatal("the viewer's offer has H.265")
	}
	req, _ := http.NewRequest(http.MethodPost, whepURL(srv, id), strings.NewReader(pc.LocalDescription().SDP))
	req.Header.Set("Content-Type", "application/sdp")
	v.token = token(t, camera.RoomOf(id), "h264-viewer", false)
	req.Header.Set("Authorization", "Bearer "+v.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("WHEP: %d %s", resp.StatusCode, body)
	}
	v.location = "http://" + srv.HTTPAddr + resp.Header.Get("Location")
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(body)}); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v *h264Viewer) read(tr *webrtc.TrackRemote) {
	v.mu.Lock()
	v.codec = tr.Codec().MimeType
	v.mu.Unlock()
	var dec rtph264.Decoder
	_ = dec.Init()
	buf := make([]byte, 1500)
	for {
		n, _, err := tr.Read(buf)
		if err != nil {
			return
		}
		var p rtp.Packet
		if p.Unmarshal(append([]byte(nil), buf[:n]...)) != nil {
			continue
		}
		au, err := dec.Decode(&p)
		if err != nil {
			continue
		}
		v.mu.Lock()
		for _, nal := range au {
			if len(nal) == 0 {
				continue
			}
			switch nal[0] & 0x1f {
			case 7:
				v.sps = true
			case 8:
				v.pps = true
			case 5:
				if v.sps && v.pps && v.idrAt.IsZero() {
					v.idrAt = time.Now()
				}
			}
		}
		// Kept from the first access unit with an IDR (its SPS/PPS too).
		if !v.idrAt.IsZero() && v.annexB.Len() < 4<<20 {
			for _, nal := range au {
				v.annexB.Write([]byte{0, 0, 0, 1})
				v.annexB.Write(nal)
			}
		}
		v.mu.Unlock()
	}
}

func (v *h264Viewer) close() {
	if v.location != "" {
		req, _ := http.NewRequest(http.MethodDelete, v.location, nil)
		req.Header.Set("Authorization", "Bearer "+v.token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		v.location = ""
	}
	_ = v.pc.Close()
}

var transcoderPID = regexp.MustCompile(`\(pid (\d+)`)

// A warm H.265 camera and a viewer that cannot receive H.265: the server answers
// with the camera's H.264 transcode, which starts for this viewer (one ffmpeg)
// and decodes (SPS/PPS, then an IDR, then frames ffmpeg decodes); the
// transcoder stops a few seconds after the viewer leaves. live.mp4 serves the
// same H.264.
func TestH265CameraTranscodedForH264Viewer(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed: " + err.Error())
	}
	emu := startH265Emulator(t)
	srv := startServer(t, config.Camera{ID: "hevc", RTSP: emu.URL(), Warm: true})
	st := waitStatus(t, srv, "hevc", "described", func(s camera.Status) bool { return s.Video != "" })
	if st.Video != webrtc.MimeTypeH265 || st.Transcoded != webrtc.MimeTypeH264 || !strings.Contains(st.VideoNote, "idle") {
		t.Fatalf("described as %+v", st)
	}
	start := time.Now()
	v := openH264Viewer(t, srv, "hevc")
	deadline := time.Now().Add(10 * time.Second)
	for {
		v.mu.Lock()
		ok := !v.idrAt.IsZero() && v.annexB.Len() > 50_000
		v.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decodable H.264 within 10 s (codec %q, sps %v pps %v, status %+v)", v.codec, v.sps, v.pps, srv.Cameras.Camera("hevc").Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	v.mu.Lock()
	codec, first, stream := v.codec, v.idrAt.Sub(start), append([]byte(nil), v.annexB.Bytes()...)
	v.mu.Unlock()
	if codec != webrtc.MimeTypeH264 {
		t.Fatalf("received %s", codec)
	}
	t.Logf("first H.264 IDR %v after the WHEP POST (warm camera, transcoder idle)", first)
	// What arrived decodes: ffmpeg counts its frames.
	file := filepath.Join(t.TempDir(), "got.h264")
	if err := os.WriteFile(file, stream, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height,nb_read_frames", "-of", "csv=p=0", file).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v: %s", err, out)
	}
	f := strings.Split(strings.TrimSpace(string(out)), ",")
	if len(f) < 4 || f[0] != "h264" || f[1] != "640" || f[2] != "360" {
		t.Fatalf("ffprobe of the received stream: %q", out)
	}
	if n, _ := strconv.Atoi(f[3]); n < 5 {
		t.Fatalf("only %d frames decode: %q", n, out)
	}

	st = srv.Cameras.Camera("hevc").Status()
	m := transcoderPID.FindStringSubmatch(st.VideoNote)
	if m == nil {
		t.Fatalf("while watched, the note names no ffmpeg: %+v", st)
	}
	pid := m[1]
	if _, err := os.Stat("/proc/" + pid); err != nil {
		t.Fatalf("ffmpeg pid %s: %v", pid, err)
	}

	pv, res := view(t, srv, "hevc")
	t.Logf("probe: %+v", res)
	waitFrames(t, pv, 25, "probe")

	// HTTP live of an H.265 camera: the same H.264, as fMP4 (avc1).
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+srv.HTTPAddr+"/v1/cameras/hevc/live.mp4", nil)
		req.Header.Set("Authorization", "Bearer "+token(t, camera.RoomOf("hevc"), "http-viewer", false))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("live.mp4: %d %s", resp.StatusCode, b)
		}
		b := make([]byte, 0, 64<<10)
		chunk := make([]byte, 8<<10)
		for !bytes.Contains(b, []byte("avc1")) || !bytes.Contains(b, []byte("moof")) {
			n, err := resp.Body.Read(chunk)
			b = append(b, chunk[:n]...)
			if err != nil || len(b) > 4<<20 {
				t.Fatalf("live.mp4: no H.264 fragment in %d bytes (%v)", len(b), err)
			}
		}
	}()
	if got := transcoderPID.FindStringSubmatch(srv.Cameras.Camera("hevc").Status().VideoNote); got == nil || got[1] != pid {
		t.Fatalf("a second consumer started another ffmpeg: %v, was %s", got, pid)
	}

	pv.Close()
	v.close()
	deadline = time.Now().Add(10 * time.Second)
	for {
		st = srv.Cameras.Camera("hevc").Status()
		if _, err := os.Stat("/proc/" + pid); err != nil && strings.Contains(st.VideoNote, "idle") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ffmpeg %s still running 10 s after the last viewer left: %+v", pid, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// whepStatus posts an offer with VP8 and H.264 only and returns the status
// and body of the answer (no session is kept).
func whepStatus(t *testing.T, srv *server.Server, id string) (int, string) {
	t.Helper()
	m := &webrtc.MediaEngine{}
	if err := m.RegisterCodec(webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
		SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"}, PayloadType: 102}, webrtc.RTPCodecTypeVideo); err != nil {
		t.Fatal(err)
	}
	pc, err := webrtc.NewAPI(webrtc.WithMediaEngine(m)).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
		t.Fatal(err)
	}
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, whepURL(srv, id), strings.NewReader(offer.SDP))
	req.Header.Set("Content-Type", "application/sdp")
	req.Header.Set("Authorization", "Bearer "+token(t, camera.RoomOf(id), "h264-probe", false))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Without ffmpeg, an H.265 camera says why browsers cannot play it: in its
// status, in the WHEP refusal (the codec) and in live.mp4's error.
func TestH265CameraWithoutFFmpegSaysWhy(t *testing.T) {
	emu := startH265Emulator(t)
	srv := startServer(t, config.Camera{ID: "nofff", RTSP: emu.URL(), Transcode: filepath.Join(t.TempDir(), "no-ffmpeg")})
	st := waitStatus(t, srv, "nofff", "described", func(s camera.Status) bool { return s.Video != "" })
	if st.Transcoded != "" || !strings.Contains(st.VideoNote, "ffmpeg") || !strings.Contains(st.VideoNote, "not installed") {
		t.Fatalf("status %+v", st)
	}
	code, body := whepStatus(t, srv, "nofff")
	if code < 400 || !strings.Contains(body, "codec") {
		t.Fatalf("WHEP with an H.264-only offer: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+srv.HTTPAddr+"/v1/cameras/nofff/live.mp4", nil)
	req.Header.Set("Authorization", "Bearer "+token(t, camera.RoomOf("nofff"), "http-viewer", false))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(b), "not installed") {
		t.Fatalf("live.mp4: %d %s", resp.StatusCode, b)
	}
}

// A transcoder that dies at once (here `false` stands in the ffmpeg binary's
// place, as a broken ffmpeg install would) is restarted a bounded number of
// times, then the status says it failed, and it stays stopped.
func TestH265TranscoderRestartsBounded(t *testing.T) {
	f, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false(1)")
	}
	emu := startH265Emulator(t)
	srv := startServer(t, config.Camera{ID: "broken", RTSP: emu.URL(), Transcode: f})
	waitStatus(t, srv, "broken", "described", func(s camera.Status) bool { return s.Transcoded != "" })
	openH264Viewer(t, srv, "broken")
	st := waitStatus(t, srv, "broken", "the transcoder given up", func(s camera.Status) bool {
		return strings.Contains(s.VideoNote, "failed 4 times")
	})
	time.Sleep(1500 * time.Millisecond) // past the next backoff: no further run
	if now := srv.Cameras.Camera("broken").Status(); now.VideoNote != st.VideoNote {
		t.Fatalf("the transcoder ran again after giving up: %q", now.VideoNote)
	}
}

// A recorded H.265 camera: the recorder leaves the H.264 transcode alone (its
// sink would keep ffmpeg running with nobody watching).
func TestH265CameraRecordedWithoutTranscoder(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed: " + err.Error())
	}
	emu := startH265Emulator(t)
	dir := t.TempDir()
	srv := startServerWith(t, func(c *config.Config) { c.Recording.Dir = dir }, config.Camera{ID: "rec", RTSP: emu.URL(), Warm: true})
	waitStatus(t, srv, "rec", "streaming", func(s camera.Status) bool { return s.State == camera.StateStreaming && s.Transcoded != "" })
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if st := srv.Cameras.Camera("rec").Status(); !strings.Contains(st.VideoNote, "idle") {
			t.Fatalf("the transcoder runs for the recorder: %+v", st)
		}
	}
}
