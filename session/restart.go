package session

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadCredentials: an ICE restart's ufrag or password is not one RFC 8839
// allows (ufrag 4-256 ice-chars, password 22-256).
var ErrBadCredentials = errors.New("ICE restart: ice-ufrag must be 4-256 and ice-pwd 22-256 characters of [A-Za-z0-9+/]")

// RestartICE restarts ICE for a WHEP viewer (RFC 9725 4.3.2): the client's
// new ufrag and password, answered with the server's new credentials and
// candidates as an sdpfrag. Checks with the previous credentials are still
// answered until the next restart, so media goes on while the client
// switches; DTLS and SRTP are not touched.
func (v *Viewer) RestartICE(ufrag, pwd string) (string, error) {
	if !iceChars(ufrag, 4) || !iceChars(pwd, 22) {
		return "", ErrBadCredentials
	}
	if v.closed.Load() {
		return "", errClosed
	}
	v.s.mu.Lock() // one restart at a time: two would both keep the same previous set
	c := newCreds(v.creds.Load())
	c.remote = ufrag
	v.creds.Store(c)
	v.s.mu.Unlock()
	v.s.addUfrag(v.Session, c.ufrag)
	v.setClient(ufrag, pwd) // new credentials: a new nomination (and nudge)
	var b strings.Builder
	fmt.Fprintf(&b, "a=ice-ufrag:%s\r\na=ice-pwd:%s\r\n", c.ufrag, c.pwd)
	for _, c := range candidates(v.s.ips, v.s.port, v.s.tcpPort) {
		fmt.Fprintf(&b, "a=candidate:%s\r\n", c)
	}
	b.WriteString("a=end-of-candidates\r\n")
	return b.String(), nil
}

// iceChars reports whether s is least to 256 ice-chars (RFC 8839 5.4).
func iceChars(s string, least int) bool {
	if len(s) < least || len(s) > 256 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '/') {
			return false
		}
	}
	return true
}
