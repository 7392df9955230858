package sfu

import (
	"sync/atomic"
	"time"
)

// RelayTap sees every relay message a room delivers (the camera gateway times
// direct sessions with it). It runs on the sender's signaling goroutine and
// must not block.
type RelayTap func(from, to *Participant, data []byte)

// SetRelayTap installs fn for every room of m (nil removes it).
func (m *Manager) SetRelayTap(fn RelayTap) {
	if fn == nil {
		m.relayTap.Store(nil)
		return
	}
	m.relayTap.Store(&fn)
}

type relayTapPtr = atomic.Pointer[RelayTap]

// NewSessionTiming starts a record that belongs to no participant's
// connection: a session the server only signals for (a direct session between
// a viewer and a WebRTC camera). It is listed by SessionTimings until Finish.
func NewSessionTiming(room, identity, sid, kind string, start time.Time) *SessionTiming {
	t := &SessionTiming{Room: room, Identity: identity, Sid: sid, Kind: kind, Start: start}
	timings.mu.Lock()
	if timings.detached == nil {
		timings.detached = map[*SessionTiming]bool{}
	}
	timings.detached[t] = true
	timings.mu.Unlock()
	return t
}

// MarkAt records step at d after the start, once (steps measured by a peer
// and reported).
func (t *SessionTiming) MarkAt(s Step, d time.Duration) {
	if t == nil || d <= 0 {
		return
	}
	t.mark(s, int64(d))
}

// Finish moves a record made by NewSessionTiming to the recent ones.
func (t *SessionTiming) Finish() {
	timings.mu.Lock()
	defer timings.mu.Unlock()
	if !timings.detached[t] {
		return
	}
	delete(timings.detached, t)
	timings.recent = append(timings.recent, t)
	if len(timings.recent) > recentTimings {
		timings.recent = timings.recent[len(timings.recent)-recentTimings:]
	}
}

// DataFilter may take a room data message before it is delivered: true means
// consumed (the camera gateway serves some topics addressed to a WebRTC
// camera itself: talk-back, its ONVIF PTZ, its web interface). It runs on the
// sender's goroutine and must not block; payload is only valid during the call.
type DataFilter func(from *Participant, reliable bool, h DataHeader, to []string, payload []byte) bool

// SetDataFilter installs fn for every room of m (nil removes it).
func (m *Manager) SetDataFilter(fn DataFilter) {
	if fn == nil {
		m.dataFilter.Store(nil)
		return
	}
	m.dataFilter.Store(&fn)
}
