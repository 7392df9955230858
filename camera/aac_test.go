package camera_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media/oggwriter"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/camera/probe"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/sfu"
)

// An RTSP camera sending AAC (RFC 3640 mpeg4-generic, and RFC 6416 LATM): a
// WebRTC viewer receives its audio as Opus, transcoded by ffmpeg, with rising
// timestamps, and the Opus decodes (with ffmpeg, from an Ogg file of what the
// viewer received) to the camera's tone, not silence. With nobody listening
// the transcoder stops.
func TestRTSPAACReachesViewerAsOpus(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is not installed: the AAC transcoder cannot run (scripts/install-deps.sh installs it)")
	}
	for _, mode := range []string{"aac", "aac-latm"} {
		t.Run(mode, func(t *testing.T) {
			clip, err := emulator.LoadClip(clipDir)
			if err != nil {
				t.Fatal(err)
			}
			if clip.AAC == nil {
				t.Fatal("the test clip has no clip.aac")
			}
			emu, err := emulator.Start(emulator.Options{Clip: clip, Audio: mode, Log: logger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(emu.Close)
			srv := startServer(t, config.Camera{ID: "aac", RTSP: emu.URL()})
			st := waitStatus(t, srv, "aac", "described", func(s camera.Status) bool { return s.Video != "" && s.Audio != "" })
			if st.Audio != webrtc.MimeTypeOpus || !strings.Contains(st.AudioNote, "AAC") {
				t.Fatalf("status %+v", st)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			v, err := probe.Open(ctx, probe.Options{Endpoint: whepURL(srv, "aac"), Token: token(t, camera.RoomOf("aac"), "listener", false),
				API: client.LoopbackAPI(), KeepAudio: 1000})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if _, err := v.WaitFirstFrame(ctx); err != nil {
				t.Fatal(err)
			}
			var pkts []*rtpPacket
			deadline := time.Now().Add(20 * time.Second)
			for {
				mime, ps := v.Audio()
				if len(ps) >= 150 {
					if !strings.EqualFold(mime, webrtc.MimeTypeOpus) {
						t.Fatalf("audio codec %s", mime)
					}
					for _, p := range ps {
						pkts = append(pkts, &rtpPacket{p.Timestamp, p.Payload})
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d Opus packets after 20 s (status %+v)", len(ps), srv.Cameras.Camera("aac").Status())
				}
				time.Sleep(50 * time.Millisecond)
			}
			if st := srv.Cameras.Camera("aac").Status(); !strings.Contains(st.AudioNote, "pid") || !strings.Contains(st.AudioNote, "ms AAC to Opus") {
				t.Errorf("status while transcoding: %q", st.AudioNote)
			} else {
				t.Logf("status: %s", st.AudioNote)
			}
			// Rising timestamps, 20 ms apart; Opus packets with a TOC of 20 ms frames.
			for i, p := range pkts {
				if len(p.payload) < 3 {
					t.Fatalf("packet %d: %d bytes (DTX or empty)", i, len(p.payload))
				}
				if cfg := p.payload[0] >> 3; cfg != 1 && cfg != 3 && cfg != 5 && cfg != 7 && cfg != 9 && cfg != 11 && cfg != 13 && cfg != 15 && cfg != 19 && cfg != 23 && cfg != 27 && cfg != 31 {
					t.Fatalf("packet %d: Opus TOC config %d is not a 20 ms frame", i, cfg)
				}
				if i > 0 && p.ts-pkts[i-1].ts != 960 {
					t.Errorf("packet %d: timestamp step %d, want 960", i, int32(p.ts-pkts[i-1].ts))
				}
			}
			mean := decodeMeanVolume(t, pkts)
			t.Logf("%s: %d Opus packets, decoded mean volume %.1f dB", mode, len(pkts), mean)
			if mean < -40 {
				t.Fatalf("the decoded Opus is silence (mean volume %.1f dB)", mean)
			}
			if mode == "aac" {
				// ffmpeg dies: the transcoder is restarted (after a second's
				// backoff) and the viewer hears Opus again.
				note := srv.Cameras.Camera("aac").Status().AudioNote
				m := regexp.MustCompile(`pid ([0-9]+)`).FindStringSubmatch(note)
				if m == nil {
					t.Fatalf("no pid in %q", note)
				}
				pid, _ := strconv.Atoi(m[1])
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatalf("kill ffmpeg %d: %v", pid, err)
				}
				killed := time.Now()
				waitStatus(t, srv, "aac", "ffmpeg restarted", func(s camera.Status) bool {
					n := regexp.MustCompile(`pid ([0-9]+)`).FindStringSubmatch(s.AudioNote)
					return n != nil && n[1] != m[1]
				})
				_, before := v.Audio()
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					if _, ps := v.Audio(); len(ps) >= len(before)+50 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("no Opus after ffmpeg was restarted")
					}
				}
				t.Logf("ffmpeg killed; Opus flowing again %v later", time.Since(killed).Round(time.Millisecond))
				// The timeline goes on from the AAC clock: forward, by about the outage.
				_, after := v.Audio()
				last, next := before[len(before)-1].Timestamp, after[len(before)].Timestamp
				if d := int32(next - last); d <= 0 || d > 5*48000 {
					t.Fatalf("across the restart the Opus timestamp moved %d ticks", d)
				}
			}
			v.Close()
			waitStatus(t, srv, "aac", "transcoder stopped without listeners", func(s camera.Status) bool { return strings.Contains(s.AudioNote, "idle") })
		})
	}
}

