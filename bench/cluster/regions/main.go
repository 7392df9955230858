// Command regions measures end-to-end delay in a three-region cluster with
// placement by measured round-trip time against placement on the node of the
// client's declared region (bench/cluster/regions.sh).
//
// The topology is a netem.Mesh: three node hosts (na, nb, nc: one `petrel
// serve` each, Redis beside nb) and three client hosts (ra, rb, rc: one
// client process each, run inside the host's namespace by this program).
// Node-to-node round trips are 30 ms (a-b), 80 ms (b-c) and 150 ms (a-c);
// a client is 10 ms from its region's node and reaches other regions' nodes
// directly over paths that need not pass through its own node (a to c 110 ms,
// shorter than the 150 ms between nodes a and c: a poor backbone between two
// data centres, the case Jitsi's Octo trial measured).
//
// Every participant publishes a synthetic VP8 stream (loadtest.Synthetic:
// send time in each packet) and receives everyone; receivers record the
// one-way delay of each frame (all processes share the machine's clock).
//
//	go run ./bench/cluster/regions -bin ./petrel -runs 3
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/loadtest"
	"github.com/petrel-sfu/petrel/netem"
	"github.com/petrel-sfu/petrel/rtc"
)

const apiKey = "benchkey"

var apiSecret = strings.Repeat("r", 40)

var regions = []string{"a", "b", "c"}

// nodeRTT and clientRTT are the emulated round trips in ms.
var nodeRTT = map[string]float64{"ab": 30, "bc": 80, "ac": 150}

var clientRTT = map[string]float64{ // client region + node region
	"aa": 10, "ab": 35, "ac": 110,
	"ba": 35, "bb": 10, "bc": 85,
	"ca": 110, "cb": 85, "cc": 10,
}

// shapes are the rooms measured: the regions of the participants, in the
// order they join.
var shapes = map[string][]string{
	"call":  {"a", "c"},
	"room6": {"a", "b", "c", "a", "b", "c"},
}

type result struct {
	Run       int                `json:"run"`
	Shape     string             `json:"shape"`
	Mode      string             `json:"mode"`
	Placement []string           `json:"placement"` // "<region>@<node>" in join order, once the room is complete (after any re-placement)
	Joined    []string           `json:"joined"`    // "<region>@<node>" where each joined
	P50       float64            `json:"p50"`
	P90       float64            `json:"p90"`
	Mean      float64            `json:"mean"` // what placement minimizes: the mean over pairs of participants
	Frames    int                `json:"frames"`
	ByPair    map[string]float64 `json:"byPair"` // "<from region>-><to region>" -> p50
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "client" {
		os.Exit(clientMain(os.Args[2:]))
	}
	bin := flag.String("bin", "./petrel", "petrel binary")
	runs := flag.Int("runs", 3, "runs (each measures every shape in both modes, interleaved)")
	window := flag.Duration("window", 10*time.Second, "measured window")
	warm := flag.Duration("warmup", 4*time.Second, "wait after everyone joined")
	samples := flag.String("samples", "", "write every delay sample (ms) of the last run's modes here, for the plot")
	flag.Parse()
	if err := bench(*bin, *runs, *window, *warm, *samples); err != nil {
		fmt.Fprintln(os.Stderr, "bench/cluster/regions:", err)
		os.Exit(1)
	}
}

func oneWay(rtt float64) time.Duration { return time.Duration(rtt / 2 * float64(time.Millisecond)) }

