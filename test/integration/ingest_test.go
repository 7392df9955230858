package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluenviron/gortsplib/v4/pkg/format/rtph264"
	srt "github.com/datarhei/gosrt"
	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media/oggwriter"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/server"
)

// logBuf collects the server's log lines for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startIngest starts the server with the RTMP and SRT ingest on free loopback ports,
// its log lines (info and above) kept.
func startIngest(t *testing.T, mod ...func(*config.Config)) (*env, *logBuf, string) {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is not installed (make deps installs it)")
	}
	cfg := config.Default()
	cfg.Loopback = true
	cfg.HTTP = "127.0.0.1:0"
	cfg.RTC.UDPPort, cfg.RTC.TCPPort, cfg.TURN.Port = 0, 0, 0
	cfg.TURN.RelayIP = "127.0.0.1"
	cfg.APIKey, cfg.APISecret = apiKey, apiSecret
	cfg.Ingest.RTMP = "127.0.0.1:0"
	cfg.Ingest.SRT = "127.0.0.1:0"
	for _, m := range mod {
		m(&cfg)
	}
	logs := &logBuf{}
	var w io.Writer = logs
	if os.Getenv("PETREL_TEST_LOG") != "" {
		w = io.MultiWriter(logs, os.Stderr)
	}
	s, err := server.Start(cfg, auth.Keys{apiKey: apiSecret}, apiKey, false, slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	e := &env{t: t, srv: s, ws: "ws://" + s.HTTPAddr + "/v1/rtc", url: "http://" + s.HTTPAddr}
	return e, logs, s.Ingest.Addr()
}

// ffmpegPublish runs ffmpeg as an OBS-like publisher: test pattern and tone,
// H.264 (keyframe every 30 frames, no B-frames) and AAC, to url for secs.
func ffmpegPublish(t *testing.T, url string, secs int) *exec.Cmd {
	t.Helper()
	format := "flv"
	if strings.HasPrefix(url, "srt:") {
		format = "mpegts"
	}
	cmd := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-re",
		"-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000",
		"-t", strconv.Itoa(secs), "-c:v", "libx264", "-preset", "veryfast", "-tune", "zerolatency", "-g", "30", "-bf", "0",
		"-pix_fmt", "yuv420p", "-c:a", "aac", "-b:a", "64k", "-f", format, url)
	var stderr logBuf
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && stderr.String() != "" {
			t.Logf("ffmpeg: %s", stderr.String())
		}
	})
	return cmd
}

func rtmpURL(addr, token string) string { return "rtmp://" + addr + "/live/" + token }

// needSRT skips a test whose ffmpeg cannot speak SRT (built without libsrt).
func needSRT(t *testing.T) {
	t.Helper()
	out, _ := exec.Command("ffmpeg", "-hide_banner", "-protocols").Output()
	if !regexp.MustCompile(`(?m)^\s*srt$`).Match(out) {
		t.Skip("this ffmpeg has no SRT protocol (Debian's ffmpeg has)")
	}
}

func srtURL(addr, streamID string) string {
	return "srt://" + addr + "?mode=caller&latency=120000&streamid=" + streamID
}

// h264Types lists the NAL unit types a packet starts or carries (STAP-A's
// aggregated units, an FU-A's original type on its first fragment).
func h264Types(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	switch t := p[0] & 0x1f; t {
	case 24:
		var out []byte
		for b := p[1:]; len(b) > 2; {
			n := int(binary.BigEndian.Uint16(b))
			if n == 0 || 2+n > len(b) {
				break
			}
			out = append(out, b[2]&0x1f)
			b = b[2+n:]
		}
		return out
	case 28:
		if len(p) > 1 && p[1]&0x80 != 0 {
			return []byte{p[1] & 0x1f}
		}
		return nil
	default:
		return []byte{t}
	}
}

// An OBS-like ffmpeg publisher over RTMP joins the room as a participant: a
// Pion subscriber there receives its H.264 (a keyframe with SPS and PPS, and
// frames ffprobe decodes at the published size) and its AAC as Opus that
// ffmpeg decodes to the tone. Time to first frame (RTMP connect to the first
// video RTP at the subscriber) is logged.
func TestRTMPIngestReachesSubscriber(t *testing.T) {
	e, logs, addr := startIngest(t)
	viewer := e.join("stage", "viewer")
	tok := e.token("stage", "obs", auth.Grants{Publish: true}, time.Hour)
	ffmpegPublish(t, rtmpURL(addr, tok), 4)
	checkIngest(t, e, logs, viewer, "RTMP")
}

