package loadtest

import (
	"context"
	"image/png"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/server"
)

const testKey = "loadkey"

var testSecret = strings.Repeat("s", 40)

// startPetrel runs a real Petrel server in this process on 127.0.0.1.
func startPetrel(t *testing.T) string {
	t.Helper()
	cfg := config.Default()
	cfg.Loopback = true
	cfg.HTTP = "127.0.0.1:0"
	cfg.RTC.UDPPort = 0
	cfg.RTC.TCPPort = 0
	cfg.TURN.Enabled = false // the generator never relays; and no port race between TURN's UDP and TCP
	cfg.APIKey, cfg.APISecret = testKey, testSecret
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := server.Start(cfg, auth.Keys{testKey: testSecret}, testKey, false, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return "http://" + s.HTTPAddr
}

func runSmall(t *testing.T, cfg Config) *Result {
	t.Helper()
	cfg.APIKey, cfg.Secret = testKey, testSecret
	if cfg.TargetPID == 0 {
		cfg.TargetPID = os.Getpid()
	}
	if testing.Verbose() {
		cfg.Progress = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != "" {
		t.Fatalf("run: %s", res.Error)
	}
	return res
}

// checkAllReceived asserts that every peer of role connected and received
// video and audio, with times in setup order.
func checkAllReceived(t *testing.T, res *Result, role string, want int) {
	t.Helper()
	n := 0
	for _, p := range res.Peers {
		if p.Role != role {
			continue
		}
		n++
		if p.Error != "" {
			t.Errorf("%s: %s", p.ID, p.Error)
			continue
		}
		if !(p.ICEMs > 0 && p.DTLSMs >= p.ICEMs && p.FirstRTPMs >= p.DTLSMs && p.FirstFrameMs >= p.FirstRTPMs) {
			t.Errorf("%s: setup times out of order or missing: ice %.1f dtls %.1f rtp %.1f frame %.1f", p.ID, p.ICEMs, p.DTLSMs, p.FirstRTPMs, p.FirstFrameMs)
		}
		kinds := map[string]uint64{}
		for _, s := range p.Streams {
			kinds[s.Kind] += s.Packets
		}
		if kinds["video"] < 20 || kinds["audio"] < 20 {
			t.Errorf("%s: received video %d audio %d packets", p.ID, kinds["video"], kinds["audio"])
		}
	}
	if n != want {
		t.Errorf("%d %s peers, want %d", n, role, want)
	}
}

func TestStreamAgainstPetrel(t *testing.T) {
	url := startPetrel(t)
	res := runSmall(t, Config{Scenario: "stream", Target: "petrel", URL: url, Peers: 20, Rate: 50, Duration: 2 * time.Second, Warmup: time.Second})
	checkAllReceived(t, res, "subscriber", 20)
	sm := res.Summary
	if sm.Connected != 21 || sm.Failed != 0 {
		t.Errorf("connected %d failed %d, want 21 and 0 (%v)", sm.Connected, sm.Failed, sm.Errors)
	}
	if sm.DelayMs.N == 0 || sm.DelayMs.P50 <= 0 || sm.DelayMs.P50 > 1000 {
		t.Errorf("one-way delay %+v: want synthetic stamps measured", sm.DelayMs)
	}
	if sm.PPS <= 0 || sm.TargetCPU <= 0 {
		t.Errorf("steady window: %.0f pkt/s, target CPU %.1f%%", sm.PPS, sm.TargetCPU)
	}
	t.Logf("summary: %+v", sm)
}

func TestRoomAgainstPetrel(t *testing.T) {
	url := startPetrel(t)
	res := runSmall(t, Config{Scenario: "room", Target: "petrel", URL: url, Publishers: 2, Peers: 4, Rate: 50, Duration: time.Second, Warmup: time.Second})
	// Each subscriber receives both publishers (2 × video + audio); each
	// publisher receives the other one.
	for _, p := range res.Peers {
		want := 4
		if p.Role == "publisher" {
			want = 2
		}
		got := 0
		for _, s := range p.Streams {
			if s.Packets > 10 {
				got++
			}
		}
		if got != want || p.Error != "" {
			t.Errorf("%s (%s): %d streams with media, want %d (error %q)", p.ID, p.Role, got, want, p.Error)
		}
	}
	if len(res.Peers) != 6 {
		t.Errorf("%d peers, want 6", len(res.Peers))
	}
}

func TestEchoAndWHEPAgainstPetrel(t *testing.T) {
	url := startPetrel(t)
	res := runSmall(t, Config{Scenario: "echo", Target: "petrel", URL: url, Peers: 3, Rate: 50, Duration: time.Second, Warmup: time.Second, Video: "testdata/clip.ivf", Audio: "testdata/tone.ogg"})
	checkAllReceived(t, res, "echo", 3)
	if res.Summary.DelayMs.N != 0 {
		t.Errorf("file sources carry no stamps, yet %d delays were measured", res.Summary.DelayMs.N)
	}
	res = runSmall(t, Config{Scenario: "whep", Target: "petrel", URL: url, Room: "w", Peers: 5, Rate: 50, Duration: time.Second, Warmup: time.Second})
	checkAllReceived(t, res, "subscriber", 5)
	// The same through the generic WHIP/WHEP target: tokens are minted here,
	// as any server's operator would hand them out.
	tok, err := (&Petrel{APIKey: testKey, APISecret: testSecret}).Token(context.Background(), "g", "viewer", true)
	if err != nil {
		t.Fatal(err)
	}
	res = runSmall(t, Config{Scenario: "whep", Target: "whip", WHIPURL: url + "/whip/g", WHEPURL: url + "/whep/g", Token: tok, Peers: 3, Rate: 50, Duration: time.Second, Warmup: time.Second})
	checkAllReceived(t, res, "subscriber", 3)
}

func TestH264StreamAndReport(t *testing.T) {
	url := startPetrel(t)
	res := runSmall(t, Config{Scenario: "stream", Target: "petrel", URL: url, Peers: 2, Rate: 50, Duration: 2 * time.Second, Warmup: time.Second, Video: "testdata/clip.h264", Audio: "testdata/tone.ogg"})
	checkAllReceived(t, res, "subscriber", 2)
	dir := t.TempDir()
	if err := WriteReport(res, dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(dir + "/report.md")
	if err != nil || !strings.Contains(string(md), "peers connected / failed | 3 / 0") {
		t.Fatalf("report: %v\n%s", err, md)
	}
	// The report promises plots: without gnuplot this fails rather than skips (make deps installs it).
	if _, err := exec.LookPath("gnuplot"); err != nil {
		t.Fatalf("gnuplot not installed (make deps installs gnuplot-nox): the report has no plots")
	}
	if len(res.Samples) < 2 {
		t.Fatalf("%d samples: too few to plot", len(res.Samples))
	}
	for _, name := range []string{"cpu.png", "rss.png", "nacks.png", "delay.png"} {
		checkPlot(t, filepath.Join(dir, name), 720, 420)
		if !strings.Contains(string(md), "]("+name+")") {
			t.Errorf("report.md does not show %s", name)
		}
	}
	if err := WriteJSON(res, dir+"/r.json"); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(dir + "/r.json")
	if err != nil || back.Summary.Connected != 3 || len(back.Peers) != 3 {
		t.Fatalf("JSON round trip: %v %+v", err, back.Summary)
	}
}

// checkPlot fails unless path is a w×h PNG with something drawn in it: the
// axes and text of an empty plot are black and grey on white, the series are
// in colour.
func checkPlot(t *testing.T, path string, w, h int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("%s: %d×%d, want %d×%d", path, b.Dx(), b.Dy(), w, h)
	}
	colours := map[[3]uint32]bool{}
	coloured := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			if max(r, g, bl)-min(r, g, bl) > 0x4000 {
				coloured++
			}
		}
	}
	// The key's two markers alone colour about 26 pixels; the data adds to them.
	if len(colours) < 4 || coloured < 30 {
		t.Errorf("%s looks blank: %d distinct colours, %d coloured pixels", path, len(colours), coloured)
	}
}

