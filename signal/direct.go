package signal

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/petrel-sfu/petrel/sfu"
)

// directICE gives a direct-session offer relayed to a camera (identity
// "camera", docs/cameras.md#direct-sessions) fresh TURN credentials for the
// camera: it joined perhaps days ago, and the credentials of its joined
// message last turn.credential_ttl. The viewer uses those of its own joined
// message, minutes old. Anything else passes unchanged.
func (s *Server) directICE(r *http.Request, from *sfu.Participant, to string, data json.RawMessage) json.RawMessage {
	if !bytes.Contains(data, []byte(`"direct"`)) {
		return data
	}
	q := from.Room().BySid(to)
	if q == nil || q.Identity() != "camera" {
		return data
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil || string(m["direct"]) != `"offer"` {
		return data
	}
	ice, err := json.Marshal(s.iceServers(r, q.Identity(), q.Grants()))
	if err != nil {
		return data
	}
	m["iceServers"] = ice
	out, err := json.Marshal(m)
	if err != nil || len(out) > 20<<10 {
		return data
	}
	return out
}
