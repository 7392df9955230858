package cluster

import (
	"math"
	"sort"
)

// Re-placement: placement decided once per participant, against those
// already in the room, lets the first participants pull a growing room onto
// their node (docs/benchmarks.md, "Placement by measured RTT"). At each join
// the whole room's assignment is evaluated instead, and participants whose
// node changes in a better one are moved (the drain's reconnect hint).
//
// The cost of an assignment is the room's expected one-way delay: the mean,
// over ordered pairs (i, j) of participants, of
//
//	rtt(i, node(i))/2 + rtt(node(i), node(j))/2 + rtt(j, node(j))/2
//
// with each participant's measured round trips to the nodes and the nodes'
// measured round trips to each other (zero on the same node). Summed over the
// pairs this is (1/n) Σ rtt(i, node(i)) + Σ_k Σ_l m_k m_l rtt(k, l) / (2n(n-1))
// with m_k participants on node k, which is what roomCost computes. A room of
// one costs its participant's half round trip.

// Person is a participant of a room as placement sees it.
type Person struct {
	Identity string
	// Node is where the participant is (or is joining, or moving to); empty
	// for the one being placed.
	Node string
	// RTT is the client's measured round trip to nodes (ms by node id); nil
	// when it was never measured (it then counts as zero to its own node).
	RTT map[string]float64
	// Fixed participants stay where they are: joining, moved recently, or
	// not clients (cameras, recorders). Those never measured stay too.
	Fixed bool
}

// Plan is a room's placement decision at a join.
type Plan struct {
	Node  string            // where the participant being placed goes
	Moves map[string]string // identity -> node, for the others who move
	Cost  float64           // the room's expected delay with the plan (ms)
	// Stay is the cost had nobody moved (the joiner on its own best node).
	Stay float64
}

// Margins: a better assignment must win by max(marginMS, marginFrac of the
// cost) to split a room one node could serve, or to move anybody. They cover
// the RTT measurements' noise and the cost of a move, and stay below the gain
// of the three-region benchmark's split (docs/benchmarks.md), so it is taken.
const (
	marginMS   = 2.0
	marginFrac = 0.05
	// costEqual: assignments closer than this count as equally good; fewer
	// moves, then less load decide.
	costEqual = 0.25
	// exhaustiveMax bounds the assignments enumerated; larger rooms use local
	// search from several starts.
	exhaustiveMax = 50000
	// singleMovesMax: above this many movable participants the local search
	// moves groups only, which keeps a placement in a room of thousands to
	// milliseconds.
	singleMovesMax = 200
)

func margin(cost float64) float64 { return math.Max(marginMS, marginFrac*cost) }