func bench(bin string, runs int, window, warm time.Duration, samplesFile string) error {
	var links []netem.MeshLink
	sym := func(a, b string, rtt float64) netem.MeshLink {
		p := netem.Params{Delay: oneWay(rtt)}
		return netem.MeshLink{A: a, B: b, Spec: netem.Spec{AB: p, BA: p}}
	}
	for pair, rtt := range nodeRTT {
		links = append(links, sym("n"+pair[:1], "n"+pair[1:], rtt))
	}
	for pair, rtt := range clientRTT {
		links = append(links, sym("r"+pair[:1], "n"+pair[1:], rtt))
	}
	m, err := netem.NewMesh(netem.MeshOptions{Name: "rg" + strconv.Itoa(os.Getpid()),
		Hosts: []string{"na", "nb", "nc", "ra", "rb", "rc"}, Links: links})
	if err != nil {
		return err
	}
	defer m.Close()
	addr := func(h string) string { return m.Hosts[h].Addr.String() }
	tmp, err := os.MkdirTemp("", "regions")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	// Redis beside node b (the middle region).
	redisAddr := net.JoinHostPort(addr("nb"), "6390")
	redis := exec.Command("ip", "netns", "exec", m.Hosts["nb"].NS, "redis-server", "--port", "6390", "--bind", addr("nb"),
		"--protected-mode", "no", "--save", "", "--appendonly", "no", "--dir", tmp, "--loglevel", "warning")
	redis.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := redis.Start(); err != nil {
		return err
	}
	defer func() { _ = redis.Process.Kill(); _ = redis.Wait() }()
	time.Sleep(500 * time.Millisecond)

	nodes := map[string]string{} // region -> node URL
	for _, r := range regions {
		h := "n" + r
		cfg := fmt.Sprintf(`http: "%[1]s:7880"
api_key: %[2]s
log_level: warn
rtc: {node_ip: "%[1]s", udp_port: 0, tcp_port: -1}
turn: {enabled: false}
webtransport: {enabled: false}
cluster: {redis: "%[3]s", node_id: %[4]s, url: "http://%[1]s:7880", max_cpu: 0}
`, addr(h), apiKey, redisAddr, r)
		file := filepath.Join(tmp, r+".yaml")
		if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
			return err
		}
		cmd := exec.Command("ip", "netns", "exec", m.Hosts[h].NS, bin, "serve", "--config", file)
		cmd.Env = append(os.Environ(), "PETREL_API_SECRET="+apiSecret)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		nodes[r] = "http://" + addr(h) + ":7880"
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	nodesJSON, _ := json.Marshal(nodes)
	clients := map[string]*clientProc{}
	for _, r := range regions {
		h := m.Hosts["r"+r]
		cmd := exec.Command("ip", "netns", "exec", h.NS, self, "client", "-region", r, "-addr", h.Addr.String(), "-nodes", string(nodesJSON))
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		clients[r] = &clientProc{in: in, out: bufio.NewScanner(out)}
		clients[r].out.Buffer(make([]byte, 1<<20), 64<<20)
	}
	// Nodes must know each other and their round trips (HTTP probes, then links).
	time.Sleep(5 * time.Second)

	enc := json.NewEncoder(os.Stdout)
	var allSamples []string
	for run := 1; run <= runs; run++ {
		for _, shape := range []string{"call", "room6"} {
			for _, mode := range []string{"nearest", "rtt"} {
				room := fmt.Sprintf("%s-%s-%d", shape, mode, run)
				res := result{Run: run, Shape: shape, Mode: mode, ByPair: map[string]float64{}}
				for i, r := range shapes[shape] {
					node, err := clients[r].ask(fmt.Sprintf("join %s %s%d %s", room, r, i, mode))
					if err != nil {
						return fmt.Errorf("%s: join: %w", room, err)
					}
					res.Joined = append(res.Joined, r+"@"+node)
					time.Sleep(1500 * time.Millisecond)
				}
				time.Sleep(warm)
				// Where everyone is once moves (re-placement) are done.
				where := map[string]string{} // identity -> node
				for _, r := range regions {
					line, err := clients[r].ask("where " + room)
					if err != nil {
						return err
					}
					for _, f := range strings.Fields(line) {
						if id, node, ok := strings.Cut(f, "@"); ok {
							where[id] = node
						}
					}
				}
				for i, r := range shapes[shape] {
					res.Placement = append(res.Placement, r+"@"+where[fmt.Sprintf("%s%d", r, i)])
				}
				for _, r := range regions {
					if _, err := clients[r].ask("mark " + room); err != nil {
						return err
					}
				}
				time.Sleep(window)
				pairs := map[string][]float64{}
				var all []float64
				for _, r := range regions {
					line, err := clients[r].ask("stats " + room)
					if err != nil {
						return err
					}
					var st map[string][]float64 // publisher region -> delays at this region
					if err := json.Unmarshal([]byte(line), &st); err != nil {
						return err
					}
					for from, d := range st {
						pairs[from+"->"+r] = append(pairs[from+"->"+r], d...)
						all = append(all, d...)
					}
				}
				for _, r := range regions {
					if _, err := clients[r].ask("leave " + room); err != nil {
						return err
					}
				}
				res.Frames = len(all)
				res.P50, res.P90 = quantile(all, 0.5), quantile(all, 0.9)
				for _, d := range all {
					res.Mean += d / float64(len(all))
				}
				for p, d := range pairs {
					res.ByPair[p] = quantile(d, 0.5)
				}
				if err := enc.Encode(res); err != nil {
					return err
				}
				if run == runs {
					for _, d := range all {
						allSamples = append(allSamples, fmt.Sprintf("%s-%s %.2f", shape, mode, d))
					}
				}
				time.Sleep(2 * time.Second)
			}
		}
	}
	if samplesFile != "" {
		return os.WriteFile(samplesFile, []byte(strings.Join(allSamples, "\n")+"\n"), 0o644)
	}
	return nil
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return -1
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

type clientProc struct {
	in  io.Writer
	out *bufio.Scanner
}

// ask sends a command and returns the reply line ("ok <text>" or "err <text>").
func (c *clientProc) ask(cmd string) (string, error) {
	if _, err := fmt.Fprintln(c.in, cmd); err != nil {
		return "", err
	}
	if !c.out.Scan() {
		return "", fmt.Errorf("client process gone: %v", c.out.Err())
	}
	l := c.out.Text()
	if l == "ok" {
		return "", nil
	}
	if rest, ok := strings.CutPrefix(l, "ok "); ok {
		return rest, nil
	}
	return "", fmt.Errorf("%s: %s", cmd, l)
}

// --- the client process, inside a region's namespace ---

type participant struct {
	mu       sync.Mutex
	c        *client.Client
	node     string
	identity string
	src      *loadtest.Source
	region   string
	moves    int
}

type collector struct {
	mu      sync.Mutex
	marking bool
	delays  map[string][]float64 // publisher region -> ms
}

func clientMain(args []string) int {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	region := fs.String("region", "", "this client host's region")
	addr := fs.String("addr", "", "this host's address")
	nodesJSON := fs.String("nodes", "", "region -> node URL")
	_ = fs.Parse(args)
	var nodes map[string]string
	if err := json.Unmarshal([]byte(*nodesJSON), &nodes); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	api := client.LoopbackAPI(func(se *webrtc.SettingEngine) {
		rtc.OnlyAddress(se, net.ParseIP(*addr))
		se.SetInterfaceFilter(func(string) bool { return true })
	})
	rooms := map[string][]*participant{}
	cols := map[string]*collector{}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) < 2 {
			fmt.Println("err bad command")
			continue
		}
		room := f[1]
		col := cols[room]
		if col == nil {
			col = &collector{delays: map[string][]float64{}}
			cols[room] = col
		}
		switch f[0] {
		case "join": // join <room> <identity> <mode>
			p, node, err := joinRoom(api, nodes, *region, room, f[2], f[3], col)
			if err != nil {
				fmt.Println("err", err)
				continue
			}
			rooms[room] = append(rooms[room], p)
			fmt.Println("ok", node)
		case "where":
			var out []string
			for _, p := range rooms[room] {
				p.mu.Lock()
				out = append(out, p.identity+"@"+p.node)
				p.mu.Unlock()
			}
			fmt.Println("ok", strings.Join(out, " "))
		case "mark":
			col.mu.Lock()
			col.marking = true
			col.mu.Unlock()
			fmt.Println("ok")
		case "stats":
			col.mu.Lock()
			b, _ := json.Marshal(col.delays)
			col.marking = false
			col.mu.Unlock()
			fmt.Println("ok", string(b))
		case "leave":
			for _, p := range rooms[room] {
				p.mu.Lock()
				p.c.Close()
				p.c = nil // a move still in progress closes what it opened
				p.mu.Unlock()
				p.src.Stop()
			}
			delete(rooms, room)
			delete(cols, room)
			fmt.Println("ok")
		default:
			fmt.Println("err unknown command")
		}
	}
	return 0
}

