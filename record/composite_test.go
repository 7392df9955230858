package record

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// The composite of a room recording is rendered by ffmpeg as a job: two
// video tracks side by side and the audio, as long as the recording; without
// ffmpeg the start is refused with a clear error; a canceled job leaves no file.
func TestRoomComposite(t *testing.T) {
	frames := makeClip(t, 60)
	vp9 := ivfFrames(t, "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-g", "30", "-b:v", "150k")
	opus := opusPackets(t, "3")
	mgr := sfu.NewManager(config.Default(), nil, testLog())
	rec, err := New(mgr, config.Recording{Dir: t.TempDir(), Segment: time.Second}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	parts := map[string]*sfu.Participant{}
	publish := func(who, kind string, c sfu.Codec) *sfu.LocalTrack {
		p := parts[who]
		if p == nil {
			if p, err = mgr.JoinLocal(sfu.LocalOptions{Room: "grid", Identity: who, Grants: auth.Grants{Publish: true}}); err != nil {
				t.Fatal(err)
			}
			parts[who] = p
		}
		lt, err := p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: kind}, Codec: c})
		if err != nil {
			t.Fatal(err)
		}
		return lt
	}
	hv := publish("hana", "video", h264Codec)
	ha := publish("hana", "audio", opusCodec)
	vv := publish("vik", "video", sfu.Codec{MimeType: webrtc.MimeTypeVP9, ClockRate: 90000, PayloadType: 98})
	info, err := rec.StartRoom("grid", "test")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	go publishClip(hv, frames, 75, stop)
	go publishFrames(vv, &codecs.VP9Payloader{}, 98, vp9, time.Second/30, 3000, stop)
	go func() {
		for i, p := range opus[:125] {
			time.Sleep(20 * time.Millisecond)
			_ = ha.WritePacket(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: uint16(i), Timestamp: uint32(i * 960), SSRC: 3}, Payload: p})
		}
	}()
	time.Sleep(2600 * time.Millisecond)
	close(stop)
	if info, err = rec.StopRoom("grid", "test"); err != nil {
		t.Fatal(err)
	}

	rec.SetFFmpeg("/nonexistent/ffmpeg")
	if _, err := rec.StartComposite(info.ID); protocol.CodeOf(err) != CodeUnavailable || !strings.Contains(err.Error(), "ffmpeg") {
		t.Fatalf("without ffmpeg: %v", err)
	}
	rec.SetFFmpeg("")
	if _, err := rec.StartComposite(info.ID); err != nil {
		t.Fatal(err)
	}
	var job CompositeJob
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if job, err = rec.Composite(info.ID); err != nil || job.State != "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("composite still running: %+v", job)
		}
	}
	if job.State != "done" || job.Progress != 1 || job.Size == 0 {
		t.Fatalf("composite: %+v %v", job, err)
	}
	path, err := rec.compositeFile(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name,width,height:format=duration", "-of", "json", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Streams []struct {
			Type   string `json:"codec_type"`
			Codec  string `json:"codec_name"`
			Width  int    `json:"width"`
			Height int    `json:"height"`
		}
		Format struct{ Duration string }
	}
	if err := json.Unmarshal(out, &p); err != nil || len(p.Streams) != 2 {
		t.Fatalf("composite streams: %s", out)
	}
	d, _ := strconv.ParseFloat(p.Format.Duration, 64)
	v := p.Streams[0]
	// Recorded for about 2.6 s.
	if v.Type != "video" || v.Codec != "h264" || v.Width != 2*cellW || v.Height != cellH || p.Streams[1].Type != "audio" || d < 1.8 || d > 3.6 {
		t.Fatalf("composite: %s", out)
	}

	// Canceled: no file is left.
	if _, err := rec.StartComposite(info.ID); err != nil {
		t.Fatal(err)
	}
	if job, err = rec.CancelComposite(info.ID); err != nil || job.State == "running" {
		t.Fatalf("cancel: %+v %v", job, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the composite file after cancel: %v", err)
	}
	if _, err := rec.Composite(info.ID); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("a canceled job is still listed: %v", err)
	}
}
