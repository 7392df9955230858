package sfu

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/bwe"
	"github.com/petrel-sfu/petrel/egress"
	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
)

// SetLeanEgress serves WHEP viewers with the lean egress from now on
// (egress/, docs/lean-egress.md): no PeerConnection per viewer, the
// DownTrack's packets encrypted and written to the socket directly. nil
// goes back to PeerConnections for new viewers.
func (m *Manager) SetLeanEgress(s *egress.Server) { m.leanEgress.Store(s) }

// leanViewer connects a lean egress viewer to its participant: it is the
// viewer's Handler, and routes the viewer's RTCP to its DownTracks.
type leanViewer struct {
	p     *Participant
	tm    *SessionTiming
	v     *egress.Viewer
	downs atomic.Pointer[[]leanDown]
	hdr   rtp.Header // OnRTCP's scratch: it runs on the egress's one RTCP goroutine

	// A room subscriber's tracks come and go: by media section, the
	// DownTracks the last offers carried (bound when an answer takes them).
	mu   sync.Mutex
	mids map[string]*DownTrack
}

// rtxBufs lends OnRTCP a buffer for retransmissions: a viewer NACKs rarely,
// and 1500 bytes held by each of a thousand viewers are 1.5 MB.
var rtxBufs = sync.Pool{New: func() any { b := make([]byte, maxPacket); return &b }}

type leanDown struct {
	ssrc uint32
	d    *DownTrack
}

// playLean is PlayWHEP through the lean egress.
func (m *Manager) playLean(srv *egress.Server, c *auth.Claims, offer string, tracks []*Publication, start time.Time) (*Participant, string, error) {
	p, err := m.newParticipant(c, true)
	if err != nil {
		return nil, "", err
	}
	tm := p.startTiming("whep", start) // timing.go
	tm.Mark(StepPCCreated)
	specs := make([]egress.Track, len(tracks))
	for i, t := range tracks {
		specs[i] = t.egressTrack()
	}
	lv := &leanViewer{p: p, tm: tm}
	// The viewer's transport-wide feedback (if its offer had it) feeds the
	// estimate that allocate shares among its tracks, as for room subscribers.
	p.bwe = bwe.New(initialEstimate, minEstimate, maxEstimate)
	v, answer, err := srv.NewViewer(offer, specs, lv)
	if err != nil {
		p.log.Info("whep offer refused", "err", err)
		return nil, "", protocol.Errorf(protocol.CodeSDPInvalid, "offer: %v", err)
	}
	tm.Mark(StepOfferApplied)
	if offerHasCandidates(offer) {
		tm.Mark(StepFirstRemoteCandidate)
	}
	lv.v = v
	p.lean = lv
	if err := m.takeIdentity(p, false); err != nil {
		v.Close("not admitted")
		return nil, "", err
	}
	if err := m.admit(p); err != nil {
		v.Close("not admitted")
		return nil, "", err
	}
	p.OnClose(func() { v.Close("left") })
	downs := make([]leanDown, len(tracks))
	for i, t := range tracks {
		d := newDownTrack(t, p)
		snd := v.Senders[i]
		d.bindWriter(v, snd.SSRC, snd.PT, t.codec.ClockRate, snd.TransportCC, 0)
		downs[i] = leanDown{ssrc: snd.SSRC, d: d}
		p.mu.Lock()
		p.subs[t.sid] = d
		p.mu.Unlock()
		metrics.Subscriptions.Inc()
		t.addDown(d)
	}
	lv.downs.Store(&downs)
	tm.Mark(StepAnswerCreated)
	reports.add(p, v)
	p.log.Info("whep session started", "tracks", len(tracks), "egress", "lean")
	return p, answer, nil
}

// Lean reports whether the participant is a lean egress viewer (no
// PeerConnection: trickled candidates are not needed, ICE-lite learns the
// viewer's address from its checks).
func (p *Participant) Lean() bool { return p.lean != nil }

// LeanICE returns the ICE ufrag a lean WHEP viewer's or WHIP publisher's
// last offer named, for telling trickled candidates (which ICE-lite does
// not need) from an ICE restart.
func (p *Participant) LeanICE() (remoteUfrag string, ok bool) {
	if p.lean != nil {
		return p.lean.v.RemoteUfrag(), true
	}
	p.mu.Lock()
	lp := p.leanPub
	p.mu.Unlock()
	if lp == nil {
		return "", false
	}
	return lp.RemoteUfrag(), true
}

// RestartLeanICE restarts ICE for a lean WHEP viewer with the client's new
// credentials; it returns the server's new ones as an sdpfrag.
func (p *Participant) RestartLeanICE(ufrag, pwd string) (string, error) {
	if p.lean == nil || p.lean.v.Offered() {
		return "", protocol.Errorf(protocol.CodeBadRequest, "not a lean WHEP session")
	}
	frag, err := p.lean.v.RestartICE(ufrag, pwd)
	if err != nil {
		return "", protocol.Errorf(protocol.CodeBadRequest, "%v", err)
	}
	p.log.Debug("whep ice restart", "egress", "lean")
	return frag, nil
}

