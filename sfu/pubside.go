package sfu

import (
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/egress"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/rtc"
	"github.com/petrel-sfu/petrel/rtc/datachan"
)

// With the lean egress on, a room participant's publisher side is a lean
// session on the shared UDP socket when the client can use UDP, and a
// PeerConnection otherwise: a publisher session (egress/ingest.go: its
// audio and video, and the two room data channels) for one that may
// publish, a data session (egress/data.go: the data channels alone) for one
// that may not (a webinar's audience). The choice is subside.go's, from the
// candidates the client trickles right after its first publisher offer, so
// the answer to that offer waits for them (ChoosesPublisherSide: the
// signaling layer answers it on its own goroutine).

// leanData is a lean publisher side's handler.
type leanData struct{ p *Participant }

func (l leanData) OnICE()                 { l.p.log.Debug("publisher side", "egress", "lean session") }
func (l leanData) OnDTLS()                {}
func (l leanData) OnRTCP(_ []rtcp.Packet) {}

// OnClose ends the participant, as the lean subscriber side's does: the
// session is gone for good (consent expired, the client closed it).
func (l leanData) OnClose(reason string) { go l.p.Close(reason) }

func (l leanData) OnDataChannel(dc *datachan.Channel) { l.p.onLeanDataChannel(dc) }

// OnTrack publishes a stream of a lean publisher session (egress/ingest.go)
// as onTrack does a PeerConnection's.
func (l leanData) OnTrack(t *egress.InTrack) {
	kind := webrtc.RTPCodecTypeVideo
	if t.Kind == "audio" {
		kind = webrtc.RTPCodecTypeAudio
	}
	codec := webrtc.RTPCodecParameters{PayloadType: webrtc.PayloadType(t.PT), RTPCodecCapability: webrtc.RTPCodecCapability{
		MimeType: t.MimeType, ClockRate: t.ClockRate, Channels: t.Channels, SDPFmtpLine: t.Fmtp}}
	l.p.publishStream(t, t.ID, kind, codec, t.AudioLevelExt, t.DependencyExt)
}

// ingest is how a lean publisher session receives: Petrel's codecs, the
// publisher interceptors, the feedback and header extensions the
// forwarding path uses.
func (m *Manager) ingest() egress.Ingest {
	m.ingestOnce.Do(func() {
		codecs := make([]egress.Track, len(rtc.Codecs))
		for i, c := range rtc.Codecs {
			codecs[i] = egress.Track{Kind: rtc.KindOf(c).String(), MimeType: c.MimeType, ClockRate: c.ClockRate, Channels: c.Channels, Fmtp: c.SDPFmtpLine}
		}
		m.ingestCfg = egress.Ingest{
			Codecs:       codecs,
			Interceptors: rtc.NewPublisherInterceptor,
			Feedback:     []string{"nack", "nack pli", "ccm fir", "transport-cc"},
			Extensions:   []string{sdp.SDESMidURI, sdp.SDESRTPStreamIDURI, rtc.ExtTransportCC, rtc.ExtAudioLevel, rtc.ExtDependencyDes},
		}
	})
	return m.ingestCfg
}

// ChoosesPublisherSide reports whether the next publisher offer will wait
// for the client's candidates before it is answered.
func (p *Participant) ChoosesPublisherSide() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pubChoice && p.pub == nil && p.leanPub == nil
}

// choosePublisherSide waits until the client's candidates show whether it
// can use UDP, then makes the publisher side: a data session (whose answer
// it returns) or a PeerConnection (which the caller answers with).
func (p *Participant) choosePublisherSide(sdp string) (*webrtc.PeerConnection, *egress.Viewer, string, error) {
	defer func() {
		p.mu.Lock()
		p.choosing = false
		p.mu.Unlock()
	}()
	lean := false
	for {
		p.mu.Lock()
		ok := true
		if c := p.subChoice; c != nil {
			lean, ok = c.decide(p.joinedAt)
		} else {
			lean = p.leanRoom() != nil // the subscriber side was chosen first
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return nil, nil, "", protocol.Errorf(protocol.CodeBadRequest, "the participant left")
		}
		if ok {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	m := p.room.mgr
	if srv := m.leanEgress.Load(); lean && srv != nil {
		max := uint32(m.cfg.Limits.MaxDataBytes + maxDataHeader + 16)
		var v *egress.Viewer
		var answer string
		var err error
		if p.grants.Publish {
			v, answer, err = srv.NewIngest(sdp, m.ingest(), max, leanData{p})
		} else {
			v, answer, err = srv.NewDataSession(sdp, max, leanData{p})
		}
		if err != nil {
			return nil, nil, "", protocol.Errorf(protocol.CodeSDPInvalid, "%v", err)
		}
		p.mu.Lock()
		closed := p.closed
		if !closed {
			p.leanPub = v
			delete(p.pending, nil) // ICE-lite: the server learns addresses from checks
		}
		p.mu.Unlock()
		if closed {
			v.Close("left")
			return nil, nil, "", protocol.Errorf(protocol.CodeBadRequest, "the participant left")
		}
		return nil, v, answer, nil
	}
	pc, err := m.engine.NewPublisherPC(p.grants.Publish)
	if err != nil {
		return nil, nil, "", protocol.Errorf(protocol.CodeInternal, "publisher connection: %v", err)
	}
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.setupPublisher(pc)
		p.pending[pc] = p.pending[nil]
		delete(p.pending, nil)
	}
	p.mu.Unlock()
	if closed {
		_ = pc.Close()
		return nil, nil, "", protocol.Errorf(protocol.CodeBadRequest, "the participant left")
	}
	p.log.Debug("publisher side", "egress", "peerconnection")
	return pc, nil, "", nil
}

// publishLean is PublishWHIP through a lean publisher session: no
// PeerConnection (the encoder's candidates do not matter: ICE-lite learns
// its address from its checks).
func (m *Manager) publishLean(srv *egress.Server, c *auth.Claims, offer string) (*Participant, string, error) {
	p, err := m.newParticipant(c, false)
	if err != nil {
		return nil, "", err
	}
	v, answer, err := srv.NewIngest(offer, m.ingest(), uint32(m.cfg.Limits.MaxDataBytes+maxDataHeader+16), leanData{p})
	if err != nil {
		p.log.Info("whip offer refused", "err", err)
		return nil, "", protocol.Errorf(protocol.CodeSDPInvalid, "offer: %v", err)
	}
	p.mu.Lock()
	p.leanPub = v // Close closes it
	p.mu.Unlock()
	if err := m.takeIdentity(p, false); err != nil {
		v.Close("not admitted")
		return nil, "", err
	}
	if err := m.admit(p); err != nil {
		v.Close("not admitted")
		return nil, "", err
	}
	p.log.Info("whip session started", "egress", "lean")
	return p, answer, nil
}
