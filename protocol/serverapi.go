package protocol

import "github.com/petrel-sfu/petrel/auth"

// Bodies of the server API's calls (docs/protocol.md, "Server API"), shared
// by the server (signal/) and its Go client (serverapi/).

// UpdateParticipant is the body of PATCH .../participants/{identity}: the
// fields given change, the others stay.
type UpdateParticipant struct {
	Name        *string      `json:"name,omitempty"`
	Metadata    *string      `json:"metadata,omitempty"`
	Permissions *Permissions `json:"permissions,omitempty"`
}

// Permissions are the grants the server API changes; those not given stay.
type Permissions struct {
	Publish     *bool `json:"publish,omitempty"`
	Subscribe   *bool `json:"subscribe,omitempty"`
	PublishData *bool `json:"publishData,omitempty"`
	Admin       *bool `json:"admin,omitempty"`
	PTZ         *bool `json:"ptz,omitempty"`
	Record      *bool `json:"record,omitempty"`
}

// Apply returns g with the permissions given changed.
func (p *Permissions) Apply(g auth.Grants) auth.Grants {
	for _, f := range []struct {
		v *bool
		g *bool
	}{{p.Publish, &g.Publish}, {p.Subscribe, &g.Subscribe}, {p.PublishData, &g.PublishData}, {p.Admin, &g.Admin}, {p.PTZ, &g.PTZ}, {p.Record, &g.Record}} {
		if f.v != nil {
			*f.g = *f.v
		}
	}
	return g
}

// SendData is the body of POST /v1/admin/rooms/{room}/data.
type SendData struct {
	// Data is the payload: text, or base64 with Encoding "base64".
	Data     string   `json:"data"`
	Encoding string   `json:"encoding,omitempty"` // "text" (default) or "base64"
	Topic    string   `json:"topic,omitempty"`
	To       []string `json:"to,omitempty"`       // identities; empty: everyone
	Reliable *bool    `json:"reliable,omitempty"` // default true
}

// MoveParticipant is the body of POST .../participants/{identity}/move.
type MoveParticipant struct {
	Room string `json:"room"`
}
