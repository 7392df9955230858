// Command soak starts bin/petrel on loopback ports with an RTP-push camera,
// churns it for -duration (package soak), and writes the samples as CSV, a
// gnuplot plot and a verdict: after the warm-up, nothing may grow by more
// than -limit. Not run in CI; a 90-second version is package soak's
// TestSoak.
//
//	go run ./bench/soak -duration 1h
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/bench/soak/soak"
	"github.com/petrel-sfu/petrel/camera/emulator"
)

const (
	apiKey = "soakkey"
	clip   = "loadtest/testdata"
)

func main() {
	duration := flag.Duration("duration", time.Hour, "how long to churn")
	every := flag.Duration("every", 5*time.Second, "sampling interval")
	warmup := flag.Duration("warmup", 0, "samples before this are not judged (default: the first third)")
	limit := flag.Float64("limit", 0.05, "largest growth allowed after the warm-up")
	bin := flag.String("bin", "bin/petrel", "the petrel binary (built from ./cmd/petrel if missing)")
	out := flag.String("out", "bench/soak/results", "directory for soak.csv, soak.log and verdict.md")
	png := flag.String("png", "docs/img/soak.png", "the plot")
	churners := flag.Int("churners", 4, "participants joining and leaving at once")
	viewers := flag.Int("viewers", 2, "WHEP viewers coming and going at once")
	replot := flag.Bool("replot", false, "only plot -out's soak.csv again into -png")
	flag.Parse()
	if *warmup == 0 {
		*warmup = *duration / 3
	}
	if *replot {
		if err := plot(filepath.Join(*out, "soak.csv"), *png, *warmup); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	if err := realMain(*duration, *every, *warmup, *limit, *bin, *out, *png, *churners, *viewers); err != nil {
		log.Fatal(err)
	}
}

func realMain(duration, every, warmup time.Duration, limit float64, bin, out, png string, churners, viewers int) error {
	if _, err := os.Stat(bin); err != nil {
		tmp, err := os.MkdirTemp("", "petrel-soak-bin")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		bin = filepath.Join(tmp, "petrel")
		log.Printf("building %s", bin)
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/petrel")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	c, err := emulator.LoadClip(clip)
	if err != nil {
		return err
	}
	secret := strings.Repeat("s", 40)
	httpPort, udpPort, tcpPort, turnPort, camPort := free(), free(), free(), free(), 0
	if camPort, err = soak.FreeUDPPair(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "petrel-soak")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sprop := base64.StdEncoding.EncodeToString(c.SPS) + "," + base64.StdEncoding.EncodeToString(c.PPS)
	yaml := fmt.Sprintf("cameras:\n  - id: soak\n    rtp:\n      port: %d\n      sprop_parameter_sets: %s\n", camPort, sprop)
	if err := os.WriteFile(filepath.Join(dir, "petrel.yaml"), []byte(yaml), 0o600); err != nil {
		return err
	}
	serverLog, err := os.Create(filepath.Join(out, "server.log"))
	if err != nil {
		return err
	}
	defer serverLog.Close()
	cmd := exec.Command(bin, "serve", "--loopback", "--http", "127.0.0.1:"+strconv.Itoa(httpPort),
		"--rtc-udp-port", strconv.Itoa(udpPort), "--rtc-tcp-port", strconv.Itoa(tcpPort), "--turn-port", strconv.Itoa(turnPort),
		"--api-key", apiKey, "--log-level", "warn", "--config", filepath.Join(dir, "petrel.yaml"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PETREL_API_SECRET="+secret, "HOME="+dir)
	cmd.Stdout, cmd.Stderr = io.Discard, serverLog
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	if err := waitHealthy(base); err != nil {
		return err
	}

	csv, err := os.Create(filepath.Join(out, "soak.csv"))
	if err != nil {
		return err
	}
	defer csv.Close()
	fmt.Fprintln(csv, soak.CSVHeader)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now().UTC()
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	samples, err := soak.Run(ctx, soak.Config{
		URL: base, PID: cmd.Process.Pid, Keys: auth.Keys{apiKey: secret}, APIKey: apiKey,
		Camera: "soak", CameraPort: camPort, Clip: clip,
		Duration: duration, Every: every, Churners: churners, Viewers: viewers,
		Logf:     func(f string, a ...any) { log.Printf(f, a...) },
		OnSample: func(s soak.Sample) { fmt.Fprintln(csv, s.CSV()) }, // as it comes: an interrupted soak keeps its samples
	})
	if err != nil {
		return err
	}
	if len(samples) == 0 {
		return errors.New("no samples")
	}
	last := samples[len(samples)-1]
	var v strings.Builder
	fmt.Fprintf(&v, "Soak of %s from %s (commit %s): `go run ./bench/soak -duration %s`, %d churners, %d WHEP viewers, sample every %s.\n\n",
		last.At.Round(time.Second), started.Format("2006-01-02 15:04 UTC"), strings.TrimSpace(string(commit)), duration, churners, viewers, every)
	fmt.Fprintf(&v, "Churn: %d joins, %d WHEP sessions, %d camera restarts, %d data messages to the anchor, %d anchor video packets, %d failures.\n\n",
		last.Joins, last.WHEPSessions, last.CameraRestarts, last.DataIn, last.AnchorPackets, last.Failures)
	stalls := 0
	for i := 1; i < len(samples); i++ {
		if samples[i].AnchorPackets <= samples[i-1].AnchorPackets {
			stalls++
		}
	}
	fmt.Fprintf(&v, "The anchor subscriber's video stopped in %d of %d sampling intervals.\n\n", stalls, len(samples)-1)
	fmt.Fprintf(&v, "Judged from %s on (after the warm-up), first vs last sixth (medians) and least-squares slope over the span:\n\n", warmup)
	fmt.Fprintln(&v, "| metric | first | last | growth | slope × span | verdict |")
	fmt.Fprintln(&v, "|---|---|---|---|---|---|")
	ok := stalls == 0
	for _, g := range soak.Growths(samples, warmup) {
		pass := g.Rel <= limit && g.Slope <= limit
		ok = ok && pass
		first, lastv := fmt.Sprintf("%.0f", g.First), fmt.Sprintf("%.0f", g.Last)
		if g.Name == "rss" {
			first, lastv = fmt.Sprintf("%.1f MB", g.First/(1<<20)), fmt.Sprintf("%.1f MB", g.Last/(1<<20))
		}
		fmt.Fprintf(&v, "| %s | %s | %s | %+.1f%% | %+.1f%% | %s |\n", g.Name, first, lastv, 100*g.Rel, 100*g.Slope, map[bool]string{true: "ok", false: "GROWS"}[pass])
	}
	fmt.Print(v.String())
	if err := os.WriteFile(filepath.Join(out, "verdict.md"), []byte(v.String()), 0o644); err != nil {
		return err
	}
	if err := plot(filepath.Join(out, "soak.csv"), png, warmup); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("something grew by more than %.0f%% after the warm-up, or the anchor's video stopped", 100*limit)
	}
	return nil
}

func plot(csv, png string, warmup time.Duration) error {
	if _, err := exec.LookPath("gnuplot"); err != nil {
		return errors.New("gnuplot not found (apt-get install gnuplot-nox)")
	}
	// Three panels sharing the time axis, each from zero: a leak shows as a
	// slope, churn as noise around a level.
	script := fmt.Sprintf(`set terminal pngcairo size 1000,750 font ",10"
set output %[1]q
set datafile separator ","
set multiplot layout 3,1 title "Petrel soak: participants, WHEP viewers and a flapping camera churning (dashed: end of warm-up)"
set autoscale xfix
set yrange [0:*]
set key bottom right
set grid ytics
set arrow 1 from %[2]f, graph 0 to %[2]f, graph 1 nohead dashtype 2 lc rgb "#888888"
set ylabel "RSS (MB)"
plot %[3]q using ($1/60):2 with lines lw 2 lc rgb "#9400d3" title "RSS"
set ylabel "goroutines"
plot %[3]q using ($1/60):3 with lines lw 1 lc rgb "#009e73" title "goroutines"
set ylabel "open files"
set xlabel "minutes"
plot %[3]q using ($1/60):4 with lines lw 2 lc rgb "#56b4e9" title "open files"
unset multiplot
`, png, warmup.Minutes(), csv)
	cmd := exec.Command("gnuplot")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gnuplot: %v: %s", err, out)
	}
	return nil
}

func waitHealthy(base string) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("petrel did not answer /healthz in 20 s")
}

// free is a loopback port free for both TCP and UDP.
func free() int {
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
		ln.Close()
		if err == nil {
			u.Close()
			return p
		}
	}
}
