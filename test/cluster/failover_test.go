package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/cluster"
	"github.com/petrel-sfu/petrel/protocol"
)

// A node crashes (no goodbye in Redis, its clients cut off): the others notice
// through the expired heartbeat, its publisher reconnects to the node the
// cluster places it on, and a viewer on another node gets its video again.
func TestNodeLossReconnect(t *testing.T) {
	_, a, b, _ := clusterOf(t)
	v := newVideo(t, "alice-cam")
	alice := join(t, a.ws, "loss", "alice")
	publish(t, alice, v)
	bob := join(t, b.ws, "loss", "bob")
	fb := watch(bob)
	fb.waitFrames(t, 30, 15*time.Second, "bob gets alice's video through the link")

	crashed := time.Now()
	a.crash()
	select {
	case <-alice.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("alice's connection to the crashed node did not end")
	}
	// What the SDK does: ask a surviving node where to go, join there.
	id, ws := place(t, b.url, "loss", nil, "a")
	if id == "a" {
		t.Fatal("placement chose the crashed node")
	}
	alice2 := join(t, ws, "loss", "alice")
	publish(t, alice2, v)
	fb.waitFrames(t, 30, 15*time.Second, "bob gets alice's video after she moved to node "+id)
	t.Logf("alice moved to node %s; bob had video again %.2f s after the crash", id, time.Since(crashed).Seconds())

	waitFor(t, 5*time.Second, "node b notices the loss of node a", func() bool {
		for _, n := range b.srv.Cluster.Nodes() {
			if n.ID == "a" {
				return false
			}
		}
		return true
	})
}

// A drained node asks its clients to reconnect elsewhere; a client that moves
// (joins the named node, then leaves the old one) is seen by a viewer on a
// third node without a frozen frame longer than a second, and the drained
// node ends with no clients.
func TestDrainMovesParticipants(t *testing.T) {
	r, a, b, c := clusterOf(t)
	v := newVideo(t, "alice-cam")
	alice := join(t, a.ws, "drain", "alice")
	publish(t, alice, v)
	join(t, b.ws, "drain", "bob")
	carol := join(t, c.ws, "drain", "carol")
	fc := watch(carol)
	fc.waitFrames(t, 30, 15*time.Second, "carol gets alice's video")

	rdb, err := cluster.Dial(context.Background(), cluster.RedisOptions{Addr: r})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	from := fc.count()
	if err := cluster.NewRegistry(rdb, time.Second).Drain(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, alice, "reconnect", 10*time.Second)
	url, _ := ev["url"].(string)
	if url == "" || url == a.ws {
		t.Fatalf("reconnect hint %v", ev)
	}
	// Make before break, as the SDK does: join the new node, then leave.
	alice2 := join(t, url, "drain", "alice")
	publish(t, alice2, v)
	time.Sleep(500 * time.Millisecond)
	alice.Close()
	fc.waitFrames(t, 60, 15*time.Second, "carol keeps getting alice's video")
	gap := fc.longestGap(from)
	t.Logf("alice moved to %s; longest frame gap at carol %.0f ms", ev["node"], gap.Seconds()*1000)
	if gap > time.Second {
		t.Fatalf("carol's video froze for %s during the move (limit 1 s)", gap)
	}
	waitFor(t, 10*time.Second, "node a has no clients left", func() bool {
		for _, n := range a.srv.Cluster.Nodes() {
			if n.ID == "a" {
				return n.Load.Participants == 0 && n.Draining
			}
		}
		return false
	})
}

func waitEvent(t *testing.T, c *client.Client, typ string, within time.Duration) protocol.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	m, err := c.WaitEvent(ctx, typ)
	if err != nil {
		t.Fatalf("no %s event: %v", typ, err)
	}
	return m
}

// A node that crashes and comes back under the same id before its record
// expires gets a fresh link: the room works again between it and the others.
func TestRestartedNodeRelinks(t *testing.T) {
	r, _, b, c := clusterOf(t)
	bob := join(t, b.ws, "restart", "bob")
	carol := join(t, c.ws, "restart", "carol")
	publish(t, carol, newVideo(t, "carol-cam"))
	fb := watch(bob)
	fb.waitFrames(t, 30, 15*time.Second, "bob gets carol's video")
	c.crash()
	c2 := startNode(t, r, "c") // same id, at once: b still holds c's record and link
	carol2 := join(t, c2.ws, "restart", "carol")
	publish(t, carol2, newVideo(t, "carol-cam-2"))
	fb.waitFrames(t, 30, 15*time.Second, "bob gets carol's video from the restarted node")
}

// During a move both sessions of one identity are in the room on both nodes
// (one local, one a mirror): neither is subscribed to the other's tracks, its
// own camera, which the client would only decode and throw away while the
// move is already doubling its work. Bob, on the new node, gets both.
func TestMoveSessionsDoNotSubscribeToEachOther(t *testing.T) {
	r, a, b, _ := clusterOf(t)
	alice := join(t, a.ws, "self", "alice")
	v := newVideo(t, "alice-cam")
	publish(t, alice, v)
	bob := join(t, b.ws, "self", "bob")
	fb := watch(bob)
	fb.waitFrames(t, 15, 15*time.Second, "bob gets alice's video")

	rdb, err := cluster.Dial(context.Background(), cluster.RedisOptions{Addr: r})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if err := cluster.NewRegistry(rdb, time.Second).Drain(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, alice, "reconnect", 10*time.Second)
	url, _ := ev["url"].(string)
	if url == "" || url == a.ws {
		t.Fatalf("reconnect hint %v", ev)
	}
	alice2 := join(t, url, "self", "alice")
	second := publish(t, alice2, newVideo(t, "alice-cam2"))
	waitFor(t, 10*time.Second, "bob subscribed to alice's second camera", func() bool {
		for {
			select {
			case m := <-bob.Events:
				if m["type"] == "trackSubscribed" && m["trackSid"] == second {
					return true
				}
			default:
				return false
			}
		}
	})
	// Both sessions are still up; give the node link time to mirror each to the other node.
	time.Sleep(1500 * time.Millisecond)
	for name, c := range map[string]*client.Client{"the old session": alice, "the new session": alice2} {
		for done := false; !done; {
			select {
			case m := <-c.Events:
				if m["type"] == "trackSubscribed" {
					t.Errorf("%s of alice was subscribed to %v", name, m)
				}
			default:
				done = true
			}
		}
	}
}
