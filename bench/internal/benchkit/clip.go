package benchkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/Eyevinn/mp4ff/avc"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4/pkg/media/oggreader"

	"github.com/petrel-sfu/petrel/sfu"
)

// Clip encodes ten seconds of test pattern (H.264 baseline, size WxH at kbps,
// a keyframe every 2 s) and a 440 Hz tone (Opus, 20 ms) with ffmpeg, in dir,
// and returns the video's access units (Annex B) and the Opus packets.
func Clip(dir, size string, kbps int) (frames, opus [][]byte, err error) {
	h264, ogg := filepath.Join(dir, "v.h264"), filepath.Join(dir, "a.ogg")
	if err := ffmpeg("-f", "lavfi", "-i", "testsrc2=s="+size+":r=30", "-frames:v", "300", "-c:v", "libx264", "-profile:v", "baseline",
		"-g", "60", "-bf", "0", "-b:v", fmt.Sprintf("%dk", kbps), "-x264-params", "repeat-headers=1", "-f", "h264", h264); err != nil {
		return nil, nil, err
	}
	if err := ffmpeg("-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration=10", "-c:a", "libopus", "-b:a", "32k",
		"-page_duration", "20000", ogg); err != nil {
		return nil, nil, err
	}
	raw, err := os.ReadFile(h264)
	if err != nil {
		return nil, nil, err
	}
	var cur []byte
	for _, n := range avc.ExtractNalusFromByteStream(raw) {
		cur = append(cur, 0, 0, 0, 1)
		cur = append(cur, n...)
		if t := n[0] & 0x1f; t == 1 || t == 5 {
			frames, cur = append(frames, cur), nil
		}
	}
	f, err := os.Open(ogg)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r, _, err := oggreader.NewWith(f)
	if err != nil {
		return nil, nil, err
	}
	for {
		p, h, err := r.ParseNextPage()
		if err != nil {
			break
		}
		if h.GranulePosition > 0 && len(p) > 0 {
			opus = append(opus, p)
		}
	}
	return frames, opus, nil
}

func ffmpeg(args ...string) error {
	out, err := exec.Command("ffmpeg", append([]string{"-y", "-hide_banner", "-v", "error"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ffmpeg: %v: %s", err, out)
	}
	return nil
}

// Send writes samples into lt in a loop, one every d (the RTP clock moving
// ticks), cut by pay (or one payload each without), until stop; then done.
func Send(lt *sfu.LocalTrack, samples [][]byte, d time.Duration, ticks uint32, pay rtp.Payloader, stop <-chan struct{}, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	seq, ts := uint16(1), uint32(1)
	t := time.NewTicker(d)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ps := [][]byte{samples[i%len(samples)]}
		if pay != nil {
			ps = pay.Payload(1200, samples[i%len(samples)])
		}
		for j, p := range ps {
			_ = lt.WritePacket(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: ts, SSRC: 1, Marker: j == len(ps)-1}, Payload: p})
			seq++
		}
		ts += ticks
	}
}

// CPU is this process's user and system time so far.
func CPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