// The same over SRT: ffmpeg sends MPEG-TS with the token in the stream id
// (the SRT access-control form, #!::r=<token>,m=publish).
func TestSRTIngestReachesSubscriber(t *testing.T) {
	needSRT(t)
	e, logs, _ := startIngest(t)
	viewer := e.join("stage", "viewer")
	tok := e.token("stage", "obs", auth.Grants{Publish: true}, time.Hour)
	ffmpegPublish(t, srtURL(e.srv.Ingest.SRTAddr(), "#!::r="+tok+",m=publish"), 4)
	checkIngest(t, e, logs, viewer, "SRT")
}

// checkIngest asserts what viewer receives from the publisher "obs": decodable
// H.264 from a keyframe with SPS and PPS on, Opus that decodes to the tone, and
// a keyframe first for a subscriber joining mid-stream. It logs the time to
// first frame.
func checkIngest(t *testing.T, e *env, logs *logBuf, viewer *client.Client, proto string) {
	t.Helper()
	var video, audio client.Track
	for video.Remote == nil || audio.Remote == nil {
		tr := waitTrack(t, viewer, 10*time.Second)
		switch tr.Remote.Kind() {
		case webrtc.RTPCodecTypeVideo:
			video = tr
		case webrtc.RTPCodecTypeAudio:
			audio = tr
		}
	}
	// Opus: what the subscriber receives goes into an Ogg file.
	dir := t.TempDir()
	ogg, err := oggwriter.New(filepath.Join(dir, "audio.ogg"), 48000, 2)
	if err != nil {
		t.Fatal(err)
	}
	var opusPkts atomic.Int64
	audioDone := make(chan struct{})
	go func() {
		defer close(audioDone)
		for {
			p, _, err := audio.Remote.ReadRTP()
			if err != nil {
				return
			}
			if p.PayloadType != uint8(audio.Remote.Codec().PayloadType) || len(p.Payload) == 0 {
				continue
			}
			if ogg.WriteRTP(p) == nil {
				opusPkts.Add(1)
			}
		}
	}()

	// H.264: access units from the first keyframe on, in Annex-B for ffprobe.
	var dec rtph264.Decoder
	if err := dec.Init(); err != nil {
		t.Fatal(err)
	}
	var annexB bytes.Buffer
	var first time.Time
	seen := map[byte]bool{}
	frames := 0
	deadline := time.Now().Add(10 * time.Second)
	for frames < 45 && time.Now().Before(deadline) {
		_ = video.Remote.SetReadDeadline(deadline)
		p, _, err := video.Remote.ReadRTP()
		if err != nil {
			t.Fatalf("video: %v after %d frames", err, frames)
		}
		if first.IsZero() {
			first = time.Now()
			if m := video.Remote.Codec().MimeType; !strings.EqualFold(m, webrtc.MimeTypeH264) {
				t.Fatalf("video codec %s", m)
			}
			pubs := e.srv.Ingest.Publishers()
			if len(pubs) != 1 || pubs[0].Room != "stage" || pubs[0].Identity != "obs" {
				t.Fatalf("publishers %+v", pubs)
			}
			ttff := first.Sub(pubs[0].Connected)
			t.Logf("%s ingest time to first frame (connect to first video RTP at the subscriber): %d ms", proto, ttff.Milliseconds())
		}
		if frames == 0 {
			for _, typ := range h264Types(p.Payload) {
				seen[typ] = true
			}
		}
		au, err := dec.Decode(p)
		if err != nil {
			continue
		}
		for _, n := range au {
			annexB.Write([]byte{0, 0, 0, 1})
			annexB.Write(n)
		}
		frames++
	}
	if !seen[7] || !seen[8] || !seen[5] {
		t.Fatalf("the first video frame is not a keyframe with SPS and PPS: NAL types %v", seen)
	}
	if frames < 45 {
		t.Fatalf("%d video frames received", frames)
	}
	// A subscriber joining mid-GOP starts at once from the cached last
	// keyframe: the encoder cannot be asked for one.
	joinedAt := time.Now()
	late := e.join("stage", "late")
	for {
		tr := waitTrack(t, late, 5*time.Second)
		if tr.Remote.Kind() != webrtc.RTPCodecTypeVideo {
			continue
		}
		_ = tr.Remote.SetReadDeadline(time.Now().Add(5 * time.Second))
		p, _, err := tr.Remote.ReadRTP()
		if err != nil {
			t.Fatalf("late subscriber: %v", err)
		}
		types := h264Types(p.Payload)
		if !bytes.Contains(types, []byte{7}) && !bytes.Contains(types, []byte{5}) {
			t.Fatalf("the late subscriber's first video packet is not a keyframe's: NAL types %v", types)
		}
		t.Logf("a subscriber joining mid-stream: first video RTP %d ms after its join began", time.Since(joinedAt).Milliseconds())
		break
	}
	h264File := filepath.Join(dir, "video.h264")
	if err := os.WriteFile(h264File, annexB.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height,nb_read_frames", "-of", "csv=p=0", h264File).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v: %s", err, out)
	}
	f := strings.Split(strings.TrimSpace(string(out)), ",")
	if len(f) != 4 || f[0] != "h264" || f[1] != "320" || f[2] != "240" {
		t.Fatalf("ffprobe: %q", out)
	}
	if n, _ := strconv.Atoi(f[3]); n < 40 {
		t.Fatalf("ffprobe decoded %d frames of %d", n, frames)
	}

	// Audio: at least a second of Opus, decoding to the tone.
	for i := 0; i < 100 && opusPkts.Load() < 60; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if n := opusPkts.Load(); n < 60 {
		t.Fatalf("%d Opus packets received", n)
	}
	if m := audio.Remote.Codec().MimeType; !strings.EqualFold(m, webrtc.MimeTypeOpus) {
		t.Fatalf("audio codec %s", m)
	}
	viewer.Close()
	<-audioDone
	_ = ogg.Close()
	out, err = exec.Command("ffmpeg", "-hide_banner", "-nostdin", "-i", filepath.Join(dir, "audio.ogg"), "-af", "volumedetect", "-f", "null", "-").CombinedOutput()
	if err != nil {
		t.Fatalf("ffmpeg decoding the Opus: %v: %s", err, out)
	}
	m := regexp.MustCompile(`mean_volume: (-?[0-9.]+) dB`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no volume in %s", out)
	}
	t.Logf("Opus from the subscriber decodes to a mean volume of %s dB", m[1])
	if v, _ := strconv.ParseFloat(string(m[1]), 64); v < -40 {
		t.Fatalf("the Opus decodes to silence (mean volume %.1f dB)", v)
	}
	if !logged(logs, "ingest first video frame in the room") {
		t.Fatalf("no first-frame log line:\n%s", logs.String())
	}
}

