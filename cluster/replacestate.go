package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/petrel-sfu/petrel/sfu"
)

// Placement records: the /v1/cluster/place handler writes its decision for a
// participant (the node, the client's measured round trips, when) into
//
//	petrel:place:<room>      hash identity -> JSON placeRec
//
// at the moment it decides, before the client has joined: the next
// placement in the room sees a participant whose join is in progress (the
// heartbeat publishes membership only once the join is done), and re-
// placement knows every participant's round trips. Moves are announced on
//
//	petrel:moves             pub/sub channel of JSON moveMsg
//
// and the node holding the participant sends it the drain's reconnect hint.
const (
	prefPlace = "petrel:place:"
	prefLock  = "petrel:placelock:"
	chanMoves = "petrel:moves"

	// pendingGrace: a placement not yet in the room's membership counts as
	// a join in progress this long.
	pendingGrace = 10 * time.Second
	// moveGrace: a participant asked to move counts on its new node this
	// long, whatever the membership says meanwhile.
	moveGrace = 15 * time.Second
	// replaceEvery: a participant is moved at most once in this period
	// (hysteresis: a growing room does not bounce anyone between nodes).
	replaceEvery = 30 * time.Second
)

type placeRec struct {
	Node  string             `json:"node"`
	RTT   map[string]float64 `json:"rtt,omitempty"`
	At    int64              `json:"at"`              // unix ms of the placement
	Moved int64              `json:"moved,omitempty"` // unix ms of the last move asked
}

type moveMsg struct {
	Room     string `json:"room"`
	Identity string `json:"identity"`
	From     string `json:"from"`
	To       string `json:"to"`
}

// roomState reads a room's membership (identity -> node) and placement
// records.
func (r *Registry) roomState(ctx context.Context, room string) (map[string]string, map[string]placeRec, error) {
	pipe := r.rdb.Pipeline()
	m := pipe.HGetAll(ctx, prefRoom+room)
	p := pipe.HGetAll(ctx, prefPlace+room)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	recs := map[string]placeRec{}
	for id, s := range p.Val() {
		var rec placeRec
		if json.Unmarshal([]byte(s), &rec) == nil && rec.Node != "" {
			recs[id] = rec
		}
	}
	return m.Val(), recs, nil
}

