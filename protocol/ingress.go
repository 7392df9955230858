package protocol

// Ingress states.
const (
	IngressInactive   = "inactive"
	IngressPublishing = "publishing"
)

// IngressInfo describes an ingress: a stream key an RTMP or SRT encoder
// publishes with into Room as Identity. StreamKey and URL are given to the
// admin API only, never in webhooks.
type IngressInfo struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"` // rtmp or srt
	Room      string `json:"room"`
	Identity  string `json:"identity"`
	Name      string `json:"name,omitempty"`
	StreamKey string `json:"streamKey,omitempty"`
	// URL is where the encoder publishes: for RTMP the server URL the key
	// goes after (OBS's "Server"), for SRT the whole URL with the key as streamid.
	URL   string `json:"url,omitempty"`
	State string `json:"state"` // inactive or publishing
	// Since is when the state began (Unix milliseconds): the creation, the
	// first media of the publisher, or its end.
	Since int64 `json:"since"`
}

// CreateIngress is the admin API's request for a new ingress.
type CreateIngress struct {
	Kind     string `json:"kind"`
	Room     string `json:"room"`
	Identity string `json:"identity"`
	Name     string `json:"name,omitempty"`
}
