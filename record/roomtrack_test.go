package record

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media/ivfreader"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// ivfFrames encodes two seconds of test pattern with ffmpeg and reads the frames.
func ivfFrames(t *testing.T, args ...string) [][]byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "v.ivf")
	cmd := exec.Command("ffmpeg", append(append([]string{"-hide_banner", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=30", "-t", "2", "-pix_fmt", "yuv420p"}, args...), "-f", "ivf", out)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, _, err := ivfreader.NewWith(f)
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for {
		fr, _, err := r.ParseNextFrame()
		if err != nil {
			break
		}
		frames = append(frames, fr)
	}
	if len(frames) < 30 {
		t.Fatalf("%d frames", len(frames))
	}
	return frames
}

// publishFrames sends frames in a loop, every d, each cut by pay, until stop.
func publishFrames(lt *sfu.LocalTrack, pay rtp.Payloader, pt uint8, frames [][]byte, d time.Duration, ticks uint32, stop <-chan struct{}) {
	seq, ts := uint16(100), uint32(5000)
	next := time.Now()
	for i := 0; ; i++ {
		next = next.Add(d)
		select {
		case <-stop:
			return
		case <-time.After(time.Until(next)):
		}
		ps := pay.Payload(1200, frames[i%len(frames)])
		for j, p := range ps {
			pkt := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: pt, SequenceNumber: seq, Timestamp: ts, SSRC: 9, Marker: j == len(ps)-1}, Payload: p}
			seq++
			_ = lt.WritePacket(&pkt)
		}
		ts += ticks
	}
}

// A room the room setting names is recorded from its start, whatever each
// track's codec (here VP9, AV1 and G.711); stopped by hand, it stays stopped;
// its export holds every track and decodes without an error.
func TestRoomSettingRecordsEveryCodec(t *testing.T) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("ffmpeg/ffprobe not installed (make deps)")
	}
	vp9 := ivfFrames(t, "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-g", "30", "-b:v", "150k")
	av1 := ivfFrames(t, "-c:v", "libaom-av1", "-usage", "realtime", "-cpu-used", "8", "-g", "30", "-b:v", "150k")
	mgr := sfu.NewManager(config.Default(), nil, testLog())
	rec, err := New(mgr, config.Recording{Dir: t.TempDir(), Segment: time.Second, Rooms: []string{"codecs", "other-*"}}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	rec.watchEvery = 50 * time.Millisecond
	defer rec.Close()
	stop := make(chan struct{})
	defer close(stop)
	// A room the setting does not name is not recorded.
	if _, err := mgr.JoinLocal(sfu.LocalOptions{Room: "elsewhere", Identity: "x", Grants: auth.Grants{Publish: true}}); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		who   string
		kind  string
		codec sfu.Codec
		pay   rtp.Payloader
		fr    [][]byte
		d     time.Duration
		ticks uint32
	}{
		{"vera", "video", sfu.Codec{MimeType: webrtc.MimeTypeVP9, ClockRate: 90000, PayloadType: 98}, &codecs.VP9Payloader{}, vp9, time.Second / 30, 3000},
		{"anna", "video", sfu.Codec{MimeType: webrtc.MimeTypeAV1, ClockRate: 90000, PayloadType: 45}, &codecs.AV1Payloader{}, av1, time.Second / 30, 3000},
		{"gus", "audio", sfu.Codec{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, PayloadType: 0}, &codecs.G711Payloader{}, [][]byte{bytes.Repeat([]byte{0x55}, 160)}, 20 * time.Millisecond, 160},
	} {
		p, err := mgr.JoinLocal(sfu.LocalOptions{Room: "codecs", Identity: x.who, Grants: auth.Grants{Publish: true}})
		if err != nil {
			t.Fatal(err)
		}
		lt, err := p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: x.kind}, Codec: x.codec})
		if err != nil {
			t.Fatal(err)
		}
		go publishFrames(lt, x.pay, uint8(x.codec.PayloadType), x.fr, x.d, x.ticks, stop)
	}
	time.Sleep(2500 * time.Millisecond)
	list := rec.RoomRecordings()
	if len(list) != 1 || list[0].Room != "codecs" || list[0].By != "config" || len(list[0].Tracks) != 3 {
		t.Fatalf("recordings: %+v", list)
	}
	if _, err := rec.StopRoom("codecs", "test"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(rec.RoomRecordings()); n != 1 {
		t.Fatalf("a recording stopped by hand was started again by the setting: %d recordings", n)
	}
	var buf bytes.Buffer
	if err := rec.ExportRoom(list[0].ID, &buf); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "x.mp4")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=codec_name,nb_read_packets", "-count_packets", "-of", "csv=p=0", file).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v\n%s", err, out)
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	sort.Strings(lines)
	var names []string
	for _, l := range lines {
		name, n, _ := strings.Cut(l, ",")
		names = append(names, name)
		// 2.5 s: at least a second of every track (video waits for a
		// keyframe, and a loaded machine delays the publishers).
		if min := map[string]int{"av1": 30, "vp9": 30, "pcm_mulaw": 50}[name]; len(n) == 0 || atoi(n) < min {
			t.Fatalf("export: %s has %s packets: %s", name, n, out)
		}
	}
	if strings.Join(names, ",") != "av1,pcm_mulaw,vp9" {
		t.Fatalf("export streams %v", lines)
	}
	if b, err := exec.Command("ffmpeg", "-hide_banner", "-v", "error", "-i", file, "-map", "0", "-f", "null", "-").CombinedOutput(); err != nil || len(bytes.TrimSpace(b)) > 0 {
		t.Fatalf("ffmpeg decoding the export: %v\n%s", err, b)
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// A simulcast track is recorded at its highest layer: up as soon as a higher
// layer shows, down only after the recorded one went quiet for sfu.LayerStale.
// Padding goes in on the recorded layer only, and chooses nothing.
func TestRoomTrackLayerChoice(t *testing.T) {
	mgr := sfu.NewManager(config.Default(), nil, testLog())
	p, err := mgr.JoinLocal(sfu.LocalOptions{Room: "sim", Identity: "s", Grants: auth.Grants{Publish: true}})
	if err != nil {
		t.Fatal(err)
	}
	lt, err := p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "video"}, Codec: sfu.Codec{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000, PayloadType: 96}})
	if err != nil {
		t.Fatal(err)
	}
	r := newRoomTrack(nil, lt.Publication(), &vpxAsm{}, time.Second, testLog())
	ms := int64(time.Millisecond)
	for i, c := range []struct {
		layer  int8
		at     int64
		want   int32
		queued int
		pad    bool // padding only: sequence numbers, no media
	}{
		{1, 0, -1, 0, true},
		{0, 1 * ms, 0, 1, false},
		{2, 10 * ms, 2, 2, false},
		{0, 20 * ms, 2, 2, false},
		{1, 25 * ms, 2, 2, false},
		{2, 30 * ms, 2, 3, false},
		{1, 30*ms + int64(sfu.LayerStale) - ms, 2, 3, false},
		{1, 30*ms + int64(sfu.LayerStale) + ms, 1, 4, false},
		{2, 3000 * ms, 2, 5, false},
		{1, 3001 * ms, 2, 5, true},
		{2, 3002 * ms, 2, 6, true},
	} {
		payload := []byte{0x10, 0, 0}
		if c.pad {
			payload = nil
		}
		r.WriteRTP(&sfu.Packet{Layer: c.layer, Arrival: c.at, Payload: payload})
		if got := r.choice.Layer(); got != c.want || len(r.q) != c.queued {
			t.Fatalf("step %d (layer %d at %d ms): recording layer %d with %d queued, want %d with %d", i, c.layer, c.at/ms, got, len(r.q), c.want, c.queued)
		}
	}
}

