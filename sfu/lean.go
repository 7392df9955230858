package sfu

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/auth"
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
		specs[i] = egress.Track{Kind: t.kind.String(), MimeType: t.codec.MimeType, ClockRate: t.codec.ClockRate,
			Fmtp: t.codec.SDPFmtpLine, ID: t.sid, StreamID: t.owner.sid}
	}
	lv := &leanViewer{p: p, tm: tm}
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
	if err := m.admit(p); err != nil {
		v.Close("not admitted")
		return nil, "", err
	}
	p.OnClose(func() { v.Close("left") })
	downs := make([]leanDown, len(tracks))
	for i, t := range tracks {
		d := newDownTrack(t, p)
		snd := v.Senders[i]
		d.bindWriter(v, snd.SSRC, snd.PT, t.codec.ClockRate)
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

// LeanICE returns a lean viewer's ICE ufrag (the one its offer named), for
// telling trickled candidates from an ICE restart.
func (p *Participant) LeanICE() (remoteUfrag string, ok bool) {
	if p.lean == nil {
		return "", false
	}
	return p.lean.v.RemoteUfrag(), true
}

func (lv *leanViewer) OnICE() { lv.tm.Mark(StepICEConnected) }

func (lv *leanViewer) OnDTLS() {
	lv.tm.Mark(StepDTLSConnected)
	lv.p.subscriberReady()
}

func (lv *leanViewer) OnClose(reason string) { go lv.p.Close(reason) }

// OnRTCP hands each feedback packet to the DownTracks it is addressed to:
// NACKs are answered from the publication's cache, PLI/FIR become keyframe
// requests, receiver reports give loss and RTT.
func (lv *leanViewer) OnRTCP(pkts []rtcp.Packet) {
	downs := lv.downs.Load()
	if downs == nil {
		return
	}
	rtx := rtxBufs.Get().(*[]byte)
	defer rtxBufs.Put(rtx)
	for _, pkt := range pkts {
		for _, ssrc := range pkt.DestinationSSRC() {
			for _, x := range *downs {
				if x.ssrc == ssrc {
					x.d.onRTCP(pkt, *rtx, &lv.hdr)
				}
			}
		}
	}
}
