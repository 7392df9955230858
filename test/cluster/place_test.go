package cluster

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// Placement over HTTP: a client close to every node joins the node that
// already hosts its room (the room is not split); a client far from that node
// goes where its measured delay is lowest; a lost node can be excluded; bad
// requests get a clear 400.
func TestPlacementEndpoint(t *testing.T) {
	_, a, b, _ := clusterOf(t)
	join(t, b.ws, "p", "bob")
	waitFor(t, 5*time.Second, "b's record lists room p", func() bool {
		for _, n := range a.srv.Cluster.Nodes() {
			if n.ID == "b" {
				return len(n.Rooms["p"]) == 1
			}
		}
		return false
	})
	if id, _ := place(t, a.url, "p", map[string]float64{"a": 5, "b": 9, "c": 5}); id != "b" {
		t.Fatalf("near every node: placed on %s, want b (hosts the room)", id)
	}
	if id, _ := place(t, a.url, "p", map[string]float64{"a": 3, "b": 400, "c": 300}); id != "a" {
		t.Fatalf("far from b: placed on %s, want a (nearest, and one loopback hop from b)", id)
	}
	if id, _ := place(t, a.url, "p", map[string]float64{"a": 5, "b": 9, "c": 5}, "b"); id == "b" {
		t.Fatal("placed on the excluded node")
	}
	for _, body := range []string{"", "{", `{"room":""}`, `{"room":"` + strings.Repeat("x", 200) + `"}`} {
		resp, err := http.Post(a.url+"/v1/cluster/place", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("place %q: %s, want 400", body, resp.Status)
		}
	}
	// A link request without the cluster's token is refused.
	resp, err := http.Post(a.url+"/v1/cluster/link", "application/json", strings.NewReader(`{"from":"x","sdp":"v=0"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unauthenticated link: %s, want 401", resp.Status)
	}
}