// LeanOffer is a lean WHIP publisher's last offer ("" for anyone else).
func (p *Participant) LeanOffer() string {
	p.mu.Lock()
	lp := p.leanPub
	p.mu.Unlock()
	if lp == nil {
		return ""
	}
	return lp.LastOffer()
}

func (lv *leanViewer) OnICE() { lv.tm.Mark(StepICEConnected) }

func (lv *leanViewer) OnDTLS() {
	lv.tm.Mark(StepDTLSConnected)
	lv.p.subscriberReady()
}

func (lv *leanViewer) OnClose(reason string) { go lv.p.Close(reason) }

// OnRTCP hands each feedback packet to the DownTracks it is addressed to:
// NACKs are answered from the publication's cache, PLI/FIR become keyframe
// requests, receiver reports give loss and RTT. Transport-wide feedback is
// the connection's, whichever of its SSRCs it names: it goes to the
// estimator.
func (lv *leanViewer) OnRTCP(pkts []rtcp.Packet) {
	downs := lv.downs.Load()
	if downs == nil {
		return
	}
	rtx := rtxBufs.Get().(*[]byte)
	defer rtxBufs.Put(rtx)
	for _, pkt := range pkts {
		if cc, ok := pkt.(*rtcp.TransportLayerCC); ok {
			if lv.p.bwe != nil {
				lv.p.bwe.OnFeedback(cc, now())
			}
			continue
		}
		for _, ssrc := range pkt.DestinationSSRC() {
			for _, x := range *downs {
				if x.ssrc == ssrc {
					x.d.onRTCP(pkt, *rtx, &lv.hdr)
				}
			}
		}
	}
}

// egressTrack is what the lean egress writes into SDP for t.
func (t *Publication) egressTrack() egress.Track {
	return egress.Track{Kind: t.kind.String(), MimeType: t.codec.MimeType, ClockRate: t.codec.ClockRate,
		Channels: t.codec.Channels, Fmtp: t.codec.SDPFmtpLine, ID: t.sid, StreamID: t.owner.sid}
}

// setupLeanSubscriber gives a room participant a subscriber side in the lean
// egress instead of a PeerConnection: the server offers its tracks in its
// own SDP, and each DownTrack's packets are encrypted and written to the
// socket by the goroutine that forwards them (docs/lean-egress.md). Under
// p.mu.
func (p *Participant) setupLeanSubscriber(srv *egress.Server, tm *SessionTiming) error {
	lv := &leanViewer{p: p, tm: tm, mids: map[string]*DownTrack{}}
	v, err := srv.NewSubscriber(lv)
	if err != nil {
		return err
	}
	lv.v = v
	lv.downs.Store(&[]leanDown{})
	p.lean = lv // Close closes v; Join made p.bwe
	reports.add(p, v)
	return nil
}

// leanRoom is the participant's lean subscriber side, nil if it has none
// (a PeerConnection, or a WHEP viewer whose tracks its offer fixed).
func (p *Participant) leanRoom() *leanViewer {
	if p.lean != nil && p.lean.v.Offered() {
		return p.lean
	}
	return nil
}

// add gives d a media section in the next offer.
func (lv *leanViewer) add(d *DownTrack) error {
	snd, err := lv.v.AddTrack(d.pub.egressTrack())
	if err != nil {
		return err
	}
	lv.mu.Lock()
	lv.mids[snd.Mid] = d
	lv.mu.Unlock()
	return nil
}

// remove takes d's section off (the next offer has it inactive).
func (lv *leanViewer) remove(d *DownTrack) {
	lv.mu.Lock()
	mid := ""
	for m, x := range lv.mids {
		if x == d {
			mid = m
			delete(lv.mids, m)
		}
	}
	downs := make([]leanDown, 0, len(*lv.downs.Load()))
	for _, x := range *lv.downs.Load() {
		if x.d != d {
			downs = append(downs, x)
		}
	}
	lv.downs.Store(&downs)
	lv.mu.Unlock()
	if mid != "" {
		lv.v.RemoveTrack(mid)
	}
}

// answer applies the client's answer and binds the DownTracks it takes.
func (lv *leanViewer) answer(sdp string) error {
	acc, err := lv.v.ApplyAnswer(sdp)
	if err != nil {
		return err
	}
	lv.mu.Lock()
	downs := append([]leanDown(nil), *lv.downs.Load()...)
	var bind []func()
	for _, a := range acc {
		d := lv.mids[a.Mid]
		if d == nil || d.bound.Load() {
			continue
		}
		if !a.OK {
			lv.p.log.Info("the client declined a track", "track", d.pub.sid, "mid", a.Mid)
			continue
		}
		downs = append(downs, leanDown{ssrc: a.SSRC, d: d})
		bind = append(bind, func() { d.bindWriter(lv.v, a.SSRC, a.PT, d.pub.codec.ClockRate, a.TransportCC, a.Dependency) })
	}
	lv.downs.Store(&downs)
	lv.mu.Unlock()
	for _, b := range bind {
		b()
	}
	return nil
}
