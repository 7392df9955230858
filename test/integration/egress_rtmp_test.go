package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/serverapi"
	"github.com/petrel-sfu/petrel/webhook"
	"github.com/petrel-sfu/petrel/webtransport"
)

// verifyingReceiver keeps the egress events whose signature webhook.Receive
// verifies with the API key and secret.
type verifyingReceiver struct {
	t  *testing.T
	mu sync.Mutex
	ev []webhook.Event
}

func (v *verifyingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ev, err := webhook.Receive(r, map[string]string{apiKey: apiSecret})
	if err != nil {
		v.t.Errorf("webhook refused: %v", err)
		w.WriteHeader(401)
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if strings.HasPrefix(ev.Event, "egress_") {
		v.ev = append(v.ev, *ev)
	}
}

// egressEvents lists "event state error" of egress id's events.
func (v *verifyingReceiver) egressEvents(id string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, ev := range v.ev {
		b, _ := json.Marshal(ev.EgressInfo)
		var in protocol.EgressInfo
		_ = json.Unmarshal(b, &in)
		if in.ID != id {
			continue
		}
		if in.URL != "" || ev.Room == nil || ev.Room.Name != in.Room {
			v.t.Errorf("%s carries the URL %q or the wrong room %+v", ev.Event, in.URL, ev.Room)
		}
		out = append(out, strings.TrimSpace(ev.Event+" "+in.State+" "+in.Error))
	}
	return out
}

// rtmpListener runs ffmpeg as an RTMP server that copies what it receives
// into out, and waits until it listens.
func rtmpListener(t *testing.T, out string) (url string, exited <-chan error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	url = fmt.Sprintf("rtmp://127.0.0.1:%d/live/test", port)
	cmd := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-listen", "1", "-i", url, "-c", "copy", out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait() }()
	// Dialing would take its one connection: read the kernel's listen table.
	want := fmt.Sprintf("0100007F:%04X", port)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile("/proc/net/tcp")
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[1] == want && f[3] == "0A" {
				return url, ch
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the ffmpeg RTMP listener does not listen")
		}
	}
}

func waitEgress(t *testing.T, api *serverapi.Client, id string, within time.Duration, states ...string) protocol.EgressInfo {
	t.Helper()
	var last protocol.EgressInfo
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		list, err := api.ListEgress(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range list {
			if in.ID == id {
				last = in
				for _, s := range states {
					if in.State == s {
						return in
					}
				}
			}
		}
	}
	t.Fatalf("egress %s is %+v, not %v, after %v", id, last, states, within)
	return last
}

