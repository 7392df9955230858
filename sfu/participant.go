package sfu

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/bwe"
	"github.com/petrel-sfu/petrel/lograte"
	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
)

// Sender delivers server messages to one client. Send never blocks: a client that
// cannot keep up is disconnected by the implementation.
type Sender interface {
	Send(protocol.Message)
	// Close ends the signaling connection after the messages already queued.
	Close(code, message string)
}

// Participant is one member of a room: who it is, what it publishes and what it
// subscribes to. The transport's sessions carry its media: a publisher side
// (the client offers; media and data flow in) and, for room participants, a
// subscriber side (the server offers; media flows out). Each side has exactly
// one offerer, so renegotiation never collides.
type Participant struct {
	sid      string
	identity string
	room     *Room
	log      *slog.Logger
	// grants change live (SetGrants): read them with Grants().
	grants      atomic.Pointer[auth.Grants]
	joinedAt    time.Time
	resumeToken string
	// hidden participants (WHEP viewers) are not announced to the room.
	hidden        bool
	autoSubscribe bool
	// local participants have no peer connection (local.go): a Go component
	// feeds and reads them (camera ingest, playback, WebTransport, mirrors).
	local bool
	// origin says whom the participant answers to (Client, Server, Mirror).
	origin Origin
	// audience limits who sees a hidden local participant's tracks (local.go).
	audience []string

	mu       sync.Mutex
	name     string
	metadata string
	out      Sender
	// pub is the session the client sends on: made at a room participant's
	// first offer, or with a WHIP publisher. Set once.
	pub Publisher
	// sub sends the participant its subscriptions (sides.go): a room
	// participant's server-offered session, or a WHEP viewer's. nil for a
	// WHIP publisher and for local participants.
	sub       *subscriberSide
	published map[string]*Publication
	announced map[string]protocol.TrackInfo // publishTrack requests by cid, waiting for media
	subs      map[string]*DownTrack         // by publication sid
	dcs       map[string]*openChan
	dcOpen    int           // admitted data channels whose reader runs (data.go)
	dcRefused lograte.Limit // the log of refused data channels
	closed    bool
	offerMu   sync.Mutex // one publisher offer at a time
	dropTimer *time.Timer
	onClose   []func()

	// subscriber-connection negotiation state
	negotiating  bool
	renegotiate  bool
	iceRestart   bool
	negotiateSet bool

	data dataLimiter
	// dataFn receives a local participant's data messages.
	dataFn func(reliable bool, h DataHeader, payload []byte)

	// Last-N: this receiver's own limit (-1: the room's) and pinned participants.
	lastN  int
	pinned []string
	// maxBitrate caps the bandwidth estimate in the allocation (0: none).
	maxBitrate atomic.Int64

	// bwe estimates the bandwidth toward this participant's subscriber connection.
	bwe *bwe.Estimator
}

func newSid(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// Sid, Identity and the other accessors are safe from any goroutine.
func (p *Participant) Sid() string      { return p.sid }
func (p *Participant) Identity() string { return p.identity }
func (p *Participant) Room() *Room      { return p.room }
func (p *Participant) Hidden() bool     { return p.hidden }
func (p *Participant) Grants() auth.Grants {
	return *p.grants.Load()
}

// Origin is whom the participant answers to.
func (p *Participant) Origin() Origin { return p.origin }

// Origin says whom a participant answers to. Grants, not the origin, decide
// what it may do; the origin decides who may take its identity and whether
// it counts against the room's limits.
type Origin uint8

const (
	// Client came with a token, over any transport (WebSocket, WHIP, WHEP,
	// WebTransport): its grants are the token's.
	Client Origin = iota
	// Server is a participant the server runs for itself under a reserved
	// identity (a camera ingest, the camera wall's copies, a recording played
	// back): no client replaces it, and it takes no place in the room.
	Server
	// Mirror is another node's client, mirrored here by the cluster with
	// that client's grants.
	Mirror
)

func (o Origin) String() string {
	switch o {
	case Server:
		return "server"
	case Mirror:
		return "mirror"
	}
	return "client"
}

// Info describes the participant and its tracks.
func (p *Participant) Info() protocol.ParticipantInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.infoLocked()
}

