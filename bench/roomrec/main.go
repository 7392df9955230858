// Command roomrec measures what recording a room costs per track: the CPU the
// recorder adds (the same publishers run once without and once with the
// room recorded, in one process, so the two are compared in one run) and the
// bytes it writes, for docs/benchmarks.md.
//
//	go run ./bench/roomrec [-pairs 8] [-for 10s]
//
// Each of -pairs participants publishes an H.264 video track (an ffmpeg test
// clip, 640x360, 30 fps, about 600 kbit/s) and an Opus track (a tone, 20 ms
// packets) as local tracks into one room; nothing goes over a network.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/bench/internal/benchkit"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/record"
	"github.com/petrel-sfu/petrel/sfu"
)

func main() {
	pairs := flag.Int("pairs", 8, "participants, each with a video and an audio track")
	dur := flag.Duration("for", 10*time.Second, "length of each of the two runs")
	flag.Parse()
	if err := run(*pairs, *dur); err != nil {
		fmt.Fprintln(os.Stderr, "bench/roomrec:", err)
		os.Exit(1)
	}
}

func run(pairs int, dur time.Duration) error {
	tmp, err := os.MkdirTemp("", "roomrec-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	frames, opus, err := benchkit.Clip(tmp, "640x360", 600)
	if err != nil {
		return err
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	measure := func(recordIt bool) (cpu time.Duration, written int64, err error) {
		mgr := sfu.NewManager(config.Default(), nil, log)
		dir := filepath.Join(tmp, fmt.Sprintf("rec-%v", recordIt))
		rec, err := record.New(mgr, config.Recording{Dir: dir, Segment: 10 * time.Second}, log)
		if err != nil {
			return 0, 0, err
		}
		stop := make(chan struct{})
		done := make(chan struct{}, 2*pairs)
		for i := 0; i < pairs; i++ {
			p, err := mgr.JoinLocal(sfu.LocalOptions{Room: "bench", Identity: fmt.Sprintf("p%d", i), Grants: auth.Grants{Publish: true}})
			if err != nil {
				return 0, 0, err
			}
			v, err := p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "video"}, Queue: 2048,
				Codec: sfu.Codec{MimeType: webrtc.MimeTypeH264, ClockRate: 90000, PayloadType: 102, SDPFmtpLine: "packetization-mode=1;profile-level-id=42e01f"}})
			if err != nil {
				return 0, 0, err
			}
			a, err := p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio"},
				Codec: sfu.Codec{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, PayloadType: 111}})
			if err != nil {
				return 0, 0, err
			}
			go benchkit.Send(v, frames, time.Second/30, 3000, &codecs.H264Payloader{}, stop, done)
			go benchkit.Send(a, opus, 20*time.Millisecond, 960, nil, stop, done)
		}
		if recordIt {
			if _, err := rec.StartRoom("bench", "bench"); err != nil {
				return 0, 0, err
			}
		}
		time.Sleep(time.Second) // settle: the recorder attached, the first GOP in
		before := benchkit.CPU()
		time.Sleep(dur)
		cpu = benchkit.CPU() - before
		close(stop)
		for i := 0; i < 2*pairs; i++ {
			<-done
		}
		rec.Close()
		mgr.Shutdown()
		_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if fi, err := d.Info(); err == nil {
					written += fi.Size()
				}
			}
			return nil
		})
		return cpu, written, nil
	}
	base, _, err := measure(false)
	if err != nil {
		return err
	}
	with, written, err := measure(true)
	if err != nil {
		return err
	}
	secs := dur.Seconds()
	tracks := 2 * pairs
	perTrack := (with - base).Seconds() / secs / float64(tracks) * 100
	load, _ := os.ReadFile("/proc/loadavg")
	// The recording ran from a second before the measured stretch to its end.
	rate := float64(written) / (secs + 1) / 1000
	fmt.Printf("| %d (%d video + %d audio) | %.1f%% | %.1f%% | %.3f%% of a core | %.0f kB/s (%.0f kB/s a participant) | %s |\n",
		tracks, pairs, pairs, base.Seconds()/secs*100, with.Seconds()/secs*100, perTrack, rate, rate/float64(pairs), bytes.Fields(load)[0])
	return nil
}
