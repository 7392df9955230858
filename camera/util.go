package camera

import (
	"bytes"
	"encoding/json"
)

// requestID is the raw JSON "id" of a request, echoed in replies ("null" if the
// request has none or is not JSON).
func requestID(req []byte) string {
	var r struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(req, &r) != nil || len(r.ID) == 0 || len(r.ID) > 128 {
		return "null"
	}
	if b := bytes.TrimSpace(r.ID); len(b) > 0 && (b[0] == '"' || (b[0] >= '0' && b[0] <= '9') || b[0] == '-') {
		return string(b)
	}
	return "null"
}