func (p *Participant) infoLocked() protocol.ParticipantInfo {
	tracks := make([]protocol.TrackInfo, 0, len(p.published))
	for _, t := range p.published {
		tracks = append(tracks, t.Info())
	}
	g := p.Grants()
	return protocol.ParticipantInfo{
		Sid: p.sid, Identity: p.identity, Name: p.name, Metadata: p.metadata,
		JoinedAt: p.joinedAt.UnixMilli(),
		Permissions: protocol.Grants{
			Publish: g.Publish, Subscribe: g.Subscribe,
			PublishData: g.PublishData, Admin: g.Admin, Record: g.Record,
		},
		Tracks: tracks,
	}
}

// send delivers m to the client if it is connected; messages to a client that is
// away (between WebSocket loss and resume) are dropped: resume sends fresh state.
func (p *Participant) send(m protocol.Message) {
	p.mu.Lock()
	out := p.out
	p.mu.Unlock()
	if out != nil {
		out.Send(m)
	}
}

// publications and subscriptions return snapshots, so that callers can work on
// them without holding the participant's lock.
func (p *Participant) publications() []*Publication {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Publication, 0, len(p.published))
	for _, t := range p.published {
		out = append(out, t)
	}
	return out
}

func (p *Participant) subscriptions() []*DownTrack {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*DownTrack, 0, len(p.subs))
	for _, d := range p.subs {
		out = append(out, d)
	}
	return out
}

// Send is send for the signaling layer.
func (p *Participant) Send(m protocol.Message) { p.send(m) }

// subscriberReady asks for the keyframes that subscriptions bound before the
// connection was up are still waiting for.
func (p *Participant) subscriberReady() {
	for _, d := range p.subscriptions() {
		d.transportReady()
	}
}

// HandleOffer answers a publisher offer: the first one makes the publisher
// side, later ones (renegotiation, ICE restart) go to it.
func (p *Participant) HandleOffer(sdp string) (string, error) {
	if err := p.room.mgr.checkSections(sdp); err != nil {
		return "", err
	}
	p.offerMu.Lock()
	defer p.offerMu.Unlock()
	p.mu.Lock()
	pub, closed := p.pub, p.closed
	p.mu.Unlock()
	if closed {
		return "", protocol.Errorf(protocol.CodeBadRequest, "the participant left")
	}
	if pub != nil {
		answer, err := pub.Reoffer(sdp)
		if err != nil {
			return "", protocol.Errorf(protocol.CodeSDPInvalid, "%v", err)
		}
		return answer, nil
	}
	pub, answer, err := p.room.mgr.transport.Publisher(sdp, p.Grants().Publish, publisherSide{p})
	if err != nil {
		return "", protocol.Errorf(protocol.CodeSDPInvalid, "%v", err)
	}
	p.mu.Lock()
	closed = p.closed
	if !closed {
		p.pub = pub // Close closes it
	}
	p.mu.Unlock()
	if closed {
		pub.Close("left")
		return "", protocol.Errorf(protocol.CodeBadRequest, "the participant left")
	}
	return answer, nil
}

// HandleAnswer applies the client's answer to the server's subscriber offer.
func (p *Participant) HandleAnswer(sdp string) error {
	p.mu.Lock()
	sub, waiting := p.sub, p.negotiating
	p.mu.Unlock()
	if sub == nil || sub.off == nil {
		return protocol.Errorf(protocol.CodeBadRequest, "no subscriber connection")
	}
	if !waiting {
		return protocol.Errorf(protocol.CodeBadRequest, "no offer is waiting for an answer")
	}
	if err := sub.answer(sdp); err != nil {
		p.mu.Lock()
		p.negotiating = false
		p.mu.Unlock()
		return protocol.Errorf(protocol.CodeSDPInvalid, "%v", err)
	}
	p.answered()
	return nil
}

