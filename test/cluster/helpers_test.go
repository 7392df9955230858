// Package cluster tests a Petrel cluster: a real Redis server (Debian's
// redis-server) started by the test on a free loopback port, three Petrel
// nodes started in-process on their own loopback ports, and Pion clients.
package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/server"
	"github.com/petrel-sfu/petrel/test/redistest"
)

const apiKey = "clusterkey"

var apiSecret = strings.Repeat("c", 40)

// startRedis runs redis-server on a free loopback port for the test.
func startRedis(t *testing.T) string {
	t.Helper()
	return startRedisWith(t, "127.0.0.1", func(port int) []string { return []string{"--port", strconv.Itoa(port)} })
}

// startRedisWith runs redis-server with the listening arguments args gives
// for a free port on host (--port, or --tls-port and certificates).
func startRedisWith(t *testing.T, host string, args func(port int) []string) string {
	t.Helper()
	return redistest.Start(t, host, args)
}

type node struct {
	id  string
	srv *server.Server
	ws  string
	url string
	t   *testing.T

	stopOnce sync.Once
}

// startNode starts a Petrel node of the cluster on 127.0.0.1 with fast
// heartbeats, so that loss is noticed within the test's patience.
func startNode(t *testing.T, redisAddr, id string) *node {
	t.Helper()
	return startNodeWith(t, id, func(c *config.Config) { c.Cluster.Redis = redisAddr }, nil)
}

// startNodeWith starts a node with the test's defaults changed by tune; its
// log goes to logw (debug level) when set, else to stderr.
func startNodeWith(t *testing.T, id string, tune func(*config.Config), logw io.Writer) *node {
	t.Helper()
	n, err := tryStartNode(t, id, tune, logw)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func tryStartNode(t *testing.T, id string, tune func(*config.Config), logw io.Writer) (*node, error) {
	cfg := config.Default()
	cfg.Loopback = true
	cfg.HTTP = "127.0.0.1:0"
	cfg.RTC.UDPPort, cfg.RTC.TCPPort, cfg.TURN.Port = 0, 0, 0
	cfg.TURN.Enabled = false
	cfg.APIKey, cfg.APISecret = apiKey, apiSecret
	cfg.Cluster.NodeID = id
	cfg.Cluster.Heartbeat = 200 * time.Millisecond
	cfg.Cluster.NodeTTL = 1500 * time.Millisecond
	cfg.Cluster.DrainGrace = 20 * time.Second
	cfg.Cluster.MaxCPU = 0 // the test machine is shared: no shedding here
	tune(&cfg)
	level := slog.LevelWarn
	if os.Getenv("PETREL_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	var w io.Writer = os.Stderr
	if logw != nil {
		w, level = logw, slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("test_node", id)
	s, err := server.Start(cfg, auth.Keys{apiKey: apiSecret}, apiKey, false, log)
	if err != nil {
		return nil, err
	}
	n := &node{id: id, srv: s, ws: "ws://" + s.HTTPAddr + "/v1/rtc", url: "http://" + s.HTTPAddr, t: t}
	t.Cleanup(n.stop)
	return n, nil
}

func (n *node) stop() {
	n.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = n.srv.Shutdown(ctx)
	})
}

// crash stops the node as a crash would for the others: no goodbye in Redis,
// no link teardown; its clients lose their connections.
func (n *node) crash() {
	n.srv.Cluster.Kill()
	n.stop()
}

func token(t *testing.T, room, identity string) string {
	c := auth.Claims{Room: room, Grants: auth.Grants{Publish: true, Subscribe: true, PublishData: true}}
	c.Subject = identity
	c.RegisteredClaims = jwt.RegisteredClaims{Subject: identity}
	tok, err := auth.Keys{apiKey: apiSecret}.Sign(apiKey, c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func join(t *testing.T, ws, room, identity string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Join(ctx, ws, token(t, room, identity), client.Options{Name: identity})
	if err != nil {
		t.Fatalf("join %s at %s: %v", identity, ws, err)
	}
	t.Cleanup(c.Close)
	return c
}

// video is a synthetic VP8 source: 30 frames/s, a keyframe every 30 frames or
// on request, the frame number in the last payload byte of each frame and the
// first letter of its id before it (a receiver on another node, where track
// ids differ, tells sources apart by it).
type video struct {
	track    *webrtc.TrackLocalStaticSample
	stop     chan struct{}
	forceKey atomic.Bool
}

func newVideo(t *testing.T, id string) *video {
	tr, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, id, "stream-"+id)
	if err != nil {
		t.Fatal(err)
	}
	v := &video{track: tr, stop: make(chan struct{})}
	t.Cleanup(func() { close(v.stop) })
	go func() {
		tick := time.NewTicker(33 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-v.stop:
				return
			case <-tick.C:
			}
			frame := make([]byte, 2500)
			frame[0] = 0x01
			if n%30 == 0 || v.forceKey.Swap(false) {
				frame[0] = 0x00
			}
			frame[len(frame)-1] = byte(n)
			frame[len(frame)-2] = id[0]
			_ = tr.WriteSample(media.Sample{Data: frame, Duration: 33 * time.Millisecond})
		}
	}()
	return v
}

// publish publishes v and answers the server's keyframe requests.
func publish(t *testing.T, c *client.Client, v *video) (sid string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sid, sender, err := c.Publish(ctx, v.track, "camera")
	if err != nil {
		t.Fatal(err)
	}
	go keyframeOnPLI(sender, v)
	return sid
}

// keyframeOnPLI makes v send a keyframe next whenever the receiver of
// sender's RTCP asks for one, until the sender is closed.
func keyframeOnPLI(sender *webrtc.RTPSender, v *video) {
	for {
		pkts, _, err := sender.ReadRTCP()
		if err != nil {
			return
		}
		for _, p := range pkts {
			if fmt.Sprintf("%T", p) == "*rtcp.PictureLossIndication" {
				v.forceKey.Store(true)
			}
		}
	}
}

// frames collects complete frames (marker packets) of every video track a
// client receives: when, and the frame number.
type frames struct {
	mu    sync.Mutex
	at    []time.Time
	nums  []byte
	tag   []byte // the source's tag (newVideo): who published the frame
	track []string
}

func watch(c *client.Client) *frames {
	f := &frames{}
	watchInto(c, f)
	return f
}

// watchInto records c's video frames into f (a client that moves to another
// node keeps one record across its two connections).
func watchInto(c *client.Client, f *frames) {
	go func() {
		for tr := range c.Tracks {
			if tr.Remote.Kind() != webrtc.RTPCodecTypeVideo {
				go drainTrack(tr.Remote)
				continue
			}
			go func(tr client.Track) {
				for {
					p, _, err := tr.Remote.ReadRTP()
					if err != nil {
						return
					}
					f.record(p, tr.TrackSid)
				}
			}(tr)
		}
	}()
}

// record notes a frame if p completes one (marker bit).
func (f *frames) record(p *rtp.Packet, track string) {
	if !p.Marker || len(p.Payload) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = append(f.at, time.Now())
	f.nums = append(f.nums, p.Payload[len(p.Payload)-1])
	f.tag = append(f.tag, p.Payload[max(len(p.Payload)-2, 0)])
	f.track = append(f.track, track)
}

func drainTrack(tr *webrtc.TrackRemote) {
	buf := make([]byte, 1500)
	for {
		if _, _, err := tr.Read(buf); err != nil {
			return
		}
	}
}

func (f *frames) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.at)
}