// recordPlacements writes placement records and drops stale ones.
func (r *Registry) recordPlacements(ctx context.Context, room string, recs map[string]placeRec, stale []string) error {
	pipe := r.rdb.TxPipeline()
	vals := make([]any, 0, 2*len(recs))
	for id, rec := range recs {
		b, _ := json.Marshal(rec)
		vals = append(vals, id, b)
	}
	if len(stale) > 0 {
		pipe.HDel(ctx, prefPlace+room, stale...)
	}
	if len(vals) > 0 {
		pipe.HSet(ctx, prefPlace+room, vals...)
		pipe.Expire(ctx, prefPlace+room, roomTTL)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// lockRoom serializes placements in a room across nodes (two joins decided
// at once would each miss the other). It waits up to a second, then goes on
// without the lock rather than refuse a join.
func (r *Registry) lockRoom(ctx context.Context, room string) func() {
	tok := time.Now().String()
	deadline := time.Now().Add(time.Second)
	for {
		ok, err := r.rdb.SetNX(ctx, prefLock+room, tok, 2*time.Second).Result()
		if err != nil || ok || time.Now().After(deadline) {
			if !ok {
				return func() {}
			}
			return func() {
				r.rdb.Eval(context.Background(), `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`, []string{prefLock + room}, tok)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// placeJoin decides where identity (of room, with measured round trips rtt)
// goes, records it, and announces the moves of others. candidates are the
// nodes it may go to; live all nodes with fresh records.
func (n *Node) placeJoin(ctx context.Context, room, identity string, rtt map[string]float64, live, candidates []NodeInfo) (NodeInfo, Plan, error) {
	unlock := n.reg.lockRoom(ctx, room)
	defer unlock()
	members, recs, err := n.reg.roomState(ctx, room)
	if err != nil {
		return NodeInfo{}, Plan{}, err
	}
	now := time.Now()
	ms := now.UnixMilli()
	isLive := map[string]bool{}
	for _, x := range live {
		isLive[x.ID] = true
	}
	var people []Person
	for id, node := range members {
		if id == identity {
			continue
		}
		p := Person{Identity: id, Node: node, Fixed: true}
		if rec, ok := recs[id]; ok {
			p.RTT = rec.RTT
			moved := time.Duration(ms-rec.Moved) * time.Millisecond
			if rec.Moved > 0 && moved < moveGrace && rec.Node != node && isLive[rec.Node] {
				p.Node = rec.Node // on its way there
			}
			p.Fixed = rec.Moved > 0 && moved < replaceEvery
		}
		if isLive[p.Node] {
			people = append(people, p)
		}
	}
	var stale []string
	for id, rec := range recs {
		if _, in := members[id]; in || id == identity {
			continue
		}
		if time.Duration(ms-rec.At)*time.Millisecond < pendingGrace && isLive[rec.Node] {
			people = append(people, Person{Identity: id, Node: rec.Node, RTT: rec.RTT, Fixed: true}) // joining
		} else {
			stale = append(stale, id) // left, or never came
		}
	}
	// Place (the joiner alone, everyone else where they are) sees the
	// membership as recorded here, joins in progress included.
	where := map[string][]Member{}
	for _, p := range people {
		where[p.Node] = append(where[p.Node], Member{Identity: p.Identity})
	}
	view := make([]NodeInfo, len(candidates))
	cset := map[string]bool{}
	for i, x := range candidates {
		x.Rooms = map[string][]Member{room: where[x.ID]}
		view[i] = x
		cset[x.ID] = true
	}
	ranked := Place(view, room, rtt, n.cfg.MaxCPU)
	if len(ranked) == 0 {
		return NodeInfo{}, Plan{}, errNoCandidate
	}
	plan := placeRoom(live, cset, people, Person{Identity: identity, RTT: rtt}, ranked[0].Node.ID, n.cfg.MaxCPU)
	out := map[string]placeRec{identity: {Node: plan.Node, RTT: rtt, At: ms}}
	var moves []moveMsg
	for id, to := range plan.Moves {
		rec := recs[id]
		from := members[id]
		rec.Node, rec.Moved = to, ms
		out[id] = rec
		moves = append(moves, moveMsg{Room: room, Identity: id, From: from, To: to})
	}
	if err := n.reg.recordPlacements(ctx, room, out, stale); err != nil {
		return NodeInfo{}, Plan{}, err
	}
	for _, mv := range moves {
		b, _ := json.Marshal(mv)
		if err := n.rdb.Publish(ctx, chanMoves, b).Err(); err != nil {
			n.log.Warn("cluster re-placement: announce a move", "room", room, "identity", mv.Identity, "err", err)
		}
	}
	if len(moves) > 0 {
		mReplaced.Add(float64(len(moves)))
		n.log.Info("cluster room re-placed", "room", room, "joiner", identity, "on", plan.Node,
			"moves", plan.sortedMoves(), "delay_ms", round1(plan.Cost), "without_moves_ms", round1(plan.Stay))
	}
	for _, x := range candidates {
		if x.ID == plan.Node {
			return x, plan, nil
		}
	}
	return ranked[0].Node, plan, nil
}

var errNoCandidate = errors.New("no node can take participants")

func round1(v float64) float64 { return float64(int(v*10+0.5)) / 10 }

// moveLoop acts on the moves announced for this node's participants: each
// gets the drain's reconnect hint naming its new node (the client joins
// there, then leaves here: make before break).
func (n *Node) moveLoop() {
	sub := n.rdb.Subscribe(n.ctx, chanMoves)
	defer sub.Close()
	ch := sub.Channel()
	for {
		select {
		case <-n.ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			var mv moveMsg
			if err := json.Unmarshal([]byte(m.Payload), &mv); err != nil {
				n.log.Warn("cluster move: bad message", "err", err)
				continue
			}
			if mv.From == n.id {
				n.moveLocal(mv)
			}
		}
	}
}

func (n *Node) moveLocal(mv moveMsg) {
	r := n.mgr.Room(mv.Room)
	if r == nil {
		return
	}
	var to *NodeInfo
	for _, x := range n.Nodes() {
		if x.ID == mv.To {
			to = &x
			break
		}
	}
	if to == nil {
		n.log.Info("cluster move: target node gone", "room", mv.Room, "identity", mv.Identity, "to", mv.To)
		return
	}
	for _, p := range r.Participants() {
		if p.Identity() == mv.Identity && p.Origin() == sfu.Client {
			n.hint(p, *to, "placement")
			n.log.Info("cluster move: participant asked to reconnect", "room", mv.Room, "identity", mv.Identity, "to", to.ID)
		}
	}
}
