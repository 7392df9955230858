// Package cluster joins Petrel nodes into one service: node records and room
// membership in Redis (registry.go), node-to-node links that cascade rooms
// across nodes (link.go, export.go, import.go), placement of new participants
// by measured delay and load (place.go), drain and load shedding. A server
// started without cluster.redis never creates a Node.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/rtc"
	"github.com/petrel-sfu/petrel/sfu"
)

// Options are what a node needs from the server it belongs to.
type Options struct {
	Config  config.Config
	Manager *sfu.Manager
	Engine  *rtc.Engine
	// Secret authenticates node links; every node of a cluster derives it from
	// the same API secret.
	Secret []byte
	// HTTPAddr is the server's listen address (for the default node URL).
	HTTPAddr string
	Log      *slog.Logger
	// Verify checks a participant's access token and returns its room and
	// identity: a placement request that carries one is recorded and may
	// re-place the room (nil: placements are never recorded).
	Verify func(token string) (room, identity string, err error)
}

// Node is this server's membership in the cluster.
type Node struct {
	cfg    config.Cluster
	id     string
	url    string
	mgr    *sfu.Manager
	engine *rtc.Engine
	log    *slog.Logger
	secret []byte
	// used holds the ids of node request tokens taken (linktoken.go).
	used         *usedTokens
	linkRefusals atomic.Int64
	verify       func(string) (string, string, error)
	rdb          *redis.Client
	reg          *Registry
	http         *http.Client
	// tls is set with cluster.tls (tls.go).
	tls *nodeTLS

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	links    map[string]*Link
	dialing  map[string]bool
	nodes    []NodeInfo // live nodes at the last heartbeat, this one included
	probeRTT map[string]float64
	prev     map[string][]Member
	started  time.Time

	mirrors sync.Map // *sfu.Participant -> id of the node it mirrors
	// hinted holds the participants sent a reconnect hint (drain,
	// placement) until they leave: the mirror of their new session on
	// another node comes in beside them (import.go).
	hinted sync.Map // *sfu.Participant -> struct{}
	// pulled counts the sessions (WHEP viewers) that hold a room here
	// without being participants of it: such a room is hosted all the same,
	// so that its tracks cascade to this node.
	pulled   map[string]int
	draining atomic.Bool
	// drainGen counts drains started: the goroutine of a drain that was
	// withdrawn (undrain) stops instead of closing clients at its deadline.
	drainGen atomic.Int64
	stopOnce sync.Once
	load     loadMeter
	shed     shedder
}

// Start registers the node in Redis and starts its heartbeat.
func Start(o Options) (*Node, error) {
	c := o.Config.Cluster
	id := c.NodeID
	if id == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		id = "node-" + hex.EncodeToString(b)
	}
	if strings.ContainsAny(id, " \t\n:*") || len(id) > 64 {
		return nil, fmt.Errorf("cluster: node id %q: no spaces, colons or stars, at most 64 bytes", id)
	}
	url := c.URL
	if url == "" {
		url = defaultURL(o.HTTPAddr, o.Engine)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rdb, err := Dial(ctx, RedisOptions{Addr: c.Redis, Password: c.RedisPassword, TLS: c.RedisTLS, CAFile: c.RedisTLSCA})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n := &Node{cfg: c, id: id, url: strings.TrimRight(url, "/"), mgr: o.Manager, engine: o.Engine,
		log: o.Log.With("node", id), secret: o.Secret, used: newUsedTokens(maxUsedTokens), verify: o.Verify, rdb: rdb, reg: NewRegistry(rdb, c.NodeTTL),
		http:  &http.Client{Timeout: 5 * time.Second},
		links: map[string]*Link{}, dialing: map[string]bool{}, probeRTT: map[string]float64{}, pulled: map[string]int{}, started: time.Now(),
		done: make(chan struct{})}
	if c.TLS.Enabled() {
		if n.tls, err = n.startTLS(c.TLS); err != nil {
			_ = rdb.Close()
			return nil, fmt.Errorf("cluster: %w", err)
		}
		n.http = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: n.tls.client}}
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.shed.init(c.MaxCPU, c.MaxEgressMbps)
	n.mgr.SetDataTap(n.onRoomData)
	// A participant joining here while a mirror of its session on another
	// node is here (it moves: drain, re-placement) does not push the mirror
	// out: the mirror leaves when the old session does, so the room sees its
	// media without a gap.
	n.mgr.SetHandover(n.isMirror)
	if err := n.heartbeat(); err != nil {
		n.stopTLS()
		_ = rdb.Close()
		return nil, fmt.Errorf("cluster: first heartbeat: %w", err)
	}
	go n.loop()
	go n.probeLoop()
	go n.moveLoop()
	nodes.Store(n, struct{}{})
	n.log.Info("cluster node started", "url", n.url, "redis", c.Redis)
	return n, nil
}

