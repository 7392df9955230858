package protocol

import (
	"fmt"
	"strings"
)

// Candidate is a trickled ICE candidate, as a browser's RTCIceCandidateInit
// encodes it in JSON.
type Candidate struct {
	Candidate        string  `json:"candidate"`
	SDPMid           *string `json:"sdpMid,omitempty"`
	SDPMLineIndex    *uint16 `json:"sdpMLineIndex,omitempty"`
	UsernameFragment *string `json:"usernameFragment,omitempty"`
}

// CheckCandidate validates a trickled ICE candidate from the network (a relay
// message of a direct camera session): an ICE
// candidate attribute value of sane length, one line, for a known m-line.
func CheckCandidate(c *Candidate) error {
	switch {
	case c == nil:
		return fmt.Errorf("no candidate")
	case len(c.Candidate) > 512:
		return fmt.Errorf("candidate of %d bytes", len(c.Candidate))
	case c.Candidate == "":
		return nil // end of candidates for a generation (browsers send it)
	case !strings.HasPrefix(c.Candidate, "candidate:") && !strings.HasPrefix(c.Candidate, "a=candidate:"):
		return fmt.Errorf("not an ICE candidate: %.40q", c.Candidate)
	case strings.ContainsAny(c.Candidate, "\r\n\x00"):
		return fmt.Errorf("candidate with a line break")
	case c.SDPMid != nil && len(*c.SDPMid) > 32:
		return fmt.Errorf("sdpMid of %d bytes", len(*c.SDPMid))
	case c.SDPMLineIndex != nil && *c.SDPMLineIndex > 16:
		return fmt.Errorf("sdpMLineIndex %d", *c.SDPMLineIndex)
	}
	return nil
}