// answered ends a round of subscriber negotiation, and starts the next one
// if something changed meanwhile.
func (p *Participant) answered() {
	p.mu.Lock()
	p.negotiating = false
	again := p.renegotiate
	p.renegotiate = false
	p.mu.Unlock()
	if again {
		p.negotiate(false)
	}
}

// AddCandidate takes a trickled candidate for the "publisher" or
// "subscriber" side. The server's sessions are ICE-lite: they learn the
// client's addresses from its checks, so a valid candidate is not needed.
func (p *Participant) AddCandidate(target string, c *protocol.Candidate) error {
	switch target {
	case "subscriber":
		p.mu.Lock()
		sub := p.sub
		p.mu.Unlock()
		if sub == nil || sub.off == nil {
			return protocol.Errorf(protocol.CodeBadRequest, "no subscriber connection")
		}
	case "publisher", "":
	default:
		return protocol.Errorf(protocol.CodeBadRequest, "no %s connection", target)
	}
	if c == nil { // end of candidates
		return nil
	}
	if err := protocol.CheckCandidate(c); err != nil {
		return protocol.Errorf(protocol.CodeBadRequest, "candidate: %v", err)
	}
	return nil
}

// negotiate sends a new subscriber offer soon. Calls close together are batched,
// and a call while an offer is outstanding is done after its answer.
func (p *Participant) negotiate(iceRestart bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.hasSubscriberSide() || p.closed {
		return
	}
	if iceRestart {
		p.iceRestart = true
	}
	if p.negotiateSet {
		return
	}
	p.negotiateSet = true
	time.AfterFunc(15*time.Millisecond, p.doNegotiate)
}

func (p *Participant) doNegotiate() {
	p.mu.Lock()
	p.negotiateSet = false
	if p.closed || !p.hasSubscriberSide() {
		p.mu.Unlock()
		return
	}
	if p.negotiating {
		p.renegotiate = true
		p.mu.Unlock()
		return
	}
	if p.out == nil {
		// The client is away; negotiate again when it resumes.
		p.renegotiate = true
		p.mu.Unlock()
		return
	}
	p.negotiating = true
	restart := p.iceRestart
	p.iceRestart = false
	sub := p.sub
	p.mu.Unlock()

	sdp, err := sub.off.Offer(restart)
	if err == nil {
		p.send(protocol.Offer{SDP: sdp})
		return
	}
	p.log.Warn("subscriber offer failed", "err", err)
	p.mu.Lock()
	p.negotiating = false
	p.mu.Unlock()
}

// PublishTrack records a track the client is about to send; media arriving with
// the same msid track id becomes this track.
func (p *Participant) PublishTrack(r *protocol.PublishTrack) (protocol.TrackInfo, error) {
	if !p.Grants().Publish {
		return protocol.TrackInfo{}, protocol.Errorf(protocol.CodeForbidden, "the token does not allow publishing")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.published)+len(p.announced) >= p.room.mgr.cfg.Limits.MaxTracksPerParticipant {
		return protocol.TrackInfo{}, protocol.Errorf(protocol.CodeTooManyTracks, "at most %d tracks per participant", p.room.mgr.cfg.Limits.MaxTracksPerParticipant)
	}
	if ti, ok := p.announced[r.Cid]; ok {
		return ti, nil
	}
	src := r.Source
	if src == "" {
		src = protocol.SourceUnknown
	}
	ti := protocol.TrackInfo{Sid: newSid("TR_"), Cid: r.Cid, Kind: string(r.Kind), Source: string(src), Width: r.Width, Height: r.Height, Layers: r.Layers}
	if r.Name != nil {
		ti.Name = *r.Name
	}
	if r.Muted != nil {
		ti.Muted = *r.Muted
	}
	p.announced[r.Cid] = ti
	return ti, nil
}

