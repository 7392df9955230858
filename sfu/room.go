package sfu

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-sfu/petrel/lograte"
	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
)

// Room is a set of participants that see each other's tracks. Its lock guards
// membership only; no packet ever takes it.
type Room struct {
	sid       string
	name      string
	mgr       *Manager
	createdAt time.Time

	mu              sync.RWMutex
	participants    map[string]*Participant // by sid
	metadata        string
	maxParticipants int
	closed          bool
	// explicit rooms (created through the API) stay open when empty.
	explicit bool

	// Speaker detection and Last-N (lastn.go).
	speakers  *Speakers
	dominant  string
	lastSpoke map[string]time.Time
	lastN     int
	// Audio Last-N (audiolastn.go): how many speakers' audio is forwarded
	// (≤ 0: all; under mu), and the last selection (by participant sid,
	// under audioMu).
	audioLastN int
	audioMu    sync.Mutex
	audioSel   map[string]bool
	// rank is the speaker order of the last selection round (ranked), for
	// the receivers' bandwidth allocation between rounds.
	rank atomic.Pointer[ranking]
	// audioMix: the room's audio is mixed by the server (mix.go).
	audioMix atomic.Bool
	done     chan struct{}
	doneOnce sync.Once

	refusedLog lograte.Limit // the log of refused joins
}

// stop ends the room's background work.
func (r *Room) stop() { r.doneOnce.Do(func() { close(r.done) }) }

// Name is the room's name.
func (r *Room) Name() string { return r.name }

// Info describes the room.
func (r *Room) Info() protocol.RoomInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, p := range r.participants {
		if !p.hidden {
			n++
		}
	}
	return protocol.RoomInfo{Sid: r.sid, Name: r.name, Metadata: r.metadata, NumParticipants: n, MaxParticipants: r.maxParticipants, CreatedAt: r.createdAt.Unix(),
		AudioMix: r.audioMix.Load()}
}

// Participants returns the visible participants.
func (r *Room) Participants() []*Participant {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Participant, 0, len(r.participants))
	for _, p := range r.participants {
		if !p.hidden {
			out = append(out, p)
		}
	}
	return out
}

func (r *Room) all() []*Participant {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Participant, 0, len(r.participants))
	for _, p := range r.participants {
		out = append(out, p)
	}
	return out
}

// ByIdentity finds a visible participant.
func (r *Room) ByIdentity(identity string) *Participant {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, p := range r.participants {
		if p.identity == identity && !p.hidden {
			return p
		}
	}
	return nil
}

// BySid finds a participant.
func (r *Room) BySid(sid string) *Participant {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.participants[sid]
}

// errRoomGone: the room closed (it emptied, or was closed by an admin) between
// looking it up and joining it; the joiner gets the room's successor.
var errRoomGone = errors.New("room closed")

// add admits p, enforcing the room's limits: every session of a client
// (visible or not, WHEP viewers included) and every mirror takes a place; the
// server's own participants take none. One identity holds at most
// limits.max_sessions_per_identity client sessions.
func (r *Room) add(p *Participant) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return errRoomGone
	}
	places, same := 0, 0
	for _, q := range r.participants {
		if q.origin != Server {
			places++
		}
		if q.origin == Client && q.identity == p.identity {
			same++
		}
	}
	if p.origin != Server && places >= r.maxParticipants {
		r.mu.Unlock()
		r.refused(p, "room_full")
		return protocol.Errorf(protocol.CodeRoomFull, "room %q is full (%d participants)", r.name, r.maxParticipants)
	}
	if limit := r.mgr.cfg.Limits.MaxSessionsPerIdentity; limit > 0 && p.origin == Client && same >= limit {
		r.mu.Unlock()
		r.refused(p, "too_many_sessions")
		return protocol.Errorf(protocol.CodeTooManySessions, "identity %q already holds %d sessions in room %q", p.identity, limit, r.name)
	}
	r.participants[p.sid] = p
	r.mu.Unlock()
	metrics.Participants.Inc()
	r.mgr.emitParticipant(EventParticipantJoined, p, nil, "")
	r.announce(protocol.ParticipantJoined{Participant: p.Info()}, p)
	return nil
}