// placeRoom decides where joiner goes and who else moves. nodes are the live
// nodes (their RTT maps give the node-to-node round trips); people are the
// room's other participants; joiner is the one being placed (Node empty);
// stayNode is where it would go with nobody moving (Place's choice). Nodes
// draining, excluded (not in candidates) or over maxCPU take nobody new.
func placeRoom(nodes []NodeInfo, candidates map[string]bool, people []Person, joiner Person, stayNode string, maxCPU float64) Plan {
	byID := map[string]NodeInfo{}
	for _, n := range nodes {
		byID[n.ID] = n
	}
	// Node indices: candidates first (movable people may go there), then
	// the nodes of fixed people.
	var ids []string
	idx := map[string]int{}
	add := func(id string) {
		if _, ok := idx[id]; !ok {
			idx[id] = len(ids)
			ids = append(ids, id)
		}
	}
	var cands []int
	for _, n := range nodes {
		if candidates[n.ID] && !n.Draining && !overloaded(n, maxCPU) {
			add(n.ID)
			cands = append(cands, idx[n.ID])
		}
	}
	all := append([]Person{joiner}, people...)
	for _, p := range all[1:] {
		if p.Node != "" {
			add(p.Node)
		}
	}
	add(stayNode)
	K := len(ids)
	d := make([]float64, K*K)
	for a := range ids {
		for b := range ids {
			if a != b {
				d[a*K+b] = interRTT(byID, ids[a], ids[b])
			}
		}
	}
	// Client round trips: unknown ones are unknownRTT, except that someone
	// never measured counts zero everywhere (nothing tells nodes apart).
	n := len(all)
	c := make([]float64, n*K)
	for i, p := range all {
		for k, id := range ids {
			switch v, ok := p.RTT[id]; {
			case ok && v >= 0:
				c[i*K+k] = v
			case len(p.RTT) == 0:
				c[i*K+k] = 0
			default:
				c[i*K+k] = unknownRTT
			}
		}
	}
	cur := make([]int, n) // the stay assignment
	cur[0] = idx[stayNode]
	var movable []int
	if len(cands) > 0 {
		movable = append(movable, 0)
	}
	for i := 1; i < n; i++ {
		cur[i] = idx[all[i].Node]
		if !all[i].Fixed && len(all[i].RTT) > 0 && len(cands) > 0 {
			movable = append(movable, i)
		}
	}
	counts := make([]int, K)
	cost := func(at []int) float64 {
		for k := range counts {
			counts[k] = 0
		}
		s := 0.0
		for i, k := range at {
			s += c[i*K+k]
			counts[k]++
		}
		if n == 1 {
			return s / 2
		}
		pairs := 0.0
		for a := 0; a < K; a++ {
			if counts[a] == 0 {
				continue
			}
			for b := 0; b < K; b++ {
				pairs += float64(counts[a]*counts[b]) * d[a*K+b]
			}
		}
		return s/float64(n) + pairs/(2*float64(n)*float64(n-1))
	}
	load := func(at []int) float64 {
		s := 0.0
		for _, k := range at {
			s += loadScore(byID[ids[k]])
		}
		return s
	}
	moves := func(at []int) int {
		m := 0
		for i := 1; i < n; i++ {
			if at[i] != cur[i] {
				m++
			}
		}
		return m
	}
	split := func(at []int) bool {
		for _, k := range at {
			if k != at[0] {
				return true
			}
		}
		return false
	}
	type cand struct {
		at    []int
		cost  float64
		moves int
		load  float64
	}
	mk := func(at []int) cand {
		a := append([]int(nil), at...)
		return cand{a, cost(a), moves(a), load(a)}
	}
	better := func(x, y cand) bool {
		if math.Abs(x.cost-y.cost) > costEqual {
			return x.cost < y.cost
		}
		if x.moves != y.moves {
			return x.moves < y.moves
		}
		return x.load < y.load
	}
	stay := mk(cur)
	plan := Plan{Node: stayNode, Cost: stay.cost, Stay: stay.cost}
	if len(movable) == 0 {
		return plan
	}
	// The best assignment overall, and the best on a single node (when the
	// fixed participants allow one).
	var best, single *cand
	consider := func(at []int) {
		x := mk(at)
		if best == nil || better(x, *best) {
			best = &x
		}
		if !split(at) && (single == nil || better(x, *single)) {
			single = &x
		}
	}
	at := append([]int(nil), cur...)
	total := 1.0
	for range movable {
		total *= float64(len(cands))
	}
	if total <= exhaustiveMax {
		var rec func(m int)
		rec = func(m int) {
			if m == len(movable) {
				consider(at)
				return
			}
			for _, k := range cands {
				at[movable[m]] = k
				rec(m + 1)
			}
		}
		rec(0)
	} else {
		// Local search from the stay assignment, from everyone movable on
		// their nearest candidate, and from everyone movable on each
		// candidate; single moves and moves of groups (the movable
		// participants sharing a nearest node) until nothing improves.
		nearest := func(i int) int {
			b := cands[0]
			for _, k := range cands {
				if c[i*K+k] < c[i*K+b] {
					b = k
				}
			}
			return b
		}
		groups := map[int][]int{}
		for _, i := range movable {
			groups[nearest(i)] = append(groups[nearest(i)], i)
		}
		starts := [][]int{append([]int(nil), cur...)}
		s := append([]int(nil), cur...)
		for _, i := range movable {
			s[i] = nearest(i)
		}
		starts = append(starts, s)
		for _, k := range cands {
			s := append([]int(nil), cur...)
			for _, i := range movable {
				s[i] = k
			}
			starts = append(starts, s)
		}
		for _, s := range starts {
			x := mk(s)
			for round := 0; round < 50; round++ {
				improved := false
				try := func(y []int) {
					if v := mk(y); better(v, x) && v.cost < x.cost-1e-9 {
						x, improved = v, true
					}
				}
				for _, i := range movable {
					if len(movable) > singleMovesMax {
						break // a big room: groups only (each try costs O(n))
					}
					for _, k := range cands {
						if x.at[i] != k {
							y := append([]int(nil), x.at...)
							y[i] = k
							try(y)
						}
					}
				}
				for _, g := range groups {
					for _, k := range cands {
						y := append([]int(nil), x.at...)
						for _, i := range g {
							y[i] = k
						}
						try(y)
					}
				}
				if !improved {
					break
				}
			}
			consider(x.at)
		}
		for _, k := range cands { // every single-node assignment, for the split rule
			s := append([]int(nil), cur...)
			for _, i := range movable {
				s[i] = k
			}
			consider(s)
		}
	}
	if best == nil {
		return plan
	}
	target := *best
	// A room is not split when one node serves it about as well.
	if split(target.at) && single != nil && single.cost-target.cost < margin(single.cost) {
		target = *single
	}
	// Nothing changes for less than the margin: nobody moves, and the joiner
	// goes where Place put it (near, on a node hosting the room, least loaded).
	if stay.cost-target.cost < margin(stay.cost) {
		return plan
	}
	plan = Plan{Node: ids[target.at[0]], Cost: target.cost, Stay: stay.cost}
	for i := 1; i < n; i++ {
		if target.at[i] != cur[i] {
			if plan.Moves == nil {
				plan.Moves = map[string]string{}
			}
			plan.Moves[all[i].Identity] = ids[target.at[i]]
		}
	}
	return plan
}

// sortedMoves lists a plan's moves by identity (logs, tests).
func (p Plan) sortedMoves() []string {
	var out []string
	for id, to := range p.Moves {
		out = append(out, id+"->"+to)
	}
	sort.Strings(out)
	return out
}