// publishStream publishes one stream a publisher sends (a track, or a
// simulcast encoding of one): id is its msid track id, which PublishTrack
// announced; levelExt and ddExt are the ids of the audio level and
// dependency descriptor extensions (0: none).
func (p *Participant) publishStream(src Source, id string, kind Kind, codec Codec, levelExt, ddExt uint8) {
	p.mu.Lock()
	if p.closed || !p.Grants().Publish {
		p.mu.Unlock()
		src.Stop()
		return
	}
	if src.RID() != "" {
		for _, t := range p.published {
			if t.Info().Cid == id {
				// Another simulcast encoding of a track already published.
				l := t.addLayer(src)
				p.mu.Unlock()
				if l != nil {
					p.log.Info("simulcast layer", "track", t.sid, "rid", src.RID(), "layer", l.index)
					l.start(nil)
					for _, d := range t.Subscribers() {
						d.chooseLayer()
					}
				}
				return
			}
		}
	}
	ti, ok := p.announced[id]
	if ok {
		delete(p.announced, id)
	} else {
		if len(p.published) >= p.room.mgr.cfg.Limits.MaxTracksPerParticipant {
			p.mu.Unlock()
			p.log.Warn("track refused: too many tracks")
			src.Stop()
			return
		}
		srcName := "camera"
		if kind == Audio {
			srcName = "microphone"
		}
		ti = protocol.TrackInfo{Sid: newSid("TR_"), Cid: id, Kind: kind.String(), Source: srcName}
	}
	t := newPublication(p, ti, kind, codec, src, p.room.mgr.cfg.RTC.PacketCache)
	l := t.layer(layerOf(src.RID()))
	if t.kind == Audio && levelExt != 0 {
		l.levelExt = levelExt
		l.speaker = p.room.speakers.Track(p.sid)
	}
	if t.kind == Video && ddExt != 0 {
		l.svc.ddExt = ddExt
	}
	p.published[t.sid] = t
	p.mu.Unlock()

	metrics.Tracks.Inc()
	p.log.Info("track published", "track", t.sid, "kind", ti.Kind, "codec", t.codec.MimeType, "source", ti.Source)
	l.start(func() { p.unpublish(t, "ended") })
	p.room.trackPublished(p, t)
}

// UnpublishTrack stops forwarding a track at the client's request.
func (p *Participant) UnpublishTrack(sid string) error {
	p.mu.Lock()
	t, ok := p.published[sid]
	p.mu.Unlock()
	if !ok {
		return protocol.Errorf(protocol.CodeNotFound, "no published track %q", sid)
	}
	p.unpublish(t, "unpublished")
	return nil
}

func (p *Participant) unpublish(t *Publication, why string) {
	p.mu.Lock()
	if _, ok := p.published[t.sid]; !ok {
		p.mu.Unlock()
		return
	}
	delete(p.published, t.sid)
	p.mu.Unlock()
	metrics.Tracks.Dec()
	for _, d := range t.Subscribers() {
		d.sub.unsubscribe(t, true)
	}
	if why != "ended" {
		// Stop the reader: the transceiver keeps its track until renegotiation.
		t.stop()
	}
	p.log.Info("track unpublished", "track", t.sid, "why", why)
	p.room.mgr.emitParticipant(EventTrackUnpublished, p, t, why)
	p.room.broadcast(protocol.TrackUnpublished{ParticipantSid: p.sid, TrackSid: t.sid}, p)
}

// MuteTrack changes a track's mute state and tells the room (the owner too, so an
// admin mute reaches the publisher's UI).
func (p *Participant) MuteTrack(sid string, muted bool) error {
	p.mu.Lock()
	t, ok := p.published[sid]
	p.mu.Unlock()
	if !ok {
		return protocol.Errorf(protocol.CodeNotFound, "no published track %q", sid)
	}
	t.setMuted(muted)
	p.room.broadcast(protocol.TrackMuted{ParticipantSid: p.sid, TrackSid: sid, Muted: muted}, nil)
	return nil
}