// Packets lost on the way in come again after the server's NACK, behind the
// ones that followed, and a browser probing for bandwidth sends padding with
// sequence numbers of their own: the recording puts packets back in order,
// counts the padding as part of the sequence and keeps every frame, instead
// of dropping to the next keyframe at each repair or probe.
func TestRoomRecordingReordersRepairs(t *testing.T) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("ffmpeg/ffprobe not installed (make deps)")
	}
	vp8 := ivfFrames(t, "-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-g", "60", "-b:v", "300k")
	mgr := sfu.NewManager(config.Default(), nil, testLog())
	rec, err := New(mgr, config.Recording{Dir: t.TempDir(), Segment: time.Second}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	p, err := mgr.JoinLocal(sfu.LocalOptions{Room: "repairs", Identity: "v", Grants: auth.Grants{Publish: true}})
	if err != nil {
		t.Fatal(err)
	}
	lt, err := p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "video"}, Codec: sfu.Codec{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000, PayloadType: 96}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.StartRoom("repairs", "test"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	// Every third frame loses its first packet, repaired after the next frame.
	pay := &codecs.VP8Payloader{}
	seq, ts := uint16(65000), uint32(5000)
	var late *rtp.Packet
	for i, fr := range vp8 {
		ps := pay.Payload(300, fr)
		for j, b := range ps {
			pkt := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: ts, SSRC: 9, Marker: j == len(ps)-1}, Payload: b}
			seq++
			if j == 0 && i%3 == 1 && len(ps) > 1 {
				late = pkt
				continue
			}
			_ = lt.WritePacket(pkt)
		}
		if late != nil && i%3 == 2 {
			_ = lt.WritePacket(late)
			late = nil
		}
		for range i % 4 {
			_ = lt.WritePacket(&rtp.Packet{Header: rtp.Header{Version: 2, Padding: true, PaddingSize: 200, PayloadType: 96, SequenceNumber: seq, Timestamp: ts, SSRC: 9}})
			seq++
		}
		ts += 3000
		time.Sleep(time.Second / 30)
	}
	time.Sleep(100 * time.Millisecond)
	r, err := rec.StopRoom("repairs", "test")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rec.ExportRoom(r.ID, &buf); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "x.mp4")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=nb_read_packets", "-count_packets", "-of", "csv=p=0", file).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v\n%s", err, out)
	}
	if n := atoi(strings.TrimSpace(string(out))); n < len(vp8)-1 {
		t.Fatalf("recorded %d of %d frames", n, len(vp8))
	}
	if b, err := exec.Command("ffmpeg", "-hide_banner", "-v", "error", "-i", file, "-f", "null", "-").CombinedOutput(); err != nil || len(bytes.TrimSpace(b)) > 0 {
		t.Fatalf("ffmpeg decoding the export: %v\n%s", err, b)
	}
}