// rtts measures the round trip to each node's /healthz, best of three.
func rtts(nodes map[string]string) map[string]float64 {
	out := map[string]float64{}
	hc := &http.Client{Timeout: 2 * time.Second}
	for r, u := range nodes {
		best := -1.0
		for range 3 {
			start := time.Now()
			resp, err := hc.Get(u + "/healthz")
			if err != nil {
				continue
			}
			// Read to the end: the connection is then reused, and the next
			// request costs one round trip, not a TCP handshake too.
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if ms := float64(time.Since(start).Microseconds()) / 1000; best < 0 || ms < best {
				best = ms
			}
		}
		if best >= 0 {
			out[r] = best
		}
	}
	return out
}

func joinRoom(api *webrtc.API, nodes map[string]string, region, room, identity, mode string, col *collector) (*participant, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	claims := auth.Claims{Room: room, Grants: auth.Grants{Publish: true, Subscribe: true}}
	claims.RegisteredClaims = jwt.RegisteredClaims{Subject: identity}
	claims.Subject = identity
	tok, err := auth.Keys{apiKey: apiSecret}.Sign(apiKey, claims, time.Hour)
	if err != nil {
		return nil, "", err
	}
	nodeID, ws := region, strings.Replace(nodes[region], "http://", "ws://", 1)+"/v1/rtc"
	if mode == "rtt" {
		// What the SDK does with { cluster: true }: measure, ask the
		// first contact (the region's node) with the token (the cluster
		// records the placement and may re-place the room), join where it
		// says.
		measured := rtts(nodes)
		b, _ := json.Marshal(map[string]any{"room": room, "rtt": measured, "token": tok})
		resp, err := http.Post(nodes[region]+"/v1/cluster/place", "application/json", bytes.NewReader(b))
		if err != nil {
			return nil, "", err
		}
		var out struct {
			Node    string  `json:"node"`
			WS      string  `json:"ws"`
			DelayMS float64 `json:"delayMs"`
			Moved   int     `json:"moved"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || out.WS == "" {
			return nil, "", fmt.Errorf("place: %s %v", resp.Status, err)
		}
		nodeID, ws = out.Node, out.WS
		fmt.Fprintf(os.Stderr, "regions: %s in region %s measured %v ms; placed on %s (room's expected delay %.1f ms, %d others moved)\n", identity, region, measured, out.Node, out.DelayMS, out.Moved)
	}
	p := &participant{src: loadtest.Synthetic(false, 300, 30, 30), region: region, identity: identity, node: nodeID}
	p.src.Start()
	c, err := p.connect(ctx, api, ws, tok, col)
	if err != nil {
		p.src.Stop()
		return nil, "", err
	}
	p.c = c
	return p, nodeID, nil
}

// connect joins ws, publishes the participant's source and receives; a
// reconnect hint (drain, re-placement) moves it as the SDK does: join the
// named node, publish there, then leave the old one (make before break).
func (p *participant) connect(ctx context.Context, api *webrtc.API, ws, tok string, col *collector) (*client.Client, error) {
	c, err := client.Join(ctx, ws, tok, client.Options{Name: p.identity, API: api})
	if err != nil {
		return nil, err
	}
	moveTo := func(url, node string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c2, err := p.connect(ctx, api, url, tok, col)
		if err != nil {
			fmt.Fprintf(os.Stderr, "regions: %s: move to %s failed: %v\n", p.identity, node, err)
			return
		}
		time.Sleep(500 * time.Millisecond)
		p.mu.Lock()
		old := p.c
		if old == nil { // left meanwhile
			p.mu.Unlock()
			c2.Close()
			return
		}
		p.c, p.node = c2, node
		p.moves++
		p.mu.Unlock()
		old.Close()
		fmt.Fprintf(os.Stderr, "regions: %s moved to node %s\n", p.identity, node)
	}
	go receive(c, col, moveTo)
	_, sender, err := c.Publish(ctx, p.src.Track("video", "video"), "camera")
	if err != nil {
		c.Close()
		return nil, err
	}
	go func() {
		for {
			pkts, _, err := sender.ReadRTCP()
			if err != nil {
				return
			}
			for _, pk := range pkts {
				if _, ok := pk.(*rtcp.PictureLossIndication); ok {
					p.src.RequestKeyframe()
				}
			}
		}
	}()
	return c, nil
}

// receive records the one-way delay of each received frame by the region
// of its publisher: the first letter of the identity whose participant sid
// is the track's stream id (sids differ from node to node, identities not).
func receive(c *client.Client, col *collector, moveTo func(url, node string)) {
	var mu sync.Mutex
	who := map[string]string{} // participant sid -> identity
	learn := func(v any) {
		var pi struct{ Sid, Identity string }
		b, _ := json.Marshal(v)
		if json.Unmarshal(b, &pi) == nil && pi.Sid != "" {
			mu.Lock()
			who[pi.Sid] = pi.Identity
			mu.Unlock()
		}
	}
	if ps, ok := c.Joined["participants"].([]any); ok {
		for _, p := range ps {
			learn(p)
		}
	}
	go func() {
		for m := range c.Events {
			if m["type"] == "participantJoined" || m["type"] == "participantUpdated" {
				learn(m["participant"])
			}
			if m["type"] == "reconnect" {
				url, _ := m["url"].(string)
				node, _ := m["node"].(string)
				if url != "" {
					go moveTo(url, node)
				}
			}
		}
	}()
	for tr := range c.Tracks {
		go func(tr client.Track) {
			from := ""
			for {
				p, _, err := tr.Remote.ReadRTP()
				if err != nil {
					return
				}
				if !p.Marker {
					continue
				}
				if from == "" {
					mu.Lock()
					if id := who[tr.ParticipantSid]; id != "" {
						from = id[:1]
					}
					mu.Unlock()
					if from == "" {
						continue
					}
				}
				if _, sent, ok := loadtest.ReadStamp(p.Payload); ok {
					d := float64(time.Now().UnixNano()-sent) / 1e6
					col.mu.Lock()
					if col.marking {
						col.delays[from] = append(col.delays[from], d)
					}
					col.mu.Unlock()
				}
			}
		}(tr)
	}
}
