package sfu

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/pion/rtp"
)

// Sharing one subscriber's bandwidth estimate among its video subscriptions.
// Audio comes off the top, then video by priority: pinned participants, the
// dominant speaker, then the others by how recently they spoke. Each gets the
// best layer that fits what is left and what its tile needs; when the estimate
// is short of what the subscriber would take, the subscriber's stream is padded
// so that the estimate can grow (probing).

const (
	allocateInterval = 500 * time.Millisecond
	initialEstimate  = 3_000_000
	minEstimate      = 100_000
	maxEstimate      = 30_000_000
	// audioReserve is set aside per subscribed audio track whose rate is not
	// measured yet; a measured one reserves its rate and a fifth more (Opus
	// varies with the speech; RTP and SRTP headers), at least minAudioReserve.
	audioReserve    = 64_000
	minAudioReserve = 8_000
	// assumedLayerRate stands for a layer whose rate is not measured yet.
	assumedLayerRate = 150_000
	// probeShare of the missing rate (at most the estimate's unused part) is
	// sent as padding in one interval: the estimate can only grow while what
	// arrives keeps up with it (bwe caps it at 1.5x the acknowledged rate).
	probeShare = 0.9
	maxPadding = 255 // bytes of RTP padding per packet
)

// rate is a layer's incoming bitrate, measured by the room's loop.
func (l *layer) rate() int {
	if r := l.bps.Load(); r > 0 {
		return int(r)
	}
	return assumedLayerRate
}

// measure updates the layer's bitrate from its byte counter (called every
// decision interval).
func (l *layer) measure(dt time.Duration) {
	r := smoothRate(l.bps.Load(), l.bytes.Load(), &l.prevBytes, dt)
	l.bps.Store(r)
	decayed := int64(float64(l.peak.Load()) * math.Pow(0.5, dt.Seconds()/peakHalfLife.Seconds()))
	l.peak.Store(max(r, decayed))
	l.trates.measure(dt)
}

// peakHalfLife: a layer's peak rate halves over it. A publisher's layer rates
// swing by a factor of several within seconds (keyframes, the encoder adapting
// to its own bandwidth and CPU); priced in a dip, a layer granted congests a
// slow link when its rate comes back.
const peakHalfLife = 10 * time.Second

// layerPeakT is layerRateT at the layer's recent peak rate (simulcast; an SVC
// stream's spatial layers are priced as measured).
func (t *Publication) layerPeakT(i, tl int) int {
	rate, _ := t.layerRateT(i, tl)
	if t.svc.spatialLayers() > 1 {
		return rate
	}
	l := t.layer(int8(i))
	if l == nil {
		return rate
	}
	full, _ := t.layerRateT(i, allTemporal)
	if pk := int(l.peak.Load()); pk > full && full > 0 {
		return int(float64(rate) * float64(pk) / float64(full))
	}
	return rate
}

// allocate shares the estimate among the participant's subscriptions.
func (p *Participant) allocate() {
	if p.bwe == nil {
		return
	}
	subs := p.subscriptions()
	p.mu.Lock()
	pinned := p.pinned // Pin replaces the slice, never writes into it
	p.mu.Unlock()
	budget := p.bwe.Estimate()
	if c := p.maxBitrate.Load(); c > 0 && c < int64(budget) {
		budget = int(c)
	}
	est := budget
	var video []*DownTrack
	for _, d := range subs {
		if d.pub.kind == Audio {
			// Audio Last-N's withheld speakers are not sent (audiolastn.go).
			if !d.Paused() && !d.pub.audioWithheld.Load() {
				budget -= d.pub.audioRate()
			}
			continue
		}
		if !d.Paused() && d.twccID != 0 {
			video = append(video, d)
		}
	}
	if len(video) == 0 {
		return
	}
	rank := p.room.currentRanking()
	sort.SliceStable(video, func(i, j int) bool {
		a, b := video[i].pub.owner.sid, video[j].pub.owner.sid
		if pa, pb := slices.Contains(pinned, a), slices.Contains(pinned, b); pa != pb {
			return pa
		}
		return rank.of(a) < rank.of(b)
	})
	shortfall, proving := 0, 0
	var probeVia *DownTrack
	capacity, acked := p.bwe.Capacity(), p.bwe.Received()
	for _, d := range video {
		want := int(d.maxLayer.Load())
		grant, grantT, top := d.grant(want, budget)
		// What the subscriber would take and does not get: the top layer it
		// wants, or the full frame rate of the one it gets.
		if top >= 0 {
			if rate, ok := d.pub.layerRateT(top, allTemporal); ok {
				shortfall = rate - budget
				if probeVia == nil {
					probeVia = d
				}
			}
		}
		// A higher spatial layer that the estimate allows but the link has
		// not been shown to carry waits for a probe at its rate to get
		// through (see proven).
		held := int(d.allocLayer.Load())
		if grant > held {
			grant, grantT = d.spatialUp(grant, grantT, held, budget)
			if grant <= held && (probeVia == nil || probeVia == d) {
				// Probe toward the next layer's full rate: sized by the
				// shortfall alone, padding shrank as the estimate neared it,
				// and the estimate (at most 1.5x what arrives) stalled.
				cur, _ := d.pub.layerRateT(grant, grantT)
				probeVia, proving = d, d.pub.layerPeakT(held+1, allTemporal)-cur
			}
		}
		if grant > held {
			rate, _ := d.pub.layerRateT(grant, grantT)
			heldRate, _ := d.pub.layerRateT(held, allTemporal)
			if !proven(est-budget+rate, capacity, acked) {
				grant, grantT, _ = d.grant(held, budget)
				if probeVia == nil || probeVia == d {
					probeVia, proving = d, rate-heldRate
				}
			}
		}
		if rate, ok := d.pub.layerRateT(grant, grantT); ok {
			budget -= rate
		}
		prevT := d.allocT.Swap(int32(grantT))
		prev := int(d.allocLayer.Swap(int32(grant)))
		if (prev != grant || prevT != int32(grantT)) && p.log != nil {
			p.log.Debug("allocation changed", "track", d.pub.sid, "layer", grant, "temporal", grantT,
				"of", d.pub.temporalLayers(grant), "left", budget, "estimate", p.bwe.Estimate())
		}
		if prev != grant {
			d.chooseLayer()
		}
	}
	// Probe with padding only into the part of the estimate that media leaves
	// unused: the estimator grows when what arrives keeps up with it, and padding
	// beyond the estimate would congest the very link it measures (a viewer
	// behind a few hundred kbit/s lost most of its low layer to padding sized
	// by the top layer's rate).
	if probeVia != nil {
		if proving > 0 {
			// Toward the layer on trial: what it adds over the held one.
			shortfall = proving
		}
		probeVia.probe(probeBytes(shortfall, budget))
	}
}