// Publishers whose stream key (RTMP) or stream id (SRT) is not a token
// allowing publishing in a room are refused with a log line, and nothing
// joins the room.
func TestIngestRefusesBadToken(t *testing.T) {
	e, logs, addr := startIngest(t)
	srtAddr := e.srv.Ingest.SRTAddr()
	viewer := e.join("stage", "viewer")
	forged := auth.Claims{Room: "stage", Grants: auth.Grants{Publish: true}}
	forged.RegisteredClaims = jwt.RegisteredClaims{Subject: "obs"}
	forgedTok, err := auth.Keys{apiKey: strings.Repeat("x", 40)}.Sign(apiKey, forged, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"no key":           "rtmp://" + addr + "/live",
		"not a token":      rtmpURL(addr, "obs-stream-key"),
		"forged":           rtmpURL(addr, forgedTok),
		"no publish":       rtmpURL(addr, e.token("stage", "obs", auth.Grants{Subscribe: true}, time.Hour)),
		"expired":          rtmpURL(addr, e.token("stage", "obs", auth.Grants{Publish: true}, -time.Minute)),
		"reserved name":    rtmpURL(addr, reservedToken(t)),
		"srt forged":       srtURL(srtAddr, forgedTok),
		"srt no publish":   srtURL(srtAddr, e.token("stage", "obs", auth.Grants{Subscribe: true}, time.Hour)),
		"srt request mode": srtURL(srtAddr, "#!::r="+e.token("stage", "obs", auth.Grants{Publish: true}, time.Hour)+",m=request"),
	}
	for name, u := range cases {
		t.Run(name, func(t *testing.T) {
			if strings.HasPrefix(u, "srt:") {
				needSRT(t) // else ffmpeg would fail for want of SRT, not for the token
			}
			cmd := ffmpegPublish(t, u, 3)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("ffmpeg published without a valid token")
				}
			case <-time.After(8 * time.Second):
				t.Fatal("ffmpeg still running: the server did not refuse it")
			}
		})
	}
	select {
	case tr := <-viewer.Tracks:
		t.Fatalf("a refused publisher's track reached the room: %s", tr.Remote.Kind())
	default:
	}
	if n := len(e.srv.Ingest.Publishers()); n != 0 {
		t.Fatalf("%d publishers", n)
	}
	if !logged(logs, "ingest publisher refused") {
		t.Fatalf("no refusal in the log:\n%s", logs.String())
	}
}