// checkMix asserts that each of n mix participants connected and received
// one audio stream (its mix) with at least min packets.
func checkMix(t *testing.T, res *Result, n int, min uint64) {
	t.Helper()
	got := 0
	for _, p := range res.Peers {
		if p.Role != "participant" {
			continue
		}
		got++
		var audio, other int
		var pkts uint64
		for _, s := range p.Streams {
			if s.Kind == "audio" {
				audio++
				pkts += s.Packets
			} else {
				other++
			}
		}
		if p.Error != "" || audio != 1 || other != 0 || pkts < min {
			t.Errorf("%s: %d audio streams (%d packets), %d others, error %q: want its one mix", p.ID, audio, pkts, other, p.Error)
		}
	}
	if got != n {
		t.Errorf("%d participants, want %d", got, n)
	}
	if res.Summary.TargetCPU <= 0 {
		t.Errorf("target CPU %.1f%%: want it sampled", res.Summary.TargetCPU)
	}
}

func TestMixAgainstPetrel(t *testing.T) {
	url := startPetrel(t)
	res := runSmall(t, Config{Scenario: "mix", Target: "petrel", URL: url, Peers: 12, Talkers: 2, Rate: 50, Duration: 2 * time.Second, Warmup: time.Second})
	// 2 s of 20 ms packets; the mix exists within 250 ms of the join. 12
	// peers: a mix track offered during the join must be counted too.
	checkMix(t, res, 12, 80)
	t.Logf("summary: %+v", res.Summary)
}
