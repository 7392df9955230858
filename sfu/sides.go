package sfu

import (
	"sync"
	"sync/atomic"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
)

// subscriberSide ties a Subscriber session to its participant: it is the
// session's handler, routes the client's feedback to the DownTracks, and
// binds each DownTrack to the session once the client took its track.
type subscriberSide struct {
	p  *Participant
	tm *SessionTiming
	s  Downstream
	// off is s when the server offers this side's tracks (a room
	// participant); nil for a WHEP viewer, whose tracks its own offer fixed.
	off   Subscriber
	downs atomic.Pointer[[]boundDown]
	hdr   rtp.Header // OnRTCP's scratch: it runs on the transport's one RTCP goroutine

	// By media section, the DownTracks the last offers carried (bound when
	// an answer takes them).
	mu   sync.Mutex
	mids map[string]*DownTrack
}

type boundDown struct {
	ssrc uint32
	d    *DownTrack
}

// rtxBufs lends OnRTCP a buffer for retransmissions: a subscriber NACKs
// rarely, and 1500 bytes held by each of a thousand viewers are 1.5 MB.
var rtxBufs = sync.Pool{New: func() any { b := make([]byte, maxPacket); return &b }}

func (ss *subscriberSide) OnICE() { ss.tm.Mark(StepICEConnected) }

func (ss *subscriberSide) OnDTLS() {
	ss.tm.Mark(StepDTLSConnected)
	ss.p.subscriberReady()
}

// OnClose ends the participant: the session is gone for good (consent
// expired, the client closed it).
func (ss *subscriberSide) OnClose(reason string) { go ss.p.Close(reason) }

// OnRTCP hands each feedback packet to the DownTracks it is addressed to:
// NACKs are answered from the publication's cache, PLI/FIR become keyframe
// requests, receiver reports give loss and RTT. Transport-wide feedback is
// the session's, whichever of its SSRCs it names: it goes to the estimator.
func (ss *subscriberSide) OnRTCP(pkts []rtcp.Packet) {
	downs := ss.downs.Load()
	if downs == nil {
		return
	}
	rtx := rtxBufs.Get().(*[]byte)
	defer rtxBufs.Put(rtx)
	for _, pkt := range pkts {
		if cc, ok := pkt.(*rtcp.TransportLayerCC); ok {
			if ss.p.bwe != nil {
				ss.p.bwe.OnFeedback(cc, now())
			}
			continue
		}
		for _, ssrc := range pkt.DestinationSSRC() {
			for _, x := range *downs {
				if x.ssrc == ssrc {
					x.d.onRTCP(pkt, *rtx, &ss.hdr)
				}
			}
		}
	}
}

// spec is what a subscriber session writes into SDP for t.
func (t *Publication) spec() TrackSpec {
	return TrackSpec{Kind: t.kind, Codec: t.codec, ID: t.sid, StreamID: t.owner.sid}
}

// add gives d a media section in the next offer.
func (ss *subscriberSide) add(d *DownTrack) error {
	mid, err := ss.off.AddTrack(d.pub.spec())
	if err != nil {
		return err
	}
	ss.mu.Lock()
	ss.mids[mid] = d
	ss.mu.Unlock()
	return nil
}

// remove takes d's section off (the next offer has it inactive).
func (ss *subscriberSide) remove(d *DownTrack) {
	ss.mu.Lock()
	mid := ""
	for m, x := range ss.mids {
		if x == d {
			mid = m
			delete(ss.mids, m)
		}
	}
	downs := make([]boundDown, 0, len(*ss.downs.Load()))
	for _, x := range *ss.downs.Load() {
		if x.d != d {
			downs = append(downs, x)
		}
	}
	ss.downs.Store(&downs)
	ss.mu.Unlock()
	if mid != "" {
		ss.off.RemoveTrack(mid)
	}
}

// answer applies the client's answer and binds the DownTracks it takes.
func (ss *subscriberSide) answer(sdp string) error {
	acc, err := ss.off.ApplyAnswer(sdp)
	if err != nil {
		return err
	}
	ss.mu.Lock()
	downs := append([]boundDown(nil), *ss.downs.Load()...)
	var bind []func()
	for _, a := range acc {
		d := ss.mids[a.Mid]
		if d == nil || d.bound.Load() {
			continue
		}
		if !a.OK {
			ss.p.log.Info("the client declined a track", "track", d.pub.sid, "mid", a.Mid)
			continue
		}
		downs = append(downs, boundDown{ssrc: a.SSRC, d: d})
		bind = append(bind, func() { d.bindWriter(ss.s, a.SSRC, a.PT, d.pub.codec.ClockRate, a.TransportCC, a.Dependency) })
	}
	ss.downs.Store(&downs)
	ss.mu.Unlock()
	for _, b := range bind {
		b()
	}
	return nil
}

