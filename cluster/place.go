package cluster

import (
	"math"
	"sort"
)

// Placement: a new participant goes to the node that minimizes the expected
// one-way delay to the people it will talk to, i.e. half its round trip to the
// candidate plus, for each participant already in the room, half the round
// trip between the candidate and that participant's node (zero on the same
// node). Routing through a nearby node is not assumed to be shorter: the
// client's measured round trips and the nodes' measured round trips decide.
// Candidates within placeTolerance of the best are then ordered so that the
// room is not split when a node that already hosts it serves well, then by load.

// placeTolerance is the expected-delay margin (ms) within which candidates
// count as equally good.
const placeTolerance = 10.0

// unknownRTT stands for a round trip nobody measured (ms).
const unknownRTT = 250.0

// Candidate is a node's score for one participant.
type Candidate struct {
	Node    NodeInfo `json:"node"`
	DelayMS float64  `json:"delayMs"`
	Hosts   int      `json:"hosts"` // participants of the room already on it
}

// Place ranks the live nodes for a participant of room whose round trips to
// nodes are clientRTT (ms by node id; nil or missing: unknown). maxCPU is the
// share of CPU above which a node is placed on only if all are.
func Place(nodes []NodeInfo, room string, clientRTT map[string]float64, maxCPU float64) []Candidate {
	where := map[string]int{} // node id -> participants of the room
	for _, n := range nodes {
		where[n.ID] = len(n.Rooms[room])
	}
	byID := map[string]NodeInfo{}
	for _, n := range nodes {
		byID[n.ID] = n
	}
	var out []Candidate
	for _, c := range nodes {
		if c.Draining {
			continue
		}
		d := unknownRTT / 2
		if rtt, ok := clientRTT[c.ID]; ok && rtt >= 0 {
			d = rtt / 2
		} else if len(clientRTT) == 0 {
			d = 0 // nothing measured: delay does not tell nodes apart
		}
		total, people := 0.0, 0
		for id, k := range where {
			if k == 0 || id == c.ID {
				people += k
				continue
			}
			total += float64(k) * interRTT(byID, c.ID, id) / 2
			people += k
		}
		if people > 0 {
			d += total / float64(people)
		}
		out = append(out, Candidate{Node: c, DelayMS: d, Hosts: where[c.ID]})
	}
	if len(out) == 0 {
		return nil
	}
	best := math.Inf(1)
	for _, c := range out {
		if !overloaded(c.Node, maxCPU) {
			best = math.Min(best, c.DelayMS)
		}
	}
	if math.IsInf(best, 1) { // every node is over its threshold
		for _, c := range out {
			best = math.Min(best, c.DelayMS)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		oa, ob := overloaded(a.Node, maxCPU), overloaded(b.Node, maxCPU)
		if oa != ob {
			return !oa
		}
		ga, gb := a.DelayMS <= best+placeTolerance, b.DelayMS <= best+placeTolerance
		if ga != gb {
			return ga
		}
		if !ga {
			return a.DelayMS < b.DelayMS
		}
		if (a.Hosts > 0) != (b.Hosts > 0) {
			return a.Hosts > 0
		}
		if la, lb := loadScore(a.Node), loadScore(b.Node); la != lb {
			return la < lb
		}
		return a.Node.ID < b.Node.ID
	})
	return out
}

// overloaded: over the CPU threshold, or over the egress limit the node
// itself set (cluster.max_egress_mbps, in its record).
func overloaded(n NodeInfo, maxCPU float64) bool {
	return (maxCPU > 0 && n.Load.CPU > maxCPU) || over(n.Load.EgressMbps, n.Load.MaxEgressMbps)
}

// loadScore orders nodes by how busy they are: CPU first (in 10% steps, as
// finer differences are noise), then participants.
func loadScore(n NodeInfo) float64 {
	return math.Floor(n.Load.CPU*10)*1e6 + float64(n.Load.Participants)
}

// interRTT is the measured round trip between two nodes (either's measurement).
func interRTT(nodes map[string]NodeInfo, a, b string) float64 {
	if v, ok := nodes[a].RTT[b]; ok {
		return v
	}
	if v, ok := nodes[b].RTT[a]; ok {
		return v
	}
	return unknownRTT
}
