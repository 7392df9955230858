package record

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

type packetCounter struct{ n atomic.Int64 }

func (c *packetCounter) WriteRTP(*sfu.Packet) { c.n.Add(1) }

// A recorded room plays back in recording/<id> through the playback
// messages: the viewer gets every recorded track, seeks to the exact frame,
// plays video and audio together, steps, fast-forwards on keyframes, pauses;
// bad requests and a viewer without the subscribe grant get errors.
func TestRoomPlayback(t *testing.T) {
	frames := makeClip(t, 90)
	opus := opusPackets(t, "4")
	mgr := sfu.NewManager(config.Default(), nil, testLog())
	rec, err := New(mgr, config.Recording{Dir: t.TempDir(), Segment: time.Second}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	rec.watchEvery = 50 * time.Millisecond
	defer rec.Close()
	alice, err := mgr.JoinLocal(sfu.LocalOptions{Room: "meet", Identity: "alice", Grants: auth.Grants{Publish: true}})
	if err != nil {
		t.Fatal(err)
	}
	vt, err := alice.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "video", Source: "camera"}, Codec: h264Codec})
	if err != nil {
		t.Fatal(err)
	}
	at, err := alice.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio", Source: "microphone"}, Codec: opusCodec})
	if err != nil {
		t.Fatal(err)
	}
	info, err := rec.StartRoom("meet", "test")
	if err != nil || len(info.Tracks) != 2 {
		t.Fatalf("start: %+v %v", info, err)
	}
	done := make(chan struct{}, 2)
	go func() { publishClip(vt, frames, 90, nil); done <- struct{}{} }()
	go func() {
		ts := uint32(777)
		for i, p := range opus[:150] {
			time.Sleep(time.Until(time.Now().Truncate(20 * time.Millisecond).Add(20 * time.Millisecond)))
			_ = at.WritePacket(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: uint16(i), Timestamp: ts, SSRC: 5}, Payload: p})
			ts += 960
		}
		done <- struct{}{}
	}()
	<-done
	<-done
	time.Sleep(200 * time.Millisecond)
	if _, err := rec.StopRoom("meet", "test"); err != nil {
		t.Fatal(err)
	}
	rr, _ := rec.roomRecording(info.ID)
	var vkey string
	for _, tr := range rr.snapshot().Tracks {
		if tr.Kind == "video" {
			vkey = tr.Key
		}
	}
	recorded := recordedFrames(t, rr.store, vkey)
	if len(recorded) < 60 {
		t.Fatalf("%d frames recorded", len(recorded))
	}

	// The viewer joins the playback room; the recording's participant comes.
	room := PlaybackRoomPrefix + info.ID
	replies := make(chan map[string]any, 64)
	join := func(id string, g auth.Grants) *sfu.Participant {
		p, err := mgr.JoinLocal(sfu.LocalOptions{Room: room, Identity: id, Grants: g})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close("test over") })
		p.OnData(func(_ bool, h sfu.DataHeader, payload []byte) {
			var m map[string]any
			if h.Topic == Topic && json.Unmarshal(payload, &m) == nil && m["event"] == nil {
				replies <- m
			}
		})
		return p
	}
	vic := join("vic", auth.Grants{Subscribe: true, PublishData: true})
	deadline := time.Now().Add(3 * time.Second)
	for mgr.Room(room).ByIdentity(CameraIdentity) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the recording's participant did not join the playback room")
		}
		time.Sleep(20 * time.Millisecond)
	}
	n := 0
	send := func(p *sfu.Participant, msg string) map[string]any {
		t.Helper()
		n++
		p.PublishData(true, Topic, []string{CameraIdentity}, []byte(fmt.Sprintf(`{"id":%d,%s}`, n, msg)))
		for {
			select {
			case m := <-replies:
				if m["id"] == float64(n) {
					return m
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("no reply to %s", msg)
			}
		}
	}
	if m := send(vic, `"op":"ranges"`); m["ok"] != true {
		t.Fatalf("ranges: %v", m)
	}
	m := send(vic, `"op":"pause"`)
	if m["ok"] != true || len(m["tracks"].([]any)) != 2 {
		t.Fatalf("pause: %v", m)
	}
	rec.mu.Lock()
	s := rec.roomSessions[roomSessionKey{room, "vic"}]
	rec.mu.Unlock()
	v := &viewer{arrived: make(chan struct{}, 1), idx: frameIndex(frames)}
	audio := &packetCounter{}
	for _, tr := range s.tracks {
		if tr.audio {
			tr.lt.Publication().AddSink(audio)
		} else {
			tr.lt.Publication().AddSink(v)
		}
	}
	frameOf := func(i int) int { return v.idx[hashOf(recorded[i].data)] }

	// Seek: the exact frame, after its GOP.
	for _, i := range []int{45, 31, 70} {
		if m := send(vic, fmt.Sprintf(`"op":"seek","t":%d`, recorded[i].t/90)); m["ok"] != true {
			t.Fatalf("seek: %v", m)
		}
		got := v.settle()
		if len(got) == 0 || got[len(got)-1] != frameOf(i) || got[0]%30 != 0 {
			t.Fatalf("seek to recorded frame %d (clip frame %d): got frames %v", i, frameOf(i), got)
		}
	}
	// Step: the next frame only.
	send(vic, `"op":"step"`)
	if got := v.settle(); len(got) != 1 || got[0] != frameOf(71) {
		t.Fatalf("step: %v, want [%d]", got, frameOf(71))
	}
	// Play a second at 1x: video and audio together.
	send(vic, fmt.Sprintf(`"op":"seek","t":%d`, recorded[0].t/90))
	v.settle()
	audio.n.Store(0)
	send(vic, `"op":"play"`)
	time.Sleep(time.Second)
	send(vic, `"op":"pause"`)
	vf, an := v.settle(), audio.n.Load()
	t.Logf("a second of play: %d frames (%d..%d), %d audio packets", len(vf), vf[0], vf[len(vf)-1], an)
	if len(vf) < 20 || len(vf) > 40 || an < 35 || an > 65 {
		t.Fatalf("a second of play: %d frames, %d audio packets", len(vf), an)
	}
	for i := 1; i < len(vf); i++ {
		if vf[i] != vf[i-1]+1 {
			t.Fatalf("frames out of order: %v", vf)
		}
	}
	// Paused: nothing more.
	time.Sleep(300 * time.Millisecond)
	if got, a := v.take(), audio.n.Load(); len(got) > 0 || a != an {
		t.Fatalf("paused, yet %d frames and %d audio packets came", len(got), a-an)
	}
	// 4x: keyframes only, and no audio.
	send(vic, `"op":"rate","rate":4`)
	send(vic, `"op":"play"`)
	time.Sleep(600 * time.Millisecond)
	send(vic, `"op":"pause"`)
	for _, f := range v.settle() {
		if f%30 != 0 {
			t.Fatalf("4x sent a frame that is not a keyframe: %d", f)
		}
	}
	if a := audio.n.Load(); a != an {
		t.Fatalf("4x played %d audio packets", a-an)
	}

	// Errors.
	if m := send(vic, `"op":"seek","t":1000`); !strings.Contains(fmt.Sprint(m["error"]), "no recording at 1000") {
		t.Fatalf("seek outside: %v", m)
	}
	if m := send(vic, `"op":"rate","rate":20`); m["error"] == nil {
		t.Fatalf("rate 20: %v", m)
	}
	if m := send(vic, `"op":"fly"`); !strings.Contains(fmt.Sprint(m["error"]), "unknown op") {
		t.Fatalf("unknown op: %v", m)
	}
	blind := join("blind", auth.Grants{PublishData: true})
	if m := send(blind, `"op":"play"`); !strings.Contains(fmt.Sprint(m["error"]), "subscrib") {
		t.Fatalf("a viewer without subscribe: %v", m)
	}
	if m := send(vic, `"op":"stop"`); m["ok"] != true {
		t.Fatalf("stop: %v", m)
	}
}
