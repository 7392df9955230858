package protocol

// Egress states (LiveKit's names): starting until the target takes media,
// active while it does, ending after a stop, then complete or failed.
const (
	EgressStarting = "starting"
	EgressActive   = "active"
	EgressEnding   = "ending"
	EgressComplete = "complete"
	EgressFailed   = "failed"
)

// EgressInfo describes an egress: a room's tracks pushed to a streaming
// service. URL is given to the admin API only, never in webhooks (an RTMP
// URL carries the service's stream key).
type EgressInfo struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"` // rtmp
	Room     string `json:"room"`
	Identity string `json:"identity,omitempty"` // the participant whose tracks go out
	// Composite: a grid of the room's videos and its audio mixed.
	Composite bool     `json:"composite,omitempty"`
	Tracks    []string `json:"tracks"` // the publications' sids
	URL       string   `json:"url,omitempty"`
	State     string   `json:"state"`
	// Error says why a failed egress failed; Reason why a complete one
	// ended when the API did not stop it (its tracks went away, shutdown).
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Since is when the state began, StartedAt when the egress was created,
	// both Unix milliseconds.
	Since     int64 `json:"since"`
	StartedAt int64 `json:"startedAt"`
}

// CreateEgress is the admin API's request for a new egress: a participant's
// camera and microphone (Identity), up to one video and one audio track of
// the room by sid (Tracks), or the room's composite.
type CreateEgress struct {
	Kind      string   `json:"kind"`
	Room      string   `json:"room"`
	URL       string   `json:"url"`
	Identity  string   `json:"identity,omitempty"`
	Tracks    []string `json:"tracks,omitempty"`
	Composite bool     `json:"composite,omitempty"`
}
