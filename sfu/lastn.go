package sfu

import (
	"sort"
	"time"

	"github.com/petrel-sfu/petrel/protocol"
)

// The room's selection loop: every decision interval it asks the speaker detector
// whether the dominant speaker changed, tells clients, recomputes which
// publishers' video each receiver gets (Last-N: the N most recent speakers plus
// pinned participants), and tells publishers which encodings anyone still needs,
// so that video nobody receives is not even sent.

const decisionInterval = 300 * time.Millisecond

func (r *Room) selectionLoop() {
	tick := time.NewTicker(decisionInterval)
	defer tick.Stop()
	audio := time.NewTicker(audioDecisionInterval)
	defer audio.Stop()
	for {
		select {
		case <-r.done:
			return
		case t := <-tick.C:
			r.decide(t)
		case t := <-audio.C:
			r.decideAudio(t)
		}
	}
}

func (r *Room) decide(t time.Time) {
	r.measureLayers()
	dom, changed := r.speakers.Decide(t)
	if changed {
		r.mu.Lock()
		if r.dominant != "" {
			r.lastSpoke[r.dominant] = t
		}
		r.dominant = dom
		r.lastSpoke[dom] = t
		r.mu.Unlock()
		r.broadcast(protocol.DominantSpeaker{ParticipantSid: dom}, nil)
	}
	r.applyLastN(changed)
	r.updateDemand()
}

// measureLayers updates every published layer's bitrate.
func (r *Room) measureLayers() {
	for _, p := range r.all() {
		for _, t := range p.publications() {
			for i := range t.layers {
				if l := t.layers[i].Load(); l != nil {
					l.measure(decisionInterval)
				}
			}
			t.svc.measure(decisionInterval)
		}
	}
}

// ranking is the room's speaker order at one moment: the participants by how
// recently they were the dominant speaker (the current one first), then by
// join time, and each one's place in that order.
type ranking struct {
	order []*Participant
	place map[string]int
}

// of is sid's place in the order; one not in it comes after everyone.
func (k *ranking) of(sid string) int {
	if i, ok := k.place[sid]; ok {
		return i
	}
	return len(k.order)
}

// ranked computes the speaker order and keeps it for currentRanking.
func (r *Room) ranked() *ranking {
	ps := r.Participants()
	r.mu.RLock()
	spoke := make(map[string]time.Time, len(r.lastSpoke))
	for k, v := range r.lastSpoke {
		spoke[k] = v
	}
	dom := r.dominant
	r.mu.RUnlock()
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if (a.sid == dom) != (b.sid == dom) {
			return a.sid == dom
		}
		ta, tb := spoke[a.sid], spoke[b.sid]
		if !ta.Equal(tb) {
			return ta.After(tb)
		}
		return a.joinedAt.Before(b.joinedAt)
	})
	k := &ranking{order: ps, place: make(map[string]int, len(ps))}
	for i, q := range ps {
		k.place[q.sid] = i
	}
	r.rank.Store(k)
	return k
}

// currentRanking is the order of the last selection round (at most
// decisionInterval old): each receiver's allocation, a few times a second
// each, orders its subscriptions by it without sorting the room again.
func (r *Room) currentRanking() *ranking {
	if k := r.rank.Load(); k != nil {
		return k
	}
	return r.ranked()
}

// applyLastN pauses or resumes each receiver's video subscriptions. Keyframes
// for video that resumes are requested once per publication, not once per
// receiver. It runs every selection round for every receiver, so the set of
// publishers a receiver gets and its list of subscriptions are reused from
// one receiver to the next.
func (r *Room) applyLastN(speakerChanged bool) {
	order := r.ranked().order
	resumed := map[*Publication]bool{}
	allowed := map[string]bool{}
	var subs []*DownTrack
	for _, p := range r.all() {
		n := p.effectiveLastN()
		p.mu.Lock()
		pinned := p.pinned
		subs = subs[:0]
		for _, d := range p.subs {
			if d.pub.kind == Video {
				subs = append(subs, d)
			}
		}
		p.mu.Unlock()
		if len(subs) == 0 {
			continue
		}
		clear(allowed)
		for _, sid := range pinned {
			allowed[sid] = true
		}
		if n <= 0 {
			for _, q := range order {
				allowed[q.sid] = true
			}
		} else {
			count := len(allowed)
			for _, q := range order {
				if count >= n {
					break
				}
				if q == p || allowed[q.sid] {
					continue
				}
				allowed[q.sid] = true
				count++
			}
		}
		for _, d := range subs {
			// A hidden publisher's video (a recording played back to its
			// audience) is never a speaker and was asked for explicitly: last-N
			// does not apply to it.
			if d.setLastNPaused(!allowed[d.pub.owner.sid] && !d.pub.owner.hidden) {
				resumed[d.pub] = true
			}
		}
	}
	clear(subs) // no subscription stays reachable from here
	for t := range resumed {
		t.switchKeyframe()
	}
}

// keyframeMargin is what a keyframe may take beyond the publisher's round
// trip (the encoder's own time, a frame interval, pacing) before it is asked
// for again.
const (
	keyframeMargin   = 120 * time.Millisecond
	keyframeRepeats  = 5
	defaultPublisRTT = 50 * time.Millisecond
)

// switchKeyframe asks the publisher for one keyframe for every receiver whose
// forwarding of t starts now (a speaker change under Last-N): each starts at
// that keyframe, none needs to ask for it. Requests from receivers meanwhile
// are served by it; it is asked for again only if it has not arrived within
// the publisher's round-trip time plus a margin.
func (t *Publication) switchKeyframe() {
	if t.kind != Video {
		return
	}
	wait := keyframeMargin + defaultPublisRTT
	if t.owner != nil {
		if rtt := t.owner.publisherRTT(); rtt > 0 {
			wait = keyframeMargin + rtt
		}
	}
	t.askKeyframe(wait, keyframeRepeats)
}

