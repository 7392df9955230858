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
func (r *Room) NewSessionTiming(identity, sid, kind string, start time.Time) *SessionTiming {
	tt := &r.mgr.timings
	t := &SessionTiming{Room: r.name, Identity: identity, Sid: sid, Kind: kind, Start: start, table: tt}
	tt.mu.Lock()
	if tt.detached == nil {
		tt.detached = map[*SessionTiming]bool{}
	}
	tt.detached[t] = true
	tt.mu.Unlock()
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
	tt := t.table
	if tt == nil {
		return
	}
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if !tt.detached[t] {
		return
	}
	delete(tt.detached, t)
	tt.finish(t)
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
