package sfu

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// What node-to-node cascading (package cluster) needs from a room beyond local
// participants and sinks: remote simulcast tracks with several layers, the
// demand of this node's receivers for a remote track, answers to retransmission
// requests from the publication's cache, and the room's data messages.

// AddLayer adds a simulcast encoding (rid, as in layerOf) to a local track
// published with PublishLocal; the returned track feeds that layer. Layers are
// best added before media flows, so that receivers know them from the start.
func (lt *LocalTrack) AddLayer(rid string, ssrc uint32) (*LocalTrack, error) {
	t := lt.pub
	if t.kind != Video {
		return nil, errors.New("only video has simulcast layers")
	}
	if rid == "" {
		return nil, errors.New("a simulcast layer needs a rid")
	}
	nl := &LocalTrack{pub: t, ssrc: ssrc, rid: rid, q: make(chan *[]byte, cap(lt.q)), wake: make(chan struct{}, 1),
		done: make(chan struct{}), rtcpQ: make(chan []byte, 8)}
	nl.pool.New = func() any { b := make([]byte, maxPacket); return &b }
	l := t.addLayer(nl)
	if l == nil {
		return nil, fmt.Errorf("layer %q exists", rid)
	}
	l.start(nil)
	for _, d := range t.Subscribers() {
		d.chooseLayer()
	}
	// The base track's end ends every layer.
	go func() {
		select {
		case <-lt.done:
			nl.Close()
		case <-nl.done:
		}
	}()
	return nl, nil
}

// Layer is the simulcast layer index a local track feeds (0 for the base).
func (lt *LocalTrack) Layer() int8 { return layerOf(lt.rid) }

// Demand reports which layers of t this node's receivers need (each wants its
// chosen maximum and every layer below, as the publisher is told in
// trackDemand) and whether any receiver needs t at all. Paused receivers (Last-N,
// hidden tiles) need nothing. Sinks are not counted.
func (t *Publication) Demand() (layers [maxLayers]bool, active bool) {
	for _, d := range t.Subscribers() {
		if d.Paused() {
			continue
		}
		active = true
		if t.kind != Video {
			layers[0] = true // audio has its one layer
			continue
		}
		for i := 0; i <= int(d.maxLayer.Load()) && i < maxLayers; i++ {
			layers[i] = true
		}
	}
	return layers, active
}

// DemandSink is a sink that knows which layers it needs (a node link forwards
// only what the remote node's receivers want); the publisher is then asked only
// for those, not for every layer.
type DemandSink interface {
	Sink
	Demand() (layers [maxLayers]bool, active bool)
}

// sinkDemand is the union of the sinks' demand; a plain sink wants everything.
func (t *Publication) sinkDemand() (need [maxLayers]bool, any bool) {
	s := t.sinks.Load()
	if s == nil {
		return need, false
	}
	for _, x := range *s {
		ds, ok := x.(DemandSink)
		if !ok {
			return [maxLayers]bool{true, true, true}, true
		}
		l, a := ds.Demand()
		if a {
			any = true
			for i := range l {
				need[i] = need[i] || l[i]
			}
		}
	}
	return need, any
}

// CachedPacket copies the packet seq of a layer from the packet cache into dst
// and returns its length, 0 if it is no longer cached (a node answering a
// retransmission request from another node).
func (t *Publication) CachedPacket(layer int8, seq uint16, dst []byte) int {
	l := t.layer(layer)
	if l == nil {
		return 0
	}
	return l.cache.Get(seq, dst)
}

// AudioLevelExt is the RTP header extension id of the RFC 6464 audio level of
// an audio track (0: none), so that a node forwarding it can let the next node
// detect the speaker from the same levels.
func (t *Publication) AudioLevelExt() uint8 {
	if l := t.layer(0); l != nil {
		return l.levelExt
	}
	return 0
}

// Layers reports which simulcast layers exist.
func (t *Publication) Layers() (exists [maxLayers]bool) {
	exists, _ = t.activeLayers()
	return exists
}

// Counters are the packets and bytes received for t so far.
func (t *Publication) Counters() (packets, bytes uint64) { return t.packets.Load(), t.bytes.Load() }

// RoomDataTap sees every data message a room delivers, with the identities it
// was addressed to (empty: everyone). It runs on the sender's goroutine and
// must not block.
type RoomDataTap func(from *Participant, reliable bool, h DataHeader, to []string, payload []byte)

// SetDataTap installs fn for every room of m (nil removes it).
func (m *Manager) SetDataTap(fn RoomDataTap) {
	if fn == nil {
		m.dataTap.Store(nil)
		return
	}
	m.dataTap.Store(&fn)
}

type dataTapPtr = atomic.Pointer[RoomDataTap]

// LastN is the room's Last-N (0: all).
func (r *Room) LastN() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.lastN
}

// SetLastN changes the room's Last-N (0: all); load shedding lowers it.
func (r *Room) SetLastN(n int) {
	r.mu.Lock()
	r.lastN = max(n, 0)
	r.mu.Unlock()
	r.applyLastN(false)
}
