package sfu

import (
	"slices"
	"time"
)

// Audio Last-N: every receiver gets the audio of only the room's N loudest
// current speakers (Jitsi Videobridge's "route loudest only"), so that a room of
// hundreds costs each listener N audio streams. The selection is room-wide,
// recomputed every audioDecisionInterval from the speaker detector's smoothed
// loudness (speaker.go), and published as one flag per publication that the
// packet path reads; subscriptions stay as they are (no renegotiation): a
// withheld track's DownTracks are simply not written to.
//
// Hysteresis: a forwarded speaker keeps its place until a challenger is louder
// by audioSwitchMargin, and the loudness itself falls slowly (speaker.go), so
// two speakers of similar level do not take turns in the same place.
//
// When a track is selected, each of its subscribers first gets the track's
// recent packets from the packet cache, from just before its speech began (at
// most audioHistory back), so that the first syllable is not lost to the
// detection delay. If that history joins what the subscriber last got, the
// stream continues unchanged; otherwise the DownTrack resynchronises at the
// first replayed packet, so the receiver sees continuous sequence numbers and
// timestamps that advanced by the time that passed, never a loss.
//
// Audio without levels (a camera's, a plain-RTP ingest's) and the tracks of
// hidden participants (a recording played back to its audience) are always
// forwarded: there is nothing to rank them by, or they were asked for.

const (
	// audioDecisionInterval: faster than the video loop's, so that a new
	// speaker's replay (and the latency it adds at the receiver) stays short.
	audioDecisionInterval = 100 * time.Millisecond
	// audioSwitchMargin is how much louder (steps of 3 dB) a challenger must be
	// than the quietest forwarded speaker to take its place.
	audioSwitchMargin = 2.0
	// audioHistory is the most a newly selected track replays; audioPreroll
	// how much before the detected start of speech the replay begins (the
	// soft start of a word is below the detection threshold).
	audioHistory = 500 * time.Millisecond
	audioPreroll = 100 * time.Millisecond
	// maxReplay bounds the packets replayed (audioHistory of 10 ms frames).
	maxReplay = 50
)

// audioCandidate is one participant whose audio can be ranked.
type audioCandidate struct {
	sid  string
	loud float64
}

// chooseAudio returns the sids to forward: with n ≤ 0 or no more candidates
// than n, all of them; otherwise the n loudest, keeping each of prev's that
// no one outside beats by audioSwitchMargin. cands are in a stable order
// (join time) that breaks ties.
func chooseAudio(prev map[string]bool, cands []audioCandidate, n int) map[string]bool {
	sel := make(map[string]bool, max(n, 0))
	if n <= 0 || len(cands) <= n {
		for _, c := range cands {
			sel[c.sid] = true
		}
		return sel
	}
	sorted := slices.Clone(cands)
	slices.SortStableFunc(sorted, func(a, b audioCandidate) int {
		switch {
		case a.loud > b.loud:
			return -1
		case a.loud < b.loud:
			return 1
		}
		return 0
	})
	var in []audioCandidate // forwarded, loudest first
	for _, c := range sorted {
		if prev[c.sid] && len(in) < n {
			in = append(in, c)
		}
	}
	member := func(sid string) bool {
		for _, x := range in {
			if x.sid == sid {
				return true
			}
		}
		return false
	}
	for _, c := range sorted {
		if len(in) >= n {
			break
		}
		if !member(c.sid) {
			in = append(in, c)
		}
	}
	for _, c := range sorted {
		if member(c.sid) {
			continue
		}
		weakest := 0
		for i, x := range in {
			if x.loud < in[weakest].loud {
				weakest = i
			}
		}
		if c.loud <= in[weakest].loud+audioSwitchMargin {
			break // sorted: nobody after c is louder
		}
		in[weakest] = c
	}
	for _, c := range in {
		sel[c.sid] = true
	}
	return sel
}

