package integration

import (
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/sfu"
)

// publisherRTT waits for the server's measure of p's publisher round trip
// to fall in [lo, hi] ms.
func waitPublisherRTT(t *testing.T, what string, p func() *sfu.Participant, lo, hi float64) {
	t.Helper()
	var ms float64
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if q := p(); q != nil {
			ms, _ = q.Stats()["publisherRttMs"].(float64)
			if ms >= lo && ms <= hi {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: publisher RTT %.1f ms, want %.0f-%.0f", what, ms, lo, hi)
}

// TestLeanPublisherRTTOfRoomParticipant: a Pion room participant whose
// packets to the server take 50 ms publishes to a lean publisher session.
// Pion answers no RTCP XR; its data channels' SCTP round trips give the
// server the publisher's RTT.
func TestLeanPublisherRTTOfRoomParticipant(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 30*time.Second)
	path := newPath(t, 50*time.Millisecond, 0, 0)
	alice, err := client.Join(ctx, e.ws, e.token("rtt", "alice", all, time.Hour), client.Options{Name: "alice", API: path.api(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(alice.Close)
	v := newVideo("a")
	if _, _, err := alice.Publish(ctx, v.track, "camera"); err != nil {
		t.Fatal(err)
	}
	v.run(t)
	p := e.srv.Manager.Room("rtt").ByIdentity("alice")
	if _, ok := p.RemoteICE(); !ok {
		t.Fatal("alice's publisher side is not a lean publisher session")
	}
	waitPublisherRTT(t, "room participant", func() *sfu.Participant { return p }, 50, 150)
}
