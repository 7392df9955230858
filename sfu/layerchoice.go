package sfu

import (
	"sync/atomic"
	"time"
)

// LayerStale is how long the simulcast layer a sink takes may be silent,
// while a lower one flows, before the sink moves down to that one.
const LayerStale = 2 * time.Second

// LayerChoice is how a sink that takes one simulcast layer (a recording, a
// muxer, an egress) picks it: the highest layer sent, up at once, down only
// when the chosen one has been silent for LayerStale (the publisher dropped
// it). Padding is taken on the chosen layer only: it holds sequence numbers
// but says nothing of which layers are sent. The zero value has chosen none;
// Take is safe on the forwarding goroutines of several layers.
type LayerChoice struct {
	plus1 atomic.Int32 // the chosen layer + 1 (0: none yet)
	seen  atomic.Int64 // arrival (sfu clock) of its last media packet
}

// Take reports whether p belongs to the chosen layer, choosing anew first.
func (c *LayerChoice) Take(p *Packet) bool {
	l := int32(p.Layer) + 1
	if len(p.Payload) == 0 {
		return l == c.plus1.Load()
	}
	if cur := c.plus1.Load(); l != cur {
		if l < cur && p.Arrival-c.seen.Load() < int64(LayerStale) {
			return false
		}
		if !c.plus1.CompareAndSwap(cur, l) {
			return false
		}
	}
	c.seen.Store(p.Arrival)
	return true
}

// Layer is the chosen layer (-1: none yet).
func (c *LayerChoice) Layer() int32 { return c.plus1.Load() - 1 }