// reservedToken names the camera's identity, which no token may hold: signed
// by hand, as Sign refuses it.
func reservedToken(t *testing.T) string {
	c := auth.Claims{Room: "stage", Grants: auth.Grants{Publish: true}}
	c.RegisteredClaims = jwt.RegisteredClaims{Subject: auth.CameraIdentity, Issuer: apiKey,
		IssuedAt: jwt.NewNumericDate(time.Now()), ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, &c)
	tok.Header["kid"] = apiKey
	s, err := tok.SignedString([]byte(apiSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// countVideo counts the video packets viewer receives from its first video
// track; waitPackets waits up to 3 s for the count to reach n.
func countVideo(t *testing.T, viewer *client.Client) (*atomic.Int64, func(what string, n int64)) {
	t.Helper()
	var video client.Track
	for video.Remote == nil {
		if tr := waitTrack(t, viewer, 10*time.Second); tr.Remote.Kind() == webrtc.RTPCodecTypeVideo {
			video = tr
		}
	}
	pkts := &atomic.Int64{}
	go func() {
		for {
			if _, _, err := video.Remote.ReadRTP(); err != nil {
				return
			}
			pkts.Add(1)
		}
	}()
	return pkts, func(what string, n int64) {
		t.Helper()
		for i := 0; i < 100 && pkts.Load() < n; i++ {
			time.Sleep(30 * time.Millisecond)
		}
		if pkts.Load() < n {
			t.Fatalf("%s: %d video packets, want %d", what, pkts.Load(), n)
		}
	}
}

// Garbage on the RTMP port (random bytes, an HTTP request, a handshake
// followed by an endless message, a handshake with a bad version) is dropped
// while a good publisher beside it keeps reaching its subscriber.
func TestRTMPIngestDropsGarbage(t *testing.T) {
	e, logs, addr := startIngest(t)
	viewer := e.join("stage", "viewer")
	ffmpegPublish(t, rtmpURL(addr, e.token("stage", "obs", auth.Grants{Publish: true}, time.Hour)), 6)
	pkts, waitPackets := countVideo(t, viewer)
	waitPackets("before the garbage", 30)

	random := make([]byte, 8192)
	_, _ = rand.Read(random)
	handshake := append([]byte{3}, make([]byte, 1536)...)
	// A chunk (type 0, stream 3) opening an AMF0 command of 9 MiB, then its body
	// without end: more than a connection may send before it publishes.
	endless := func(c net.Conn) {
		h := []byte{0x03, 0, 0, 0, 0x90, 0, 0, 0x14, 0, 0, 0, 0}
		chunk := make([]byte, 128)
		_, _ = c.Write(append(h, chunk...))
		for i := 0; i < 8192; i++ {
			if _, err := c.Write(append([]byte{0xc3}, chunk...)); err != nil {
				return
			}
		}
	}
	conns := map[string]func(net.Conn){
		"random":      func(c net.Conn) { _, _ = c.Write(random) },
		"http":        func(c net.Conn) { _, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) },
		"bad version": func(c net.Conn) { _, _ = c.Write(append([]byte{9}, random[:1536]...)) },
		"endless": func(c net.Conn) {
			_, _ = c.Write(handshake)
			s := make([]byte, 3073)
			if _, err := io.ReadFull(c, s); err != nil {
				return
			}
			_, _ = c.Write(s[1:1537]) // C2 echoes S1
			endless(c)
		},
		"garbage after handshake": func(c net.Conn) {
			_, _ = c.Write(handshake)
			s := make([]byte, 3073)
			if _, err := io.ReadFull(c, s); err != nil {
				return
			}
			_, _ = c.Write(s[1:1537])
			_, _ = c.Write(random)
		},
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	for name, send := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			send(c)
			// The server closes the connection: reads end well before our deadline.
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						errs <- fmt.Errorf("%s: the server kept the connection open", name)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	before := pkts.Load()
	waitPackets("after the garbage", before+30)
	if !logged(logs, "ingest connection dropped") {
		t.Fatalf("no drop in the log:\n%s", logs.String())
	}
	if n := len(e.srv.Ingest.Publishers()); n != 1 {
		t.Fatalf("%d publishers, want the good one", n)
	}
}

// Garbage on the SRT port (random datagrams, forged control packets, a
// handshake with a stream id that is no token, an accepted publisher sending
// bytes that are not MPEG-TS) leaves a good SRT publisher reaching its
// subscriber.
func TestSRTIngestDropsGarbage(t *testing.T) {
	needSRT(t)
	e, logs, _ := startIngest(t)
	addr := e.srv.Ingest.SRTAddr()
	viewer := e.join("stage", "viewer")
	ffmpegPublish(t, srtURL(addr, e.token("stage", "obs", auth.Grants{Publish: true}, time.Hour)), 6)
	pkts, waitPackets := countVideo(t, viewer)
	waitPackets("before the garbage", 30)

	u, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	buf := make([]byte, 1500)
	for i := 0; i < 300; i++ {
		_, _ = rand.Read(buf)
		n := 1 + i*5%1500
		if i%2 == 1 {
			buf[0] |= 0x80 // a control packet of a random type
		}
		_, _ = u.Write(buf[:n])
	}

	// A caller with no token is refused, and the refusal logged; on a loaded
	// machine a handshake may also time out before the listener sees it.
	cfg := srt.DefaultConfig()
	cfg.StreamId = "not-a-token"
	for try := 0; try < 3 && !strings.Contains(logs.String(), "ingest publisher refused"); try++ {
		if c, err := srt.Dial("srt", addr, cfg); err == nil {
			c.Close()
			t.Fatal("an SRT caller with no token was accepted")
		}
	}

	cfg.StreamId = e.token("stage", "noise", auth.Grants{Publish: true}, time.Hour)
	c, err := srt.Dial("srt", addr, cfg)
	if err != nil {
		t.Fatalf("SRT caller with a valid token: %v", err)
	}
	noise := make([]byte, 1316)
	for i := 0; i < 200; i++ {
		_, _ = rand.Read(noise)
		if _, err := c.Write(noise); err != nil {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	c.Close()

	before := pkts.Load()
	waitPackets("after the garbage", before+30)
	for _, p := range e.srv.Ingest.Publishers() {
		if p.Identity != "obs" {
			t.Fatalf("publisher %+v joined from noise", p)
		}
	}
	if !logged(logs, "ingest publisher refused") {
		t.Fatalf("no refusal in the log:\n%s", logs.String())
	}
}

// logged waits a little for a line containing want: the server logs a refusal
// after the refused client has heard of it.
func logged(logs *logBuf, want string) bool {
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(logs.String(), want) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// A publisher spends a join from its address's allowance like any client:
// with one join a second (a burst of two) from 127.0.0.1, the third SRT
// caller in a row is refused.
func TestIngestSpendsJoinAllowance(t *testing.T) {
	e, logs, _ := startIngest(t, func(c *config.Config) { c.Limits.JoinsPerIP = 1 })
	cfg := srt.DefaultConfig()
	cfg.StreamId = e.token("stage", "obs", auth.Grants{Publish: true}, time.Hour)
	for i := 0; i < 3; i++ {
		c, err := srt.Dial("srt", e.srv.Ingest.SRTAddr(), cfg)
		if i < 2 {
			if err != nil {
				t.Fatalf("caller %d: %v", i, err)
			}
			defer c.Close()
			continue
		}
		if err == nil {
			c.Close()
			t.Fatal("a third join within the burst was admitted")
		}
	}
	if !logged(logs, "too many joins from your address") {
		t.Fatalf("no refusal for the allowance in the log:\n%s", logs.String())
	}
}
