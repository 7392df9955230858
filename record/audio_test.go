package record

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// opusPackets encodes a tone with ffmpeg (libopus, 20 ms packets).
func opusPackets(t *testing.T, secs string) [][]byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "tone.opus")
	if b, err := exec.Command("ffmpeg", "-y", "-hide_banner", "-v", "error", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration="+secs,
		"-c:a", "libopus", "-b:a", "32k", "-frame_duration", "20", "-f", "ogg", out).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	pkts, err := emulator.ReadOggOpus(bytes.NewReader(raw))
	if err != nil || len(pkts) < 50 {
		t.Fatalf("opus packets: %d, %v", len(pkts), err)
	}
	return pkts
}

// A camera's Opus is recorded into the video's segments as a second track:
// the segment files and an export each hold an H.264 and an Opus stream that
// ffprobe reads (with about as much audio as video), and the video is what it
// was (every frame decodes, playback reads video only).
func TestRecordOpusWithVideo(t *testing.T) {
	frames := makeClip(t, 90)
	opus := opusPackets(t, "4")
	dir := t.TempDir()
	e := newCamEnv(t, dir, time.Hour)
	alt, err := e.cam.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio", Source: "microphone", SSRC: 43},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, PayloadType: 111}})
	if err != nil {
		t.Fatal(err)
	}
	// The recorder takes the audio on its first look at the room.
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.rec.mu.Lock()
		attached := false
		for _, tr := range e.rec.tracks {
			attached = attached || tr.removeAudio != nil
		}
		e.rec.mu.Unlock()
		if attached {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("recorder did not attach the camera's Opus")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			pkt := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: uint16(500 + i), Timestamp: uint32(7000 + 960*i), SSRC: 43, Marker: i == 0},
				Payload: opus[i%len(opus)]}
			_ = alt.WritePacket(&pkt)
		}
	}()
	e.recordClip(t, frames, 90)
	close(stop)
	<-done

	c := e.rec.store.lookup("door")
	if c == nil {
		t.Fatal("no recordings")
	}
	// The recorder lets go of the track before it has closed the segment.
	var seg Segment
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c.mu.Lock()
		n, open := len(c.segs), len(c.segs) > 0 && c.segs[0].open
		if n == 1 && !open {
			seg = *c.segs[0]
		}
		c.mu.Unlock()
		if n != 1 || !open {
			if n != 1 {
				t.Fatalf("%d segments, want 1", n)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the segment was never closed")
		}
	}
	if len(seg.Audio) == 0 || len(seg.Frags) == 0 {
		t.Fatalf("segment has %d video and %d audio fragments", len(seg.Frags), len(seg.Audio))
	}
	probe := func(path string) (video, audio string, audioSecs float64) {
		t.Helper()
		out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name,duration", "-of", "csv=p=0", path).CombinedOutput()
		if err != nil {
			t.Fatalf("ffprobe %s: %v\n%s", path, err, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(l, ",")
			if len(f) < 2 {
				continue
			}
			switch f[1] {
			case "video":
				video = f[0]
			case "audio":
				audio = f[0]
				if len(f) > 2 {
					_, _ = fmt.Sscan(f[2], &audioSecs)
				}
			}
		}
		return
	}
	if v, a, secs := probe(seg.Path); v != "h264" || a != "opus" || secs < 1.5 {
		t.Fatalf("segment streams: video %q, audio %q (%.2f s)", v, a, secs)
	}
	if n := ffmpegFrames(t, seg.Path); n < 60 {
		t.Fatalf("ffmpeg decoded %d frames of the segment", n)
	}
	if got := recordedFrames(t, e.rec.store, "door"); len(got) < 60 {
		t.Fatalf("playback reads %d video frames", len(got))
	}
	// The export over HTTP: both streams.
	rs := e.rec.Ranges("door")
	if len(rs) != 1 {
		t.Fatalf("ranges %+v", rs)
	}
	var buf bytes.Buffer
	if _, err := e.rec.store.Export("door", rs[0].From, rs[0].To, &buf); err != nil {
		t.Fatal(err)
	}
	ex := filepath.Join(t.TempDir(), "export.mp4")
	if err := os.WriteFile(ex, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, a, secs := probe(ex); v != "h264" || a != "opus" || secs < 1.5 {
		t.Fatalf("export streams: video %q, audio %q (%.2f s)", v, a, secs)
	}
	// ffmpeg decodes the exported Opus without a complaint.
	if out, err := exec.Command("ffmpeg", "-v", "error", "-i", ex, "-map", "0:a", "-f", "null", "-").CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("ffmpeg decoding the exported audio: %v\n%s", err, out)
	}

	// Playback at 1x carries the audio: Opus with continuous timestamps.
	v := e.joinViewer(t, "alice")
	if r := e.send(t, v, "alice", `{"id":1,"op":"play"}`); r["error"] != nil {
		t.Fatalf("play: %v", r)
	}
	e.rec.mu.Lock()
	sess := e.rec.sessions[sessionKey{"door", "alice"}]
	e.rec.mu.Unlock()
	if sess == nil || sess.aout == nil {
		t.Fatal("the playback session has no audio track")
	}
	heard := &opusCounter{}
	sess.aout.track.Publication().AddSink(heard)
	for deadline := time.Now().Add(10 * time.Second); heard.good() < 40; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
	}
	if g, b := heard.good(), heard.bad(); g < 40 || b != 0 {
		t.Fatalf("playback audio: %d good Opus packets, %d bad", g, b)
	}

	// A crash mid-write (the file cut inside a fragment, no index): the scan
	// finds both tracks' complete fragments and cuts the torn one off.
	st, err := os.Stat(seg.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg.Path, st.Size()*2/3); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(indexPath(seg.Path))
	re, err := openSegment(seg.Path)
	if err != nil {
		t.Fatal(err)
	}
	if len(re.Frags) == 0 || len(re.Audio) == 0 || len(re.Frags) >= len(seg.Frags) {
		t.Fatalf("after the cut: %d video, %d audio fragments (had %d, %d)", len(re.Frags), len(re.Audio), len(seg.Frags), len(seg.Audio))
	}
	if v, a, _ := probe(seg.Path); v != "h264" || a != "opus" {
		t.Fatalf("torn segment's streams: video %q, audio %q", v, a)
	}
	if n := ffmpegFrames(t, seg.Path); n == 0 {
		t.Fatal("torn segment decodes no frame")
	}
}

// opusCounter is a sink that checks the Opus packets playback sends: the TOC
// parses and consecutive packets' timestamps step by the previous duration.
type opusCounter struct {
	mu        sync.Mutex
	ok, wrong int
	prevSeq   uint16
	prevTS    uint32
	prevDur   int
	have      bool
}

func (o *opusCounter) WriteRTP(pkt *sfu.Packet) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := emulator.OpusSamples(pkt.Payload)
	switch {
	case err != nil || pkt.Header.PayloadType != 111:
		o.wrong++
	case o.have && pkt.Header.SequenceNumber == o.prevSeq+1 && pkt.Header.Timestamp-o.prevTS != uint32(o.prevDur):
		o.wrong++
	default:
		o.ok++
	}
	o.prevSeq, o.prevTS, o.prevDur, o.have = pkt.Header.SequenceNumber, pkt.Header.Timestamp, n, true
}

func (o *opusCounter) good() int { o.mu.Lock(); defer o.mu.Unlock(); return o.ok }
func (o *opusCounter) bad() int  { o.mu.Lock(); defer o.mu.Unlock(); return o.wrong }