// refused logs a refused admission, at most once a second per room (a client
// can repeat it at will), with the number of refusals not logged.
func (r *Room) refused(p *Participant, why string) {
	if n, ok := r.refusedLog.Allow(time.Second); ok {
		p.log.Warn("join refused", "why", why, "origin", p.origin, "unlogged", n)
	}
}

func (r *Room) remove(p *Participant, reason string) {
	r.mu.Lock()
	if _, ok := r.participants[p.sid]; !ok {
		r.mu.Unlock()
		return
	}
	delete(r.participants, p.sid)
	delete(r.lastSpoke, p.sid)
	if r.dominant == p.sid {
		r.dominant = ""
	}
	empty := len(r.participants) == 0 && !r.explicit
	r.mu.Unlock()
	r.speakers.Forget(p.sid)
	metrics.Participants.Dec()
	r.mgr.emitParticipant(EventParticipantLeft, p, nil, reason)
	r.announce(protocol.ParticipantLeft{ParticipantSid: p.sid, Identity: p.identity, Reason: reason}, p)
	if empty {
		r.mgr.dropIfEmpty(r)
	}
}

// broadcast sends m to every visible participant except skip.
func (r *Room) broadcast(m protocol.Message, skip *Participant) {
	for _, p := range r.all() {
		if p != skip && !p.hidden {
			p.send(m)
		}
	}
}

// announce tells those who may see p (everyone for a visible participant, its
// audience for a hidden one) that it joined or left: a client only attaches
// tracks of participants it knows.
func (r *Room) announce(m protocol.Message, p *Participant) {
	for _, q := range r.all() {
		if q != p && !q.hidden && p.seenBy(q) {
			q.send(m)
		}
	}
}

// trackPublished announces t and subscribes those who subscribe automatically.
func (r *Room) trackPublished(owner *Participant, t *Publication) {
	r.mgr.emitParticipant(EventTrackPublished, owner, t, "")
	info := t.Info()
	mixed := r.mixed(owner, t)
	if mixed {
		// Before anyone can subscribe: the mixer's sink alone hears it.
		t.audioWithheld.Store(true)
	}
	for _, p := range r.all() {
		if p == owner || !owner.seenBy(p) {
			continue
		}
		if !p.hidden {
			p.send(protocol.TrackPublished{ParticipantSid: owner.sid, Track: info})
		}
		if p.autoSubscribe && !mixed && p.Grants().Subscribe && !sameSession(p, owner) {
			if err := p.Subscribe(t); err != nil {
				p.log.Warn("auto-subscribe failed", "track", t.sid, "err", err)
			}
		}
	}
}

// sameSession says whether p and q are two sessions of one person: visible and
// of one identity, which only a move to another node makes (old and new side by
// side). Neither subscribes to the other's tracks, its own camera and microphone.
func sameSession(p, q *Participant) bool {
	return p.identity == q.identity && !p.hidden && !q.hidden
}

// subscribeExisting subscribes a newcomer to the tracks already published.
func (r *Room) subscribeExisting(p *Participant) {
	if !p.autoSubscribe || !p.Grants().Subscribe {
		return
	}
	for _, q := range r.all() {
		if q == p || !q.seenBy(p) || sameSession(p, q) {
			continue
		}
		for _, t := range q.publications() {
			if !r.mixed(q, t) {
				_ = p.Subscribe(t)
			}
		}
	}
}

func (r *Room) findTrack(sid string) *Publication {
	for _, p := range r.all() {
		p.mu.Lock()
		t := p.published[sid]
		p.mu.Unlock()
		if t != nil {
			return t
		}
	}
	return nil
}

// recipients are the participants a data message from p to identities goes to.
func (r *Room) recipients(from *Participant, identities []string) []*Participant {
	var out []*Participant
	for _, p := range r.all() {
		// Hidden participants get only messages addressed to them, and only
		// local ones (a playback session) can receive at all: a WHEP viewer
		// has no data channel.
		if p == from || (p.hidden && (len(identities) == 0 || !p.local)) || !from.seenBy(p) {
			continue
		}
		if len(identities) == 0 {
			out = append(out, p)
			continue
		}
		for _, id := range identities {
			if p.identity == id {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// Close removes everyone with the given reason.
func (r *Room) Close(reason string) {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	for _, p := range r.all() {
		p.Kick(reason, "the room was closed")
	}
	r.mgr.forget(r)
}
