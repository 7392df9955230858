package cluster

import (
	"context"
	"time"
)

// Pull makes room's tracks available on this node for a session that is not
// a participant of the room: a WHEP viewer on this node of a room whose
// publishers are on other nodes. The node hosts the room while the session
// lives (until release is called): its record names the room, the nodes
// hosting it link to this one and export their participants, and the
// viewer's demand decides which layers cross. Pull returns once a track of
// the room's is here, once the room turns out to have no participant on
// another node, or when ctx ends; the caller goes on either way (its own
// "no publisher" answer is right if nothing came).
func (n *Node) Pull(ctx context.Context, room string) (release func()) {
	n.mu.Lock()
	n.pulled[room]++
	n.mu.Unlock()
	release = func() {
		n.mu.Lock()
		if n.pulled[room]--; n.pulled[room] <= 0 {
			delete(n.pulled, room)
		}
		n.mu.Unlock()
	}
	if n.hasTracks(room) {
		return release
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	members, err := n.reg.Room(rctx, room)
	cancel()
	if err != nil {
		n.log.Warn("cluster pull: room membership", "room", room, "err", err)
		return release
	}
	elsewhere := false
	for _, node := range members {
		if node != n.id {
			elsewhere = true
			break
		}
	}
	if !elsewhere {
		return release
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !n.hasTracks(room) {
		select {
		case <-ctx.Done():
			n.log.Info("cluster pull: no track arrived", "room", room, "err", ctx.Err())
			return release
		case <-tick.C:
		}
	}
	return release
}

func (n *Node) isPulled(room string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pulled[room] > 0
}

// hasTracks reports whether room has a published track on this node (its own
// participants' or mirrors').
func (n *Node) hasTracks(room string) bool {
	r := n.mgr.Room(room)
	if r == nil {
		return false
	}
	for _, p := range r.Participants() {
		if len(p.Publications()) > 0 {
			return true
		}
	}
	return false
}
