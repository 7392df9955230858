// Command record measures recording playback: the latency from a viewer's seek
// message to the arrival of the exact target frame on the viewer's WebRTC
// connection, repeated over random targets (p50/p90), for docs/benchmarks.md.
//
//	go run ./bench/record [-seeks 30] [-record 12s]
//
// It runs a real server (server.Start with recording on, loopback), a camera
// publishing an ffmpeg test clip into room camera/bench, and a viewer joined
// with the room protocol (Pion) that sends playback messages to the camera and
// identifies every received frame by the hash of its slice NAL unit.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/Eyevinn/mp4ff/avc"
	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/record"
	"github.com/petrel-sfu/petrel/server"
	"github.com/petrel-sfu/petrel/sfu"
)

func main() {
	seeks := flag.Int("seeks", 30, "seeks to measure")
	recordFor := flag.Duration("record", 12*time.Second, "how long the camera records first")
	flag.Parse()
	if err := run(*seeks, *recordFor); err != nil {
		fmt.Fprintln(os.Stderr, "bench/record:", err)
		os.Exit(1)
	}
}

type frame struct {
	annexB []byte
	key    bool
	id     [32]byte // hash of the slice NAL unit
}

func makeClip(dir string, n int) ([]frame, error) {
	out := filepath.Join(dir, "clip.h264")
	cmd := exec.Command("ffmpeg", "-y", "-hide_banner", "-v", "error",
		"-f", "lavfi", "-i", "testsrc2=s=640x360:r=30", "-frames:v", fmt.Sprint(n),
		"-c:v", "libx264", "-profile:v", "baseline", "-g", "30", "-keyint_min", "30", "-sc_threshold", "0",
		"-bf", "0", "-b:v", "1M", "-x264-params", "repeat-headers=1", "-f", "h264", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ffmpeg: %v %s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	var frames []frame
	var cur []byte
	for _, n := range avc.ExtractNalusFromByteStream(raw) {
		cur = append(cur, 0, 0, 0, 1)
		cur = append(cur, n...)
		if t := n[0] & 0x1f; t == 1 || t == 5 {
			frames = append(frames, frame{annexB: cur, key: t == 5, id: sha256.Sum256(n)})
			cur = nil
		}
	}
	return frames, nil
}

func run(seeks int, recordFor time.Duration) error {
	dir, err := os.MkdirTemp("", "petrel-bench-record")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	frames, err := makeClip(dir, 450) // longer than the recording: every recorded frame is unique
	if err != nil {
		return err
	}
	byID := map[[32]byte]int{}
	for i, f := range frames {
		byID[f.id] = i
	}

	cfg := config.Default()
	cfg.Loopback = true
	cfg.HTTP = "127.0.0.1:0"
	cfg.RTC.UDPPort, cfg.RTC.TCPPort, cfg.TURN.Enabled = 0, -1, false
	cfg.Recording = config.Recording{Dir: filepath.Join(dir, "rec"), Segment: 4 * time.Second}
	keys := auth.Keys{"bench": "bench-secret-bench-secret-bench-secret"}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := server.Start(cfg, keys, "bench", false, log)
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())

	// The camera: a local participant "camera" that answers playback messages
	// the way the camera gateway does.
	cam, err := srv.Manager.JoinLocal(sfu.LocalOptions{Room: "camera/bench", Identity: "camera",
		Grants: auth.Grants{Publish: true, PublishData: true}, Origin: sfu.Server})
	if err != nil {
		return err
	}
	cam.OnData(func(_ bool, h sfu.DataHeader, payload []byte) {
		if h.Topic == record.Topic {
			from := h.From
			p := append([]byte(nil), payload...)
			go srv.Recorder.HandlePlayback("bench", from, p, func(b []byte) { cam.PublishData(true, record.Topic, []string{from}, b) })
		}
	})
	lt, err := cam.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "video", Source: "camera", SSRC: 1},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeH264, ClockRate: 90000, SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f", PayloadType: 102}})
	if err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // the recorder attaches
	fmt.Fprintf(os.Stderr, "recording %v of the clip...\n", recordFor)
	publish(lt, frames, int(recordFor.Seconds()*30))
	lt.Close()
	time.Sleep(time.Second)
	ranges := srv.Recorder.Ranges("bench")
	if len(ranges) == 0 {
		return fmt.Errorf("nothing recorded")
	}

	tok, err := keys.Sign("bench", func() auth.Claims {
		c := auth.Claims{Room: "camera/bench", Grants: auth.Grants{Subscribe: true, PublishData: true}}
		c.Subject = "viewer"
		return c
	}(), time.Hour)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	v, err := client.Join(ctx, "ws://"+srv.HTTPAddr+"/v1/rtc", tok, client.Options{})
	if err != nil {
		return err
	}
	defer v.Close()

	arrivals := make(chan arrival, 4096) // clip frames as they complete
	go func() {
		for t := range v.Tracks {
			go readFrames(t.Remote, byID, arrivals)
		}
	}()
	replies := make(chan map[string]any, 64)
	go func() {
		for d := range v.DataIn {
			var m map[string]any
			if d.Header.Topic == record.Topic && json.Unmarshal(d.Payload, &m) == nil && m["event"] == nil {
				replies <- m
			}
		}
	}()
	send := func(msg string) (map[string]any, error) {
		if err := v.SendDataRaw(sfu.EncodeData(sfu.DataHeader{To: []string{"camera"}, Topic: record.Topic, Text: true}, []byte(msg))); err != nil {
			return nil, err
		}
		select {
		case m := <-replies:
			return m, nil
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("no reply to %s", msg)
		}
	}
	// Open the session and let the viewer subscribe to its track: seek again
	// until a frame arrives (the first bursts go out while the subscriber
	// connection is still being set up; a Pion viewer, unlike a browser, does
	// not ask for a keyframe by itself).
	deadline := time.Now().Add(20 * time.Second)
	for got := false; !got; {
		if time.Now().After(deadline) {
			return fmt.Errorf("the playback track never delivered a frame")
		}
		if _, err := send(fmt.Sprintf(`{"id":0,"op":"seek","t":%d}`, ranges[0].From+500)); err != nil {
			return err
		}
		select {
		case <-arrivals:
			got = true
		case <-time.After(500 * time.Millisecond):
		}
	}
	time.Sleep(300 * time.Millisecond)

	// The frame shown after a seek is the last of its burst (exactness is what
	// record's TestSeekShowsExactFrame checks); its arrival ends the latency.
	var lat []time.Duration
	span := ranges[len(ranges)-1].To - ranges[0].From
	for i := 0; i < seeks; i++ {
		t := ranges[0].From + 200 + rand.Int64N(span-400)
		drain(arrivals)
		start := time.Now()
		if err := v.SendDataRaw(sfu.EncodeData(sfu.DataHeader{To: []string{"camera"}, Topic: record.Topic, Text: true},
			[]byte(fmt.Sprintf(`{"id":%d,"op":"seek","t":%d}`, i+1, t)))); err != nil {
			return err
		}
		// The reply names the time of the frame shown; the clip was recorded
		// from its frame 0 at 30 fps, so that time names the clip frame.
		target := -1
		var got *arrival
		seen := map[int]arrival{}
		timeout := time.After(10 * time.Second)
		for got == nil {
			select {
			case a := <-arrivals:
				seen[a.n] = a
			case m := <-replies:
				if e, ok := m["error"]; ok {
					return fmt.Errorf("seek: %v", e)
				}
				ft, _ := m["t"].(float64)
				target = int(math.Round((ft - float64(ranges[0].From)) * 30 / 1000))
			case <-timeout:
				return fmt.Errorf("seek %d: target frame %d never arrived", i, target)
			}
			if a, ok := seen[target]; ok && target >= 0 {
				got = &a
			}
		}
		if key := target - target%30; seen[key].at.IsZero() {
			return fmt.Errorf("seek %d: target %d arrived without its keyframe %d", i, target, key)
		}
		fmt.Fprintf(os.Stderr, "seek %2d: frame %d, %.1f ms\n", i, target, ms(got.at.Sub(start)))
		lat = append(lat, got.at.Sub(start))
		time.Sleep(100 * time.Millisecond)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1)+0.5)] }
	fmt.Printf("seeks: %d\nseek to exact frame arrival: p50 %.1f ms, p90 %.1f ms, max %.1f ms\n",
		len(lat), ms(pct(0.5)), ms(pct(0.9)), ms(lat[len(lat)-1]))
	fmt.Printf("| seeks | p50 | p90 | max |\n|---|---|---|---|\n| %d | %.1f ms | %.1f ms | %.1f ms |\n",
		len(lat), ms(pct(0.5)), ms(pct(0.9)), ms(lat[len(lat)-1]))
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func drain(c chan arrival) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// arrival is a clip frame completed on the viewer's connection.
type arrival struct {
	n  int
	at time.Time
}

