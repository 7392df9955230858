package integration

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// countingSink records what a sink sees of a publication.
type countingSink struct {
	packets   atomic.Int64
	keyframes atomic.Int64
	mu        sync.Mutex
	last      []byte
}

func (s *countingSink) WriteRTP(p *sfu.Packet) {
	s.packets.Add(1)
	if p.Keyframe {
		s.keyframes.Add(1)
	}
	s.mu.Lock()
	s.last = append(s.last[:0], p.Payload...)
	s.mu.Unlock()
}

// A track fed from inside the server (how cameras and WebTransport publishers
// enter a room) reaches a WebRTC subscriber like any other; its keyframe
// requests reach the feeder; a WebRTC publisher's track reaches a Go sink; data
// crosses between a local participant and a client in both directions.
func TestLocalParticipantPublishesAndReceives(t *testing.T) {
	e := start(t)
	cam, err := e.srv.Manager.JoinLocal(sfu.LocalOptions{Room: "local", Identity: "camera-1", Name: "Door",
		Grants: auth.Grants{Publish: true, PublishData: true}, Origin: sfu.Server})
	if err != nil {
		t.Fatal(err)
	}
	lt, err := cam.PublishLocal(sfu.LocalTrackOptions{
		Info:  protocol.TrackInfo{Kind: "video", Source: "camera", SSRC: 0x1234},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000, PayloadType: 96},
	})
	if err != nil {
		t.Fatal(err)
	}
	var keyRequests atomic.Int64
	lt.OnKeyframeRequest(func() { keyRequests.Add(1) })
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(33 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			payload := make([]byte, 800)
			payload[0] = 0x10 // VP8 descriptor: start of partition 0
			payload[1] = 0x01 // inter frame
			if n%30 == 0 {
				payload[1] = 0x00
			}
			_ = lt.WritePacket(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: uint16(n), Timestamp: uint32(n * 3000), SSRC: 0x1234, Marker: true}, Payload: payload})
		}
	}()

	viewer := e.join("local", "viewer")
	tr := waitTrack(t, viewer, 10*time.Second)
	pkts := readPackets(t, tr.Remote, 20, 10*time.Second)
	if tr.Remote.Codec().MimeType != webrtc.MimeTypeVP8 {
		t.Fatalf("codec %s", tr.Remote.Codec().MimeType)
	}
	for i := 1; i < len(pkts); i++ {
		if pkts[i].SequenceNumber != pkts[i-1].SequenceNumber+1 {
			t.Fatalf("sequence gap %d -> %d", pkts[i-1].SequenceNumber, pkts[i].SequenceNumber)
		}
	}
	if keyRequests.Load() == 0 {
		t.Error("a new subscriber's keyframe request never reached the local track's owner")
	}

	// The other direction: a WebRTC publisher's track into a sink.
	pubc := e.join("local", "speaker")
	v := newVideo("v")
	if _, _, err := pubc.Publish(ctxT(t, 10*time.Second), v.track, "camera"); err != nil {
		t.Fatal(err)
	}
	v.run(t)
	var pub *sfu.Publication
	deadline := time.Now().Add(10 * time.Second)
	for pub == nil && time.Now().Before(deadline) {
		if p := e.srv.Manager.Room("local").ByIdentity("speaker"); p != nil {
			for _, x := range p.Publications() {
				pub = x
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pub == nil {
		t.Fatal("speaker's track never published")
	}
	sink := &countingSink{}
	remove := pub.AddSink(sink)
	for time.Now().Before(deadline) && (sink.packets.Load() < 30 || sink.keyframes.Load() == 0) {
		time.Sleep(20 * time.Millisecond)
	}
	if sink.packets.Load() < 30 || sink.keyframes.Load() == 0 {
		t.Fatalf("sink got %d packets, %d keyframe packets", sink.packets.Load(), sink.keyframes.Load())
	}
	remove()
	n := sink.packets.Load()
	time.Sleep(200 * time.Millisecond)
	if got := sink.packets.Load(); got > n+1 {
		t.Fatalf("removed sink still receives: %d -> %d", n, got)
	}

	// Data: client -> local participant (addressed), local -> client.
	got := make(chan []byte, 1)
	cam.OnData(func(reliable bool, h sfu.DataHeader, payload []byte) {
		if h.From == "viewer" && reliable {
			select {
			case got <- append([]byte(nil), payload...):
			default:
			}
		}
	})
	if err := viewer.SendData([]byte("ptz left"), true, true, "camera-1"); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if string(b) != "ptz left" {
			t.Fatalf("local participant got %q", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("data message never reached the local participant")
	}
	cam.PublishData(true, "status", []string{"viewer"}, []byte("moved"))
	select {
	case d := <-viewer.DataIn:
		if !bytes.Equal(d.Payload, []byte("moved")) || d.Header.From != "camera-1" || d.Header.Topic != "status" {
			t.Fatalf("viewer got %+v %q", d.Header, d.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("local participant's data never reached the viewer")
	}

	// A participant with an audience: only the viewer gets its track.
	pb, err := e.srv.Manager.JoinLocal(sfu.LocalOptions{Room: "local", Identity: "playback-viewer", Audience: []string{"viewer"},
		Grants: auth.Grants{Publish: true, PublishData: true}, Origin: sfu.Server})
	if err != nil {
		t.Fatal(err)
	}
	for len(pubc.Tracks) > 0 {
		<-pubc.Tracks
	}
	plt, err := pb.PublishLocal(sfu.LocalTrackOptions{
		Info:  protocol.TrackInfo{Kind: "video", Source: "playback", SSRC: 0x99},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000, PayloadType: 96},
	})
	if err != nil {
		t.Fatal(err)
	}
	evCtx := ctxT(t, 5*time.Second)
	for {
		ev, err := viewer.WaitEvent(evCtx, "trackPublished")
		if err != nil {
			t.Fatalf("audience member not told of the track: %v", err)
		}
		if tr, _ := ev["track"].(map[string]any); tr != nil && tr["sid"] == plt.Sid() {
			break
		}
	}
	select {
	case tr := <-pubc.Tracks:
		t.Fatalf("a participant outside the audience got track %s", tr.TrackSid)
	case <-time.After(time.Second):
	}
	pb.Close("done")

	// Closing the local track unpublishes it for the room.
	lt.Close()
	if _, err := viewer.WaitEvent(ctxT(t, 5*time.Second), "trackUnpublished"); err != nil {
		t.Fatalf("no trackUnpublished after Close: %v", err)
	}
}
