package cluster

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// simulcast publishes a three-layer VP8 track from inside node n's server (as
// the server's own camera would) and feeds it at 30 frames/s.
func simulcast(t *testing.T, n *node, room, identity string) {
	p, err := n.srv.Manager.JoinLocal(sfu.LocalOptions{Room: room, Identity: identity, Name: identity,
		Grants: auth.Grants{Publish: true, PublishData: true, Subscribe: true}, Origin: sfu.Server})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close("done") })
	base, err := p.PublishLocal(sfu.LocalTrackOptions{
		Info:  protocol.TrackInfo{Kind: "video", Source: "camera", SSRC: 1000, Width: 1280, Height: 720},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000, PayloadType: 96},
	})
	if err != nil {
		t.Fatal(err)
	}
	layers := []*sfu.LocalTrack{base}
	for i, rid := range []string{"h", "f"} {
		lt, err := base.AddLayer(rid, uint32(1001+i))
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, lt)
	}
	var key [3]atomic.Bool
	for i, lt := range layers {
		lt.OnKeyframeRequest(func() { key[i].Store(true) })
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(33 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for i, lt := range layers {
				payload := make([]byte, 300*(i+1))
				payload[0] = 0x10 // VP8 descriptor: start of partition 0
				payload[1] = 0x01 // inter frame
				if n%60 == 0 || key[i].Swap(false) {
					payload[1] = 0x00
				}
				payload[len(payload)-1] = byte(n)
				_ = lt.WritePacket(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: uint16(n),
					Timestamp: uint32(n * 3000), SSRC: uint32(1000 + i), Marker: true}, Payload: payload})
			}
		}
	}()
}

// Only the simulcast layers a receiver on the other node needs cross the
// link: a viewer asking for low quality gets layer 0 only over the link; when
// it asks for high quality, the top layer crosses too. A node with no viewer of
// the track gets nothing of it.
func TestOnlyNeededLayersCross(t *testing.T) {
	_, a, b, c := clusterOf(t)
	simulcast(t, a, "layers", "camera")
	viewer := join(t, b.ws, "layers", "viewer")
	// A participant on c whose tile is hidden (paused): the room spans c, but
	// the camera's video is not needed there.
	idle := join(t, c.ws, "layers", "idle")

	var tr = <-viewer.Tracks
	go drainTrack(tr.Remote)
	link := func(from *node, to string) [3]uint64 {
		l := from.srv.Cluster.Links()[to]
		if l == nil {
			return [3]uint64{}
		}
		return l.Stats().SentLayer
	}
	waitFor(t, 10*time.Second, "layer 0 crosses a->b", func() bool { return link(a, "b")[0] > 30 })

	settings := func(quality string) {
		ctx := ctxT(t, 5*time.Second)
		if _, err := viewer.Request(ctx, protocol.Msg{"type": "updateTrackSettings", "trackSid": tr.TrackSid, "quality": quality}); err != nil {
			t.Fatal(err)
		}
	}
	settings("low")
	time.Sleep(time.Second) // demand travels: room decision, link sync, want
	before := link(a, "b")
	time.Sleep(2 * time.Second)
	after := link(a, "b")
	d := [3]uint64{after[0] - before[0], after[1] - before[1], after[2] - before[2]}
	t.Logf("low quality: packets per layer over a->b in 2 s: %v", d)
	// Counts, not rates: a loaded machine slows the source, not the selection.
	if d[0] < 10 || d[1] != 0 || d[2] != 0 {
		t.Fatalf("low quality viewer: layers crossing the link %v, want layer 0 only", d)
	}

	settings("high")
	time.Sleep(time.Second)
	before = link(a, "b")
	time.Sleep(2 * time.Second)
	after = link(a, "b")
	d = [3]uint64{after[0] - before[0], after[1] - before[1], after[2] - before[2]}
	t.Logf("high quality: packets per layer over a->b in 2 s: %v", d)
	if d[2] < 10 || d[2] < d[0]/2 {
		t.Fatalf("high quality viewer: layers crossing the link %v, want layer 2", d)
	}

	itr := <-idle.Tracks
	go drainTrack(itr.Remote)
	if _, err := idle.Request(ctxT(t, 5*time.Second), protocol.Msg{"type": "updateTrackSettings", "trackSid": itr.TrackSid, "paused": true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	before = link(a, "c")
	time.Sleep(2 * time.Second)
	after = link(a, "c")
	d = [3]uint64{after[0] - before[0], after[1] - before[1], after[2] - before[2]}
	t.Logf("paused viewer on c: packets per layer over a->c in 2 s: %v", d)
	if d != [3]uint64{} {
		t.Fatalf("a paused viewer's node still gets %v", d)
	}
}