// ID is the node's id; URL its HTTP base URL.
func (n *Node) ID() string  { return n.id }
func (n *Node) URL() string { return n.url }

func defaultURL(addr string, e *rtc.Engine) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
		for _, ip := range e.LocalIPs {
			if !ip.IsLoopback() {
				host = ip.String()
				break
			}
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

func wsURL(httpURL string) string {
	switch {
	case strings.HasPrefix(httpURL, "https://"):
		return "wss://" + strings.TrimPrefix(httpURL, "https://") + "/v1/rtc"
	case strings.HasPrefix(httpURL, "http://"):
		return "ws://" + strings.TrimPrefix(httpURL, "http://") + "/v1/rtc"
	}
	return httpURL + "/v1/rtc"
}

func (n *Node) loop() {
	defer close(n.done)
	tick := time.NewTicker(n.cfg.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		if err := n.heartbeat(); err != nil {
			mRedisErrors.Inc()
			n.log.Warn("cluster heartbeat failed", "err", err)
		}
	}
}

// heartbeat publishes this node's record, reads the others', notices lost
// nodes, opens links to nodes sharing a room, and acts on drain and load.
func (n *Node) heartbeat() error {
	ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
	defer cancel()
	info := n.snapshot()
	n.shed.update(n, info.Load.CPU, info.Load.EgressMbps)
	n.mu.Lock()
	prev := n.prev
	n.mu.Unlock()
	if err := n.reg.Heartbeat(ctx, info, prev); err != nil {
		return err
	}
	n.mu.Lock()
	n.prev = info.Rooms
	n.mu.Unlock()
	live, lost, err := n.reg.Nodes(ctx)
	if err != nil {
		return err
	}
	for _, id := range lost {
		if id == n.id {
			continue
		}
		n.log.Warn("cluster node lost", "lost", id)
		mNodesLost.Inc()
		if err := n.reg.Forget(ctx, id); err != nil {
			n.log.Warn("forget lost node", "lost", id, "err", err)
		}
		n.mu.Lock()
		l := n.links[id]
		n.mu.Unlock()
		if l != nil {
			l.close("node lost")
		}
	}
	n.mu.Lock()
	n.nodes = live
	n.mu.Unlock()
	// Links: to every live node that hosts a room this node hosts. The node
	// with the smaller id dials, so that a pair never builds two links.
	mine := map[string]bool{}
	for _, r := range n.hostedRooms() {
		mine[r] = true
	}
	for _, peer := range live {
		if peer.ID == n.id {
			continue
		}
		n.mu.Lock()
		l := n.links[peer.ID]
		n.mu.Unlock()
		if l != nil && l.peerStarted != 0 && l.peerStarted != peer.Started {
			l.close("peer restarted")
		}
		shared := false
		for r := range peer.Rooms {
			if mine[r] {
				shared = true
				break
			}
		}
		if shared && n.id < peer.ID {
			n.ensureLink(peer)
		}
	}
	if d, err := n.reg.DrainRequested(ctx, n.id); err == nil {
		if d && !n.draining.Load() {
			n.startDrain()
		} else if !d && n.draining.Load() {
			n.stopDrain()
		}
	}
	return nil
}

// snapshot is this node's record as of now.
func (n *Node) snapshot() NodeInfo {
	info := NodeInfo{ID: n.id, URL: n.url, Started: n.started.UnixNano(), Draining: n.draining.Load(),
		LinkURL: n.linkSelf(),
		Rooms:   map[string][]Member{}, RTT: map[string]float64{}}
	var packets uint64
	for _, r := range n.mgr.Rooms() {
		var members []Member
		for _, p := range r.Participants() {
			pubs := p.Publications()
			for _, t := range pubs {
				c, _ := t.Counters()
				packets += c
			}
			if n.isMirror(p) {
				continue
			}
			info.Load.Tracks += len(pubs)
			kind := "participant"
			if p.Origin() == sfu.Server {
				kind = "local"
			}
			members = append(members, Member{Identity: p.Identity(), Kind: kind})
		}
		if len(members) > 0 {
			sort.Slice(members, func(i, j int) bool { return members[i].Identity < members[j].Identity })
			info.Rooms[r.Name()] = members
			info.Load.Participants += len(members)
		}
	}
	// A pulled room is in the record without members: the nodes hosting it
	// see it shared and link, and the room's membership in Redis is untouched.
	n.mu.Lock()
	for r := range n.pulled {
		if _, ok := info.Rooms[r]; !ok {
			info.Rooms[r] = []Member{}
		}
	}
	n.mu.Unlock()
	info.Load.Rooms = len(info.Rooms)
	info.Load.CPU, info.Load.PacketsPerSec, info.Load.EgressMbps = n.load.sample(packets, n.sentBytes())
	info.Load.MaxEgressMbps = n.cfg.MaxEgressMbps
	n.mu.Lock()
	for id, ms := range n.probeRTT {
		info.RTT[id] = ms
	}
	// Placement wants the path's delay. The link's ping rides the SCTP
	// association it shares with media and waits behind it (twice the
	// emulated RTT was measured on a loaded machine); an HTTP probe, best of
	// three, waits behind nothing. The smaller of the two is the estimate.
	for id, l := range n.links {
		if rtt := float64(l.RTT()) / 1e6; rtt > 0 {
			if p, ok := info.RTT[id]; !ok || rtt < p {
				info.RTT[id] = rtt
			}
		}
	}
	info.Links = len(n.links)
	n.mu.Unlock()
	return info
}

// hostedRooms are the rooms where this node has participants of its own (not
// only mirrors of other nodes'): the rooms it asks other nodes to cascade.
func (n *Node) hostedRooms() []string {
	var out []string
	n.mu.Lock()
	for r := range n.pulled {
		out = append(out, r)
	}
	n.mu.Unlock()
	for _, r := range n.mgr.Rooms() {
		if n.isPulled(r.Name()) {
			continue
		}
		for _, p := range r.Participants() {
			if !n.isMirror(p) {
				out = append(out, r.Name())
				break
			}
		}
	}
	return out
}

func (n *Node) isMirror(p *sfu.Participant) bool {
	_, ok := n.mirrors.Load(p)
	return ok
}
func (n *Node) addMirror(p *sfu.Participant, peer string) { n.mirrors.Store(p, peer) }

// mirrorPeer is the node a mirror comes from.
func (n *Node) mirrorPeer(p *sfu.Participant) (string, bool) {
	v, ok := n.mirrors.Load(p)
	if !ok {
		return "", false
	}
	return v.(string), true
}

// isDraining reports whether node id drains, as of the last heartbeat.
func (n *Node) isDraining(id string) bool {
	for _, x := range n.Nodes() {
		if x.ID == id {
			return x.Draining
		}
	}
	return false
}
func (n *Node) removeMirror(p *sfu.Participant) { n.mirrors.Delete(p) }

// Nodes returns the live nodes as of the last heartbeat.
func (n *Node) Nodes() []NodeInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]NodeInfo(nil), n.nodes...)
}