func (t *Publication) askKeyframe(wait time.Duration, repeats int) {
	asked := now()
	for i := range t.layers {
		if l := t.layers[i].Load(); l != nil {
			l.lastPLI.Store(0) // a new keyframe, even if one was asked for just now
			l.keyWait.Store(0)
			l.requestKeyframe()
			l.keyWait.Store(asked + int64(wait))
		}
	}
	time.AfterFunc(wait, func() {
		missing := false
		for i := range t.layers {
			// A layer that stopped sending (turned off for want of receivers) is not waited for.
			if l := t.layers[i].Load(); l != nil && l.lastKey.Load() < asked && now()-l.lastRecv.Load() < int64(time.Second) {
				missing = true
			}
		}
		if missing && repeats > 0 {
			t.askKeyframe(wait, repeats-1)
		}
	})
}

// publisherRTT is the round-trip time to the participant's publisher side
// (0 if unknown).
func (p *Participant) publisherRTT() time.Duration {
	p.mu.Lock()
	pub := p.pub
	p.mu.Unlock()
	if pub == nil {
		return 0
	}
	return pub.RTT()
}

// effectiveLastN is the participant's own limit or the room's.
func (p *Participant) effectiveLastN() int {
	p.mu.Lock()
	n := p.lastN
	p.mu.Unlock()
	if n >= 0 {
		return n
	}
	r := p.room
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.lastN
}

// SetLastN overrides the room's Last-N for this receiver (-1: the room's).
func (p *Participant) SetLastN(n int) {
	p.mu.Lock()
	p.lastN = n
	p.mu.Unlock()
	p.room.applyLastN(false)
}

// SetMaxBitrate caps what this receiver is sent (bit/s, 0: no cap), below
// the bandwidth estimate: a data saver, or a test of what a slow link would
// get (Jitsi Videobridge's assumedBandwidthBps).
func (p *Participant) SetMaxBitrate(bps int64) {
	p.maxBitrate.Store(bps)
	p.log.Debug("receive bitrate capped", "bps", bps)
	p.allocate()
}

// Pin sets the participants whose video this receiver always gets.
func (p *Participant) Pin(sids []string) {
	p.mu.Lock()
	p.pinned = append([]string(nil), sids...)
	p.mu.Unlock()
	p.room.applyLastN(false)
}

// updateDemand tells each publisher which encodings of each video track some
// receiver needs; the SDK disables the others at the encoder.
func (r *Room) updateDemand() {
	for _, p := range r.all() {
		for _, t := range p.publications() {
			t.updateDemand()
		}
	}
}

// updateDemand sends the track's publisher a trackDemand when what receivers
// need changed. The room's loop calls it every decision interval, and a
// subscriber's request for more calls it at once: waiting for the loop cost a
// switch up to a layer turned off as much as the interval. Serialized per
// track, so that an older computation never overwrites a newer one.
func (t *Publication) updateDemand() {
	if t.kind != Video {
		return
	}
	t.demandMu.Lock()
	defer t.demandMu.Unlock()
	var need [maxLayers]bool
	any := false
	for _, d := range t.Subscribers() {
		if d.Paused() {
			continue
		}
		// What the receiver wants (not what it gets now: a layer turned
		// off would never be chosen again), and every layer below it, so
		// that it can always step down without waiting.
		for i := 0; i <= int(d.maxLayer.Load()) && i < maxLayers; i++ {
			need[i] = true
		}
		any = true
	}
	if t.hasSinks() {
		// Sinks (recording, WebTransport) may use any layer; node links
		// say which they need (DemandSink).
		sn, sa := t.sinkDemand()
		for i := range sn {
			need[i] = need[i] || sn[i]
		}
		any = any || sa
	}
	// Turning on is at once, turning off only once nobody needed it for
	// demandOffDelay.
	n := now()
	for i := range need {
		need[i] = t.stillNeeded(i, need[i], n)
	}
	any = t.stillNeeded(maxLayers, any, n)
	if v := packDemand(need, any); t.demand.Swap(v) != v {
		t.owner.send(protocol.TrackDemand{TrackSid: t.sid, Active: any, Layers: need[:]})
	}
}

// demandOffDelay is how long a layer (or the whole track) stays on at the
// publisher after the last receiver stopped needing it. Chromium takes a few
// hundred milliseconds to bring an encoding it turned off back (encoder
// reconfiguration, its bandwidth allocation, the first keyframe), and a viewer
// toggling a tile's size, a tab coming back or two people talking in turns
// under Last-N would pay that each time; LiveKit holds paused layers for 5 s
// (dynacast_pause_delay) for the same reason. The cost is a few seconds of the
// publisher's uplink after each drop in demand.
const demandOffDelay = 3 * time.Second

// stillNeeded records a layer's need (index maxLayers: the track's) at n and
// says whether it counts as needed: now, or within demandOffDelay. Under
// demandMu.
func (t *Publication) stillNeeded(i int, needed bool, n int64) bool {
	if needed {
		t.neededAt[i] = n
		return true
	}
	return t.neededAt[i] != 0 && n-t.neededAt[i] < int64(demandOffDelay)
}

func packDemand(need [maxLayers]bool, any bool) uint32 {
	v := uint32(1 << 31) // set: demand was computed at least once
	for i, n := range need {
		if n {
			v |= 1 << i
		}
	}
	if any {
		v |= 1 << 8
	}
	return v
}
