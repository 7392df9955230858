package camera

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/petrel-sfu/petrel/sfu"
)

// Direct sessions (docs/cameras.md#direct-sessions): a viewer and a WebRTC
// camera connect peer to peer, the server relaying their offer and answer
// (relay messages with a "direct" field) and lending its TURN. The media never
// passes the server, so the server's record of such a session (kind "direct"
// in GET /v1/cameras/{id} and petrel_time_to_stream_seconds) is made from the
// signaling it relays and from the steps the camera reports when its first
// packet went out: the camera's steps are placed on the server's clock by
// aligning the camera's answer_created with the moment its answer passed here.

// directSignal is the part of a relayed direct-session message the gateway reads.
type directSignal struct {
	Direct  string             `json:"direct"`
	Session string             `json:"session"`
	Steps   map[string]float64 `json:"stepsMs,omitempty"`
}

// directTimings are the open direct sessions' records, by viewer sid + session.
type directTimings struct {
	mu sync.Mutex
	m  map[string]*directTiming
}

type directTiming struct {
	t      *sfu.SessionTiming
	answer time.Duration // when the answer passed, since the start
	opened time.Time
}

// directTTL bounds how long an unfinished record stays live (a viewer that
// never connected).
const directTTL = 2 * time.Minute

// onRelay is the manager's relay tap: it runs on the sender's signaling
// goroutine, for every relay message of every room.
func (g *Gateway) onRelay(from, to *sfu.Participant, data []byte) {
	// Cheap test first: relays of 1:1 calls carry "p2p", not "direct".
	if !strings.HasPrefix(from.Room().Name(), "camera/") || !strings.Contains(string(data), `"direct"`) {
		return
	}
	var sig directSignal
	if json.Unmarshal(data, &sig) != nil || sig.Session == "" || len(sig.Session) > 64 {
		return
	}
	var viewer *sfu.Participant
	switch {
	case to.Identity() == Identity && from.Identity() != Identity:
		viewer = from
	case from.Identity() == Identity && to.Identity() != Identity:
		viewer = to
	default:
		return
	}
	key := viewer.Sid() + "/" + sig.Session
	d := &g.direct
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]*directTiming{}
	}
	for k, x := range d.m {
		if time.Since(x.opened) > directTTL {
			x.t.Finish()
			delete(d.m, k)
		}
	}
	cur := d.m[key]
	switch sig.Direct {
	case "offer":
		if cur != nil || viewer != from {
			return
		}
		now := time.Now()
		t := from.Room().NewSessionTiming(viewer.Identity(), viewer.Sid(), "direct", now)
		d.m[key] = &directTiming{t: t, opened: now}
	case "answer":
		if cur != nil && viewer == to {
			cur.answer = time.Since(cur.t.Start)
			cur.t.MarkAt(sfu.StepAnswerCreated, cur.answer)
		}
	case "timing":
		if cur == nil || viewer != to || cur.answer == 0 {
			return
		}
		base, ok := sig.Steps["answer_created"]
		if !ok {
			return
		}
		for name, step := range map[string]sfu.Step{
			"pc_created": sfu.StepPCCreated, "offer_applied": sfu.StepOfferApplied, "first_remote_candidate": sfu.StepFirstRemoteCandidate,
			"ice_connected": sfu.StepICEConnected, "dtls_connected": sfu.StepDTLSConnected, "first_rtp": sfu.StepFirstRTP,
		} {
			if ms, ok := sig.Steps[name]; ok && ms >= 0 && ms < 600e3 {
				cur.t.MarkAt(step, cur.answer+time.Duration((ms-base)*1e6))
			}
		}
		cur.t.Finish()
		delete(d.m, key)
	case "bye":
		if cur != nil {
			cur.t.Finish()
			delete(d.m, key)
		}
	}
}

// filterData is the manager's data filter: data messages addressed to a
// WebRTC camera with a topic the gateway serves for it reach the gateway's
// handler instead of the camera (which would not know what to do with them),
// and so do those on a topic whose grant the sender lacks, which the gateway
// refuses: the device itself never sees them. It runs on the sender's
// goroutine: queue, never block.
func (g *Gateway) filterData(from *sfu.Participant, reliable bool, h sfu.DataHeader, to []string, payload []byte) bool {
	if len(to) != 1 || to[0] != Identity || h.Topic == "" || from.Identity() == Identity {
		return false
	}
	id, ok := strings.CutPrefix(from.Room().Name(), "camera/")
	if !ok {
		return false
	}
	c := g.Camera(id)
	if c == nil || !c.cfg.WebRTC {
		return false
	}
	route, ok := g.handler(h.Topic)
	refused := ok && route.grant != "" && !from.Grants().Has(route.grant)
	if !refused && !c.servesTopic(h.Topic) {
		return false
	}
	c.onData(reliable, h, payload)
	return true
}

// servesTopic reports whether the gateway, not the WebRTC camera itself,
// answers topic: talk-back (the gateway subscribes the camera to the talker's
// microphone), PTZ and the web interface when the camera is declared with
// ONVIF or HTTP settings, and the server's own topics (playback).
func (c *Camera) servesTopic(topic string) bool {
	switch topic {
	case "talk":
		return true
	case "ptz":
		return c.cfg.ONVIF.URL != ""
	case "http":
		return c.cfg.HTTP.Base != ""
	}
	_, ok := c.g.handler(topic)
	return ok
}