// Links returns the links that are up, by peer id.
func (n *Node) Links() map[string]*Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]*Link{}
	for id, l := range n.links {
		if l.isUp() {
			out[id] = l
		}
	}
	return out
}

// LinkStats are one link's counters (tests and metrics).
type LinkStats struct {
	SentPackets, SentBytes, RecvPackets, RecvBytes uint64
	SentLayer                                      [3]uint64
	Filtered, Retransmitted, NackIgnored           uint64
	RTT                                            time.Duration
}

// Stats returns the link's counters.
func (l *Link) Stats() LinkStats {
	s := &l.stats
	return LinkStats{SentPackets: s.sentPackets.Load(), SentBytes: s.sentBytes.Load(), RecvPackets: s.recvPackets.Load(),
		RecvBytes: s.recvBytes.Load(), SentLayer: [3]uint64{s.sentLayer[0].Load(), s.sentLayer[1].Load(), s.sentLayer[2].Load()},
		Filtered: s.filtered.Load(), Retransmitted: s.rtxSent.Load(), NackIgnored: s.nackIgnored.Load(), RTT: l.RTT()}
}

func (n *Node) dropLink(l *Link) {
	n.mu.Lock()
	if n.links[l.peer] == l {
		delete(n.links, l.peer)
	}
	n.mu.Unlock()
}

