// Command cluster is the cluster benchmark (bench/cluster/run.sh): a room spread
// over several `petrel serve` processes sharing a Redis, with simulcast
// publishers and viewers (Pion clients) spread over the nodes. It reports the
// bytes crossing node links per second, each node's CPU, and what the viewers
// received, as one JSON line.
//
//	go run ./bench/cluster -bin ./petrel -nodes 3 -publishers 6 -viewers 24
//	go run ./bench/cluster -bin ./petrel -nodes 3 -forward-all   # baseline: every layer crosses
//	go run ./bench/cluster -bin ./petrel -nodes 1                # one node holds everyone
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
)

const apiKey = "benchkey"

var apiSecret = strings.Repeat("b", 40)

type result struct {
	Mode          string    `json:"mode"`
	Nodes         int       `json:"nodes"`
	ForwardAll    bool      `json:"forwardAll"`
	Publishers    int       `json:"publishers"`
	Viewers       int       `json:"viewers"`
	Seconds       float64   `json:"seconds"`
	LinkKbps      float64   `json:"linkKbps"`   // sum over nodes of bytes sent on links
	NodeCPU       []float64 `json:"nodeCpu"`    // cores used per node
	CPUTotal      float64   `json:"cpuTotal"`   // cores used by all nodes
	ViewerKpps    float64   `json:"viewerKpps"` // packets/s received by all viewers
	ViewerTracks  int       `json:"viewerTracks"`
	PublishedKbps float64   `json:"publishedKbps"`
}

func main() {
	bin := flag.String("bin", "./petrel", "petrel binary")
	nodes := flag.Int("nodes", 3, "petrel nodes (1: one node holds everyone)")
	forwardAll := flag.Bool("forward-all", false, "send every layer over node links (the baseline)")
	pubs := flag.Int("publishers", 6, "simulcast publishers, spread over the nodes")
	viewers := flag.Int("viewers", 24, "viewers, spread over the nodes")
	dur := flag.Duration("duration", 15*time.Second, "measured window")
	warm := flag.Duration("warmup", 6*time.Second, "wait after everyone joined")
	flag.Parse()
	res, err := run(*bin, *nodes, *forwardAll, *pubs, *viewers, *dur, *warm)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/cluster:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
}

