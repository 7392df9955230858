package sfu

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-sfu/petrel/metrics"
)

// Time-to-stream instrumentation of viewing sessions: every WHEP session (and
// every room participant's subscriber connection) records when each WebRTC step
// happened, relative to the first signaling message, so that a slow start can
// be blamed on the right step. Steps go to Prometheus as they happen and the
// last sessions stay readable through SessionTimings (the camera REST API).

// Step is one milestone of a session's setup.
type Step int

const (
	StepPCCreated Step = iota
	StepOfferApplied
	StepAnswerCreated
	StepFirstRemoteCandidate
	StepICEConnected
	StepDTLSConnected
	StepFirstRTP // first media packet sent (for video: the first keyframe's first packet)
	numSteps
)

var stepNames = [numSteps]string{"pc_created", "offer_applied", "answer_created", "first_remote_candidate", "ice_connected", "dtls_connected", "first_rtp"}

func (s Step) String() string { return stepNames[s] }

// SessionTiming is one session's milestones, in nanoseconds since Start (0: not yet).
type SessionTiming struct {
	Room     string
	Identity string
	Sid      string
	Kind     string // "whep", "room" or "direct"
	Start    time.Time
	marks    [numSteps]atomic.Int64
	table    *timingTable // a detached record's (NewSessionTiming)
}

// Mark records step now, once.
func (t *SessionTiming) Mark(s Step) {
	if t == nil {
		return
	}
	t.mark(s, max(int64(time.Since(t.Start)), 1))
}

func (t *SessionTiming) mark(s Step, d int64) {
	if !t.marks[s].CompareAndSwap(0, d) {
		return
	}
	metrics.TimeToStream.WithLabelValues(s.String()).Observe(float64(d) / 1e9)
	if s == StepICEConnected {
		from := t.marks[StepFirstRemoteCandidate].Load()
		if from == 0 {
			from = t.marks[StepOfferApplied].Load()
		}
		if from > 0 && d > from {
			metrics.TimeToStream.WithLabelValues("ice").Observe(float64(d-from) / 1e9)
		}
	}
}

// SessionTimingInfo is a session's milestones in milliseconds since its start.
type SessionTimingInfo struct {
	Room     string             `json:"room"`
	Identity string             `json:"identity"`
	Sid      string             `json:"sid"`
	Kind     string             `json:"kind"`
	Start    time.Time          `json:"start"`
	Steps    map[string]float64 `json:"stepsMs"`
}

// Info snapshots the milestones reached so far.
func (t *SessionTiming) Info() SessionTimingInfo {
	out := SessionTimingInfo{Room: t.Room, Identity: t.Identity, Sid: t.Sid, Kind: t.Kind, Start: t.Start, Steps: map[string]float64{}}
	for i := range t.marks {
		if v := t.marks[i].Load(); v > 0 {
			out.Steps[Step(i).String()] = float64(v) / 1e6
		}
	}
	return out
}

// timingTable is a manager's sessions: live ones by participant, and the
// last finished ones.
type timingTable struct {
	mu     sync.Mutex
	live   map[*Participant]*SessionTiming
	recent []*SessionTiming
	// detached are live records of sessions without a participant of their own (relaytap.go).
	detached map[*SessionTiming]bool
}

// finish moves t to the recent records. Under mu.
func (tt *timingTable) finish(t *SessionTiming) {
	tt.recent = append(tt.recent, t)
	if len(tt.recent) > recentTimings {
		tt.recent = tt.recent[len(tt.recent)-recentTimings:]
	}
}

const recentTimings = 200

// startTiming begins p's record at start (the first signaling message).
func (p *Participant) startTiming(kind string, start time.Time) *SessionTiming {
	t := &SessionTiming{Room: p.room.name, Identity: p.identity, Sid: p.sid, Kind: kind, Start: start}
	tt := &p.room.mgr.timings
	tt.mu.Lock()
	if tt.live == nil {
		tt.live = map[*Participant]*SessionTiming{}
	}
	tt.live[p] = t
	tt.mu.Unlock()
	p.OnClose(func() {
		tt.mu.Lock()
		delete(tt.live, p)
		tt.finish(t)
		tt.mu.Unlock()
	})
	return t
}

// timing is p's record, nil if it has none.
func (p *Participant) timing() *SessionTiming {
	tt := &p.room.mgr.timings
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return tt.live[p]
}

// Timing is the participant's session timing, nil if it has none.
func (p *Participant) Timing() *SessionTiming { return p.timing() }

// SessionTimings lists the live and recently finished sessions of room, newest
// last.
func (m *Manager) SessionTimings(room string) []SessionTimingInfo {
	tt := &m.timings
	tt.mu.Lock()
	var all []*SessionTiming
	for _, t := range tt.recent {
		all = append(all, t)
	}
	for _, t := range tt.live {
		all = append(all, t)
	}
	for t := range tt.detached {
		all = append(all, t)
	}
	tt.mu.Unlock()
	out := []SessionTimingInfo{}
	for _, t := range all {
		if t.Room == room {
			out = append(out, t.Info())
		}
	}
	for i := 1; i < len(out); i++ { // few entries: insertion sort by start
		for j := i; j > 0 && out[j].Start.Before(out[j-1].Start); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// offerHasCandidates reports whether a (non-trickled) offer carries candidates.
func offerHasCandidates(sdp string) bool { return strings.Contains(sdp, "a=candidate:") }

// markFirstRTP is called by a DownTrack when its first packet went out.
func (d *DownTrack) markFirstRTP() {
	if d.sub != nil && d.pub.kind == Video {
		if t := d.sub.timing(); t != nil {
			t.Mark(StepFirstRTP)
		}
	}
}