// A participant's H.264 camera and Opus microphone pushed over RTMP to an
// ffmpeg listener: the received file has H.264 and AAC of the time it ran;
// DELETE ends it; a signature-checking receiver sees started, active,
// ending, complete. A target that refuses the connection fails the egress
// with the reason, in the list and in egress_ended. Hostile requests get
// clear 4xx answers.
func TestRTMPEgressOfAParticipant(t *testing.T) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("ffmpeg/ffprobe not installed (make deps)")
	}
	cl := makeClips(t)
	recv := &verifyingReceiver{t: t}
	hooks := httptest.NewServer(recv)
	t.Cleanup(hooks.Close)
	e := start(t, func(c *config.Config) {
		c.Webhook.URLs = []string{hooks.URL}
		c.Webhook.Backoff = 50 * time.Millisecond
	})
	api := serverapi.New(e.url, apiKey, apiSecret)
	ctx := ctxT(t, 50*time.Second)

	bob := e.join("stage", "bob")
	var sids []string
	for _, tr := range []struct {
		cap    webrtc.RTPCodecCapability
		source string
		clip   string
	}{
		{webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
			SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"}, "camera", cl.h264},
		{webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "microphone", cl.opus},
	} {
		lt, err := webrtc.NewTrackLocalStaticSample(tr.cap, tr.source, "bob-"+tr.source)
		if err != nil {
			t.Fatal(err)
		}
		sid, _, err := bob.Publish(ctxT(t, 10*time.Second), lt, tr.source)
		if err != nil {
			t.Fatal(err)
		}
		sids = append(sids, sid)
		play(t, lt, clipSamples(t, tr.clip))
	}
	// Carol publishes nothing.
	_ = e.join("stage", "carol")

	// Hostile requests: each a 4xx with a code, and nothing started.
	for _, c := range []struct {
		req    protocol.CreateEgress
		status int
		code   string
	}{
		{protocol.CreateEgress{Kind: "rtmp", Room: "stage", Identity: "bob", URL: "file:///tmp/x.flv"}, 400, "bad_request"},
		{protocol.CreateEgress{Kind: "rtmp", Room: "stage", Identity: "bob", URL: "http://127.0.0.1:1/live/x"}, 400, "bad_request"},
		{protocol.CreateEgress{Kind: "rtmp", Room: "stage", Identity: "bob", URL: "rtmp://127.0.0.1:1"}, 400, "bad_request"},
		{protocol.CreateEgress{Kind: "rtmp", Room: "stage", Identity: "bob", URL: "rtmp://127.0.0.1:1/live/x -y /tmp/owned"}, 400, "bad_request"},
		{protocol.CreateEgress{Kind: "hls", Room: "stage", Identity: "bob", URL: "rtmp://127.0.0.1:1/live/x"}, 400, "bad_request"},
		{protocol.CreateEgress{Kind: "rtmp", Room: "nowhere", Identity: "bob", URL: "rtmp://127.0.0.1:1/live/x"}, 404, "not_found"},
		{protocol.CreateEgress{Kind: "rtmp", Room: "stage", Identity: "dave", URL: "rtmp://127.0.0.1:1/live/x"}, 404, "not_found"},
		{protocol.CreateEgress{Kind: "rtmp", Room: "stage", Identity: "carol", URL: "rtmp://127.0.0.1:1/live/x"}, 404, "not_found"},
		{protocol.CreateEgress{Kind: "rtmp", Room: "stage", Tracks: []string{"TR_nope"}, URL: "rtmp://127.0.0.1:1/live/x"}, 404, "not_found"},
		{protocol.CreateEgress{Kind: "rtmp", Room: "stage", Identity: "bob", Tracks: sids, URL: "rtmp://127.0.0.1:1/live/x"}, 400, "bad_request"},
		{protocol.CreateEgress{Kind: "rtmp", Room: "stage", URL: "rtmp://127.0.0.1:1/live/x"}, 400, "bad_request"},
	} {
		var ae *serverapi.Error
		if _, err := api.StartEgress(ctx, c.req); !errors.As(err, &ae) || ae.Status != c.status || ae.Code != c.code || ae.Message == "" {
			t.Errorf("start %+v: %v, want %d %s", c.req, err, c.status, c.code)
		}
	}
	var ae *serverapi.Error
	if _, err := api.StopEgress(ctx, "EG_nope"); !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "not_found" {
		t.Errorf("stop of no egress: %v", err)
	}
	if list, err := api.ListEgress(ctx); err != nil || len(list) != 0 {
		t.Fatalf("list after refusals: %+v %v", list, err)
	}

	out := filepath.Join(t.TempDir(), "out.flv")
	target, listenerDone := rtmpListener(t, out)
	eg, err := api.StartEgress(ctx, protocol.CreateEgress{Kind: "rtmp", Room: "stage", Identity: "bob", URL: target})
	if err != nil {
		t.Fatal(err)
	}
	if eg.ID == "" || eg.State != protocol.EgressStarting || eg.Identity != "bob" || strings.Join(eg.Tracks, ",") != strings.Join(sids, ",") || eg.URL != target {
		t.Fatalf("started %+v (tracks %v)", eg, sids)
	}
	requested := time.Now()
	active := waitEgress(t, api, eg.ID, 20*time.Second, protocol.EgressActive)
	t.Logf("active %d ms after the request", active.Since-eg.StartedAt)
	activeAt := time.Now()
	time.Sleep(4 * time.Second)
	stopped, err := api.StopEgress(ctx, eg.ID)
	if err != nil || stopped.State != protocol.EgressEnding && stopped.State != protocol.EgressComplete {
		t.Fatalf("stop: %+v %v", stopped, err)
	}
	ran, since := time.Since(activeAt).Seconds(), time.Since(requested).Seconds()
	select {
	case <-listenerDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the RTMP listener still receives after the egress was stopped")
	}
	if done := waitEgress(t, api, eg.ID, 10*time.Second, protocol.EgressComplete, protocol.EgressFailed); done.State != protocol.EgressComplete || done.Error != "" || done.Reason != "stopped through the API" {
		t.Fatalf("ended %+v", done)
	}

	probe, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=codec_name,start_time:format=duration", "-of", "default=nw=1", out).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v\n%s", err, probe)
	}
	// The file holds what came since the egress was asked for (ffmpeg keeps
	// what it read while probing the tracks), at least all since it was active.
	p := string(probe)
	t.Logf("received:\n%s", p)
	d, _ := strconv.ParseFloat(strings.TrimSpace(p[strings.Index(p, "duration=")+len("duration="):]), 64)
	if !strings.Contains(p, "codec_name=h264") || !strings.Contains(p, "codec_name=aac") || d < ran-1 || d > since+0.5 {
		t.Fatalf("received file (the egress ran %.1f s, active for %.1f s):\n%s", since, ran, p)
	}

	// A target that refuses: failed, with the reason.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := fmt.Sprintf("rtmp://%s/live/sk_secret", l.Addr())
	l.Close()
	bad, err := api.StartEgress(ctx, protocol.CreateEgress{Kind: "rtmp", Room: "stage", Tracks: sids[:1], URL: closed})
	if err != nil {
		t.Fatal(err)
	}
	// RTMPS to a certificate no authority of this server vouches for: failed.
	cert, _ := devCert(t)
	untrusted, err := api.StartEgress(ctx, protocol.CreateEgress{Kind: "rtmp", Room: "stage", Tracks: sids[1:], URL: tlsFront(t, cert, "rtmp://127.0.0.1:1/live/x")})
	if err != nil {
		t.Fatal(err)
	}
	failed := waitEgress(t, api, bad.ID, 20*time.Second, protocol.EgressFailed, protocol.EgressComplete)
	t.Logf("refused target: %s", failed.Error)
	if failed.State != protocol.EgressFailed || !strings.Contains(failed.Error, "Connection refused") || strings.Contains(failed.Error, "sk_secret") {
		t.Fatalf("refused target: %+v", failed)
	}

	if f := waitEgress(t, api, untrusted.ID, 20*time.Second, protocol.EgressFailed, protocol.EgressComplete); f.State != protocol.EgressFailed ||
		!strings.Contains(f.Error, "certificate") {
		t.Fatalf("untrusted RTMPS target: %+v", f)
	} else {
		t.Logf("untrusted RTMPS target: %s", f.Error)
	}

	want := map[string]string{
		eg.ID:  "egress_started starting,egress_updated active,egress_updated ending,egress_ended complete",
		bad.ID: "egress_started starting,egress_ended failed " + failed.Error,
	}
	for id, w := range want {
		var got []string
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if got = recv.egressEvents(id); strings.Join(got, ",") == w {
				break
			}
		}
		if strings.Join(got, ",") != w {
			t.Errorf("webhooks of %s:\n%s\nwant\n%s", id, strings.Join(got, "\n"), strings.ReplaceAll(w, ",", "\n"))
		}
	}
}

