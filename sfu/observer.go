package sfu

import (
	"sync/atomic"

	"github.com/petrel-sfu/petrel/protocol"
)

// Events the room core reports to its observer (Manager.SetObserver): the
// webhook package turns them into notifications. None comes from a packet path.
const (
	EventRoomStarted       = "room_started"
	EventRoomFinished      = "room_finished"
	EventParticipantJoined = "participant_joined"
	EventParticipantLeft   = "participant_left"
	EventTrackPublished    = "track_published"
	EventTrackUnpublished  = "track_unpublished"
)

// Event is something that happened in a room, as snapshots an observer may
// keep. Features (recording, egress, ingress) emit their own kinds with Info.
type Event struct {
	Kind        string
	Room        protocol.RoomInfo
	Participant *protocol.ParticipantInfo
	Track       *protocol.TrackInfo
	// Origin and Hidden are the participant's: the observer decides whom to
	// report (another node's mirror, a hidden recorder).
	Origin Origin
	Hidden bool
	// Reason is why a participant left.
	Reason string
	// Info is a feature's description of what its event is about.
	Info any
}

// SetObserver makes fn hear every event of every room of m (nil: none). fn
// runs on the goroutine that caused the event, sometimes under the manager's
// lock: it must not block or call back into m.
func (m *Manager) SetObserver(fn func(Event)) {
	if fn == nil {
		m.observer.Store(nil)
		return
	}
	m.observer.Store(&fn)
}

type observerPtr = atomic.Pointer[func(Event)]

// Emit hands ev to the observer. Features that attach to rooms call it for
// their own events (recording_started and the like).
func (m *Manager) Emit(ev Event) {
	if fn := m.observer.Load(); fn != nil {
		(*fn)(ev)
	}
}

// observing says whether anyone listens, so that unobserved rooms build no
// snapshots.
func (m *Manager) observing() bool { return m.observer.Load() != nil }

// emitParticipant reports an event of p (and of t, if any).
func (m *Manager) emitParticipant(kind string, p *Participant, t *Publication, reason string) {
	if !m.observing() {
		return
	}
	info := p.Info()
	ev := Event{Kind: kind, Room: p.room.Info(), Participant: &info, Origin: p.origin, Hidden: p.hidden, Reason: reason}
	if t != nil {
		ti := t.Info()
		ev.Track = &ti
	}
	m.Emit(ev)
}

func (m *Manager) emitRoom(kind string, r *Room) {
	if m.observing() {
		m.Emit(Event{Kind: kind, Room: r.Info()})
	}
}
