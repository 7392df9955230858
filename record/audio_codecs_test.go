package record

import (
	"bytes"
	"fmt"
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

	"github.com/bluenviron/mediacommon/pkg/codecs/mpeg4audio"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// toneFile makes a 440 Hz tone with ffmpeg in the given output format.
func toneFile(t *testing.T, rate int, secs string, args ...string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "tone")
	cmd := append([]string{"-y", "-hide_banner", "-v", "error", "-f", "lavfi", "-i", fmt.Sprintf("sine=frequency=440:sample_rate=%d:duration=%s", rate, secs)}, args...)
	if b, err := exec.Command("ffmpeg", append(cmd, out)...).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// streamsOf lists a file's streams as ffprobe reads them.
func streamsOf(t *testing.T, path string) (video, audio string, audioSecs float64) {
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

// meanVolume decodes a file's audio with ffmpeg (errors while decoding fail)
// and returns its mean volume and how many seconds of it there are.
func meanVolume(t *testing.T, path string) (db, secs float64) {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-hide_banner", "-nostdin", "-v", "info", "-i", path, "-map", "0:a", "-ac", "1", "-af", "aresample=8000,volumedetect", "-f", "null", "-").CombinedOutput()
	if err != nil {
		t.Fatalf("ffmpeg decoding the audio of %s: %v\n%s", path, err, out)
	}
	m := regexp.MustCompile(`mean_volume: (-?[0-9.]+) dB`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no mean_volume decoding %s:\n%s", path, out)
	}
	db, _ = strconv.ParseFloat(string(m[1]), 64)
	if n := regexp.MustCompile(`n_samples: ([0-9]+)`).FindSubmatch(out); n != nil {
		ns, _ := strconv.Atoi(string(n[1]))
		secs = float64(ns) / 8000
	}
	return db, secs
}

// G.711 (from the camera's PCMU track) and AAC (from an AudioSource, as an
// AAC camera gives it) are recorded with the video: the segment and an
// export hold an H.264 stream and a pcm_mulaw or aac stream that ffprobe
// reads, about as long as the video, and that ffmpeg decodes to the tone.
// Recorded G.711 plays back as PCMU with 20 ms timestamp steps; a torn
// segment keeps its audio codec.
func TestRecordG711AndAAC(t *testing.T) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("ffprobe is not installed (scripts/install-deps.sh): the segments cannot be checked")
	}
	for _, codec := range []string{"pcmu", "aac"} {
		t.Run(codec, func(t *testing.T) {
			frames := makeClip(t, 90)
			e := newCamEnv(t, t.TempDir(), time.Hour)
			stop := make(chan struct{})
			done := make(chan struct{})
			var feed func(i int)
			var fed atomic.Int64 // packets or access units fed so far
			step := 20 * time.Millisecond
			switch codec {
			case "pcmu":
				ulaw := toneFile(t, 8000, "5", "-c:a", "pcm_mulaw", "-f", "mulaw")
				alt, err := e.cam.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio", Source: "microphone", SSRC: 43},
					Codec: sfu.Codec{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1, PayloadType: 0}})
				if err != nil {
					t.Fatal(err)
				}
				feed = func(i int) {
					off := (i * 160) % (len(ulaw) - 160)
					pkt := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 0, SequenceNumber: uint16(900 + i), Timestamp: uint32(5000 + 160*i), SSRC: 43},
						Payload: ulaw[off : off+160]}
					_ = alt.WritePacket(&pkt)
				}
			case "aac":
				var pkts mpeg4audio.ADTSPackets
				if err := pkts.Unmarshal(toneFile(t, 16000, "5", "-c:a", "aac", "-b:a", "32k", "-ac", "1", "-f", "adts")); err != nil {
					t.Fatal(err)
				}
				asc, err := (&mpeg4audio.AudioSpecificConfig{Type: pkts[0].Type, SampleRate: pkts[0].SampleRate, ChannelCount: pkts[0].ChannelCount}).Marshal()
				if err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				var deliver func(uint32, []byte)
				e.rec.SetAudioSource(func(id string, d func(uint32, []byte)) (AudioConf, func(), bool) {
					if id != "door" {
						return AudioConf{}, nil, false
					}
					mu.Lock()
					deliver = d
					mu.Unlock()
					return AudioConf{Codec: "aac", Rate: 16000, Channels: 1, ASC: asc}, func() {}, true
				})
				step = 64 * time.Millisecond // 1024 samples at 16 kHz
				feed = func(i int) {
					mu.Lock()
					d := deliver
					mu.Unlock()
					if d != nil {
						d(uint32(3000+1024*i), pkts[i%len(pkts)].AU)
					}
				}
			}
			// The recorder takes the audio on its first look at the room.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
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
					t.Fatal("the recorder did not attach the camera's audio")
				}
			}
			go func() {
				defer close(done)
				tick := time.NewTicker(step)
				defer tick.Stop()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					feed(i)
					fed.Add(1)
				}
			}()
			fedBefore := fed.Load()
			e.recordClip(t, frames, 90)
			// What was fed while the clip played: on a loaded machine the
			// ticker skips ticks, and there is less audio to record.
			fedSecs := float64(fed.Load()-fedBefore) * step.Seconds()
			close(stop)
			<-done

			c := e.rec.store.lookup("door")
			var seg Segment
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				c.mu.Lock()
				n := len(c.segs)
				closed := n == 1 && !c.segs[0].open
				if closed {
					seg = *c.segs[0]
				}
				c.mu.Unlock()
				if n > 1 {
					t.Fatalf("%d segments, want 1", n)
				}
				if closed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the segment was never closed")
				}
			}
			if len(seg.Audio) == 0 || seg.ACodec != codec {
				t.Fatalf("segment: %d audio fragments, codec %q", len(seg.Audio), seg.ACodec)
			}
			want := map[string]string{"pcmu": "pcm_mulaw", "aac": "aac"}[codec]
			// 90 frames at 25 fps: 3.6 s of video, and as much audio.
			v0, a0, _ := streamsOf(t, seg.Path)
			if v0 != "h264" || a0 != want {
				t.Fatalf("segment streams: video %q, audio %q", v0, a0)
			}
			db, secs := meanVolume(t, seg.Path)
			// 90 frames take 3.6 s: about that much audio is fed meanwhile
			// (less on a loaded machine, whose ticker skips ticks) and all of
			// it is recorded but what came before the first keyframe (no
			// segment yet) or after the last frame.
			if low := fedSecs - 0.4; db < -40 || secs < low || secs > 4.5 {
				t.Fatalf("the recorded audio decodes to %.2f s at %.1f dB, want %.2f-4.5 s of the tone (%.2f s fed while recording)", secs, db, low, fedSecs)
			}
			t.Logf("segment: %s + %s, %.2f s of audio (%.2f s fed while recording), mean volume %.1f dB", v0, a0, secs, fedSecs, db)
			if n := ffmpegFrames(t, seg.Path); n < 60 {
				t.Fatalf("ffmpeg decoded %d frames of the segment", n)
			}
			// The export keeps the audio.
			rs := e.rec.Ranges("door")
			var buf bytes.Buffer
			if _, err := e.rec.store.Export("door", rs[0].From, rs[0].To, &buf); err != nil {
				t.Fatal(err)
			}
			ex := filepath.Join(t.TempDir(), "export.mp4")
			if err := os.WriteFile(ex, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			if v, a, _ := streamsOf(t, ex); v != "h264" || a != want {
				t.Fatalf("export streams: video %q, audio %q", v, a)
			}
			if db, secs := meanVolume(t, ex); db < -40 || secs < 3 {
				t.Fatalf("the exported audio decodes to %.2f s at %.1f dB", secs, db)
			}

			// Playback: G.711 as PCMU, continuous 20 ms steps; AAC video only without
			// an AAC player (the server sets the camera gateway's: camera/aac_test.go).
			v := e.joinViewer(t, "alice")
			if r := e.send(t, v, "alice", `{"id":1,"op":"play"}`); r["error"] != nil {
				t.Fatalf("play: %v", r)
			}
			e.rec.mu.Lock()
			sess := e.rec.sessions[sessionKey{"door", "alice"}]
			e.rec.mu.Unlock()
			if codec == "aac" {
				if sess == nil || sess.aout != nil {
					t.Fatalf("an AAC recording's playback should be video only (session %v)", sess != nil)
				}
			} else {
				if sess == nil || sess.aout == nil {
					t.Fatal("the playback session has no audio track")
				}
				if mt := sess.aout.track.Publication().Codec().MimeType; mt != webrtc.MimeTypePCMU {
					t.Fatalf("playback audio codec %s", mt)
				}
				heard := &g711Counter{}
				sess.aout.track.Publication().AddSink(heard)
				for deadline := time.Now().Add(10 * time.Second); heard.good() < 40 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				}
				if g, b := heard.good(), heard.bad(); g < 40 || b != 0 {
					t.Fatalf("playback audio: %d good PCMU packets, %d bad", g, b)
				}
			}

			// A torn segment, rescanned without its index, still names its codec.
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
			if len(re.Audio) == 0 || re.ACodec != codec {
				t.Fatalf("after the cut: %d audio fragments, codec %q", len(re.Audio), re.ACodec)
			}
			if _, a, _ := streamsOf(t, seg.Path); a != want {
				t.Fatalf("torn segment's audio: %q", a)
			}
		})
	}
}

// g711Counter checks playback's PCMU packets: payload type 0, 160 bytes, and
// timestamps that step by the previous packet's length.
type g711Counter struct {
	mu        sync.Mutex
	ok, wrong int
	prevSeq   uint16
	prevTS    uint32
	prevN     int
	have      bool
}

func (o *g711Counter) WriteRTP(pkt *sfu.Packet) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case pkt.Header.PayloadType != 0 || len(pkt.Payload) != 160:
		o.wrong++
	case o.have && pkt.Header.SequenceNumber == o.prevSeq+1 && pkt.Header.Timestamp-o.prevTS != uint32(o.prevN):
		o.wrong++
	default:
		o.ok++
	}
	o.prevSeq, o.prevTS, o.prevN, o.have = pkt.Header.SequenceNumber, pkt.Header.Timestamp, len(pkt.Payload), true
}

func (o *g711Counter) good() int { o.mu.Lock(); defer o.mu.Unlock(); return o.ok }
func (o *g711Counter) bad() int  { o.mu.Lock(); defer o.mu.Unlock(); return o.wrong }
