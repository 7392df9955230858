package sfu

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/bwe"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
)

// Manager owns the rooms of this server.
type Manager struct {
	cfg       config.Config
	transport Transport
	log       *slog.Logger

	mu    sync.Mutex
	rooms map[string]*Room

	dataTap dataTapPtr // cascade.go
	// handover says whether a participant holding an identity stays when the
	// same identity joins (a cluster mirror of someone moving here: it leaves
	// when its node says so, after the new session has media).
	handover atomic.Pointer[func(*Participant) bool]
	relayTap relayTapPtr // relaytap.go
	observer observerPtr // observer.go
	// dataFilter may take a data message before delivery (relaytap.go).
	dataFilter atomic.Pointer[DataFilter]
	// recordCtl starts and stops room recordings (record.go).
	recordCtl atomic.Pointer[RecordControl]

	timings timingTable // timing.go
	reports reporter    // reporter.go
}

// NewManager returns a manager whose participants' sessions t makes.
func NewManager(cfg config.Config, t Transport, log *slog.Logger) *Manager {
	return &Manager{cfg: cfg, transport: t, log: log, rooms: map[string]*Room{}}
}

// Room returns the named room or nil.
func (m *Manager) Room(name string) *Room {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rooms[name]
}

// Rooms lists open rooms by name.
func (m *Manager) Rooms() []*Room {
	m.mu.Lock()
	out := make([]*Room, 0, len(m.rooms))
	for _, r := range m.rooms {
		out = append(out, r)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// CreateRoom opens a room that stays open when empty (rooms otherwise come and go
// with their participants).
func (m *Manager) CreateRoom(name string, maxParticipants int, metadata string) (*Room, error) {
	r, err := m.getOrCreate(name)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.explicit = true
	if maxParticipants > 0 {
		r.maxParticipants = maxParticipants
	}
	r.metadata = metadata
	r.mu.Unlock()
	return r, nil
}

func (m *Manager) getOrCreate(name string) (*Room, error) {
	if name == "" || len(name) > 128 {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "room name must be 1 to 128 bytes")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.rooms[name]; ok {
		return r, nil
	}
	if len(m.rooms) >= m.cfg.Limits.MaxRooms {
		return nil, protocol.Errorf(protocol.CodeServerBusy, "this server holds its maximum of %d rooms", m.cfg.Limits.MaxRooms)
	}
	r := &Room{
		sid: newSid("RM_"), name: name, mgr: m, createdAt: time.Now(),
		participants: map[string]*Participant{}, maxParticipants: m.cfg.Limits.MaxParticipantsPerRoom,
		speakers: NewSpeakers(), lastSpoke: map[string]time.Time{}, lastN: m.cfg.RTC.LastN, audioLastN: m.cfg.RTC.AudioLastN, done: make(chan struct{}),
	}
	r.audioMix.Store(m.cfg.RTC.MixesAudio(name))
	go r.selectionLoop()
	m.rooms[name] = r
	metrics.Rooms.Inc()
	m.log.Info("room opened", "room", name)
	// Under m.mu: no one joins the room before it is reported.
	m.emitRoom(EventRoomStarted, r)
	return r, nil
}

func (m *Manager) dropIfEmpty(r *Room) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.mu.Lock()
	empty := len(r.participants) == 0 && !r.explicit
	if empty {
		r.closed = true
	}
	r.mu.Unlock()
	if empty && m.rooms[r.name] == r {
		r.stop()
		delete(m.rooms, r.name)
		metrics.Rooms.Dec()
		m.log.Info("room closed", "room", r.name, "why", "empty")
		m.emitRoom(EventRoomFinished, r)
	}
}

func (m *Manager) forget(r *Room) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rooms[r.name] == r {
		r.stop()
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		delete(m.rooms, r.name)
		metrics.Rooms.Dec()
		m.log.Info("room closed", "room", r.name)
		m.emitRoom(EventRoomFinished, r)
	}
}