// devCert makes a certificate for 127.0.0.1 and writes it as the PEM file
// a server trusts with egress.ca_file.
func devCert(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	cert, _, _, err := webtransport.DevCertificate(24 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, file
}

// tlsFront terminates TLS with cert for the one plain RTMP server at url and
// answers the rtmps:// URL that leads there: the ffmpeg listener cannot take
// RTMPS itself.
func tlsFront(t *testing.T, cert tls.Certificate, url string) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	hostPort := strings.TrimPrefix(url, "rtmp://")
	back := hostPort[:strings.IndexByte(hostPort, '/')]
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if err := c.(*tls.Conn).Handshake(); err != nil {
			return
		}
		b, err := net.Dial("tcp", back)
		if err != nil {
			return
		}
		defer b.Close()
		go func() { _, _ = io.Copy(b, c); b.Close() }()
		_, _ = io.Copy(c, b)
	}()
	return "rtmps://" + l.Addr().String() + hostPort[len(back):]
}

// A VP8 track becomes H.264 on its way out (ffmpeg transcodes it), picked by
// sid, over RTMPS to a target whose certificate egress.ca_file trusts; when
// its publisher leaves, the egress ends by itself,
// complete, with the reason.
func TestRTMPEgressTranscodesVP8AndEndsWithItsTrack(t *testing.T) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("ffmpeg/ffprobe not installed (make deps)")
	}
	cl := makeClips(t)
	cert, ca := devCert(t)
	e := start(t, func(c *config.Config) { c.Egress.CAFile = ca })
	api := serverapi.New(e.url, apiKey, apiSecret)
	ctx := ctxT(t, 40*time.Second)
	carol := e.join("stage", "carol")
	lt, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, "cv", "carol-cv")
	if err != nil {
		t.Fatal(err)
	}
	sid, _, err := carol.Publish(ctxT(t, 10*time.Second), lt, "camera")
	if err != nil {
		t.Fatal(err)
	}
	play(t, lt, clipSamples(t, cl.vp8))

	out := filepath.Join(t.TempDir(), "out.flv")
	plain, listenerDone := rtmpListener(t, out)
	eg, err := api.StartEgress(ctx, protocol.CreateEgress{Kind: "rtmp", Room: "stage", Tracks: []string{sid}, URL: tlsFront(t, cert, plain)})
	if err != nil {
		t.Fatal(err)
	}
	waitEgress(t, api, eg.ID, 20*time.Second, protocol.EgressActive)
	time.Sleep(2 * time.Second)
	carol.Close()
	done := waitEgress(t, api, eg.ID, 10*time.Second, protocol.EgressComplete, protocol.EgressFailed)
	if done.State != protocol.EgressComplete || !strings.Contains(done.Reason, "participant left") {
		t.Fatalf("after its publisher left: %+v", done)
	}
	select {
	case <-listenerDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the RTMP listener still receives after the egress ended")
	}
	probe, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=codec_name,width,height", "-of", "default=nw=1", out).CombinedOutput()
	if err != nil || strings.TrimSpace(string(probe)) != "codec_name=h264\nwidth=160\nheight=120" {
		t.Fatalf("received file: %v\n%s", err, probe)
	}
}