// publisherSide is the handler of a participant's publisher session.
type publisherSide struct{ p *Participant }

func (ps publisherSide) OnICE()                 { ps.p.log.Debug("publisher side connected") }
func (ps publisherSide) OnDTLS()                {}
func (ps publisherSide) OnRTCP(_ []rtcp.Packet) {}

// OnClose ends the participant, as the subscriber side's does.
func (ps publisherSide) OnClose(reason string) { go ps.p.Close(reason) }

func (ps publisherSide) OnDataChannel(c DataChannel) { ps.p.onDataChannel(c) }

// OnTrack publishes a stream the client sends.
func (ps publisherSide) OnTrack(t IncomingTrack) {
	ps.p.publishStream(t.Source, t.ID, t.Kind, t.Codec, t.AudioLevelExt, t.DependencyExt)
}

// newSubscriberSide makes a room participant's subscriber side. Under p.mu
// or before p is admitted.
func (p *Participant) newSubscriberSide(tm *SessionTiming) error {
	ss := &subscriberSide{p: p, tm: tm, mids: map[string]*DownTrack{}}
	s, err := p.room.mgr.transport.Subscriber(ss)
	if err != nil {
		return err
	}
	ss.s, ss.off = s, s
	ss.downs.Store(&[]boundDown{})
	p.sub = ss // Close closes s
	p.room.mgr.reports.add(p, s)
	return nil
}

// playViewer makes a WHEP viewer's session: the tracks its offer receives
// are fixed, each bound to its sender at once.
func (p *Participant) playViewer(offer string, tracks []*Publication, tm *SessionTiming) (string, error) {
	specs := make([]TrackSpec, len(tracks))
	for i, t := range tracks {
		specs[i] = t.spec()
	}
	ss := &subscriberSide{p: p, tm: tm}
	s, slots, answer, err := p.room.mgr.transport.Viewer(offer, specs, ss)
	if err != nil {
		return "", err
	}
	ss.s = s
	p.sub = ss
	downs := make([]boundDown, len(tracks))
	for i, t := range tracks {
		d := newDownTrack(t, p)
		snd := slots[i]
		d.bindWriter(s, snd.SSRC, snd.PT, t.codec.ClockRate, snd.TransportCC, snd.Dependency)
		downs[i] = boundDown{ssrc: snd.SSRC, d: d}
		p.mu.Lock()
		p.subs[t.sid] = d
		p.mu.Unlock()
		metrics.Subscriptions.Inc()
		t.addDown(d)
	}
	ss.downs.Store(&downs)
	p.room.mgr.reports.add(p, s)
	return answer, nil
}

// RemoteICE returns the ICE ufrag of the client's last offer on the session a
// WHIP or WHEP request drives, for telling trickled candidates (which
// ICE-lite does not need) from an ICE restart.
func (p *Participant) RemoteICE() (remoteUfrag string, ok bool) {
	p.mu.Lock()
	pub, sub := p.pub, p.sub
	p.mu.Unlock()
	switch {
	case p.hidden && sub != nil:
		return sub.s.RemoteUfrag(), true
	case pub != nil:
		return pub.RemoteUfrag(), true
	}
	return "", false
}

// RestartViewerICE restarts ICE for a WHEP viewer with the client's new
// credentials; it returns the server's new ones as an sdpfrag.
func (p *Participant) RestartViewerICE(ufrag, pwd string) (string, error) {
	p.mu.Lock()
	sub := p.sub
	p.mu.Unlock()
	var v Viewer
	if sub != nil {
		v, _ = sub.s.(Viewer)
	}
	if !p.hidden || v == nil {
		return "", protocol.Errorf(protocol.CodeBadRequest, "not a WHEP session")
	}
	frag, err := v.RestartICE(ufrag, pwd)
	if err != nil {
		return "", protocol.Errorf(protocol.CodeBadRequest, "%v", err)
	}
	p.log.Debug("whep ice restart")
	return frag, nil
}

// LastOffer is a WHIP publisher's last offer ("" for anyone else).
func (p *Participant) LastOffer() string {
	p.mu.Lock()
	pub := p.pub
	p.mu.Unlock()
	if pub == nil {
		return ""
	}
	return pub.LastOffer()
}
