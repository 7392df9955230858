package camera_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Eyevinn/mp4ff/mp4"

	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/camera/probe"
	"github.com/petrel-sfu/petrel/config"
)

// The HTTP live fallback streams fragmented MP4 that starts at a keyframe and
// that ffmpeg decodes frame after frame; tokens for another room or none are
// refused, a wall token (which sees every camera anyway) is taken.
func TestLiveMP4Fallback(t *testing.T) {
	emu := startEmulator(t, "")
	srv := startServer(t, config.Camera{ID: "gate", RTSP: emu.URL(), Warm: true})
	waitStatus(t, srv, "gate", "streaming", func(s camera.Status) bool { return s.State == camera.StateStreaming })
	url := "http://" + srv.HTTPAddr + "/v1/cameras/gate/live.mp4"

	for _, c := range []struct {
		token string
		want  int
	}{{"", 401}, {"garbage", 401}, {token(t, "camera/other", "v", false), 403}, {token(t, camera.WallRoom, "wall", false), 200}} {
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
	// The camera counts this stream among its viewers while it is served.
	waitStatus(t, srv, "gate", "one HTTP live viewer", func(s camera.Status) bool { return s.LiveViewers == 1 })
	_, _ = io.Copy(out, resp.Body)
	out.Close()
	waitStatus(t, srv, "gate", "no HTTP live viewer", func(s camera.Status) bool { return s.LiveViewers == 0 })
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

// An AAC camera's live.mp4 carries its audio as Opus (transcoded by ffmpeg):
// the init declares an H.264 track and an Opus track (with dOps), Opus
// fragments follow with rising decode times, starting within half a second of
// the video they are interleaved with, and ffprobe reads both streams of the
// captured piece.
func TestLiveMP4Audio(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is not installed: the AAC transcoder cannot run")
	}
	clip, err := emulator.LoadClip(clipDir)
	if err != nil {
		t.Fatal(err)
	}
	emu, err := emulator.Start(emulator.Options{Clip: clip, Audio: "aac", Log: logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	srv := startServer(t, config.Camera{ID: "gate", RTSP: emu.URL(), Warm: true})
	waitStatus(t, srv, "gate", "streaming with audio", func(s camera.Status) bool {
		return s.State == camera.StateStreaming && s.Audio != ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "http://" + srv.HTTPAddr + "/v1/cameras/gate/live.mp4?token=" + token(t, camera.RoomOf("gate"), "http-viewer", false)
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("live.mp4: %s", resp.Status)
	}
	began := time.Now()
	go func() { time.Sleep(3 * time.Second); resp.Body.Close() }()
	// Read as it comes, noting when the first video and audio fragments arrive.
	var b []byte
	var firstVideo, firstAudio time.Duration
	buf := make([]byte, 32<<10)
	for scan := 0; ; {
		n, err := resp.Body.Read(buf)
		b = append(b, buf[:n]...)
		for scan+8 <= len(b) && (firstVideo == 0 || firstAudio == 0) {
			size := int(binary.BigEndian.Uint32(b[scan:]))
			if size < 8 || scan+size > len(b) {
				break
			}
			if string(b[scan+4:scan+8]) == "moof" && size >= 8+16+16 {
				// mfhd (16 bytes) then traf, whose tfhd holds the track ID.
				if i := bytes.Index(b[scan:scan+size], []byte("tfhd")); i > 0 && scan+i+12 <= len(b) {
					if binary.BigEndian.Uint32(b[scan+i+8:]) == 2 && firstAudio == 0 {
						firstAudio = time.Since(began)
					} else if firstVideo == 0 {
						firstVideo = time.Since(began)
					}
				}
			}
			scan += size
		}
		if err != nil {
			break
		}
	}

	// Walk the top-level boxes (the last may be cut).
	var traks []string
	var video, audio []uint64
	var audioAfterVideo []int64 // first audio decode time minus the video's before it (ms)
	for off := 0; off+8 <= len(b); {
		size := int(binary.BigEndian.Uint32(b[off:]))
		if size < 8 || off+size > len(b) {
			break
		}
		box, err := mp4.DecodeBox(uint64(off), bytes.NewReader(b[off:off+size]))
		if err != nil {
			t.Fatalf("box at %d: %v", off, err)
		}
		switch x := box.(type) {
		case *mp4.MoovBox:
			for _, tr := range x.Traks {
				var kinds []string
				for _, c := range tr.Mdia.Minf.Stbl.Stsd.Children {
					kinds = append(kinds, c.Type())
				}
				traks = append(traks, fmt.Sprintf("%d:%s", tr.Tkhd.TrackID, strings.Join(kinds, ",")))
			}
		case *mp4.MoofBox:
			dt := x.Traf.Tfdt.BaseMediaDecodeTime()
			if x.Traf.Tfhd.TrackID == 2 {
				if len(audio) == 0 && len(video) > 0 {
					audioAfterVideo = append(audioAfterVideo, int64(dt*1000/48000)-int64(video[len(video)-1]*1000/90000))
				}
				audio = append(audio, dt)
			} else {
				video = append(video, dt)
			}
		}
		off += size
	}
	if len(traks) != 2 || traks[0] != "1:avc1" || traks[1] != "2:Opus" {
		t.Fatalf("init tracks %v, want 1:avc1 2:Opus", traks)
	}
	if !bytes.Contains(b[:min(len(b), 4096)], []byte("dOps")) {
		t.Fatal("the Opus sample entry has no dOps")
	}
	// 3 s minus the transcoder's start: at least a second of 20 ms packets.
	if len(audio) < 50 || len(video) < 40 {
		t.Fatalf("%d audio and %d video fragments in 3 s", len(audio), len(video))
	}
	for i := 1; i < len(audio); i++ {
		if audio[i] <= audio[i-1] {
			t.Fatalf("audio decode time %d after %d (fragment %d)", audio[i], audio[i-1], i)
		}
	}
	if d := audioAfterVideo[0]; d < -500 || d > 500 {
		t.Errorf("the first audio is at %d ms from the video frame before it", d)
	}
	// Over the capture the two timelines advance alike (within half a second).
	aSpan := float64(audio[len(audio)-1]-audio[0]) / 48000
	vEnd := float64(video[len(video)-1]) / 90000
	aEnd := float64(audio[len(audio)-1]) / 48000
	if math.Abs(vEnd-aEnd) > 0.5 {
		t.Errorf("the stream ends with video at %.2f s and audio at %.2f s", vEnd, aEnd)
	}
	t.Logf("first video fragment after %v, first audio fragment after %v (the transcoder's start)", firstVideo.Round(time.Millisecond), firstAudio.Round(time.Millisecond))
	t.Logf("%d video, %d audio fragments (%.2f s of audio); first audio %d ms after the video before it; ends: video %.2f s, audio %.2f s",
		len(video), len(audio), aSpan, audioAfterVideo[0], vEnd, aEnd)

	if _, err := exec.LookPath("ffprobe"); err != nil {
		return
	}
	file := filepath.Join(t.TempDir(), "live.mp4")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-count_packets", "-show_entries", "stream=codec_type,codec_name,nb_read_packets", "-of", "csv=p=0", file).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v %s", err, out)
	}
	got := strings.Fields(strings.ReplaceAll(string(out), ",", " "))
	if len(got) < 6 || got[0] != "h264" || got[1] != "video" || got[3] != "opus" || got[4] != "audio" {
		t.Fatalf("ffprobe: %s", out)
	}
	if n, _ := strconv.Atoi(got[5]); n < 50 {
		t.Fatalf("ffprobe read %d Opus packets: %s", n, out)
	}
	t.Logf("ffprobe: %s", strings.TrimSpace(string(out)))
}