// decideAudio recomputes which audio tracks are forwarded.
func (r *Room) decideAudio(t time.Time) {
	r.mu.RLock()
	n := r.audioLastN
	r.mu.RUnlock()
	ps := r.all()
	slices.SortStableFunc(ps, func(a, b *Participant) int { return a.joinedAt.Compare(b.joinedAt) })
	type ranked struct {
		pub   *Publication
		sid   string
		onset time.Time
	}
	var tracks []ranked
	var cands []audioCandidate
	var free, mixed []*Publication
	for _, p := range ps {
		counted := false
		for _, pub := range p.publications() {
			if pub.kind != Audio {
				continue
			}
			if r.mixed(p, pub) {
				mixed = append(mixed, pub)
				continue
			}
			l := pub.layer(0)
			if p.hidden || l == nil || l.speaker == nil {
				free = append(free, pub)
				continue
			}
			loud, onset := l.speaker.loudness(t)
			tracks = append(tracks, ranked{pub, p.sid, onset})
			if !counted {
				cands = append(cands, audioCandidate{sid: p.sid, loud: loud})
				counted = true
			}
		}
	}
	r.audioMu.Lock()
	sel := chooseAudio(r.audioSel, cands, n)
	r.audioSel = sel
	r.audioMu.Unlock()
	nowNS := now()
	for _, pub := range free {
		pub.setAudioForwarded(true, nowNS)
	}
	for _, pub := range mixed {
		pub.setAudioForwarded(false, nowNS)
	}
	for _, x := range tracks {
		from := nowNS - int64(audioHistory)
		if !x.onset.IsZero() {
			from = max(from, nowNS-int64(t.Sub(x.onset)+audioPreroll))
		}
		x.pub.setAudioForwarded(sel[x.sid], from)
	}
}

// setAudioForwarded publishes the selection of an audio track. A track that
// becomes forwarded has each subscriber replay its packets since from (sfu
// clock) first: the flags are set before forwarding resumes, so no packet
// goes out before its subscriber's replay.
func (t *Publication) setAudioForwarded(on bool, from int64) {
	if !on {
		t.audioWithheld.Store(true)
		return
	}
	if !t.audioWithheld.Load() {
		return
	}
	t.replayFrom.Store(from)
	for _, d := range t.Subscribers() {
		d.audioReplay.Store(true)
	}
	t.audioWithheld.Store(false)
}

// replayAudio writes, before p, the cached packets of p's track since its
// selection's replayFrom that this subscriber has not had. It runs on the
// layer's reader goroutine (the cache's only writer, so the cached packets
// before p are stable) and allocates nothing: the buffer and the packet are
// the layer's.
func (d *DownTrack) replayAudio(p *Packet) {
	if !d.audioReplay.Swap(false) {
		return
	}
	l := d.pub.layer(p.Layer)
	if l == nil {
		return
	}
	// Never older than the history before p: a subscriber that paused the
	// track meanwhile gets the selection's replay late, not stale audio.
	from := max(d.pub.replayFrom.Load(), p.Arrival-int64(audioHistory))
	d.mu.Lock()
	started, lastIn := d.started, d.out.lastSeq-d.out.seqOffset
	d.mu.Unlock()
	seq := p.Header.SequenceNumber
	for i := 0; i < maxReplay; i++ {
		prev := seq - 1
		if started && int16(prev-lastIn) <= 0 {
			break
		}
		if at := l.cache.Arrival(prev); at == 0 || at < from {
			break
		}
		seq = prev
	}
	if !started || seq != lastIn+1 {
		// Not where the subscriber's stream stopped: a new segment at the
		// first packet written, its timestamp advanced by the time between.
		d.needSync.Store(true)
	}
	if l.replayBuf == nil {
		l.replayBuf = make([]byte, maxPacket) // once per audio track
	}
	q := &l.replayPkt
	for s := seq; s != p.Header.SequenceNumber; s++ {
		n, at := l.cache.GetAt(s, l.replayBuf)
		if n == 0 {
			d.needSync.Store(true)
			return
		}
		payload, ok := splitRTP(&q.Header, l.replayBuf[:n])
		if !ok {
			d.needSync.Store(true)
			return
		}
		q.Payload, q.Layer, q.Arrival = payload, p.Layer, at
		d.writeRTP(q)
	}
}
