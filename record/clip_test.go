package record

import (
	"crypto/sha256"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/Eyevinn/mp4ff/avc"
	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/sfu"
)

// clipFrame is one access unit of the test clip as length-prefixed NAL units.
type clipFrame struct {
	data []byte
	key  bool
}

// makeClip encodes n frames of a test pattern at 30 fps with a one-second GOP
// and parameter sets on every keyframe. The bottom band encodes the frame number
// in 12 black/white stripes (the browser test reads it), so every frame differs
// and frames are told apart by hash.
func makeClip(t testing.TB, n int) []clipFrame {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed (scripts/install-deps.sh)")
	}
	out := filepath.Join(t.TempDir(), "clip.h264")
	cmd := exec.Command("ffmpeg", "-y", "-hide_banner", "-v", "error",
		"-f", "lavfi", "-i", "testsrc2=s=320x200:r=30",
		"-f", "lavfi", "-i", "color=c=black:s=320x40:r=30,format=yuv420p,geq=lum='255*mod(floor(N/pow(2\\,floor(X*12/W)))\\,2)':cb=128:cr=128",
		"-filter_complex", "[0:v]format=yuv420p[a];[a][1:v]vstack",
		"-frames:v", strconv.Itoa(n), "-c:v", "libx264", "-profile:v", "baseline", "-g", "30", "-keyint_min", "30",
		"-sc_threshold", "0", "-bf", "0", "-x264-params", "repeat-headers=1", "-f", "h264", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	frames := parseClip(raw)
	if len(frames) != n {
		t.Fatalf("clip has %d frames, want %d", len(frames), n)
	}
	return frames
}

// parseClip splits an Annex B stream (one slice per frame) into access units.
func parseClip(raw []byte) []clipFrame {
	var frames []clipFrame
	var cur clipFrame
	for _, n := range avc.ExtractNalusFromByteStream(raw) {
		if len(n) == 0 {
			continue
		}
		typ := n[0] & 0x1f
		if typ == nalAUD {
			continue
		}
		cur.data = binary.BigEndian.AppendUint32(cur.data, uint32(len(n)))
		cur.data = append(cur.data, n...)
		if typ == nalIDR {
			cur.key = true
		}
		if typ == 1 || typ == nalIDR {
			frames = append(frames, cur)
			cur = clipFrame{}
		}
	}
	return frames
}

func hashOf(b []byte) [32]byte { return sha256.Sum256(b) }

// frameIndex maps each clip frame's hash to its number.
func frameIndex(frames []clipFrame) map[[32]byte]int {
	m := map[[32]byte]int{}
	for i, f := range frames {
		m[hashOf(f.data)] = i
	}
	return m
}

// publishClip sends frames as RTP into lt at 30 fps in real time (frame i has
// RTP time ts0 + 3000 i), starting with frame first, for count frames (looping).
func publishClip(lt *sfu.LocalTrack, frames []clipFrame, count int, stop <-chan struct{}) {
	z := packetizer{mtu: 1200}
	var seq uint16 = 1000
	var ts uint32 = 12345
	start := time.Now()
	for i := 0; i < count; i++ {
		due := start.Add(time.Duration(i) * time.Second / 30)
		select {
		case <-stop:
			return
		case <-time.After(time.Until(due)):
		}
		f := frames[i%len(frames)]
		z.payloads(f.data, func(p []byte, last bool) {
			pkt := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 102, SequenceNumber: seq, Timestamp: ts, SSRC: 42, Marker: last}, Payload: p}
			seq++
			_ = lt.WritePacket(&pkt)
		})
		ts += 3000
	}
}
