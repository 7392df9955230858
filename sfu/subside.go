package sfu

import (
	"strings"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/egress"
)

// With the lean egress on, a room participant's subscriber side is the lean
// egress (lean.go: ICE-lite, no PeerConnection) for a client that can use
// UDP, or TCP when the lean server has ICE-TCP, and a PeerConnection for one
// that cannot. Which one is decided at the first subscriber offer, from the
// candidates the client trickled for its publisher connection, which it
// opens right after joining: a UDP candidate (host, server-reflexive, or a
// TURN relay, which reaches the server over UDP whatever the client's leg)
// chooses the lean egress; without ICE-TCP on the lean server, only TCP
// candidates, or none within subChoiceWait, choose a PeerConnection (with
// it, the lean egress after subChoiceWait). Until then the participant's
// subscriptions wait in pending.
type subChoice struct {
	srv      *egress.Server
	newPC    func() (*webrtc.PeerConnection, error)
	udp, tcp bool
	tcpAt    time.Time
	pending  []*DownTrack
}

const (
	// subChoiceWait is how long the first subscriber offer waits for a
	// candidate of the client's.
	subChoiceWait = time.Second
	// subChoiceTCPWait is how long it waits for a UDP candidate after a TCP
	// one (clients gather both at once).
	subChoiceTCPWait = 200 * time.Millisecond
)

// saw notes a candidate of the client's ("candidate:1 1 udp 2130706431 …").
func (c *subChoice) saw(candidate string) {
	switch egress.CandidateProtocol(candidate) {
	case "udp":
		c.udp = true
	case "tcp":
		if !c.tcp {
			c.tcp, c.tcpAt = true, time.Now()
		}
	}
}

// sawSDP notes the candidates written into an SDP.
func (c *subChoice) sawSDP(sdp string) {
	for _, l := range strings.Split(sdp, "\n") {
		c.saw(l)
	}
}

// decide says whether the lean egress serves the client (lean), or that it
// is too early to tell (!ok).
func (c *subChoice) decide(joined time.Time) (lean, ok bool) {
	// A lean server with ICE-TCP serves clients that cannot use UDP too.
	tcp := c.srv != nil && c.srv.TCPPort() != 0
	switch {
	case c.udp || c.tcp && tcp:
		return true, true
	case c.tcp && time.Since(c.tcpAt) >= subChoiceTCPWait:
		return false, true
	case time.Since(joined) >= subChoiceWait:
		return tcp, true
	}
	return false, false
}

// makeSubscriberSide creates the side c chose and gives it the subscriptions
// that waited. Under p.mu, with p.subChoice already cleared.
func (p *Participant) makeSubscriberSide(c *subChoice, lean bool) error {
	if lean {
		if err := p.setupLeanSubscriber(c.srv, p.timing()); err != nil {
			return err
		}
		p.log.Debug("subscriber side", "egress", "lean")
	} else {
		pc, err := c.newPC()
		if err != nil {
			return err
		}
		p.setupSubscriber(pc)
		if tm := p.timing(); tm != nil {
			tm.watchTransport(pc)
		}
		p.log.Debug("subscriber side", "egress", "peerconnection")
	}
	for _, d := range c.pending {
		if err := p.attach(d); err != nil {
			return err
		}
	}
	return nil
}
