package cluster

import (
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/protocol"
)

// Participants on three nodes in one room receive each other's video (every
// frame, in order) and data, through node links.
func TestCascadedRoom(t *testing.T) {
	_, a, b, c := clusterOf(t)
	alice := join(t, a.ws, "cascade", "alice")
	bob := join(t, b.ws, "cascade", "bob")
	carol := join(t, c.ws, "cascade", "carol")
	fa, fb, fc := watch(alice), watch(bob), watch(carol)
	aliceCam := publish(t, alice, newVideo(t, "alice-cam"))
	publish(t, bob, newVideo(t, "bob-cam"))

	fc.waitFrames(t, 90, 15*time.Second, "carol (node c) gets alice's and bob's video")
	fb.waitFrames(t, 45, 10*time.Second, "bob (node b) gets alice's video")
	fa.waitFrames(t, 45, 10*time.Second, "alice (node a) gets bob's video")
	if !fa.inOrder(30) || !fb.inOrder(30) {
		t.Fatal("frames arrive out of order or with gaps")
	}
	if len(a.srv.Cluster.Links()) < 2 {
		t.Fatalf("node a has %d links, want 2", len(a.srv.Cluster.Links()))
	}

	// Data from alice reaches carol on another node, with alice as sender.
	if err := alice.SendData([]byte("hello across nodes"), true, true); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-carol.DataIn:
		if string(d.Payload) != "hello across nodes" || d.Header.From != "alice" {
			t.Fatalf("carol got %q from %q", d.Payload, d.Header.From)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("carol got no data message from alice")
	}

	// Alice mutes her camera: carol, on another node, is told.
	if _, err := alice.Request(ctxT(t, 5*time.Second), protocol.Msg{"type": "muteTrack", "trackSid": aliceCam, "muted": true}); err != nil {
		t.Fatal(err)
	}
	m := waitEvent(t, carol, "trackMuted", 5*time.Second)
	if m["muted"] != true {
		t.Fatalf("carol got %v", m)
	}
}