// Without ffmpeg an AAC camera is video only, and its status says why.
func TestRTSPAACWithoutFFmpegIsVideoOnly(t *testing.T) {
	clip, err := emulator.LoadClip(clipDir)
	if err != nil {
		t.Fatal(err)
	}
	emu, err := emulator.Start(emulator.Options{Clip: clip, Audio: "aac", Log: logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	srv := startServer(t, config.Camera{ID: "noff", RTSP: emu.URL(), Transcode: filepath.Join(t.TempDir(), "no-ffmpeg")})
	st := waitStatus(t, srv, "noff", "described", func(s camera.Status) bool { return s.Video != "" && s.AudioNote != "" })
	if st.Audio != "" || !strings.Contains(st.AudioNote, "ffmpeg is not installed") {
		t.Fatalf("status %+v", st)
	}
	v, _ := view(t, srv, "noff")
	waitFrames(t, v, 25, "video-only viewer")
}

type rtpPacket struct {
	ts      uint32
	payload []byte
}

// decodeMeanVolume writes the packets as Ogg/Opus and has ffmpeg decode them.
func decodeMeanVolume(t *testing.T, pkts []*rtpPacket) float64 {
	t.Helper()
	path := filepath.Join(t.TempDir(), "heard.ogg")
	w, err := oggwriter.New(path, 48000, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pkts {
		if err := w.WriteRTP(rtpOf(p, uint16(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffmpeg", "-hide_banner", "-nostdin", "-i", path, "-af", "volumedetect", "-f", "null", "-").CombinedOutput()
	if err != nil {
		t.Fatalf("ffmpeg decode: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`mean_volume: (-?[0-9.]+) dB`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no mean_volume in ffmpeg's output:\n%s", out)
	}
	f, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(fmt.Errorf("mean volume %q: %w", m[1], err))
	}
	return f
}

func rtpOf(p *rtpPacket, seq uint16) *rtp.Packet {
	return &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: seq, Timestamp: p.ts}, Payload: p.payload}
}

// An AAC camera is recorded as it sends: the segments hold H.264 and AAC
// (ffprobe), whose audio decodes to the tone, and recording alone does not
// start the transcoder.
func TestRTSPAACRecordedAsAAC(t *testing.T) {
	for _, tool := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the recording cannot be checked", tool)
		}
	}
	clip, err := emulator.LoadClip(clipDir)
	if err != nil {
		t.Fatal(err)
	}
	emu, err := emulator.Start(emulator.Options{Clip: clip, Audio: "aac", Log: logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	dir := t.TempDir()
	srv := startServerWith(t, func(c *config.Config) {
		c.Recording.Dir, c.Recording.Segment = dir, 2*time.Second
	}, config.Camera{ID: "rec", RTSP: emu.URL(), Warm: true})
	// Wait for a closed segment (its index is written when it closes).
	var seg string
	for deadline := time.Now().Add(30 * time.Second); seg == ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no closed segment after 30 s")
		}
		idx, _ := filepath.Glob(filepath.Join(dir, "*", "*.idx"))
		if len(idx) > 0 {
			seg = strings.TrimSuffix(idx[0], ".idx") + ".mp4"
		}
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name,sample_rate", "-of", "csv=p=0", seg).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v\n%s", err, out)
	}
	if s := string(out); !strings.Contains(s, "h264,video") || !strings.Contains(s, "aac,audio,16000") {
		t.Fatalf("segment streams:\n%s", s)
	}
	dec, err := exec.Command("ffmpeg", "-hide_banner", "-nostdin", "-i", seg, "-map", "0:a", "-af", "volumedetect", "-f", "null", "-").CombinedOutput()
	if err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, dec)
	}
	m := regexp.MustCompile(`mean_volume: (-?[0-9.]+) dB`).FindSubmatch(dec)
	if m == nil {
		t.Fatalf("no volume:\n%s", dec)
	}
	if db, _ := strconv.ParseFloat(string(m[1]), 64); db < -40 {
		t.Fatalf("recorded AAC decodes to silence (%.1f dB)", db)
	}
	if st := srv.Cameras.Camera("rec").Status(); !strings.Contains(st.AudioNote, "idle") {
		t.Fatalf("recording started the transcoder: %+v", st)
	}

	// Playback of the AAC recording carries its audio, transcoded to Opus by
	// a transcoder of the session's own: Opus packets whose TOC parses, with
	// timestamps stepping by their duration, while playing at 1x; none after
	// a pause (ffmpeg stopped).
	viewer, err := srv.Manager.JoinLocal(sfu.LocalOptions{Room: camera.RoomOf("rec"), Identity: "alice",
		Grants: auth.Grants{Subscribe: true, PublishData: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viewer.Close("test over") })
	control := func(msg string) string {
		reply := make(chan []byte, 1)
		srv.Recorder.HandlePlayback("rec", "alice", []byte(msg), func(b []byte) { reply <- b })
		select {
		case b := <-reply:
			if strings.Contains(string(b), `"error"`) {
				t.Fatalf("%s: %s", msg, b)
			}
			return string(b)
		case <-time.After(10 * time.Second):
			t.Fatalf("no reply to %s", msg)
			return ""
		}
	}
	played := time.Now()
	control(`{"id":1,"op":"play"}`)
	audio := srv.Recorder.PlaybackAudio("rec", "alice")
	if audio == nil || !strings.EqualFold(audio.Codec().MimeType, webrtc.MimeTypeOpus) {
		t.Fatalf("the AAC recording's playback has no Opus track (%v)", audio)
	}
	heard := &opusHeard{}
	audio.AddSink(heard)
	for deadline := time.Now().Add(15 * time.Second); heard.counts()[0] < 50 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
	}
	if c := heard.counts(); c[0] < 50 || c[1] != 0 {
		t.Fatalf("playback audio: %d good Opus packets, %d bad", c[0], c[1])
	}
	control(`{"id":2,"op":"pause"}`)
	time.Sleep(time.Second) // the transcoder stops within half a second; what it had in hand comes out first
	before := heard.counts()[0]
	time.Sleep(time.Second)
	if after := heard.counts()[0]; after != before {
		t.Fatalf("paused, the playback audio goes on: %d packets, then %d", before, after)
	}
	t.Logf("playback audio: %d Opus packets before the pause, the first %v after play", before, heard.firstAt().Sub(played).Round(time.Millisecond))
	control(`{"id":3,"op":"stop"}`)
}

// opusHeard checks Opus packets: payload type 111, a TOC that parses, and
// timestamps stepping by the previous packet's duration.
type opusHeard struct {
	mu       sync.Mutex
	ok, bad  int
	prevSeq  uint16
	prevTS   uint32
	prevDur  int
	havePrev bool
	first    time.Time
}

func (o *opusHeard) firstAt() time.Time { o.mu.Lock(); defer o.mu.Unlock(); return o.first }

func (o *opusHeard) WriteRTP(p *sfu.Packet) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := emulator.OpusSamples(p.Payload)
	switch {
	case err != nil || p.Header.PayloadType != 111:
		o.bad++
	case o.havePrev && p.Header.SequenceNumber == o.prevSeq+1 && p.Header.Timestamp-o.prevTS != uint32(o.prevDur):
		o.bad++
	default:
		o.ok++
	}
	o.prevSeq, o.prevTS, o.prevDur, o.havePrev = p.Header.SequenceNumber, p.Header.Timestamp, n, true
	if o.first.IsZero() {
		o.first = time.Now()
	}
}

func (o *opusHeard) counts() [2]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return [2]int{o.ok, o.bad}
}