// JoinOptions are what a client asks for when joining.
type JoinOptions struct {
	Name          *string
	Metadata      *string
	AutoSubscribe bool
}

// Join admits the holder of claims into its room as a full participant
// (publisher and subscriber connections, data channels).
func (m *Manager) Join(c *auth.Claims, opt JoinOptions, out Sender) (*Participant, error) {
	start := time.Now()
	p, err := m.newParticipant(c, false)
	if err != nil {
		return nil, err
	}
	if opt.Name != nil {
		p.name = *opt.Name
	}
	if opt.Metadata != nil {
		p.metadata = *opt.Metadata
	}
	p.autoSubscribe = opt.AutoSubscribe
	p.out = out
	p.bwe = bwe.New(initialEstimate, minEstimate, maxEstimate)
	tm := p.startTiming("room", start) // timing.go: the viewer's side of time-to-stream
	// The publisher side comes with the client's first offer (HandleOffer).
	if err := p.newSubscriberSide(tm); err != nil {
		return nil, fmt.Errorf("subscriber connection: %w", err)
	}
	tm.Mark(StepPCCreated)
	if err := m.takeIdentity(p, false); err != nil {
		p.sub.s.Close("not admitted")
		return nil, err
	}
	if err := m.admit(p); err != nil {
		p.sub.s.Close("not admitted")
		return nil, err
	}
	p.log.Info("participant joined")
	return p, nil
}

// takeIdentity makes room for p's identity: a visible participant holding it
// is replaced (a reconnecting client's old session), unless the cluster keeps
// it during a handover or keep is set. The server's own participants are never
// replaced by anyone else's: their identities are reserved.
func (m *Manager) takeIdentity(p *Participant, keep bool) error {
	if p.origin == Client && auth.Reserved(p.identity) && !(p.identity == auth.CameraIdentity && p.Grants().Camera) {
		return protocol.Errorf(protocol.CodeIdentityReserved, "identity %q is reserved for the server's own participants", p.identity)
	}
	if p.hidden {
		return nil
	}
	old := p.room.ByIdentity(p.identity)
	switch {
	case old == nil:
	case old.origin == Server && p.origin != Server:
		p.log.Warn("join refused: the identity is the server's own", "origin", p.origin)
		return protocol.Errorf(protocol.CodeIdentityReserved, "identity %q is held by the server's own participant in room %q", p.identity, p.room.name)
	case !keep && !m.keeps(old):
		old.Kick("duplicate_identity", "the same identity joined again")
	}
	return nil
}

// admit adds p to its room. If the room closed since p was made (its last
// member left, as when a reconnecting client replaces its old session), p joins
// the room's successor.
func (m *Manager) admit(p *Participant) error {
	for i := 0; i < 3; i++ {
		err := p.room.add(p)
		if !errors.Is(err, errRoomGone) {
			return err
		}
		r, err := m.getOrCreate(p.room.name)
		if err != nil {
			return err
		}
		p.room = r
	}
	return protocol.Errorf(protocol.CodeServerBusy, "room %q keeps closing, try again", p.room.name)
}

// Start subscribes a newly joined participant to what is already published. It
// runs after the joined message, so the client knows the room before offers come.
func (p *Participant) Start() { p.room.subscribeExisting(p) }

func (m *Manager) newParticipant(c *auth.Claims, hidden bool) (*Participant, error) {
	room, err := m.getOrCreate(c.Room)
	if err != nil {
		return nil, err
	}
	sid := newSid("PA_")
	p := &Participant{
		sid: sid, identity: c.Identity(), room: room,
		joinedAt: time.Now(), resumeToken: newSid(""), hidden: hidden,
		name: c.Name, metadata: c.Metadata,
		published: map[string]*Publication{}, announced: map[string]protocol.TrackInfo{},
		subs: map[string]*DownTrack{}, dcs: map[string]*openChan{},
		lastN: -1,
	}
	g := c.Grants
	p.grants.Store(&g)
	p.log = m.log.With("room", room.name, "participant", sid, "identity", c.Identity())
	return p, nil
}