// onRoomData carries data messages from this node's participants to the nodes
// that host the same room.
func (n *Node) onRoomData(from *sfu.Participant, reliable bool, h sfu.DataHeader, to []string, payload []byte) {
	if n.isMirror(from) || from.Hidden() {
		return
	}
	room := from.Room().Name()
	m := ctlMsg{T: msgData, Room: room, ID: from.Identity(), Reliable: reliable, Topic: h.Topic, To: to, Payload: payload}
	for _, l := range n.Links() {
		if (*l.ex.peerRooms.Load())[room] {
			l.send(m)
		}
	}
}

// Close leaves the cluster: links close (the peers' mirrors of this node's
// participants go) and the record is removed at once.
func (n *Node) Close() { n.stopOnce.Do(n.leave) }

func (n *Node) leave() {
	n.stopTLS()
	nodes.Delete(n)
	n.cancel()
	<-n.done
	n.mgr.SetDataTap(nil)
	n.mgr.SetHandover(nil)
	n.mu.Lock()
	links := make([]*Link, 0, len(n.links))
	for _, l := range n.links {
		links = append(links, l)
	}
	n.mu.Unlock()
	for _, l := range links {
		l.close("node leaving")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info := n.snapshot()
	if err := n.reg.Leave(ctx, info); err != nil && !errors.Is(err, context.Canceled) {
		n.log.Warn("cluster leave", "err", err)
	}
	_ = n.rdb.Close()
}

// Kill stops the node without leaving (no record removal, links dropped as a
// crash would): the others must notice through the missing heartbeat. Tests
// use it to show node loss.
func (n *Node) Kill() { n.stopOnce.Do(n.crash) }

func (n *Node) crash() {
	n.stopTLS()
	nodes.Delete(n)
	n.cancel()
	<-n.done
	n.mu.Lock()
	links := make([]*Link, 0, len(n.links))
	for _, l := range n.links {
		links = append(links, l)
	}
	n.mu.Unlock()
	for _, l := range links {
		// Closing the PeerConnection would tell the peer at once (SCTP abort,
		// DTLS close); a crash tells nothing, so only local state goes.
		l.closeOnce.Do(func() { close(l.closed); l.ex.closeAll() })
	}
	_ = n.rdb.Close()
}

// hint sends p a reconnect hint naming node to, and remembers that p moves.
func (n *Node) hint(p *sfu.Participant, to NodeInfo, reason string) {
	if _, was := n.hinted.LoadOrStore(p, struct{}{}); !was {
		p.OnClose(func() { n.hinted.Delete(p) })
	}
	p.Send(protocol.Reconnect{URL: to.WSURL(), Node: to.ID, Reason: reason})
}

// moving reports whether p was asked to move to another node.
func (n *Node) moving(p *sfu.Participant) bool {
	_, ok := n.hinted.Load(p)
	return ok
}
