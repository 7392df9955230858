package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/netem"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/rtc"
)

// The cluster on test hosts: three `petrel serve` processes, each in its
// own network namespace, a fourth namespace for the clients and Redis, and
// Petrel's network emulator on every link between them (netem.Mesh). The
// test process re-runs itself inside the clients' namespace (its Pion
// clients then open their sockets there); the outer run only builds the
// topology and the binary.

const netemChildEnv = "PETREL_CLUSTER_NETEM_CHILD"

// netemTopo is what the outer run hands the run inside the namespace.
type netemTopo struct {
	Bin  string            // the petrel binary
	NS   map[string]string // host label -> namespace
	Addr map[string]string // host label -> address
}

// Emulated one-way delays: nodes 15 ms apart (30 ms RTT), clients 5 ms from
// every node.
const (
	nodeDelay   = 15 * time.Millisecond
	clientDelay = 5 * time.Millisecond
)

func TestClusterOverEmulatedLinks(t *testing.T) {
	sym := func(d time.Duration) netem.Spec {
		return netem.Spec{AB: netem.Params{Delay: d}, BA: netem.Params{Delay: d}}
	}
	inMesh(t, "TestClusterOverEmulatedLinks", []netem.MeshLink{
		{A: "a", B: "b", Spec: sym(nodeDelay)}, {A: "a", B: "c", Spec: sym(nodeDelay)}, {A: "b", B: "c", Spec: sym(nodeDelay)},
		{A: "cl", B: "a", Spec: sym(clientDelay)}, {A: "cl", B: "b", Spec: sym(clientDelay)}, {A: "cl", B: "c", Spec: sym(clientDelay)},
	}, clusterInNamespaces)
}

// inMesh builds hosts a, b, c (nodes) and cl (clients) linked as given,
// then re-runs test name inside cl's namespace, where child runs.
func inMesh(t *testing.T, name string, links []netem.MeshLink, child func(*testing.T, netemTopo)) {
	if env := os.Getenv(netemChildEnv); env != "" {
		var topo netemTopo
		if err := json.Unmarshal([]byte(env), &topo); err != nil {
			t.Fatal(err)
		}
		child(t, topo)
		return
	}
	if err := netem.Available(); err != nil {
		t.Skipf("skipping the cluster over emulated links: %v", err)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed (scripts/install-deps.sh installs Debian's redis-server)")
	}
	m, err := netem.NewMesh(netem.MeshOptions{Name: "cl" + strconv.Itoa(os.Getpid()), Hosts: []string{"a", "b", "c", "cl"}, Links: links})
	if err != nil {
		t.Skipf("skipping: cannot create network namespaces here: %v", err)
	}
	defer m.Close()
	topo := netemTopo{Bin: petrelBinary(t), NS: map[string]string{}, Addr: map[string]string{}}
	for l, h := range m.Hosts {
		topo.NS[l], topo.Addr[l] = h.NS, h.Addr.String()
	}
	env, _ := json.Marshal(topo)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"netns", "exec", topo.NS["cl"], self, "-test.run", "^" + name + "$", "-test.count=1", "-test.v", "-test.timeout=4m"}
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), netemChildEnv+"="+string(env))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if l := sc.Text(); !strings.HasPrefix(l, "=== RUN") {
			t.Log(l)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the run inside the clients' namespace failed: %v (its output is above)", err)
	}
}

// petrelBinary builds the server (or takes PETREL_BIN).
func petrelBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("PETREL_BIN"); b != "" {
		return b
	}
	bin := filepath.Join(t.TempDir(), "petrel")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/petrel-sfu/petrel/cmd/petrel").CombinedOutput()
	if err != nil {
		t.Fatalf("go build petrel: %v\n%s", err, out)
	}
	return bin
}

// procNode is a `petrel serve` process in a namespace.
type procNode struct {
	id, url, ws, logf string
	cmd               *exec.Cmd
}

func startProcNode(t *testing.T, topo netemTopo, id, redis string) *procNode {
	t.Helper()
	addr := topo.Addr[id]
	dir := t.TempDir()
	cfg := fmt.Sprintf(`http: "%[1]s:7880"
api_key: %[2]s
log_level: info
rtc: {node_ip: "%[1]s", udp_port: 0, tcp_port: -1}
turn: {enabled: false}
webtransport: {enabled: false}
admin: {allow_remote: true}
cluster: {redis: "%[3]s", node_id: %[4]s, url: "http://%[1]s:7880", heartbeat: 200ms, node_ttl: 1500ms, drain_grace: 20s, max_cpu: 0}
`, addr, apiKey, redis, id)
	if err := os.WriteFile(filepath.Join(dir, "petrel.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	n := &procNode{id: id, url: "http://" + addr + ":7880", ws: "ws://" + addr + ":7880/v1/rtc", logf: filepath.Join(dir, "node.log")}
	logf, err := os.Create(n.logf)
	if err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command("ip", "netns", "exec", topo.NS[id], topo.Bin, "serve", "--config", filepath.Join(dir, "petrel.yaml"))
	n.cmd.Env = append(os.Environ(), "PETREL_API_SECRET="+apiSecret)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			b, _ := os.ReadFile(n.logf)
			t.Logf("node %s log (last 3 KB):\n%s", id, tail(b, 3000))
		}
	})
	return n
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// kill ends the node as a crash would (ip exec()s into petrel: same pid).
func (n *procNode) kill() {
	if n.cmd.ProcessState == nil {
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
	}
}