// Resume finds the participant a reconnecting client left behind.
func (m *Manager) Resume(c *auth.Claims, participantSid, resumeToken string) (*Participant, error) {
	r := m.Room(c.Room)
	if r == nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "room %q no longer exists", c.Room)
	}
	p := r.BySid(participantSid)
	if p == nil || p.identity != c.Identity() || !p.ResumeTokenMatches(resumeToken) {
		return nil, protocol.Errorf(protocol.CodeNotFound, "no participant to resume")
	}
	return p, nil
}

// sectionAllowance is how many media sections an offer may have beyond the
// participant's track limit: its data channel's, and receive-only or
// stopped ones a client keeps.
const sectionAllowance = 4

// checkSections refuses an offer with more media sections than a participant
// can use, before the transport parses it: each would cost its state however
// few tracks are then allowed.
func (m *Manager) checkSections(offer string) error {
	max := m.cfg.Limits.MaxTracksPerParticipant + sectionAllowance
	if n := MediaSections(offer); n > max {
		return protocol.Errorf(protocol.CodeTooManyTracks, "the offer has %d media sections, at most %d are taken (%d tracks and %d others)",
			n, max, m.cfg.Limits.MaxTracksPerParticipant, sectionAllowance)
	}
	return nil
}

// PublishWHIP admits a WHIP publisher: one client-offered connection, no
// signaling channel. It returns the participant and the answer.
func (m *Manager) PublishWHIP(c *auth.Claims, offer string) (*Participant, string, error) {
	if !c.Grants.Publish {
		return nil, "", protocol.Errorf(protocol.CodeForbidden, "the token does not allow publishing")
	}
	if err := m.checkSections(offer); err != nil {
		return nil, "", err
	}
	p, err := m.newParticipant(c, false)
	if err != nil {
		return nil, "", err
	}
	pub, answer, err := m.transport.Publisher(offer, true, publisherSide{p})
	if err != nil {
		p.log.Info("whip offer refused", "err", err)
		return nil, "", protocol.Errorf(protocol.CodeSDPInvalid, "offer: %v", err)
	}
	p.pub = pub // Close closes it
	if err := m.takeIdentity(p, false); err != nil {
		pub.Close("not admitted")
		return nil, "", err
	}
	if err := m.admit(p); err != nil {
		pub.Close("not admitted")
		return nil, "", err
	}
	p.log.Info("whip session started")
	return p, answer, nil
}

// PlayWHEP admits a WHEP viewer: a hidden participant whose client-offered
// connection receives the selected tracks (by participant identity and/or track
// sid; by default the newest video and audio in the room).
func (m *Manager) PlayWHEP(c *auth.Claims, offer, identity string, trackSids []string) (*Participant, string, error) {
	if !c.Grants.Subscribe {
		return nil, "", protocol.Errorf(protocol.CodeForbidden, "the token does not allow subscribing")
	}
	if err := m.checkSections(offer); err != nil {
		return nil, "", err
	}
	room := m.Room(c.Room)
	if room == nil {
		return nil, "", protocol.Errorf(protocol.CodeNotFound, "room %q has no publisher", c.Room)
	}
	tracks := selectTracks(room, identity, trackSids, offerCodecs(offer))
	if room.AudioMix() {
		tracks = room.withMix(tracks, c.Identity())
	}
	if len(tracks) == 0 {
		return nil, "", protocol.Errorf(protocol.CodeNotFound, "no published track matches")
	}
	start := time.Now()
	p, err := m.newParticipant(c, true)
	if err != nil {
		return nil, "", err
	}
	tm := p.startTiming("whep", start) // timing.go
	tm.Mark(StepPCCreated)
	p.bwe = bwe.New(initialEstimate, minEstimate, maxEstimate)
	answer, err := p.playViewer(offer, tracks, tm)
	if err != nil {
		p.log.Info("whep offer refused", "err", err)
		return nil, "", protocol.Errorf(protocol.CodeSDPInvalid, "offer: %v", err)
	}
	tm.Mark(StepOfferApplied)
	if offerHasCandidates(offer) {
		tm.Mark(StepFirstRemoteCandidate)
	}
	if err := m.takeIdentity(p, false); err != nil {
		p.Close("not admitted")
		return nil, "", err
	}
	if err := m.admit(p); err != nil {
		p.Close("not admitted")
		return nil, "", err
	}
	tm.Mark(StepAnswerCreated)
	p.log.Info("whep session started", "tracks", len(tracks))
	return p, answer, nil
}