// readFrames reassembles H.264 frames from a track and reports their clip numbers.
func readFrames(tr *webrtc.TrackRemote, byID map[[32]byte]int, out chan<- arrival) {
	if tr.Kind() != webrtc.RTPCodecTypeVideo {
		return // the codec is not known before the first packet; video here is H.264
	}
	var depack codecs.H264Packet
	var au []byte
	var ts uint32
	buf := make([]byte, 1600)
	started := time.Now()
	for {
		n, _, err := tr.Read(buf)
		if err != nil {
			// A track announced before its connection's DTLS is up reads EOF
			// until SRTP starts (FireOnTrackBeforeFirstRTP); give it time.
			if time.Since(started) < 10*time.Second {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			return
		}
		var p rtp.Packet
		if p.Unmarshal(buf[:n]) != nil {
			continue
		}
		if p.Timestamp != ts {
			au, ts = au[:0], p.Timestamp
		}
		b, err := depack.Unmarshal(p.Payload)
		if err == nil {
			au = append(au, b...)
		}
		if !p.Marker {
			continue
		}
		for _, nal := range avc.ExtractNalusFromByteStream(au) {
			if t := nal[0] & 0x1f; t == 1 || t == 5 {
				if i, ok := byID[sha256.Sum256(nal)]; ok {
					out <- arrival{i, time.Now()}
				}
			}
		}
		au = au[:0]
	}
}

func publish(lt *sfu.LocalTrack, frames []frame, count int) {
	var pay codecs.H264Payloader
	var seq uint16
	var ts uint32
	start := time.Now()
	for i := 0; i < count; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / 30)))
		f := frames[i%len(frames)]
		ps := pay.Payload(1200, f.annexB)
		for j, p := range ps {
			pkt := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 102, SequenceNumber: seq, Timestamp: ts, SSRC: 1, Marker: j == len(ps)-1}, Payload: p}
			seq++
			_ = lt.WritePacket(&pkt)
		}
		ts += 3000
	}
}
