package lean

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"

	"github.com/pion/stun/v4"
)

// Binding is a decoded ICE binding request addressed to this endpoint.
type Binding struct {
	// RemoteUfrag is the part of USERNAME after the colon: the sender's ufrag.
	RemoteUfrag string
	// UseCandidate: the controlling agent nominates the pair (RFC 8445 8.1.1).
	UseCandidate bool
	// Controlling: the sender says it is the controlling agent.
	Controlling bool
}

var (
	errNotForUs   = errors.New("binding request for another username")
	errBadIntegr  = errors.New("binding request with a bad MESSAGE-INTEGRITY or FINGERPRINT")
	errNotRequest = errors.New("not a binding request")
)

// LocalUfrag returns the ufrag a binding request is addressed to (the part of
// USERNAME before the colon), or nil if m carries none. It reads m's decoded
// attributes and allocates nothing: a demultiplexer calls it on every STUN
// datagram to find the session (m[string(u)] does not copy either).
func LocalUfrag(m *stun.Message) []byte {
	raw, err := m.Get(stun.AttrUsername)
	if err != nil {
		return nil
	}
	i := bytes.IndexByte(raw, ':')
	if i <= 0 {
		return nil
	}
	return raw[:i]
}

// CheckBinding verifies that m is a binding request for ufrag with the
// short-term credential pwd (RFC 8445 7.3, RFC 8489 9.1) and a valid
// FINGERPRINT.
func CheckBinding(m *stun.Message, ufrag, pwd string) (Binding, error) {
	var b Binding
	if m.Type != stun.BindingRequest {
		return b, errNotRequest
	}
	var u stun.Username
	if u.GetFrom(m) != nil {
		return b, errNotForUs
	}
	local, remote, ok := strings.Cut(u.String(), ":")
	if !ok || local != ufrag {
		return b, errNotForUs
	}
	if stun.NewShortTermIntegrity(pwd).Check(m) != nil || stun.Fingerprint.Check(m) != nil {
		return b, errBadIntegr
	}
	b.RemoteUfrag = remote
	b.UseCandidate = m.Contains(stun.AttrUseCandidate)
	b.Controlling = m.Contains(stun.AttrICEControlling)
	return b, nil
}

// BindingSuccess builds the answer to a checked binding request from from:
// XOR-MAPPED-ADDRESS, MESSAGE-INTEGRITY with pwd, FINGERPRINT.
func BindingSuccess(req *stun.Message, from netip.AddrPort, pwd string) ([]byte, error) {
	resp, err := stun.Build(req, stun.BindingSuccess,
		&stun.XORMappedAddress{IP: from.Addr().AsSlice(), Port: int(from.Port())},
		stun.NewShortTermIntegrity(pwd), stun.Fingerprint)
	if err != nil {
		return nil, err
	}
	return resp.Raw, nil
}

// Nudge builds the one binding request an ICE-lite endpoint sends (session:
// Viewer.nudge): to the client that checked it, with the client's
// credentials (USERNAME client-ufrag:our-ufrag, MESSAGE-INTEGRITY with the
// client's password), ICE-CONTROLLED with tieBreaker, and PRIORITY as a
// peer-reflexive candidate's (RFC 8445 7.1.1).
func Nudge(remoteUfrag, localUfrag, remotePwd string, tieBreaker uint64) ([]byte, error) {
	m, err := stun.Build(stun.BindingRequest, stun.TransactionID,
		stun.NewUsername(remoteUfrag+":"+localUfrag),
		stun.RawAttribute{Type: stun.AttrICEControlled, Value: be64(tieBreaker)},
		stun.RawAttribute{Type: stun.AttrPriority, Value: []byte{0x6e, 0x7f, 0x1e, 0xff}},
		stun.NewShortTermIntegrity(remotePwd), stun.Fingerprint)
	if err != nil {
		return nil, err
	}
	return m.Raw, nil
}

func be64(v uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(v >> (56 - 8*i))
	}
	return b
}
