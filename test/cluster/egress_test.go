package cluster

import (
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/config"
)

// A node's egress is measured from the bytes it sends (one 600 kbit/s camera
// to three receivers: about 1.8 Mbit/s in its record), and over
// cluster.max_egress_mbps it sheds: its room's Last-N goes down a step.
func TestEgressSheds(t *testing.T) {
	r := startRedis(t)
	a := startNodeWith(t, "a", func(c *config.Config) {
		c.Cluster.Redis = r
		c.Cluster.MaxEgressMbps = 1
	}, nil)
	v := newVideo(t, "alice-cam")
	alice := join(t, a.ws, "egress", "alice")
	publish(t, alice, v)
	var seen []*frames
	for _, id := range []string{"bob", "carol", "dave"} {
		seen = append(seen, watch(join(t, a.ws, "egress", id)))
	}
	for _, f := range seen {
		f.waitFrames(t, 30, 15*time.Second, "a receiver gets alice's video")
	}
	var mbps float64
	waitFor(t, 10*time.Second, "node a's record to show its egress over 1 Mbit/s", func() bool {
		for _, n := range a.srv.Cluster.Nodes() {
			if n.ID == "a" {
				mbps = n.Load.EgressMbps
			}
		}
		return mbps > 1
	})
	if mbps > 10 {
		t.Fatalf("egress %.1f Mbit/s for one 600 kbit/s camera to three receivers", mbps)
	}
	room := a.srv.Manager.Room("egress")
	waitFor(t, 10*time.Second, "the room's Last-N to go down a step (3 others to 2)", func() bool { return room.LastN() == 2 })
	t.Logf("egress %.2f Mbit/s over the 1 Mbit/s limit: last-n %d", mbps, room.LastN())
}
