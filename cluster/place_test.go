package cluster

import (
	"testing"
)

func TestPlace(t *testing.T) {
	// Three regions: eu and us 80 ms apart, eu and asia 150, us and asia 180.
	rtt := map[string]map[string]float64{
		"eu":   {"us": 80, "asia": 150},
		"us":   {"eu": 80, "asia": 180},
		"asia": {"eu": 150, "us": 180},
	}
	mk := func(id string, room int, cpu float64) NodeInfo {
		n := NodeInfo{ID: id, RTT: rtt[id], Load: Load{CPU: cpu}, Rooms: map[string][]Member{}}
		for i := 0; i < room; i++ {
			n.Rooms["r"] = append(n.Rooms["r"], Member{Identity: string(rune('a' + i))})
		}
		return n
	}
	cases := []struct {
		name   string
		nodes  []NodeInfo
		client map[string]float64
		want   string
	}{
		{"empty room, nearest node", []NodeInfo{mk("eu", 0, 0), mk("us", 0, 0), mk("asia", 0, 0)},
			map[string]float64{"eu": 90, "us": 20, "asia": 200}, "us"},
		// The room is on eu; a client 20 ms from us and 95 ms from eu is better
		// served from eu (95/2) than through us (20/2 + 80/2).
		{"room elsewhere, going direct is shorter", []NodeInfo{mk("eu", 4, 0), mk("us", 0, 0), mk("asia", 0, 0)},
			map[string]float64{"eu": 95, "us": 20, "asia": 200}, "eu"},
		// A client next to us (5 ms) and far from eu (150 ms): through us.
		{"room elsewhere, local node is shorter", []NodeInfo{mk("eu", 4, 0), mk("us", 0, 0), mk("asia", 0, 0)},
			map[string]float64{"eu": 150, "us": 5, "asia": 200}, "us"},
		{"no measurements: do not split the room", []NodeInfo{mk("eu", 0, 0), mk("us", 3, 0.5), mk("asia", 0, 0)}, nil, "us"},
		{"equal delay: least loaded", []NodeInfo{mk("eu", 0, 0.6), mk("us", 0, 0.1), mk("asia", 0, 0.3)},
			map[string]float64{"eu": 10, "us": 12, "asia": 11}, "us"},
		{"overloaded node avoided", []NodeInfo{mk("eu", 2, 0.95), mk("us", 0, 0.1), mk("asia", 0, 0.1)},
			map[string]float64{"eu": 10, "us": 40, "asia": 200}, "us"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Place(c.nodes, "r", c.client, 0.85)
			if len(got) == 0 || got[0].Node.ID != c.want {
				t.Fatalf("placed on %+v, want %s", got, c.want)
			}
		})
	}
	// Over its own egress limit, eu (nearest, hosting the room) is offered
	// only after us; under it, eu again.
	busy := []NodeInfo{mk("eu", 2, 0.1), mk("us", 0, 0.1)}
	busy[0].Load.EgressMbps, busy[0].Load.MaxEgressMbps = 900, 800
	if got := Place(busy, "r", map[string]float64{"eu": 10, "us": 40}, 0.85); len(got) != 2 || got[0].Node.ID != "us" {
		t.Fatalf("a node over its egress limit placed first: %+v", got)
	}
	busy[0].Load.EgressMbps = 500
	if got := Place(busy, "r", map[string]float64{"eu": 10, "us": 40}, 0.85); len(got) != 2 || got[0].Node.ID != "eu" {
		t.Fatalf("a node under its egress limit not placed first: %+v", got)
	}
	draining := []NodeInfo{mk("eu", 0, 0), mk("us", 0, 0)}
	draining[0].Draining = true
	if got := Place(draining, "r", nil, 0.85); len(got) != 1 || got[0].Node.ID != "us" {
		t.Fatalf("a draining node was offered: %+v", got)
	}
}

func TestMediaFrame(t *testing.T) {
	b := make([]byte, mediaHeader+12)
	putMediaHeader(b, frameRTP, 7, 2)
	kind, n, layer, rtp, err := parseMediaHeader(b)
	if err != nil || kind != frameRTP || n != 7 || layer != 2 || len(rtp) != 12 {
		t.Fatalf("%d %d %d %d %v", kind, n, layer, len(rtp), err)
	}
	for _, bad := range [][]byte{nil, {1, 0, 0, 0, 1}, append([]byte{1, 0, 0, 0, 1, 9}, make([]byte, 12)...)} {
		if _, _, _, _, err := parseMediaHeader(bad); err == nil {
			t.Errorf("accepted %v", bad)
		}
	}
}
