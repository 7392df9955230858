package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/sfu"
)

// loadMeter turns CPU time, packet and byte counters into rates between
// heartbeats.
type loadMeter struct {
	mu         sync.Mutex
	at         time.Time
	cpu        time.Duration
	packets    uint64
	sent       uint64
	lastCPU    float64
	lastRate   float64
	lastEgress float64
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sample returns the CPU share of the machine, packets per second received
// and megabits per second sent since the previous sample. sent counts the
// bytes the node has sent so far; a counter that went back (a closed link's
// bytes leave the sum) keeps the previous rate for one sample.
func (m *loadMeter) sample(packets, sent uint64) (cpuShare, pps, egressMbps float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now, cpu := time.Now(), processCPU()
	if !m.at.IsZero() {
		if dt := now.Sub(m.at); dt > 50*time.Millisecond {
			m.lastCPU = float64(cpu-m.cpu) / float64(dt) / float64(runtime.NumCPU())
			if packets >= m.packets {
				m.lastRate = float64(packets-m.packets) / dt.Seconds()
			}
			if sent >= m.sent {
				m.lastEgress = float64(sent-m.sent) * 8 / 1e6 / dt.Seconds()
			}
		}
	}
	m.at, m.cpu, m.packets, m.sent = now, cpu, packets, sent
	return m.lastCPU, m.lastRate, m.lastEgress
}

// sentBytes is what the node has sent so far: RTP to its subscribers (the
// petrel_bytes_total{direction="out"} counter, one per process) and media
// over its node links. Read once a heartbeat.
func (n *Node) sentBytes() uint64 {
	var m dto.Metric
	var total uint64
	if err := metrics.BytesOut.Write(&m); err == nil {
		total = uint64(m.GetCounter().GetValue())
	}
	n.mu.Lock()
	for _, l := range n.links {
		total += l.stats.sentBytes.Load()
	}
	n.mu.Unlock()
	return total
}

func (m *loadMeter) last() (float64, float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastCPU, m.lastRate
}

// shedder lowers the Last-N of the node's rooms, one step at a time, while the
// node is over its CPU or its egress threshold, and gives the steps back when
// both have fallen.
// Lowering Last-N first drops the video of the participants who spoke least
// recently — the tiles receivers look at least — so the least-affected
// receivers lose quality first; audio, the dominant speaker and pinned
// participants are never shed.
type shedder struct {
	max       float64 // CPU share, 0: no CPU limit
	maxEgress float64 // Mbit/s sent, 0: no egress limit
	level     atomic.Int32
	over      int
	under     int
	// orig is each room's Last-N before shedding began.
	orig map[string]int
}

const (
	shedMinLastN = 2
	shedOverN    = 3 // heartbeats over the threshold before a step down
	shedUnderN   = 6 // heartbeats under 70% of it before a step back up
)

func (s *shedder) init(maxCPU, maxEgressMbps float64) {
	s.max, s.maxEgress, s.orig = maxCPU, maxEgressMbps, map[string]int{}
}

// over and under say whether a load is over its limit, or under 70% of it
// (the hysteresis band between holds the level); a limit of 0 is never over
// and always under.
func over(v, limit float64) bool  { return limit > 0 && v > limit }
func under(v, limit float64) bool { return limit <= 0 || v < 0.7*limit }

// update runs on the heartbeat goroutine only.
func (s *shedder) update(n *Node, cpu, egressMbps float64) {
	if s.max <= 0 && s.maxEgress <= 0 {
		return
	}
	switch {
	case over(cpu, s.max) || over(egressMbps, s.maxEgress):
		s.over, s.under = s.over+1, 0
	case under(cpu, s.max) && under(egressMbps, s.maxEgress):
		s.under, s.over = s.under+1, 0
	default:
		s.over, s.under = 0, 0
	}
	lvl := int(s.level.Load())
	switch {
	case s.over >= shedOverN:
		s.over = 0
		if lvl >= s.maxUseful(n) {
			return // every room is at the floor: more steps would only slow recovery
		}
		lvl++
	case s.under >= shedUnderN && lvl > 0:
		s.under = 0
		lvl--
	default:
		return
	}
	s.level.Store(int32(lvl))
	n.log.Warn("cluster load shedding", "level", lvl, "cpu", cpu, "max_cpu", s.max, "egress_mbps", egressMbps, "max_egress_mbps", s.maxEgress)
	for _, r := range n.mgr.Rooms() {
		name := r.Name()
		orig, ok := s.orig[name]
		if !ok {
			orig = r.LastN()
			s.orig[name] = orig
		}
		full := orig
		if full == 0 {
			full = len(r.Participants()) - 1
		}
		target := max(full-lvl, shedMinLastN)
		if lvl == 0 || target >= full {
			r.SetLastN(orig)
			delete(s.orig, name)
			continue
		}
		r.SetLastN(target)
	}
}

// maxUseful is the level at which every room is at the Last-N floor.
func (s *shedder) maxUseful(n *Node) int {
	m := 0
	for _, r := range n.mgr.Rooms() {
		full, ok := s.orig[r.Name()]
		if !ok {
			full = r.LastN()
		}
		if full == 0 {
			full = len(r.Participants()) - 1
		}
		m = max(m, full-shedMinLastN)
	}
	return m
}

// probeLoop measures the HTTP round trip to every other node (best of three
// every 5 s), so that placement knows the distances before any room is
// shared, and has an estimate free of the link's queueing once one is.
func (n *Node) probeLoop() {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		for _, peer := range n.Nodes() {
			if peer.ID == n.id {
				continue
			}
			best := -1.0
			for i := 0; i < 3; i++ {
				ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, peer.URL+"/healthz", nil)
				t0 := time.Now()
				resp, err := n.http.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if ms := float64(time.Since(t0)) / 1e6; best < 0 || ms < best {
						best = ms
					}
				}
				cancel()
			}
			if best >= 0 {
				n.mu.Lock()
				n.probeRTT[peer.ID] = best
				n.mu.Unlock()
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// startDrain asks every client of this node to reconnect to another node,
// then closes those still here after the grace period.
func (n *Node) startDrain() {
	if n.draining.Swap(true) {
		return
	}
	gen := n.drainGen.Add(1)
	n.log.Warn("cluster node draining")
	go func() {
		withdrawn := func() bool { return n.drainGen.Load() != gen || !n.draining.Load() }
		deadline := time.Now().Add(n.cfg.DrainGrace)
		for time.Now().Before(deadline) {
			if withdrawn() {
				return
			}
			if n.askToMove() == 0 {
				n.log.Info("cluster node drained")
				return
			}
			select {
			case <-n.ctx.Done():
				return
			case <-time.After(3 * time.Second):
			}
		}
		if withdrawn() {
			return
		}
		for _, r := range n.mgr.Rooms() {
			for _, p := range r.Participants() {
				if p.Origin() == sfu.Client {
					p.Kick("node_drained", "this node was drained")
				}
			}
		}
	}()
}

// stopDrain withdraws a drain (the operator's undrain): the node is offered
// to new participants again from its next heartbeat, and those that have not
// moved yet stay (a reconnect hint already sent cannot be taken back).
func (n *Node) stopDrain() {
	if n.draining.Swap(false) {
		n.drainGen.Add(1)
		n.log.Warn("cluster node drain withdrawn")
	}
}

// askToMove sends each client on this node a reconnect hint naming the best
// other node for its room, and returns how many clients are still here.
func (n *Node) askToMove() int {
	others := []NodeInfo{}
	for _, x := range n.Nodes() {
		if x.ID != n.id {
			others = append(others, x)
		}
	}
	left := 0
	for _, r := range n.mgr.Rooms() {
		for _, p := range r.Participants() {
			if p.Origin() != sfu.Client {
				continue
			}
			left++
			c := Place(others, r.Name(), nil, n.cfg.MaxCPU)
			if len(c) == 0 {
				continue // nowhere to go: stay until the grace period ends
			}
			n.hint(p, c[0].Node, "drain")
		}
	}
	return left
}

// maxClientRTT bounds a client's reported round trip (ms): larger values
// are not measurements.
const maxClientRTT = 60000

// AdminHandler serves the operator's cluster endpoints; the caller checks
// the admin grant (server/cluster.go):
//
//	GET  /v1/admin/cluster/nodes               live node records (load, rooms, RTTs)
//	POST /v1/admin/cluster/nodes/{id}/drain    as petrel cluster drain, without waiting
//	POST /v1/admin/cluster/nodes/{id}/undrain  as petrel cluster undrain
func (n *Node) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/admin/cluster/nodes", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"self": n.id, "nodes": n.Nodes()})
	})
	for _, op := range []string{"drain", "undrain"} {
		mux.HandleFunc("POST /v1/admin/cluster/nodes/{id}/"+op, func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			var err error
			if op == "drain" {
				err = n.reg.Drain(ctx, id)
			} else {
				err = n.reg.Undrain(ctx, id)
			}
			if err != nil {
				n.log.Info("cluster admin request failed", "op", op, "node", id, "err", err)
				code := http.StatusServiceUnavailable
				if errors.Is(err, ErrNoNode) {
					code = http.StatusNotFound
				}
				httpErr(w, code, fmt.Sprintf("%s %s: %v", op, id, err))
				return
			}
			n.log.Info("cluster admin request", "op", op, "node", id)
			writeJSON(w, map[string]any{"node": id, "op": op})
		})
	}
	return mux
}

