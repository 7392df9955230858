// Command rtmpout measures what one RTMP push egress of a 720p H.264 track
// and an Opus track costs: the server process's CPU with and without the
// egress (the sinks and the RTP senders), and the CPU of the egress's ffmpeg
// (H.264 copied, Opus to AAC), for docs/benchmarks.md.
//
//	go run ./bench/rtmpout [-for 10s]
//
// One local participant publishes H.264 (an ffmpeg test clip, 1280x720, 30
// fps, about 2.5 Mbit/s) and Opus (a tone, 20 ms packets); an ffmpeg RTMP
// listener on loopback takes the stream and discards it (its CPU is not counted).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/bench/internal/benchkit"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/egress"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

func main() {
	dur := flag.Duration("for", 10*time.Second, "length of each of the two runs")
	flag.Parse()
	if err := run(*dur); err != nil {
		fmt.Fprintln(os.Stderr, "bench/rtmpout:", err)
		os.Exit(1)
	}
}

func run(dur time.Duration) error {
	tmp, err := os.MkdirTemp("", "rtmpout-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	frames, opus, err := benchkit.Clip(tmp, "1280x720", 2500)
	if err != nil {
		return err
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mgr := sfu.NewManager(config.Default(), nil, log)
	defer mgr.Shutdown()
	p, err := mgr.JoinLocal(sfu.LocalOptions{Room: "bench", Identity: "p", Grants: auth.Grants{Publish: true}})
	if err != nil {
		return err
	}
	v, err := p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "video", Source: "camera"}, Queue: 2048,
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeH264, ClockRate: 90000, PayloadType: 102, SDPFmtpLine: "packetization-mode=1;profile-level-id=42e01f"}})
	if err != nil {
		return err
	}
	a, err := p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio", Source: "microphone"},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, PayloadType: 111}})
	if err != nil {
		return err
	}
	stop, done := make(chan struct{}), make(chan struct{}, 2)
	go benchkit.Send(v, frames, time.Second/30, 3000, &codecs.H264Payloader{}, stop, done)
	go benchkit.Send(a, opus, 20*time.Millisecond, 960, nil, stop, done)
	defer func() { close(stop); <-done; <-done }()

	time.Sleep(time.Second)
	before := benchkit.CPU()
	time.Sleep(dur)
	base := benchkit.CPU() - before

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	target := "rtmp://" + l.Addr().String() + "/live/bench"
	l.Close()
	lst := exec.Command("ffmpeg", "-hide_banner", "-v", "error", "-listen", "1", "-i", target, "-c", "copy", "-f", "null", "-")
	if err := lst.Start(); err != nil {
		return err
	}
	defer func() { _ = lst.Process.Kill(); _ = lst.Wait() }()
	time.Sleep(500 * time.Millisecond)
	ps := egress.NewPushes(egress.PushOptions{Manager: mgr, Max: 1, Log: log})
	defer ps.Close()
	eg, err := ps.Start(protocol.CreateEgress{Kind: "rtmp", Room: "bench", Identity: "p", URL: target})
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st := ps.List()[0]
		if st.State == protocol.EgressActive {
			break
		}
		if st.State == protocol.EgressFailed || time.Now().After(deadline) {
			return fmt.Errorf("egress %s: %s %s", eg.ID, st.State, st.Error)
		}
	}
	pid := childWith("pipe:0")
	if pid == 0 {
		return fmt.Errorf("the egress's ffmpeg is not found")
	}
	time.Sleep(time.Second)
	before, fb := benchkit.CPU(), procCPU(pid)
	time.Sleep(dur)
	with, ff := benchkit.CPU()-before, procCPU(pid)-fb
	secs := dur.Seconds()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("| 1280x720 H.264 2.5 Mbit/s + Opus | %.1f%% | %.1f%% | %.1f%% | %s |\n",
		base.Seconds()/secs*100, with.Seconds()/secs*100, ff.Seconds()/secs*100, bytes.Fields(load)[0])
	return nil
}

// childWith finds this process's child whose command line holds arg.
func childWith(arg string) int {
	ents, _ := os.ReadDir("/proc")
	me := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+2:]))
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if len(f) > 1 && f[1] == me && bytes.Contains(cmd, []byte(arg)) {
			return pid
		}
	}
	return 0
}

// procCPU is a process's user and system time.
func procCPU(pid int) time.Duration {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / 100 // USER_HZ
}