// Subscribe starts receiving t.
func (p *Participant) Subscribe(t *Publication) error {
	if !p.Grants().Subscribe {
		return protocol.Errorf(protocol.CodeForbidden, "the token does not allow subscribing")
	}
	if t.owner == p {
		return nil
	}
	p.mu.Lock()
	// Again under mu: SetGrants collects the subscriptions to end under it.
	if p.closed || !p.hasSubscriberSide() || !p.Grants().Subscribe {
		p.mu.Unlock()
		return nil
	}
	if _, ok := p.subs[t.sid]; ok {
		p.mu.Unlock()
		return nil
	}
	d := newDownTrack(t, p)
	if err := p.attach(d); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("subscribe %s: %w", t.sid, err)
	}
	p.subs[t.sid] = d
	p.mu.Unlock()
	metrics.Subscriptions.Inc()
	t.addDown(d)
	p.send(protocol.TrackSubscribed{ParticipantSid: t.owner.sid, TrackSid: t.sid})
	p.negotiate(false)
	return nil
}

// attach gives d a media section in the subscriber side's next offer.
// Under p.mu.
func (p *Participant) attach(d *DownTrack) error { return p.sub.add(d) }

// unsubscribe stops receiving t; renegotiate is false when the connection is
// being closed anyway.
func (p *Participant) unsubscribe(t *Publication, renegotiate bool) {
	p.mu.Lock()
	d, ok := p.subs[t.sid]
	if ok {
		delete(p.subs, t.sid)
	}
	sub := p.sub
	p.mu.Unlock()
	if !ok {
		return
	}
	metrics.Subscriptions.Dec()
	t.removeDown(d)
	d.close()
	if p.hidden && renegotiate {
		// A WHEP viewer cannot be offered anything new: when what it plays is
		// gone, its session ends.
		p.mu.Lock()
		left := len(p.subs)
		p.mu.Unlock()
		if left == 0 {
			go p.Close("publisher_left")
			return
		}
	}
	if sub != nil && sub.off != nil {
		sub.remove(d)
	}
	if sub != nil && sub.off != nil && renegotiate {
		p.send(protocol.TrackUnsubscribed{ParticipantSid: t.owner.sid, TrackSid: t.sid})
		p.negotiate(false)
	}
}

// SetSubscribed subscribes to or unsubscribes from tracks by sid.
func (p *Participant) SetSubscribed(sids []string, on bool) error {
	for _, sid := range sids {
		t := p.room.findTrack(sid)
		if t == nil {
			return protocol.Errorf(protocol.CodeNotFound, "no track %q in this room", sid)
		}
		if on {
			if err := p.Subscribe(t); err != nil {
				return err
			}
		} else {
			p.unsubscribe(t, true)
		}
	}
	return nil
}

// UpdateTrackSettings applies a subscriber's wishes for one track: the size it is
// shown at (or a quality), and whether it is shown at all.
func (p *Participant) UpdateTrackSettings(r *protocol.UpdateTrackSettings) error {
	p.mu.Lock()
	d := p.subs[r.TrackSid]
	p.mu.Unlock()
	if d == nil {
		return protocol.Errorf(protocol.CodeNotFound, "not subscribed to %q", r.TrackSid)
	}
	if r.Paused != nil {
		d.SetPaused(*r.Paused)
	}
	switch {
	case r.Quality != "":
		d.SetMaxLayer(map[protocol.VideoQuality]int{protocol.QualityLow: 0, protocol.QualityMedium: 1, protocol.QualityHigh: 2}[r.Quality])
	case r.Width > 0 || r.Height > 0:
		d.SetMaxLayer(d.pub.layerForSize(r.Width, r.Height))
	}
	return nil
}