// MediaSections counts the media sections of an SDP without parsing it, so
// that an offer with too many is refused before a parser builds them all.
// It counts every line of type m as Pion's parser finds them (a line may
// start after any run of \r and \n), so it never counts fewer.
func MediaSections(text string) int {
	n := 0
	for i := 0; ; {
		j := strings.Index(text[i:], "m=")
		if j < 0 {
			return n
		}
		if at := i + j; at == 0 || text[at-1] == '\n' || text[at-1] == '\r' {
			n++
		}
		i += j + 2
	}
}

// offerCodecs lists the codecs (lower-case mime subtype: "h264") an offer's
// rtpmap lines name.
func offerCodecs(offer string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(offer, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(l), "a=rtpmap:")
		if !ok {
			continue
		}
		if _, enc, ok := strings.Cut(v, " "); ok {
			name, _, _ := strings.Cut(enc, "/")
			out[strings.ToLower(name)] = true
		}
	}
	return out
}

// selectTracks picks the tracks a WHEP viewer asked for, or the newest video
// and audio. An alternate video track stands in for its owner's video only
// when the offer (codecs) cannot receive the original's codec.
func selectTracks(room *Room, identity string, sids []string, codecs map[string]bool) []*Publication {
	var out []*Publication
	if len(sids) > 0 {
		for _, sid := range sids {
			if t := room.findTrack(sid); t != nil {
				out = append(out, t)
			}
		}
		return out
	}
	var video, audio *Publication
	var vAt, aAt time.Time
	for _, p := range room.Participants() {
		if identity != "" && p.identity != identity {
			continue
		}
		p.mu.Lock()
		for _, t := range p.published {
			at := p.joinedAt
			if t.kind == Video && !t.alternate && (video == nil || at.After(vAt)) {
				video, vAt = t, at
			}
			if t.kind == Audio && (audio == nil || at.After(aAt)) {
				audio, aAt = t, at
			}
		}
		p.mu.Unlock()
	}
	if video != nil && !codecs[codecName(video.codec.MimeType)] {
		owner := video.owner
		owner.mu.Lock()
		for _, t := range owner.published {
			if t.kind == Video && t.alternate && codecs[codecName(t.codec.MimeType)] {
				video = t
				break
			}
		}
		owner.mu.Unlock()
	}
	if video != nil {
		out = append(out, video)
	}
	if audio != nil {
		out = append(out, audio)
	}
	return out
}

func codecName(mime string) string {
	_, name, _ := strings.Cut(mime, "/")
	return strings.ToLower(name)
}

// Shutdown tells every participant the server is going away and closes them,
// all at once: closing a connection waits for its goroutines, and one by one a
// full server would outlast a supervisor's stop timeout.
func (m *Manager) Shutdown() {
	var wg sync.WaitGroup
	for _, r := range m.Rooms() {
		for _, p := range r.all() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.Kick("server_shutdown", "the server is shutting down")
			}()
		}
	}
	wg.Wait()
}

// SetHandover sets which holders of an identity stay when it joins again
// (cluster/: mirrors of participants moving to this node); nil: none.
func (m *Manager) SetHandover(fn func(*Participant) bool) {
	if fn == nil {
		m.handover.Store(nil)
		return
	}
	m.handover.Store(&fn)
}

func (m *Manager) keeps(old *Participant) bool {
	fn := m.handover.Load()
	return fn != nil && (*fn)(old)
}