type node struct {
	cmd  *exec.Cmd
	http string
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func run(bin string, n int, forwardAll bool, pubs, viewers int, dur, warm time.Duration) (*result, error) {
	redisPort := freePort()
	dir, _ := os.MkdirTemp("", "bench-cluster")
	defer os.RemoveAll(dir)
	redis := exec.Command("redis-server", "--port", strconv.Itoa(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := redis.Start(); err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	defer func() { _ = redis.Process.Kill(); _ = redis.Wait() }()
	time.Sleep(300 * time.Millisecond)
	var ns []*node
	defer func() {
		for _, x := range ns {
			_ = x.cmd.Process.Signal(os.Interrupt)
		}
		for _, x := range ns {
			_ = x.cmd.Wait()
		}
	}()
	for i := 0; i < n; i++ {
		port := freePort()
		args := []string{"serve", "--loopback", "--http", fmt.Sprintf("127.0.0.1:%d", port), "--rtc-udp-port", "0", "--rtc-tcp-port", "-1",
			"--turn=false", "--api-key", apiKey, "--api-secret", apiSecret, "--log-level", "warn",
			"--redis", fmt.Sprintf("127.0.0.1:%d", redisPort), "--node-id", fmt.Sprintf("n%d", i),
			"--cluster-forward-all=" + strconv.FormatBool(forwardAll), "--max-participants", "500", "--joins-per-second", "200", "--joins-per-ip", "0", "--max-conns-per-ip", "0"}
		cmd := exec.Command(bin, args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		x := &node{cmd: cmd, http: fmt.Sprintf("http://127.0.0.1:%d", port)}
		ns = append(ns, x)
		if err := waitHealthy(x.http); err != nil {
			return nil, err
		}
	}
	room := "bench"
	ctx := context.Background()
	var published atomic.Uint64
	stop := make(chan struct{})
	defer close(stop)
	var received atomic.Uint64
	var tracks atomic.Int64
	// Publishers watch the room too, with the same speaker view as viewers.
	for i := 0; i < pubs; i++ {
		c, err := join(ctx, ns[i%n], room, fmt.Sprintf("pub%02d", i))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		if err := publishSimulcast(ctx, c, stop, &published); err != nil {
			return nil, fmt.Errorf("publisher %d: %w", i, err)
		}
		go view(c, &received, &tracks)
	}
	for j := 0; j < viewers; j++ {
		c, err := join(ctx, ns[j%n], room, fmt.Sprintf("view%03d", j))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		go view(c, &received, &tracks)
		time.Sleep(30 * time.Millisecond)
	}
	time.Sleep(warm)
	cpu0 := make([]float64, n)
	link0 := 0.0
	for i, x := range ns {
		cpu0[i] = procCPU(x.cmd.Process.Pid)
		link0 += linkBytes(x.http)
	}
	r0, p0 := received.Load(), published.Load()
	t0 := time.Now()
	time.Sleep(dur)
	secs := time.Since(t0).Seconds()
	res := &result{Nodes: n, ForwardAll: forwardAll, Publishers: pubs, Viewers: viewers, Seconds: secs,
		ViewerTracks: int(tracks.Load())}
	link1 := 0.0
	for i, x := range ns {
		c := (procCPU(x.cmd.Process.Pid) - cpu0[i]) / secs
		res.NodeCPU = append(res.NodeCPU, c)
		res.CPUTotal += c
		link1 += linkBytes(x.http)
	}
	res.LinkKbps = (link1 - link0) * 8 / 1000 / secs
	res.ViewerKpps = float64(received.Load()-r0) / 1000 / secs
	res.PublishedKbps = float64(published.Load()-p0) * 8 / 1000 / secs
	switch {
	case n == 1:
		res.Mode = "one node"
	case forwardAll:
		res.Mode = fmt.Sprintf("%d nodes, every layer crosses", n)
	default:
		res.Mode = fmt.Sprintf("%d nodes, selective", n)
	}
	return res, nil
}

func waitHealthy(base string) error {
	for i := 0; i < 100; i++ {
		if r, err := http.Get(base + "/healthz"); err == nil {
			r.Body.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not start", base)
}

func join(ctx context.Context, n *node, room, identity string) (*client.Client, error) {
	c := auth.Claims{Room: room, Grants: auth.Grants{Publish: true, Subscribe: true, PublishData: true}}
	c.Subject = identity
	c.RegisteredClaims = jwt.RegisteredClaims{Subject: identity}
	tok, err := auth.Keys{apiKey: apiSecret}.Sign(apiKey, c, time.Hour)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ws := "ws" + strings.TrimPrefix(n.http, "http") + "/v1/rtc"
	return client.Join(ctx, ws, tok, client.Options{Name: identity})
}

// layerBytes are the frame sizes of the three layers at 30 frames/s: about
// 150, 500 and 1500 kbit/s, as a camera's quarter, half and full resolution.
var layerBytes = [3]int{625, 2080, 6250}

// publishSimulcast publishes one VP8 track in three encodings (q, h, f) and
// feeds them at 30 frames/s, a keyframe every 2 s or on request.
func publishSimulcast(ctx context.Context, c *client.Client, stop chan struct{}, sent *atomic.Uint64) error {
	vp8 := webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}
	rids := []string{"q", "h", "f"}
	var layers [3]*webrtc.TrackLocalStaticRTP
	for i, rid := range rids {
		tr, err := webrtc.NewTrackLocalStaticRTP(vp8, "video", "cam", webrtc.WithRTPStreamID(rid))
		if err != nil {
			return err
		}
		layers[i] = tr
	}
	if _, err := c.Request(ctx, protocol.PublishTrack{Cid: "video", Kind: protocol.KindVideo, Source: protocol.SourceCamera,
		Layers: []protocol.LayerInfo{{RID: "q", Width: 320, Height: 180}, {RID: "h", Width: 640, Height: 360}, {RID: "f", Width: 1280, Height: 720}}}); err != nil {
		return err
	}
	sender, err := c.Pub.AddTrack(layers[0])
	if err != nil {
		return err
	}
	for _, l := range layers[1:] {
		if err := sender.AddEncoding(l); err != nil {
			return err
		}
	}
	var key atomic.Bool
	go func() {
		buf := make([]byte, 1500)
		for {
			n, _, err := sender.Read(buf)
			if err != nil {
				return
			}
			// Any keyframe request (PLI/FIR) makes the next frame a keyframe.
			if n > 1 && (buf[1] == 206 || buf[1] == 192) {
				key.Store(true)
			}
		}
	}()
	if err := c.NegotiatePublisher(ctx, false); err != nil {
		return err
	}
	var midID, ridID uint8
	for _, x := range sender.GetParameters().HeaderExtensions {
		switch x.URI {
		case sdp.SDESMidURI:
			midID = uint8(x.ID)
		case sdp.SDESRTPStreamIDURI:
			ridID = uint8(x.ID)
		}
	}
	mid := ""
	for _, tr := range c.Pub.GetTransceivers() {
		if tr.Sender() == sender {
			mid = tr.Mid()
		}
	}
	go func() {
		tick := time.NewTicker(33 * time.Millisecond)
		defer tick.Stop()
		seq := [3]uint16{100, 20000, 40000}
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			k := n%60 == 0 || key.Swap(false)
			for i := range layers {
				left := layerBytes[i]
				for left > 0 {
					size := min(left, 1100)
					left -= size
					p := make([]byte, size)
					p[0] = 0x10
					p[1] = 0x01
					if k {
						p[1] = 0x00
					}
					pkt := &rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq[i], Timestamp: uint32(n * 3000), Marker: left == 0}, Payload: p}
					_ = pkt.Header.SetExtension(midID, []byte(mid))
					_ = pkt.Header.SetExtension(ridID, []byte(rids[i]))
					_ = layers[i].WriteRTP(pkt)
					sent.Add(uint64(size + 12))
					seq[i]++
				}
			}
		}
	}()
	return nil
}

// view reads every track the viewer gets. The layout is a speaker view: one
// large tile (the top layer) and small tiles (the low layer) for the rest. The
// large one is the video of the participant with the smallest sid the viewer
// has seen, so that every viewer on a node shows the same one large (sids
// differ between nodes, as a room's speaker view would on each screen).
func view(c *client.Client, received *atomic.Uint64, tracks *atomic.Int64) {
	set := func(sid, quality string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = c.Request(ctx, protocol.UpdateTrackSettings{TrackSid: sid, Quality: protocol.VideoQuality(quality)})
		cancel()
	}
	bigOwner, bigTrack := "", ""
	for tr := range c.Tracks {
		tracks.Add(1)
		if tr.Remote.Kind() == webrtc.RTPCodecTypeVideo {
			if bigOwner == "" || tr.ParticipantSid < bigOwner {
				if bigTrack != "" {
					set(bigTrack, "low")
				}
				bigOwner, bigTrack = tr.ParticipantSid, tr.TrackSid
				set(tr.TrackSid, "high")
			} else {
				set(tr.TrackSid, "low")
			}
		}
		go func(r *webrtc.TrackRemote) {
			buf := make([]byte, 1600)
			for {
				if _, _, err := r.Read(buf); err != nil {
					return
				}
				received.Add(1)
			}
		}(tr.Remote)
	}
}

// procCPU is a process's user+system CPU time in seconds.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // USER_HZ
}

// linkBytes sums petrel_cluster_link_bytes_total{direction="out"} of a node.
func linkBytes(base string) float64 {
	r, err := http.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer r.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(io.LimitReader(r.Body, 16<<20))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "petrel_cluster_link_bytes_total{") && strings.Contains(line, `direction="out"`) {
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				v, _ := strconv.ParseFloat(line[i+1:], 64)
				total += v
			}
		}
	}
	return total
}
