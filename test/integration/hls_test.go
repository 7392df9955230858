package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/gohlslib/v2/pkg/playlist"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
)

// TestHLSRoom: a room's H.264 and Opus tracks, published by a Pion client,
// are served as LL-HLS: ffprobe reads the playlist through the token the
// playlist's URIs carry and counts H.264 frames; blocking reloads return the
// next part; hostile requests get clear errors; the muxer stops when nobody
// watches.
func TestHLSRoom(t *testing.T) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("ffmpeg/ffprobe not installed (make deps)")
	}
	cl := makeClips(t)
	e := start(t, func(c *config.Config) {
		c.HLS.Idle = 2 * time.Second
	})
	bob := e.join("stage", "bob")
	bv, ba := sampleTrack(t, webrtc.MimeTypeH264, "bv"), sampleTrack(t, webrtc.MimeTypeOpus, "ba")
	if _, _, err := bob.Publish(ctxT(t, 10*time.Second), bv, "camera"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bob.Publish(ctxT(t, 10*time.Second), ba, "microphone"); err != nil {
		t.Fatal(err)
	}
	play(t, bv, clipSamples(t, cl.h264))
	play(t, ba, clipSamples(t, cl.opus))
	// Carol publishes VP8, which HLS carries through a transcoder.
	carol := e.join("stage", "carol")
	cv := sampleTrack(t, webrtc.MimeTypeVP8, "cv")
	vp8Sid, _, err := carol.Publish(ctxT(t, 10*time.Second), cv, "camera")
	if err != nil {
		t.Fatal(err)
	}
	play(t, cv, clipSamples(t, cl.vp8))

	viewer := e.token("stage", "viewer", auth.Grants{Subscribe: true}, time.Hour)
	get := func(path, tok string, bearer bool) (int, http.Header, []byte) {
		t.Helper()
		u := e.url + path
		req, _ := http.NewRequest("GET", u, nil)
		if tok != "" && bearer {
			req.Header.Set("Authorization", "Bearer "+tok)
		} else if tok != "" {
			sep := "?"
			if strings.Contains(u, "?") {
				sep = "&"
			}
			req, _ = http.NewRequest("GET", u+sep+"access_token="+url.QueryEscape(tok), nil)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	wantErr := func(what string, status int, code string, st int, b []byte) {
		t.Helper()
		var body struct{ Code, Message string }
		if st != status || json.Unmarshal(b, &body) != nil || body.Code != code || body.Message == "" {
			t.Fatalf("%s: %d %s, want %d with code %q", what, st, b, status, code)
		}
	}

	// The first request starts the muxer and waits for its first segment. A
	// WebRTC track reaches the room with its first packet: until one has, the
	// room has nothing to stream (404), and until bob's video has, the room's
	// stream is his audio alone.
	t0 := time.Now()
	var st int
	var b []byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, _, b = get("/v1/rooms/stage/hls/index.m3u8", viewer, false)
		if st != 200 && st != 404 || st == 200 && strings.Contains(string(b), "avc1.") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st != 200 || !strings.Contains(string(b), "#EXT-X-STREAM-INF") || !strings.Contains(string(b), "avc1.") ||
		!strings.Contains(string(b), "opus") || !strings.Contains(string(b), "access_token=") {
		t.Fatalf("multivariant playlist: %d\n%s", st, b)
	}
	t.Logf("first playlist %v after the first request", time.Since(t0).Round(time.Millisecond))
	var mediaURI string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "" {
			continue
		}
		if mediaURI == "" || strings.HasSuffix(strings.SplitN(l, "?", 2)[0], ".m3u8") {
			mediaURI = strings.TrimSpace(l)
		}
	}
	if mediaURI == "" {
		t.Fatalf("no media playlist in\n%s", b)
	}
	base := "/v1/rooms/stage/hls/"
	media := func(query string) (*playlist.Media, string, time.Duration) {
		t.Helper()
		t1 := time.Now()
		u := base + strings.SplitN(mediaURI, "?", 2)[0] + "?access_token=" + url.QueryEscape(viewer) + query
		st, _, b := get(u, "", false)
		if st != 200 {
			t.Fatalf("media playlist %s: %d %s", query, st, b)
		}
		pl, err := playlist.Unmarshal(b)
		if err != nil {
			t.Fatalf("media playlist: %v\n%s", err, b)
		}
		m, ok := pl.(*playlist.Media)
		if !ok {
			t.Fatalf("not a media playlist:\n%s", b)
		}
		return m, string(b), time.Since(t1)
	}
	m, text, _ := media("")
	for _, tag := range []string{"#EXT-X-PART:", "#EXT-X-PRELOAD-HINT:", "CAN-BLOCK-RELOAD=YES", "#EXT-X-PART-INF:PART-TARGET=", "#EXT-X-MAP:"} {
		if !strings.Contains(text, tag) {
			t.Fatalf("media playlist lacks %s:\n%s", tag, text)
		}
	}
	if !strings.Contains(text, "access_token=") {
		t.Fatalf("the media playlist's URIs do not carry the token:\n%s", text)
	}

	// Blocking reloads: each asks for the part after the newest one and
	// returns when it is there; the part is available this long after its
	// first frame arrived (the part's start on the program date-time clock).
	var avail []time.Duration
	for i := 0; i < 10; i++ {
		msn, part := m.MediaSequence+len(m.Segments), len(m.Parts)
		m, _, _ = media(fmt.Sprintf("&_HLS_msn=%d&_HLS_part=%d", msn, part))
		now := time.Now()
		last := m.Segments[len(m.Segments)-1]
		if last.DateTime == nil || len(m.Parts) == 0 {
			continue
		}
		start := last.DateTime.Add(last.Duration)
		for _, p := range m.Parts[:len(m.Parts)-1] {
			start = start.Add(p.Duration)
		}
		avail = append(avail, now.Sub(start))
	}
	if len(avail) < 5 {
		t.Fatalf("blocking reloads gave %d measurable parts", len(avail))
	}
	sort.Slice(avail, func(i, j int) bool { return avail[i] < avail[j] })
	t.Logf("publish → part in the playlist: median %v, max %v (part target %v)", avail[len(avail)/2].Round(time.Millisecond),
		avail[len(avail)-1].Round(time.Millisecond), config.Default().HLS.Part)
	if avail[len(avail)/2] > 2*time.Second {
		t.Fatalf("parts arrive %v after their first frame", avail)
	}

	// ffprobe reads the stream as a player would: the playlist, then the
	// URIs it names (with the token they carry).
	got := ffprobeHLS(t, e.url+base+"index.m3u8?access_token="+url.QueryEscape(viewer))
	if got["video/h264"] < 30 || got["audio/opus"] < 50 {
		t.Fatalf("ffprobe counted %v, want ≥30 H.264 frames and ≥50 Opus packets", got)
	}
	t.Logf("ffprobe: %v", got)

	// Carol's VP8 comes as H.264 through the transcoder its first request
	// starts (with her audio: none here); as a player does, ask again while
	// the first segment is made.
	t1 := time.Now()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st, _, b := get(base+"index.m3u8?track="+vp8Sid, viewer, true)
		if st == 200 && strings.Contains(string(b), "avc1.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the transcoded track's playlist: %d %s", st, b)
		}
	}
	t.Logf("transcoded VP8: first playlist %v after the first request", time.Since(t1).Round(time.Millisecond))
	got = ffprobeHLS(t, e.url+base+"index.m3u8?track="+vp8Sid+"&access_token="+url.QueryEscape(viewer))
	if got["video/h264"] < 30 {
		t.Fatalf("ffprobe counted %v of the transcoded VP8 track, want ≥30 H.264 frames", got)
	}
	t.Logf("ffprobe, VP8 transcoded: %v", got)

	// Hostile and refused requests.
	st, _, b = get(base+"index.m3u8", "", false)
	wantErr("no token", 401, "unauthorized", st, b)
	st, _, b = get(base+"index.m3u8", "garbage", true)
	wantErr("bad token", 401, "unauthorized", st, b)
	st, _, b = get(base+"index.m3u8", e.token("elsewhere", "v", auth.Grants{Subscribe: true}, time.Hour), false)
	wantErr("token for another room", 403, "forbidden", st, b)
	st, _, b = get(base+"index.m3u8", e.token("stage", "v", auth.Grants{Publish: true}, time.Hour), true)
	wantErr("token without subscribe", 403, "forbidden", st, b)
	st, _, b = get("/v1/rooms/nosuch/hls/index.m3u8", e.token("nosuch", "v", auth.Grants{Subscribe: true}, time.Hour), true)
	wantErr("unknown room", 404, "not_found", st, b)
	for _, f := range []string{"x.txt", "..%2Fsecret.m3u8", "a.b.mp4", strings.Repeat("a", 80) + ".mp4", "nosuch_seg1.mp4", "index.m3u8x"} {
		st, _, b = get(base+f, viewer, true)
		wantErr("file "+f, 404, "not_found", st, b)
	}
	playlistPath := base + strings.SplitN(mediaURI, "?", 2)[0]
	for _, q := range []string{"_HLS_msn=abc", "_HLS_msn=99999999", "_HLS_part=2", "_HLS_msn=1&_HLS_part=-1"} {
		st, _, b = get(playlistPath+"?"+q, viewer, true)
		wantErr("query "+q, 400, "bad_request", st, b)
	}
	st, _, b = get(base+"index.m3u8?track=TR_nosuch", viewer, true)
	wantErr("unknown track", 404, "not_found", st, b)

	// Nobody asks any more: the muxer stops.
	deadline := time.Now().Add(6 * time.Second)
	for e.srv.HLS.Streams() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d HLS streams still run with no viewer", e.srv.HLS.Streams())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ffprobeHLS reads two seconds of an HLS stream as a player would (the
// playlist, then the URIs it names) and counts frames by type/codec.
func ffprobeHLS(t *testing.T, u string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ffprobe", "-v", "error", "-read_intervals", "%+2", "-count_frames",
		"-show_entries", "stream=codec_type,codec_name,nb_read_frames", "-of", "json", u).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			out = append(out, ee.Stderr...)
		}
		t.Fatalf("ffprobe: %v\n%s", err, out)
	}
	var probe struct {
		Streams []struct {
			CodecType string `json:"codec_type"`
			CodecName string `json:"codec_name"`
			Frames    string `json:"nb_read_frames"`
		}
	}
	if err := json.Unmarshal(out, &probe); err != nil {
		t.Fatalf("ffprobe: %v\n%s", err, out)
	}
	got := map[string]int{}
	for _, s := range probe.Streams {
		n, _ := strconv.Atoi(s.Frames)
		got[s.CodecType+"/"+s.CodecName] += n
	}
	return got
}
