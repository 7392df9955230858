package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/cluster"
	"github.com/petrel-sfu/petrel/netem"
	"github.com/petrel-sfu/petrel/rtc"
)

// Re-placement of a growing room over emulated regions: nodes a, b, c with
// round trips of 30 ms (a-b), 80 ms (b-c) and 150 ms (a-c) between them, as
// in bench/cluster/regions. Participants tell the cluster their round trips
// to the nodes of the benchmark's regions. Alice (region a) and Bob (region
// b) share node a; when Carol (region c) joins, the room is cheaper on node
// b (43 ms expected delay against 52 ms on a), so Carol is placed there and
// Alice and Bob are asked to move. Alice moves as the SDK does (joins node b,
// then leaves a) and keeps receiving Bob's video without a freeze longer
// than a second.
func TestReplacementOverEmulatedRegions(t *testing.T) {
	sym := func(d time.Duration) netem.Spec {
		return netem.Spec{AB: netem.Params{Delay: d}, BA: netem.Params{Delay: d}}
	}
	ms := time.Millisecond
	inMesh(t, "TestReplacementOverEmulatedRegions", []netem.MeshLink{
		{A: "a", B: "b", Spec: sym(15 * ms)}, {A: "b", B: "c", Spec: sym(40 * ms)}, {A: "a", B: "c", Spec: sym(75 * ms)},
		{A: "cl", B: "a", Spec: sym(clientDelay)}, {A: "cl", B: "b", Spec: sym(clientDelay)}, {A: "cl", B: "c", Spec: sym(clientDelay)},
	}, replaceInNamespaces)
}

// The benchmark's client round trips by region (ms).
var regionRTT = map[string]map[string]float64{
	"a": {"a": 10, "b": 35, "c": 110},
	"b": {"a": 35, "b": 10, "c": 85},
	"c": {"a": 110, "b": 85, "c": 10},
}

func replaceInNamespaces(t *testing.T, topo netemTopo) {
	redis := startRedisWith(t, topo.Addr["cl"], func(port int) []string {
		return []string{"--port", strconv.Itoa(port), "--protected-mode", "no"}
	})
	a := startProcNode(t, topo, "a", redis)
	startProcNode(t, topo, "b", redis)
	startProcNode(t, topo, "c", redis)
	rdb, err := cluster.Dial(context.Background(), cluster.RedisOptions{Addr: redis})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	reg := cluster.NewRegistry(rdb, time.Second)
	// Placement needs the nodes' round trips to each other (HTTP probes).
	waitFor(t, 30*time.Second, "every node has measured its round trips to the others", func() bool {
		live, _, err := reg.Nodes(context.Background())
		if err != nil || len(live) != 3 {
			return false
		}
		for _, n := range live {
			if len(n.RTT) < 2 {
				return false
			}
		}
		return true
	})
	api := client.LoopbackAPI(func(se *webrtc.SettingEngine) {
		rtc.OnlyAddress(se, net.ParseIP(topo.Addr["cl"]))
		se.SetInterfaceFilter(func(string) bool { return true })
	})
	const room = "grow"
	// Alice first: her nearest node. Bob next, asking at once (before
	// Alice's node has published her membership): he joins her node, the
	// room is not split (17.5 ms there against 20 ms split).
	nodeA, wsA, _ := placeAs(t, a.url, room, "alice", regionRTT["a"])
	nodeB, wsB, _ := placeAs(t, a.url, room, "bob", regionRTT["b"])
	if nodeA != "a" || nodeB != "a" {
		t.Fatalf("alice placed on %s, bob on %s: want both on a", nodeA, nodeB)
	}
	alice := joinAt(t, api, wsA, room, "alice")
	bob := joinAt(t, api, wsB, room, "bob")
	aliceCam, bobCam := newVideo(t, "alice-cam"), newVideo(t, "bob-cam")
	fa := &frames{}
	watchInto(alice, fa)
	publish(t, alice, aliceCam)
	publish(t, bob, bobCam)
	fa.waitFrames(t, 30, 20*time.Second, "alice gets bob's video")
	waitFor(t, 10*time.Second, "the room's membership in Redis lists alice and bob on a", func() bool {
		m, _ := reg.Room(context.Background(), room)
		return m["alice"] == "a" && m["bob"] == "a"
	})

	// Carol from region c: the room moves to node b.
	nodeC, wsC, moved := placeAs(t, a.url, room, "carol", regionRTT["c"])
	if nodeC != "b" || moved != 2 {
		t.Fatalf("carol placed on %s with %d moves, want b and 2 (alice and bob to b)", nodeC, moved)
	}
	carol := joinAt(t, api, wsC, room, "carol")
	fc := watch(carol)
	evA := waitEvent(t, alice, "reconnect", 10*time.Second)
	evB := waitEvent(t, bob, "reconnect", 10*time.Second)
	for _, ev := range []map[string]any{evA, evB} {
		if ev["node"] != "b" || ev["reason"] != "placement" {
			t.Fatalf("reconnect hint %v, want node b for placement", ev)
		}
	}
	// Make before break, as the SDK does: join the new node, publish, leave.
	from := fa.count()
	moveAt := time.Now()
	alice2 := joinAt(t, api, evA["url"].(string), room, "alice")
	watchInto(alice2, fa)
	publish(t, alice2, aliceCam)
	bob2 := joinAt(t, api, evB["url"].(string), room, "bob")
	publish(t, bob2, bobCam)
	time.Sleep(time.Second)
	alice.Close()
	bob.Close()
	waitFor(t, 20*time.Second, "alice gets 90 frames of bob's video after the move", func() bool { return fa.framesOf(from, 'b') >= 90 })
	gap := fa.longestGapOf(from, 'b')
	t.Logf("re-placement: alice and bob moved to node b; longest gap in bob's video at alice %.0f ms (%.1f s after the move began)", gap.Seconds()*1000, time.Since(moveAt).Seconds())
	if gap > time.Second {
		t.Fatalf("alice's view of bob froze for %s during the move (limit 1 s)", gap)
	}
	waitFor(t, 20*time.Second, "carol gets alice's and bob's video", func() bool { return fc.framesOf(0, 'a') >= 30 && fc.framesOf(0, 'b') >= 30 })
	waitFor(t, 10*time.Second, "the room's membership in Redis lists everyone on b", func() bool {
		m, _ := reg.Room(context.Background(), room)
		return m["alice"] == "b" && m["bob"] == "b" && m["carol"] == "b"
	})
	// Dan from region a right away: alice moved moments ago and is not
	// moved again (at most one move per participant in 30 s).
	if _, _, moved := placeAs(t, a.url, room, "dan", regionRTT["a"]); moved != 0 {
		t.Fatalf("a join right after the move moved %d participants again", moved)
	}
	// A placement with somebody else's token is refused.
	b, _ := json.Marshal(map[string]any{"room": "other", "rtt": regionRTT["a"], "token": token(t, room, "eve")})
	resp, err := http.Post(a.url+"/v1/cluster/place", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("placement with a token for another room: %s, want 401", resp.Status)
	}
}

// placeAs asks a node where identity should join, with its token (the
// placement is recorded and may re-place the room); moved is how many
// others it moved.
func placeAs(t *testing.T, nodeURL, room, identity string, rtt map[string]float64) (id, ws string, moved int) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"room": room, "rtt": rtt, "token": token(t, room, identity)})
	resp, err := http.Post(nodeURL+"/v1/cluster/place", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Node  string `json:"node"`
		WS    string `json:"ws"`
		Moved int    `json:"moved"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("place %s: %s", identity, resp.Status)
	}
	return out.Node, out.WS, out.Moved
}