// Handler serves the cluster's HTTP endpoints:
//
//	GET  /v1/cluster/nodes  live nodes (id, URLs, load, draining) for client placement
//	POST /v1/cluster/place  {room, rtt: {node id: ms}, exclude: [node id], token} -> the node to join
//	                        (with the participant's token the decision is recorded and may
//	                        re-place the room: replace.go, replacestate.go)
//	POST /v1/cluster/link   a node's link offer (cluster token)
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/cluster/nodes", func(w http.ResponseWriter, _ *http.Request) {
		type pub struct {
			ID       string  `json:"id"`
			URL      string  `json:"url"`
			WS       string  `json:"ws"`
			Draining bool    `json:"draining"`
			CPU      float64 `json:"cpu"`
			Parts    int     `json:"participants"`
		}
		var out []pub
		for _, x := range n.Nodes() {
			// Room names and identities stay in Redis: clients need only the nodes.
			out = append(out, pub{ID: x.ID, URL: x.URL, WS: x.WSURL(), Draining: x.Draining, CPU: x.Load.CPU, Parts: x.Load.Participants})
		}
		writeJSON(w, map[string]any{"self": n.id, "nodes": out})
	})
	mux.HandleFunc("POST /v1/cluster/place", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Room string             `json:"room"`
			RTT  map[string]float64 `json:"rtt"`
			// Exclude names nodes the client could not use (the one it just
			// lost: the others may not have noticed yet).
			Exclude []string `json:"exclude"`
			// Token is the participant's access token: with it the placement
			// is recorded for its identity and may re-place the room.
			Token string `json:"token"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil || req.Room == "" || len(req.Room) > 128 || len(req.RTT) > 1000 {
			httpErr(w, http.StatusBadRequest, "place takes JSON {room, rtt: {node id: milliseconds}, token}")
			return
		}
		identity := ""
		if req.Token != "" && n.verify != nil {
			room, id, err := n.verify(req.Token)
			if err != nil || room != req.Room || id == "" {
				n.log.Info("cluster place: token refused", "room", req.Room, "remote", r.RemoteAddr, "err", err, "token_room", room)
				httpErr(w, http.StatusUnauthorized, "place: the token is not valid for this room")
				return
			}
			identity = id
		}
		var cands, live []NodeInfo
		stale := time.Now().Add(-3 * n.cfg.Heartbeat).UnixMilli()
	next:
		for _, x := range n.Nodes() {
			if x.Updated < stale && x.ID != n.id {
				continue // missed heartbeats: probably lost
			}
			live = append(live, x)
			for _, e := range req.Exclude {
				if x.ID == e {
					continue next
				}
			}
			cands = append(cands, x)
		}
		if identity != "" {
			// Only round trips to live nodes, within reason, are kept (they
			// are stored in Redis with the placement).
			rtt := map[string]float64{}
			for _, x := range live {
				if v, ok := req.RTT[x.ID]; ok && v >= 0 && v <= maxClientRTT {
					rtt[x.ID] = v
				}
			}
			req.RTT = rtt
			ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
			node, plan, err := n.placeJoin(ctx, req.Room, identity, req.RTT, live, cands)
			cancel()
			if err == nil {
				writeJSON(w, map[string]any{"node": node.ID, "url": node.URL, "ws": node.WSURL(), "delayMs": plan.Cost, "moved": len(plan.Moves)})
				return
			}
			if errors.Is(err, errNoCandidate) {
				httpErr(w, http.StatusServiceUnavailable, "no node can take participants")
				return
			}
			// Redis failed: place without the room's records.
			n.log.Warn("cluster place: room state unavailable", "room", req.Room, "err", err)
		}
		c := Place(cands, req.Room, req.RTT, n.cfg.MaxCPU)
		if len(c) == 0 {
			httpErr(w, http.StatusServiceUnavailable, "no node can take participants")
			return
		}
		writeJSON(w, map[string]any{"node": c[0].Node.ID, "url": c[0].Node.URL, "ws": c[0].Node.WSURL(), "delayMs": c[0].DelayMS})
	})
	mux.HandleFunc("POST /v1/cluster/link", n.serveLink)
	return mux
}
