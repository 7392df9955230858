package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"
	"github.com/pion/webrtc/v4/pkg/media/ivfreader"
	"github.com/pion/webrtc/v4/pkg/media/oggreader"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	recording "github.com/petrel-sfu/petrel/record"
)

// clips are real encoded streams (ffmpeg), so that the recording and its
// export can be checked with ffprobe: VP8 (IVF), H.264 (Annex B with access
// unit delimiters) and Opus (Ogg, one packet a page).
type clips struct{ vp8, h264, opus string }

func makeClips(t *testing.T) clips {
	t.Helper()
	dir := t.TempDir()
	c := clips{vp8: filepath.Join(dir, "v.ivf"), h264: filepath.Join(dir, "v.h264"), opus: filepath.Join(dir, "a.ogg")}
	src := []string{"-f", "lavfi", "-i", "testsrc=size=160x120:rate=30", "-t", "2", "-pix_fmt", "yuv420p"}
	for _, args := range [][]string{
		append(append([]string{}, src...), "-c:v", "libvpx", "-g", "30", "-b:v", "150k", c.vp8),
		append(append([]string{}, src...), "-c:v", "libx264", "-profile:v", "baseline", "-g", "30", "-x264-params", "aud=1", "-bsf:v", "h264_mp4toannexb", "-f", "h264", c.h264),
		{"-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "2", "-c:a", "libopus", "-page_duration", "20000", c.opus},
	} {
		cmd := exec.Command("ffmpeg", append([]string{"-hide_banner", "-loglevel", "error", "-y"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ffmpeg %v: %v\n%s", args, err, out)
		}
	}
	return c
}

// frames reads a clip into samples (data, duration).
func clipSamples(t *testing.T, path string) []media.Sample {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []media.Sample
	switch filepath.Ext(path) {
	case ".ivf":
		r, _, err := ivfreader.NewWith(f)
		if err != nil {
			t.Fatal(err)
		}
		for {
			fr, _, err := r.ParseNextFrame()
			if err != nil {
				break
			}
			out = append(out, media.Sample{Data: fr, Duration: time.Second / 30})
		}
	case ".ogg":
		r, _, err := oggreader.NewWith(f)
		if err != nil {
			t.Fatal(err)
		}
		for {
			p, h, err := r.ParseNextPage()
			if err != nil {
				break
			}
			if h.GranulePosition == 0 || len(p) == 0 {
				continue // the Opus headers
			}
			out = append(out, media.Sample{Data: p, Duration: 20 * time.Millisecond})
		}
	case ".h264":
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		aud := []byte{0, 0, 0, 1, 9}
		for _, au := range bytes.Split(b, aud) {
			if len(au) > 0 {
				out = append(out, media.Sample{Data: append(append([]byte{}, aud...), au...), Duration: time.Second / 30})
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("%s: %d samples", path, len(out))
	}
	return out
}

// play publishes the clip in a loop until the test ends.
func play(t *testing.T, tr *webrtc.TrackLocalStaticSample, ss []media.Sample) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		next := time.Now()
		for i := 0; ; i++ {
			s := ss[i%len(ss)]
			next = next.Add(s.Duration)
			select {
			case <-stop:
				return
			case <-time.After(time.Until(next)):
			}
			_ = tr.WriteSample(s)
		}
	}()
}

func TestRoomRecording(t *testing.T) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("ffmpeg/ffprobe not installed (make deps)")
	}
	cl := makeClips(t)
	recv := &hookReceiver{t: t}
	hooks := httptest.NewServer(recv)
	defer hooks.Close()
	e := start(t, func(c *config.Config) {
		c.Recording.Dir = t.TempDir()
		c.Recording.Segment = time.Second
		c.Webhook.URLs = []string{hooks.URL}
		c.Webhook.Backoff = 50 * time.Millisecond
	})
	admin := e.token("", "ops", auth.Grants{Admin: true}, time.Hour)
	call := func(method, path string) (int, []byte) {
		req, _ := http.NewRequest(method, e.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	// Alice publishes VP8 and Opus; the administrator starts the recording;
	// Bob comes later with H.264 and Opus, and is recorded too.
	alice := e.join("meet", "alice")
	av, aa := sampleTrack(t, webrtc.MimeTypeVP8, "av"), sampleTrack(t, webrtc.MimeTypeOpus, "aa")
	for _, x := range []struct {
		tr  *webrtc.TrackLocalStaticSample
		src string
		ss  []media.Sample
	}{{av, "camera", clipSamples(t, cl.vp8)}, {aa, "microphone", clipSamples(t, cl.opus)}} {
		if _, _, err := alice.Publish(ctxT(t, 10*time.Second), x.tr, x.src); err != nil {
			t.Fatal(err)
		}
		play(t, x.tr, x.ss)
	}
	// Without the grant, a participant is refused.
	if _, err := alice.Request(ctxT(t, 5*time.Second), protocol.Msg{"type": "startRecording"}); protocol.CodeOf(err) != protocol.CodeForbidden ||
		!strings.Contains(err.Error(), "record grant") {
		t.Fatalf("startRecording without the grant: %v", err)
	}
	if st, b := call("POST", "/v1/admin/rooms/nosuchroom/recording"); st != 404 || !strings.Contains(string(b), `"code":"not_found"`) {
		t.Fatalf("start on a missing room: %d %s", st, b)
	}
	st, b := call("POST", "/v1/admin/rooms/meet/recording")
	var rec recording.RoomRecording
	if st != 200 || json.Unmarshal(b, &rec) != nil || rec.ID == "" || !rec.Active {
		t.Fatalf("start: %d %s", st, b)
	}
	time.Sleep(500 * time.Millisecond)
	bob := e.join("meet", "bob")
	bv, ba := sampleTrack(t, webrtc.MimeTypeH264, "bv"), sampleTrack(t, webrtc.MimeTypeOpus, "ba")
	for _, x := range []struct {
		tr  *webrtc.TrackLocalStaticSample
		src string
		ss  []media.Sample
	}{{bv, "camera", clipSamples(t, cl.h264)}, {ba, "microphone", clipSamples(t, cl.opus)}} {
		if _, _, err := bob.Publish(ctxT(t, 10*time.Second), x.tr, x.src); err != nil {
			t.Fatal(err)
		}
		play(t, x.tr, x.ss)
	}
	time.Sleep(3500 * time.Millisecond)
	if st, b := call("DELETE", "/v1/admin/rooms/meet/recording"); st != 200 || !strings.Contains(string(b), `"active":false`) {
		t.Fatalf("stop: %d %s", st, b)
	}
	if st, b := call("DELETE", "/v1/admin/rooms/meet/recording"); st != 404 {
		t.Fatalf("stop twice: %d %s", st, b)
	}
	st, b = call("GET", "/v1/admin/recordings/"+rec.ID)
	if st != 200 || json.Unmarshal(b, &rec) != nil {
		t.Fatalf("get: %d %s", st, b)
	}
	mimes := map[string]string{}
	for _, tr := range rec.Tracks {
		mimes[tr.Identity+"/"+tr.Kind] = strings.ToLower(tr.MimeType)
		if len(tr.Ranges) == 0 {
			t.Fatalf("track %+v: nothing recorded", tr)
		}
	}
	want := map[string]string{"alice/video": "video/vp8", "alice/audio": "audio/opus", "bob/video": "video/h264", "bob/audio": "audio/opus"}
	for k, v := range want {
		if mimes[k] != v {
			t.Fatalf("recorded tracks %v, want %v", mimes, want)
		}
	}

	// The export has every track, each about as long as it was recorded.
	st, b = call("GET", "/v1/admin/recordings/"+rec.ID+"/export")
	if st != 200 {
		t.Fatalf("export: %d %s", st, b)
	}
	file := filepath.Join(t.TempDir(), "room.mp4")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	spans := probeSpans(t, file)
	var codecs []string
	longest := 0.0
	for _, s := range spans {
		codecs = append(codecs, s.codec)
		// Alice's audio spans the whole recording (about 4 s), Bob's from his
		// arrival (about 3.3 s); video starts at the publisher's next
		// keyframe (the clips answer no keyframe request: up to 1 s later).
		t.Logf("export: %s spans %.2f s", s.codec, s.secs)
		longest = max(longest, s.secs)
		if s.secs < 2.0 || s.secs > 5.5 {
			t.Fatalf("export: stream %s spans %.2f s: %+v", s.codec, s.secs, spans)
		}
	}
	if longest < 3.7 {
		t.Fatalf("export: the longest stream spans %.2f s of about 4", longest)
	}
	sort.Strings(codecs)
	if got := strings.Join(codecs, ","); got != "h264,opus,opus,vp8" {
		t.Fatalf("export streams %s, want h264, opus, opus, vp8", got)
	}
	// Every frame decodes.
	if out, err := exec.Command("ffmpeg", "-hide_banner", "-v", "error", "-i", file, "-map", "0", "-f", "null", "-").CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("ffmpeg decoding the export: %v\n%s", err, out)
	}

	// The webhook receiver heard the recording start and finish.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var kinds []string
		for _, ev := range recv.events() {
			if info, _ := ev.EgressInfo.(map[string]any); info != nil && info["id"] == rec.ID {
				kinds = append(kinds, ev.Event)
			}
		}
		if strings.Join(kinds, ",") == "recording_started,recording_finished" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook events of the recording: %v", kinds)
		}
	}

	// A participant with the record grant starts and stops its room's
	// recording over signaling.
	carol := e.joinWith("meet", "carol", auth.Grants{Subscribe: true, Record: true})
	r, err := carol.Request(ctxT(t, 5*time.Second), protocol.Msg{"type": "startRecording"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := r["recording"].(map[string]any)
	id2, _ := got["id"].(string)
	if id2 == "" || id2 == rec.ID || got["startedBy"] != "carol" {
		t.Fatalf("startRecording: %v", r)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := carol.Request(ctxT(t, 5*time.Second), protocol.Msg{"type": "stopRecording"}); err != nil {
		t.Fatal(err)
	}
	if _, err := carol.Request(ctxT(t, 5*time.Second), protocol.Msg{"type": "stopRecording"}); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("stopRecording twice: %v", err)
	}

	// List, then delete.
	st, b = call("GET", "/v1/admin/recordings")
	var list struct{ Recordings []recording.RoomRecording }
	if st != 200 || json.Unmarshal(b, &list) != nil || len(list.Recordings) != 2 || list.Recordings[0].ID != id2 {
		t.Fatalf("list: %d %s", st, b)
	}
	if st, b := call("DELETE", "/v1/admin/recordings/"+id2); st != 200 {
		t.Fatalf("delete: %d %s", st, b)
	}
	if st, _ := call("GET", "/v1/admin/recordings/"+id2); st != 404 {
		t.Fatalf("deleted recording still there: %d", st)
	}
	if _, err := os.Stat(filepath.Join(e.srv.Config.Recording.Dir, "_rooms", id2)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deleted recording's files: %v", err)
	}
	// Unknown ids, whatever they look like: 404 with the API's code.
	for _, path := range []string{"/v1/admin/recordings/nope", "/v1/admin/recordings/nope/export", "/v1/admin/recordings/%2E%2E%2F%2E%2E"} {
		if st, b := call("GET", path); st != 404 || !strings.Contains(string(b), `"code":"not_found"`) {
			t.Fatalf("GET %s: %d %s", path, st, b)
		}
	}
	if st, b := call("DELETE", "/v1/admin/recordings/nope"); st != 404 {
		t.Fatalf("DELETE unknown: %d %s", st, b)
	}
	// Not from an admin token: refused.
	req, _ := http.NewRequest("GET", e.url+"/v1/admin/recordings", nil)
	req.Header.Set("Authorization", "Bearer "+e.token("meet", "carol", auth.Grants{Record: true}, time.Hour))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Fatalf("list with a participant token: %v %v", resp, err)
	}
}

type span struct {
	codec string
	secs  float64
}

// probeSpans asks ffprobe for each stream's codec and the time from its first
// packet to the end of its last.
func probeSpans(t *testing.T, file string) []span {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=index,codec_name:packet=stream_index,pts_time,duration_time",
		"-of", "json", file).Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	var v struct {
		Streams []struct {
			Index int    `json:"index"`
			Codec string `json:"codec_name"`
		}
		Packets []struct {
			Stream int    `json:"stream_index"`
			PTS    string `json:"pts_time"`
			Dur    string `json:"duration_time"`
		}
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	first, last := map[int]float64{}, map[int]float64{}
	for _, p := range v.Packets {
		var pts, d float64
		if _, err := fmt.Sscan(p.PTS, &pts); err != nil {
			continue
		}
		_, _ = fmt.Sscan(p.Dur, &d)
		if f, ok := first[p.Stream]; !ok || pts < f {
			first[p.Stream] = pts
		}
		last[p.Stream] = max(last[p.Stream], pts+d)
	}
	var spans []span
	for _, s := range v.Streams {
		spans = append(spans, span{codec: s.Codec, secs: last[s.Index] - first[s.Index]})
	}
	return spans
}

func (e *env) joinWith(room, identity string, g auth.Grants) *client.Client {
	e.t.Helper()
	c, err := client.Join(ctxT(e.t, 10*time.Second), e.ws, e.token(room, identity, g, time.Hour), client.Options{Name: identity})
	if err != nil {
		e.t.Fatalf("join %s: %v", identity, err)
	}
	e.t.Cleanup(c.Close)
	return c
}