// metric sums the samples of a metric whose labels contain every pair given.
func (n *procNode) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(n.url + "/metrics")
	if err != nil {
		t.Fatalf("metrics of node %s: %v", n.id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	re := regexp.MustCompile(`^` + name + `\{([^}]*)\} (\S+)$`)
	for _, l := range strings.Split(string(b), "\n") {
		mm := re.FindStringSubmatch(l)
		if mm == nil {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(mm[1], labels[i]+`="`+labels[i+1]+`"`) {
				ok = false
			}
		}
		if ok {
			v, _ := strconv.ParseFloat(mm[2], 64)
			sum += v
		}
	}
	return sum
}

// nodesSeen is how many live nodes n lists.
func (n *procNode) nodesSeen() int {
	resp, err := http.Get(n.url + "/v1/cluster/nodes")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var out struct {
		Nodes []struct{ ID string } `json:"nodes"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return len(out.Nodes)
}

// joinAt joins a node as a client with candidates on the clients' address.
func joinAt(t *testing.T, api *webrtc.API, ws, room, identity string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Join(ctx, ws, token(t, room, identity), client.Options{Name: identity, API: api})
	if err != nil {
		t.Fatalf("join %s at %s: %v", identity, ws, err)
	}
	t.Cleanup(c.Close)
	return c
}

// sentTo is the RTP packets node n sent over its link to peer.
func sentTo(t *testing.T, n *procNode, peer string) float64 {
	return n.metric(t, "petrel_cluster_link_packets_total", "peer", peer, "direction", "out")
}

// clusterInNamespaces runs inside the clients' namespace.
func clusterInNamespaces(t *testing.T, topo netemTopo) {
	cl := topo.Addr["cl"]
	// Protected mode refuses clients from other hosts when Redis has no
	// password; the nodes are other hosts here.
	redis := startRedisWith(t, cl, func(port int) []string {
		return []string{"--port", strconv.Itoa(port), "--protected-mode", "no"}
	})
	a := startProcNode(t, topo, "a", redis)
	b := startProcNode(t, topo, "b", redis)
	c := startProcNode(t, topo, "c", redis)
	waitFor(t, 30*time.Second, "three nodes in namespaces see each other", func() bool {
		return a.nodesSeen() == 3 && b.nodesSeen() == 3 && c.nodesSeen() == 3
	})
	// Candidates on the clients' address, on any of its TUN devices (the
	// loopback API's filter keeps only "lo").
	api := client.LoopbackAPI(func(se *webrtc.SettingEngine) {
		rtc.OnlyAddress(se, net.ParseIP(cl))
		se.SetInterfaceFilter(func(string) bool { return true })
	})

	// Participants on three nodes decode each other.
	alice := joinAt(t, api, a.ws, "netem", "alice")
	bob := joinAt(t, api, b.ws, "netem", "bob")
	carol := joinAt(t, api, c.ws, "netem", "carol")
	fa, fb, fc := watch(alice), watch(bob), watch(carol)
	aliceCam := newVideo(t, "alice-cam")
	publish(t, alice, aliceCam)
	publish(t, bob, newVideo(t, "bob-cam"))
	fc.waitFrames(t, 90, 30*time.Second, "carol (node c) gets alice's (node a) and bob's (node b) video")
	fb.waitFrames(t, 45, 20*time.Second, "bob (node b) gets alice's video")
	fa.waitFrames(t, 45, 20*time.Second, "alice (node a) gets bob's video")
	if !fa.inOrder(30) || !fb.inOrder(30) {
		t.Fatal("frames arrive out of order or with gaps over the emulated links")
	}
	if rtt := a.metric(t, "petrel_cluster_link_rtt_seconds", "peer", "b"); rtt < 2*nodeDelay.Seconds() {
		t.Errorf("link a-b RTT %.1f ms, the emulated one is %.0f ms", rtt*1000, 2*nodeDelay.Seconds()*1000)
	} else {
		t.Logf("link a-b RTT %.1f ms (emulated %.0f ms)", rtt*1000, 2*nodeDelay.Seconds()*1000)
	}

	// Only what a receiver needs crosses: with Last-N 1 carol shows one
	// video, and only one of nodes a and b keeps sending to node c.
	if _, err := carol.Request(ctxT(t, 10*time.Second), protocol.Msg{"type": "setLastN", "n": 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // demand reaches the sending nodes
	a0, b0, fa0 := sentTo(t, a, "c"), sentTo(t, b, "c"), a.metric(t, "petrel_cluster_link_filtered_total", "peer", "c")+b.metric(t, "petrel_cluster_link_filtered_total", "peer", "c")
	time.Sleep(3 * time.Second)
	da, db := sentTo(t, a, "c")-a0, sentTo(t, b, "c")-b0
	filtered := a.metric(t, "petrel_cluster_link_filtered_total", "peer", "c") + b.metric(t, "petrel_cluster_link_filtered_total", "peer", "c") - fa0
	t.Logf("Last-N 1 at carol, 3 s: node a sent %.0f packets to c, node b %.0f; %.0f packets not sent (no receiver needed them)", da, db, filtered)
	if min(da, db) > 0.1*max(da, db) || max(da, db) < 60 || filtered < 60 {
		t.Fatalf("with Last-N 1 at node c's only receiver, one sender should carry ~all and the other ~nothing: a %.0f, b %.0f, filtered %.0f", da, db, filtered)
	}
	if _, err := carol.Request(ctxT(t, 10*time.Second), protocol.Msg{"type": "setLastN", "n": 0}); err != nil {
		t.Fatal(err)
	}
	fc.waitFrames(t, 90, 20*time.Second, "carol gets both videos again with Last-N back to all")

	// Drain node a: alice moves (make before break, as the SDK does); carol
	// sees alice's video without a frozen frame longer than a second.
	from := fc.count()
	out, err := exec.Command(topo.Bin, "cluster", "drain", "a", "--redis", redis, "--wait", "0").CombinedOutput()
	if err != nil {
		t.Fatalf("petrel cluster drain a: %v: %s", err, out)
	}
	ev := waitEvent(t, alice, "reconnect", 15*time.Second)
	url, _ := ev["url"].(string)
	if url == "" || url == a.ws {
		t.Fatalf("reconnect hint %v", ev)
	}
	alice2 := joinAt(t, api, url, "netem", "alice")
	publish(t, alice2, aliceCam)
	time.Sleep(time.Second)
	alice.Close()
	fc.waitFrames(t, 120, 20*time.Second, "carol keeps getting video after alice moved")
	gap := fc.longestGapOf(from, 'a')
	t.Logf("drain: alice moved to node %s; longest gap in her video at carol %.0f ms", ev["node"], gap.Seconds()*1000)
	if gap > time.Second {
		t.Fatalf("carol's view of alice froze for %s during the drain (limit 1 s)", gap)
	}

	// Kill node b: bob's connection ends, he asks a surviving node where to
	// go and republishes; carol gets his video again within a few seconds.
	bobCam := newVideo(t, "bob-cam-2")
	killed, before := time.Now(), fc.count()
	b.kill()
	select {
	case <-bob.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("bob's connection to the killed node did not end")
	}
	id, ws := place(t, c.url, "netem", nil, "b", "a")
	bob2 := joinAt(t, api, ws, "netem", "bob")
	publish(t, bob2, bobCam)
	waitFor(t, 30*time.Second, "carol gets bob's video from his new node", func() bool { return fc.framesOf(before, 'b') >= 30 })
	resumed := time.Since(killed)
	t.Logf("kill: bob resumed on node %s; carol had 30 frames of his new video %.1f s after node b was killed", id, resumed.Seconds())
	if resumed > 10*time.Second {
		t.Errorf("resume after a node kill took %.1f s (want a few seconds)", resumed.Seconds())
	}
	waitFor(t, 10*time.Second, "node c notices the loss of node b", func() bool { return c.nodesSeen() == 2 })
}

// longestGapOf is the longest time between frames of one source (by tag)
// from the i-th frame on.
func (f *frames) longestGapOf(from int, tag byte) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var g time.Duration
	var prev time.Time
	for i := from; i < len(f.at); i++ {
		if f.tag[i] != tag {
			continue
		}
		if !prev.IsZero() {
			g = max(g, f.at[i].Sub(prev))
		}
		prev = f.at[i]
	}
	return g
}

// framesOf counts the frames of one source (by tag) from the i-th frame on.
func (f *frames) framesOf(from int, tag byte) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for i := from; i < len(f.tag); i++ {
		if f.tag[i] == tag {
			n++
		}
	}
	return n
}