// spatialUp limits a switch up from spatial layer held to grant: to the
// highest layer between whose full frame rate, at its recent peak, fits the
// budget, or none (the held layer, at the frame rate that fits). The switch
// costs a keyframe; taken at a lower frame rate it left the viewer no margin
// but another switch, and a 300 kbit/s viewer went up and down between the two
// lowest layers every few seconds, each keyframe queueing behind the link.
// On the way down the frame rate still goes before the spatial layer.
func (d *DownTrack) spatialUp(grant, grantT, held, budget int) (int, int) {
	for i := grant; i > held; i-- {
		if _, ok := d.pub.layerRateT(i, allTemporal); ok && d.pub.layerPeakT(i, allTemporal) <= budget {
			if i == grant {
				return grant, grantT
			}
			return i, allTemporal
		}
	}
	g, t, _ := d.grant(held, budget)
	return g, t
}

// upConfirmShare is the share of a higher layer's rate that the subscriber
// must have acknowledged over the last half second before a switch up beyond
// the link's known capacity (padding probes send about 0.9 of what the layer
// adds). What arrives is bounded by the bottleneck's rate whatever was sent,
// so one such half second shows the link carries it.
const upConfirmShare = 0.85

// proven says whether the subscriber may switch up to a layer that brings
// what it receives to need bps. Within the link capacity the estimator
// learnt at its last decreases (or with none learnt: nothing has pushed
// back), the estimate is trusted. Above it the switch waits until the
// subscriber has acknowledged upConfirmShare of need, padding probes making
// up the difference, as LiveKit switches up only after a successful probe.
// Trusting the estimate there froze a viewer behind a 300 kbit/s link for
// seconds: the delay-based estimate climbs past the link between overuse
// detections, and the 640 layer's keyframe and frames queued behind the link
// until it was taken away.
func proven(need, capacity, acked int) bool {
	return capacity <= 0 || need <= capacity || float64(acked) >= upConfirmShare*float64(need)
}

// grant picks the best (spatial, temporal) layer of d's publication within
// want that fits the budget: spatial layers above the lowest at their full
// frame rate only, and on the lowest the frame rate is lowered down to TL0
// before anything is taken away: the lowest layer's TL0 is granted even if it
// does not fit, as the lowest layer was before temporal layers. A higher
// layer at a lower frame rate (LiveKit's order) sat at the edge of a 300
// kbit/s link: its keyframes are not smaller for the frame rate, and it went
// up and down with the estimate, a keyframe each way. Lowering the frame rate
// costs no keyframe and raising it waits only for the next layer-sync frame.
// top is the layer whose full rate the subscriber lacks (-1: it has all it
// wants).
func (d *DownTrack) grant(want, budget int) (grant, grantT, top int) {
	held := int(d.allocLayer.Load())
	heldT := int(d.allocT.Load())
	grant, grantT, top = -1, allTemporal, -1
	lowest := lowestLayer(d.pub)
	for i := want; i >= 0 && grant == -1; i-- {
		n := d.pub.temporalLayers(i)
		for t := n - 1; t >= 0; t-- {
			rate, ok := d.pub.layerRateT(i, t)
			if !ok {
				break
			}
			if top == -1 && t == n-1 {
				top = i
			}
			if fits(rate, budget, i < held || i == held && t <= heldT) {
				grant, grantT = i, t
				break
			}
			if i != lowest {
				break // above the lowest spatial layer, the full frame rate only
			}
		}
	}
	if grant == -1 {
		grant, grantT = lowest, 0
	}
	if grantT >= d.pub.temporalLayers(grant)-1 {
		grantT = allTemporal
	}
	if top == grant && grantT == allTemporal {
		top = -1
	}
	return grant, grantT, top
}