// Relay passes signaling for a direct connection to another participant of the
// room (offers, answers and candidates of the peer-to-peer path for 1:1 calls,
// a viewer's direct session to a WebRTC camera); the server checks the
// sender's grant and the recipient, and stamps the sender. Media received
// over a direct connection is subscribed to: relaying needs that grant.
func (p *Participant) Relay(to string, data []byte) error {
	if !p.Grants().Subscribe {
		return protocol.Errorf(protocol.CodeForbidden, "the token does not allow subscribing, which a direct connection does")
	}
	q := p.room.BySid(to)
	if q == nil || q.hidden || q == p {
		return protocol.Errorf(protocol.CodeNotFound, "no participant %q to relay to", to)
	}
	if tap := p.room.mgr.relayTap.Load(); tap != nil {
		(*tap)(p, q, data)
	}
	q.send(protocol.Relayed{From: p.sid, Data: json.RawMessage(data)})
	return nil
}

// SetGrants changes what p may do, at once (the admin API): a revoked publish
// unpublishes its tracks, a revoked subscribe ends its subscriptions, a
// revoked publishData drops its next message. The camera grant is the token's
// alone and stays as it was. Everyone in the room, p too, gets
// participantUpdated. A client whose publisher connection was made without
// publish (data only) publishes media after it reconnects.
func (p *Participant) SetGrants(g auth.Grants) {
	old := p.Grants()
	g.Camera = old.Camera
	p.grants.Store(&g)
	var pubs, subs []*Publication
	p.mu.Lock()
	if old.Publish && !g.Publish {
		clear(p.announced)
		for _, t := range p.published {
			pubs = append(pubs, t)
		}
	}
	if old.Subscribe && !g.Subscribe {
		for _, d := range p.subs {
			subs = append(subs, d.pub)
		}
	}
	p.mu.Unlock()
	for _, t := range pubs {
		p.unpublish(t, "permission_revoked")
	}
	for _, t := range subs {
		p.unsubscribe(t, true)
	}
	if len(pubs)+len(subs) > 0 || old != g {
		p.log.Info("grants changed", "publish", g.Publish, "subscribe", g.Subscribe, "publishData", g.PublishData, "admin", g.Admin, "ptz", g.PTZ, "record", g.Record)
	}
	p.UpdateMetadata(nil, nil)
	if !old.Subscribe && g.Subscribe {
		p.room.subscribeExisting(p)
	}
}

// UpdateMetadata changes name and/or metadata and tells the room.
func (p *Participant) UpdateMetadata(name, metadata *string) {
	p.mu.Lock()
	if name != nil {
		p.name = *name
	}
	if metadata != nil {
		p.metadata = *metadata
	}
	info := p.infoLocked()
	p.mu.Unlock()
	p.room.broadcast(protocol.ParticipantUpdated{Participant: info}, nil)
}

// RestartICE renegotiates the subscriber connection with new ICE credentials.
func (p *Participant) RestartICE() { p.negotiate(true) }

// Attach connects a (new) signaling connection, as on join or resume.
func (p *Participant) Attach(out Sender) {
	p.mu.Lock()
	p.out = out
	if p.dropTimer != nil {
		p.dropTimer.Stop()
		p.dropTimer = nil
	}
	again := p.renegotiate && !p.negotiating
	if p.negotiating {
		// The offer sent before the loss may never have arrived: offer again.
		p.negotiating = false
		again = true
	}
	p.renegotiate = false
	p.mu.Unlock()
	if again {
		p.negotiate(false)
	}
}

// Detach is called when the signaling connection out is lost. The participant
// stays for the resume window, then leaves.
func (p *Participant) Detach(out Sender, window time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out != out || p.closed {
		return
	}
	p.out = nil
	p.log.Info("signaling lost, waiting for resume", "window", window)
	p.dropTimer = time.AfterFunc(window, func() { p.Close("disconnected") })
}

// ResumeTokenMatches checks a resume attempt in constant time.
func (p *Participant) ResumeTokenMatches(tok string) bool {
	return constantTimeEqual(p.resumeToken, tok)
}

// ResumeToken is handed to the client in joined.
func (p *Participant) ResumeToken() string { return p.resumeToken }