// waitFrames waits until n more frames than now arrived.
func (f *frames) waitFrames(t *testing.T, n int, within time.Duration, what string) {
	t.Helper()
	start := f.count()
	deadline := time.Now().Add(within)
	for f.count() < start+n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d frames within %s", what, f.count()-start, n, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// longestGap is the longest time without a new frame between the i-th frame
// and the last.
func (f *frames) longestGap(from int) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var g time.Duration
	for i := max(from, 1); i < len(f.at); i++ {
		g = max(g, f.at[i].Sub(f.at[i-1]))
	}
	return g
}

// inOrder reports whether the frame numbers of the last n frames of one track
// follow each other (the receiver could decode them all).
func (f *frames) inOrder(n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.nums) < n {
		return false
	}
	for i := len(f.nums) - n + 1; i < len(f.nums); i++ {
		if f.track[i] == f.track[i-1] && f.nums[i] != f.nums[i-1]+1 {
			return false
		}
	}
	return true
}

// place asks a node where a participant of room should go.
func place(t *testing.T, nodeURL, room string, rtt map[string]float64, exclude ...string) (id, ws string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"room": room, "rtt": rtt, "exclude": exclude})
	resp, err := http.Post(nodeURL+"/v1/cluster/place", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Node string `json:"node"`
		WS   string `json:"ws"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("place: %s", resp.Status)
	}
	return out.Node, out.WS
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterOf starts Redis and three nodes a, b, c, and waits until each sees all.
func clusterOf(t *testing.T) (string, *node, *node, *node) {
	r := startRedis(t)
	a, b, c := startNode(t, r, "a"), startNode(t, r, "b"), startNode(t, r, "c")
	waitFor(t, 5*time.Second, "nodes see each other", func() bool {
		return len(a.srv.Cluster.Nodes()) == 3 && len(b.srv.Cluster.Nodes()) == 3 && len(c.srv.Cluster.Nodes()) == 3
	})
	return r, a, b, c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