// probeBytes is the padding for one interval when the subscriber lacks shortfall
// bps for the layer it wants and unused bps of the estimate are free.
func probeBytes(shortfall, unused int) int {
	pad := min(shortfall, unused)
	if pad <= 0 {
		return 0
	}
	return int(float64(pad) * probeShare * allocateInterval.Seconds() / 8)
}

// holdMargin is how far over the budget a layer already granted may run before
// it is taken away. A delay-based estimate drops by 15% on every overuse
// (often one its own probe caused) and climbs back over seconds; without the
// margin each such dip would cost a switch down and, soon after, one back up,
// each waiting for a keyframe.
const holdMargin = 0.2

// fits says whether a layer of rate bps fits the budget; one the subscriber
// already has (held) keeps fitting within the margin.
func fits(rate, budget int, held bool) bool {
	if held {
		return float64(rate) <= float64(budget)*(1+holdMargin)
	}
	return rate <= budget
}

// audioRate is what an audio publication takes of a subscriber's estimate:
// measured, not a fixed 64 kbit/s (twice what Opus sends for speech, which
// shrank the video budget of a viewer behind a few hundred kbit/s).
func (t *Publication) audioRate() int {
	if l := t.layer(0); l != nil {
		if r := l.bps.Load(); r > 0 {
			return max(int(r)*6/5, minAudioReserve)
		}
	}
	return audioReserve
}

func lowestLayer(t *Publication) int {
	for i := 0; i < maxLayers; i++ {
		if t.layer(int8(i)) != nil {
			return i
		}
	}
	return 0
}

// probe sends about n bytes of padding-only packets in the subscriber's stream,
// spread over the next interval, so that the estimator sees whether there is
// room for more. Padding takes sequence numbers of its own; the stream's offsets
// move past them, and NACKs for them are not answered.
func (d *DownTrack) probe(n int) {
	if n <= 0 || !d.bound.Load() || d.Paused() {
		return
	}
	packets := min(max(n/maxPadding, 1), 100)
	bursts := 10
	go func() {
		tick := time.NewTicker(allocateInterval / time.Duration(bursts))
		defer tick.Stop()
		for b := 0; b < bursts; b++ {
			// The packets spread over the bursts, remainder included: whole
			// divisions sent nothing below 10 packets (2.5 kB), so that a
			// subscriber a little short of a layer was never probed.
			if !d.padBurst(packets*(b+1)/bursts - packets*b/bursts) {
				return
			}
			select {
			case <-tick.C:
			case <-d.closed:
				return
			}
		}
	}()
}

// padBurst writes k padding packets right after the last packet sent.
func (d *DownTrack) padBurst(k int) bool {
	if k <= 0 {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.started || d.writer == nil || d.needSync.Load() {
		return false
	}
	o := &d.out
	if !o.lastMarker {
		// Not between two packets of a frame: a receiver assembles a
		// frame from consecutive sequence numbers, and one numbered
		// around padding never completes (Chromium then waits for a
		// keyframe). This burst's padding goes; the next one comes.
		return true
	}
	var h rtp.Header
	h.Version = 2
	h.Padding = true
	h.PaddingSize = maxPadding
	h.PayloadType = d.pt
	h.SSRC = d.ssrc
	h.Timestamp = o.lastTS
	start := o.lastSeq + 1
	if d.svc != nil {
		defer func() { d.svc.off += o.lastSeq + 1 - start }() // media continues after the padding
	}
	if d.vp8t != nil {
		defer func() { d.vp8t.off += o.lastSeq + 1 - start }()
	}
	for i := 0; i < k; i++ {
		h.SequenceNumber = o.lastSeq + 1
		var tw [2]byte
		var twSeq uint16
		if d.twccID != 0 {
			twSeq = d.stampTWCC(&h, tw[:])
		}
		n, err := d.writer.WriteRTP(&h, nil)
		h.Extensions = h.Extensions[:0]
		h.Extension = false
		if err != nil || n == 0 {
			break
		}
		if d.twccID != 0 {
			d.sub.bwe.OnSent(twSeq, now(), n)
		}
		o.lastSeq++
		o.seqOffset++
	}
	if o.lastSeq+1 != start {
		// Padding is a segment of its own (layer -1: not answered on NACK);
		// media continues in a new one.
		d.pushSegment(segment{startOut: start, layer: -1})
		d.pushSegment(segment{startOut: o.lastSeq + 1, layer: d.current, seqOffset: o.seqOffset,
			tsOffset: o.tsOffset, picOffset: o.picOffset, tl0Offset: o.tl0Offset})
	}
	return true
}
