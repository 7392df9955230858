package sfu

import (
	"sync/atomic"

	"github.com/petrel-sfu/petrel/metrics"
)

// Fast start for tracks whose source cannot be asked for a keyframe (an RTSP
// camera, plain RTP) or answers slowly: a new subscriber starts at once from the
// last keyframe still in the layer's packet cache, followed by every packet
// since (the rest of the GOP, so that the frames after it decode correctly),
// instead of waiting up to a whole GOP for the next keyframe.
//
// The layer's reader notes where the last keyframe began (noteGOP); the
// DownTrack's first write replays the cache from there (replayGOP), or the
// reader does when the subscriber's transport comes up (replayWaiting). All run on
// the layer's reader goroutine, the only writer of the cache, so the cached
// packets older than the one being forwarded are stable during the replay.

// gopIndex is the sequence number of the first packet of the layer's last
// keyframe (bit 16 set when valid), and that keyframe's timestamp.
type gopIndex struct {
	start atomic.Uint32
	ts    uint32 // reader goroutine only
	// next is the sequence number after the newest packet read (valid when
	// seen): a subscriber woken into the stream is replayed up to it.
	next uint16
	seen bool
}

// waker is a Source whose pending ReadRTP can be made to return no packet
// (0, nil), so that the reader starts the subscribers whose transport just
// came up (LocalTrack: an RTSP or RTP camera, the camera wall).
type waker interface{ Wake() }

// SetGOPStart enables (or disables) starting new subscribers of t from the
// cached last GOP.
func (t *Publication) SetGOPStart(on bool) { t.gopStart.Store(on) }

// HasSinks reports whether a Go sink (a recorder) receives the track.
func (t *Publication) HasSinks() bool { return t.hasSinks() }

// noteGOP records where a keyframe begins: the first keyframe packet with a
// new timestamp (parameter sets and the IDR's first fragment share it).
func (l *layer) noteGOP(p *Packet) {
	if !p.Keyframe || !l.pub.gopStart.Load() {
		return
	}
	g := &l.gop
	if cur := g.start.Load(); cur&(1<<16) != 0 && g.ts == p.Header.Timestamp {
		return
	}
	g.ts = p.Header.Timestamp
	g.start.Store(1<<16 | uint32(p.Header.SequenceNumber))
	l.cache.Pin(p.Header.SequenceNumber)
}

// noteNewest records p as the newest packet read, for replayWaiting.
func (l *layer) noteNewest(p *Packet) {
	if !l.pub.gopStart.Load() {
		return
	}
	g := &l.gop
	if next := p.Header.SequenceNumber + 1; !g.seen || int16(next-g.next) > 0 {
		g.next, g.seen = next, true
	}
}

// replayWaiting starts, from the cached GOP, the subscribers whose transport
// came up since the layer's last packet (transportReady woke the reader),
// instead of at the next packet: a frame interval away, or much more for a
// camera that sends only when the picture changes. Reader goroutine only.
func (l *layer) replayWaiting() {
	if !l.pub.gopStart.Load() || !l.gop.seen {
		return
	}
	for _, d := range l.pub.Subscribers() {
		if d.needSync.Load() && int8(d.target.Load()) == l.index {
			d.replayCached(l, l.gop.next, now())
		}
	}
}

// replayGOP starts a subscriber that has received nothing yet from the cached
// last keyframe, when p (not itself a keyframe) would otherwise make it wait.
// It writes the cached packets before p through writeRTP; p follows normally.
func (d *DownTrack) replayGOP(p *Packet) {
	if p.Keyframe || p.Layer != int8(d.target.Load()) {
		return
	}
	if l := d.pub.layer(p.Layer); l != nil {
		d.replayCached(l, p.Header.SequenceNumber, p.Arrival)
	}
}

// replayCached writes a subscriber that has received nothing yet the cached
// packets of l from its last keyframe up to (not including) until. Reader
// goroutine of l only: the cached packets it reads are stable.
func (d *DownTrack) replayCached(l *layer, until uint16, arrival int64) {
	if !d.pub.gopStart.Load() || d.pub.kind != Video || !d.needSync.Load() || !d.bound.Load() || d.paused.Load() {
		return
	}
	d.mu.Lock()
	// Not started: nothing reached the subscriber yet (a write refused before
	// DTLS was up leaves current set but started false).
	fresh := !d.started
	d.mu.Unlock()
	if !fresh {
		return
	}
	g := l.gop.start.Load()
	if g&(1<<16) == 0 {
		return
	}
	from := uint16(g)
	span := until - from
	if span == 0 || int(span) >= len(l.cache.slots) || int16(span) < 0 {
		return // the keyframe is no longer cached (or p is older): wait for the next
	}
	buf := make([]byte, maxPacket)
	var q Packet
	for seq := from; seq != until; seq++ {
		n := l.cache.Get(seq, buf)
		if n == 0 {
			return // a hole: the rest would not decode; p's normal path waits
		}
		payload, ok := splitRTP(&q.Header, buf[:n])
		if !ok {
			return
		}
		q.Payload = payload
		q.Layer = l.index
		q.Keyframe = isKeyframe(l.pub.ck, payload)
		q.VP8 = vp8Descriptor{}
		if l.pub.ck == codecVP8 {
			q.VP8 = parseVP8(payload)
		}
		q.Arrival = arrival
		if !d.writeRTP(&q) && seq == from {
			return // transport not up yet: try again on a later packet
		}
	}
	metrics.GOPStarts.Inc()
}

// CachedGOP hands fn the cached packets of the base layer from the start of
// the last keyframe to the newest, in order, and returns the sequence number
// after the last one (ok false when no keyframe is cached). A sink attached
// just before (AddSink) and skipping what precedes next continues the stream
// without a gap: the HTTP live fallback starts at once from it. It may run on
// any goroutine: cache slots are read under their lock and checked by sequence
// number, so a slot overwritten meanwhile ends the replay early.
func (t *Publication) CachedGOP(fn func(p *Packet)) (next uint16, ok bool) {
	l := t.layer(0)
	if l == nil || t.kind != Video {
		return 0, false
	}
	g := l.gop.start.Load()
	if g&(1<<16) == 0 {
		return 0, false
	}
	buf := make([]byte, maxPacket)
	var q Packet
	seq := uint16(g)
	for i := 0; i < len(l.cache.slots); i++ {
		n := l.cache.Get(seq, buf)
		if n == 0 {
			break
		}
		payload, valid := splitRTP(&q.Header, buf[:n])
		if !valid {
			break
		}
		q.Payload = payload
		q.Keyframe = isKeyframe(t.ck, payload)
		q.Arrival = now()
		fn(&q)
		seq++
		ok = true
	}
	return seq, ok
}

// SinkCount is how many Go sinks receive the track.
func (t *Publication) SinkCount() int {
	if s := t.sinks.Load(); s != nil {
		return len(*s)
	}
	return 0
}