// probeStreams lists a file's streams as "codec WxH" (video) or "codec"
// (audio), and its duration.
func probeStreams(t *testing.T, file string) ([]string, float64) {
	t.Helper()
	b, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name,width,height:format=duration",
		"-of", "json", file).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe %s: %v\n%s", file, err, b)
	}
	var out struct {
		Streams []struct {
			CodecType     string `json:"codec_type"`
			CodecName     string `json:"codec_name"`
			Width, Height int
		}
		Format struct{ Duration string }
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	var ss []string
	for _, s := range out.Streams {
		if s.CodecType == "video" {
			ss = append(ss, fmt.Sprintf("%s %dx%d", s.CodecName, s.Width, s.Height))
		} else {
			ss = append(ss, s.CodecName)
		}
	}
	d, _ := strconv.ParseFloat(out.Format.Duration, 64)
	return ss, d
}

// The room's composite: bob's H.264 and carol's VP8 side by side in a 720p
// grid, their Opus tracks mixed, as H.264 and AAC. When carol leaves, the
// composite starts a new stream with bob alone (the listener, which takes
// one stream, is started again to take it); DELETE ends it.
func TestRTMPEgressComposite(t *testing.T) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("ffmpeg/ffprobe not installed (make deps)")
	}
	cl := makeClips(t)
	e := start(t)
	api := serverapi.New(e.url, apiKey, apiSecret)
	ctx := ctxT(t, 50*time.Second)
	publish := func(c interface {
		Publish(context.Context, webrtc.TrackLocal, string) (string, *webrtc.RTPSender, error)
	}, mime, source, clip string) string {
		lt := sampleTrack(t, mime, source)
		sid, _, err := c.Publish(ctxT(t, 10*time.Second), lt, source)
		if err != nil {
			t.Fatal(err)
		}
		play(t, lt, clipSamples(t, clip))
		return sid
	}
	bob, carol := e.join("stage", "bob"), e.join("stage", "carol")
	bv, ba := publish(bob, webrtc.MimeTypeH264, "camera", cl.h264), publish(bob, webrtc.MimeTypeOpus, "microphone", cl.opus)
	cv, ca := publish(carol, webrtc.MimeTypeVP8, "camera", cl.vp8), publish(carol, webrtc.MimeTypeOpus, "microphone", cl.opus)

	var ae *serverapi.Error
	if _, err := api.StartEgress(ctx, protocol.CreateEgress{Kind: "rtmp", Room: "stage", Composite: true, Identity: "bob",
		URL: "rtmp://127.0.0.1:1/live/x"}); !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("a composite naming a participant: %v", err)
	}
	dir := t.TempDir()
	first := filepath.Join(dir, "first.flv")
	target, firstDone := rtmpListener(t, first)
	eg, err := api.StartEgress(ctx, protocol.CreateEgress{Kind: "rtmp", Room: "stage", Composite: true, URL: target})
	if err != nil {
		t.Fatal(err)
	}
	if !eg.Composite || eg.Identity != "" || strings.Join(eg.Tracks, ",") != strings.Join([]string{bv, cv, ba, ca}, ",") {
		t.Fatalf("composite %+v", eg)
	}
	waitEgress(t, api, eg.ID, 20*time.Second, protocol.EgressActive)
	time.Sleep(2 * time.Second)

	carol.Close()
	select {
	case <-firstDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the composite did not end its stream when carol left")
	}
	second := filepath.Join(dir, "second.flv")
	cmd := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-listen", "1", "-i", target, "-c", "copy", second)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	secondDone := make(chan error, 1)
	go func() { secondDone <- cmd.Wait() }()
	// The new stream: starting (with bob's tracks alone), then active.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		list, err := api.ListEgress(ctx)
		if err != nil || len(list) != 1 {
			t.Fatalf("list: %+v %v", list, err)
		}
		if strings.Join(list[0].Tracks, ",") == bv+","+ba && list[0].State == protocol.EgressActive {
			break
		}
		if time.Now().After(deadline) || protocol.EgressFailed == list[0].State {
			t.Fatalf("after carol left: %+v", list[0])
		}
	}
	time.Sleep(time.Second)
	if _, err := api.StopEgress(ctx, eg.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-secondDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the second stream did not end")
	}
	if done := waitEgress(t, api, eg.ID, 10*time.Second, protocol.EgressComplete, protocol.EgressFailed); done.State != protocol.EgressComplete {
		t.Fatalf("ended %+v", done)
	}
	// The layouts: two 4:3 cells side by side leave bands above and below
	// (a row 50 pixels down is black); one 4:3 picture fills the height.
	for _, c := range []struct {
		file string
		band bool
	}{{first, true}, {second, false}} {
		ss, d := probeStreams(t, c.file)
		t.Logf("%s: %v, %.1f s", filepath.Base(c.file), ss, d)
		if strings.Join(ss, ",") != "h264 1280x720,aac" || d < 1 {
			t.Fatalf("%s: %v, %.1f s", c.file, ss, d)
		}
		luma, err := exec.Command("ffmpeg", "-v", "error", "-ss", "1", "-i", c.file, "-frames:v", "1", "-vf", "crop=1280:2:0:50,scale=1:1",
			"-f", "rawvideo", "-pix_fmt", "gray", "-").Output()
		if err != nil || len(luma) != 1 || (luma[0] < 40) != c.band {
			t.Fatalf("%s: the row 50 pixels down has luma %v (%v), want black %v", c.file, luma, err, c.band)
		}
	}
}