// MoveTo sends a room-protocol client to another room (the server API): it
// gets move with the room and a token for it, its connections close, and it
// leaves this room (reason moved); the client joins the other room with the
// token and publishes its tracks there. Only a client on a signaling
// connection can follow.
func (p *Participant) MoveTo(room, token string) error {
	p.mu.Lock()
	out := p.out
	p.mu.Unlock()
	if out == nil || p.local || p.hidden {
		return protocol.Errorf(protocol.CodeBadRequest, "participant %q is not connected over the room protocol's WebSocket, so it cannot follow a move", p.identity)
	}
	out.Send(protocol.Move{Room: room, Token: token})
	// No leave message: the client would take it as the end of its session.
	out.Close("moved", "moved to room "+room)
	p.Close("moved")
	return nil
}

// Kick tells the client why and removes it.
func (p *Participant) Kick(reason, message string) {
	p.mu.Lock()
	out := p.out
	p.mu.Unlock()
	if out != nil {
		out.Send(protocol.LeaveNotice{Reason: reason, Message: message})
		out.Close(reason, message)
	}
	p.Close(reason)
}

// Close removes the participant: its tracks are unpublished, its subscriptions
// and connections closed, and the room told.
func (p *Participant) Close(reason string) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.dropTimer != nil {
		p.dropTimer.Stop()
	}
	pubs := make([]*Publication, 0, len(p.published))
	for _, t := range p.published {
		pubs = append(pubs, t)
	}
	subs := make([]*Publication, 0, len(p.subs))
	for _, d := range p.subs {
		subs = append(subs, d.pub)
	}
	pub, sub := p.pub, p.sub
	p.mu.Unlock()

	for _, t := range pubs {
		p.unpublish(t, "left")
	}
	for _, t := range subs {
		p.unsubscribe(t, false)
	}
	if pub != nil {
		pub.Close("left")
	}
	if sub != nil {
		sub.s.Close("left")
	}
	p.room.remove(p, reason)
	p.log.Info("participant left", "reason", reason)
	p.mu.Lock()
	fs := p.onClose
	p.onClose = nil
	p.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Stats summarises what the participant sends and receives, for the API.
func (p *Participant) Stats() map[string]any {
	pubRTT := p.publisherRTT()
	p.mu.Lock()
	defer p.mu.Unlock()
	var subs []map[string]any
	for sid, d := range p.subs {
		subs = append(subs, map[string]any{
			"trackSid": sid, "packets": d.packets.Load(), "nacks": d.nacks.Load(),
			"retransmits": d.retransmits.Load(), "plis": d.plis.Load(),
			"rttMs": float64(d.rtt.Load()) / 1e6, "fractionLost": float64(d.lossFrac.Load()) / 256,
			"layer": d.CurrentLayer(), "allocatedLayer": d.allocLayer.Load(), "switches": d.switches.Load(),
			"temporal": d.CurrentTemporal(), "allocatedTemporal": d.allocT.Load(),
			"kind": d.pub.kind.String(), "temporalLayers": d.pub.temporalLayers(d.CurrentLayer()),
		})
	}
	var pubs []map[string]any
	for sid, t := range p.published {
		pubs = append(pubs, map[string]any{"trackSid": sid, "packets": t.packets.Load(), "bytes": t.bytes.Load(), "subscribers": len(t.Subscribers())})
	}
	out := map[string]any{"published": pubs, "subscribed": subs, "publisherRttMs": float64(pubRTT) / 1e6}
	if p.bwe != nil {
		out["estimateBps"] = p.bwe.Estimate()
		out["receivedBps"] = p.bwe.Received()
	}
	return out
}

func constantTimeEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	var v byte
	for i := 0; i < len(a); i++ {
		v |= a[i] ^ b[i]
	}
	return v == 0
}

// hasSubscriberSide: the participant's subscriptions are offered to it by
// the server. Under mu.
func (p *Participant) hasSubscriberSide() bool { return p.sub != nil && p.sub.off != nil }

// OnClose registers f to run once the participant has left.
func (p *Participant) OnClose(f func()) {
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.onClose = append(p.onClose, f)
	}
	p.mu.Unlock()
	if closed {
		f()
	}
}
