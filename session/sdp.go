package session

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/pion/sdp/v3"

	"github.com/petrel-sfu/petrel/rtc/lean"
	"github.com/petrel-sfu/petrel/sfu"
)

// Track is one publication a viewer is to receive, as the SDP answer needs it.
type Track struct {
	Kind      string // "audio" or "video"
	MimeType  string // "video/VP8", "audio/opus", …
	ClockRate uint32
	Channels  uint16 // audio channels (opus: 2), for offers' a=rtpmap
	Fmtp      string // the publisher's fmtp (H.264: profile and packetization)
	ID        string // msid track id
	StreamID  string // msid stream id
}

// Sender is what the answer assigned to a Track: the payload type the viewer
// offered for its codec, and the SSRC the server sends it with.
type Sender struct {
	PT   uint8
	SSRC uint32
	Mid  string
	// TransportCC is the id of the transport-wide sequence number extension
	// when the viewer offered it with transport-cc feedback (0: not
	// negotiated, no bandwidth estimate from this viewer).
	TransportCC uint8
}

// offer is what the server needs from a viewer's offer.
type offer struct {
	transport
	sections []section
}

type section struct {
	kind, mid  string
	port       int
	protos     []string
	formats    []string
	recv       bool // the viewer can receive here (recvonly or sendrecv)
	bundleOnly bool
	rsize      bool
	codecs     []offeredCodec

	// What a publisher's section says of the media it sends (ingest.go).
	send  bool // the client sends here (sendonly or sendrecv)
	exts  []extmap
	rids  []string // simulcast encodings the client sends (a=rid:… send)
	msid  string   // "stream track"
	ssrcs []uint32 // a=ssrc lines, for clients that send without mid/rid extensions
}

type extmap struct {
	id  uint8
	uri string
}

// Limits on what one section may list: more is not a client, it is an attack.
const (
	maxRIDs  = 4
	maxSSRCs = 8
	maxExts  = 16
)

type offeredCodec struct {
	pt     uint8
	rtpmap string // "VP8/90000", as offered
	name   string
	clock  uint32
	fmtp   string
	fb     []string // "nack", "nack pli", "ccm fir", …
}

var errNoMedia = errors.New("the offer has no audio or video section that can receive the published codecs")

// parseOffer reads a WHEP offer. Everything in it comes from the network:
// every field is checked, nothing is trusted to be well formed.
func parseOffer(text string) (*offer, error) {
	if n := sfu.MediaSections(text); n > maxSections {
		return nil, fmt.Errorf("offer: %d media sections, at most %d", n, maxSections)
	}
	var s sdp.SessionDescription
	if err := s.UnmarshalString(text); err != nil {
		return nil, fmt.Errorf("offer: %w", err)
	}
	o := &offer{}
	if err := o.read(s.Attributes, "offer"); err != nil {
		return nil, err
	}
	for _, m := range s.MediaDescriptions {
		sec := section{kind: m.MediaName.Media, port: m.MediaName.Port.Value, protos: m.MediaName.Protos, formats: m.MediaName.Formats, recv: true, send: true}
		if err := o.read(m.Attributes, "offer"); err != nil {
			return nil, err
		}
		byPT := map[uint8]int{} // payload type → index in sec.codecs
		for _, a := range m.Attributes {
			switch a.Key {
			case "mid":
				sec.mid = a.Value
			case "sendonly", "inactive":
				sec.recv = false
				sec.send = sec.send && a.Key == "sendonly"
			case "recvonly":
				sec.send = false
			case "msid":
				sec.msid = a.Value
			case "extmap":
				// "id[/direction] uri [attributes]"
				f := strings.Fields(a.Value)
				if len(f) < 2 {
					continue
				}
				idText, _, _ := strings.Cut(f[0], "/")
				id, err := strconv.Atoi(idText)
				if err != nil || id < 1 || id > 14 || len(sec.exts) >= maxExts {
					continue // one-byte ids only (RFC 8285): what browsers use
				}
				sec.exts = append(sec.exts, extmap{id: uint8(id), uri: f[1]})
			case "rid":
				// "id send [restrictions]"
				f := strings.Fields(a.Value)
				if len(f) >= 2 && f[1] == "send" && len(f[0]) <= 16 && len(sec.rids) < maxRIDs {
					sec.rids = append(sec.rids, f[0])
				}
			case "ssrc":
				v, _, _ := strings.Cut(a.Value, " ")
				n, err := strconv.ParseUint(v, 10, 32)
				if err == nil && !slices.Contains(sec.ssrcs, uint32(n)) && len(sec.ssrcs) < maxSSRCs {
					sec.ssrcs = append(sec.ssrcs, uint32(n))
				}
				if _, rest, ok := strings.Cut(a.Value, " msid:"); ok && sec.msid == "" {
					sec.msid = rest
				}
			case "rtcp-rsize":
				sec.rsize = true
			case "bundle-only":
				// Port 0 with bundle-only is a section offered inside the
				// BUNDLE group, not a rejected one (RFC 8843 7.2).
				sec.bundleOnly = true
			case "rtpmap":
				pt, rest, ok := cutPT(a.Value)
				if !ok {
					continue
				}
				name, clock, _ := strings.Cut(rest, "/")
				clock, _, _ = strings.Cut(clock, "/")
				c, err := strconv.ParseUint(clock, 10, 32)
				if err != nil || c == 0 || name == "" {
					continue
				}
				if _, dup := byPT[pt]; dup || len(sec.codecs) >= 64 {
					continue
				}
				byPT[pt] = len(sec.codecs)
				sec.codecs = append(sec.codecs, offeredCodec{pt: pt, rtpmap: rest, name: name, clock: uint32(c)})
			}
		}
		for _, a := range m.Attributes {
			switch a.Key {
			case "fmtp", "rtcp-fb":
				pt, rest, ok := cutPT(a.Value)
				i, known := byPT[pt]
				if !ok || !known {
					continue
				}
				if c := &sec.codecs[i]; a.Key == "fmtp" {
					c.fmtp = rest
				} else if len(c.fb) < 16 {
					c.fb = append(c.fb, rest)
				}
			}
		}
		o.sections = append(o.sections, sec)
	}
	if err := o.check("offer"); err != nil {
		return nil, err
	}
	if o.setup == "passive" {
		return nil, errors.New("offer: setup:passive (this server is the DTLS server; offer actpass or active)")
	}
	return o, nil
}

// transport is what a client's SDP says of its ICE and DTLS side. The first
// credentials, setup and fingerprint win: with BUNDLE the first section's
// transport carries everything, and some clients (aiortc) write different
// ICE credentials into every section.
type transport struct {
	ufrag, pwd, setup string
	fpAlg             string
	fp                []byte
}

// read takes the transport attributes of one level of an SDP (session or
// media section); what ("offer", "answer") names the SDP in errors.
func (t *transport) read(attrs []sdp.Attribute, what string) error {
	for _, a := range attrs {
		switch a.Key {
		// Copies: the session keeps the credentials, and a substring would
		// keep the whole description alive with them.
		case "ice-ufrag":
			if t.ufrag == "" {
				t.ufrag = strings.Clone(a.Value)
			}
		case "ice-pwd":
			if t.pwd == "" {
				t.pwd = strings.Clone(a.Value)
			}
		case "setup":
			if t.setup == "" {
				t.setup = a.Value
			}
		case "fingerprint":
			if t.fp != nil {
				continue
			}
			alg, fp, err := lean.ParseFingerprint(a.Value)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			t.fpAlg, t.fp = alg, fp
		}
	}
	return nil
}

// check says what a usable transport lacks: ICE credentials (of a sane
// length) and a fingerprint.
func (t *transport) check(what string) error {
	switch {
	case t.ufrag == "" || t.pwd == "":
		return fmt.Errorf("%s: no ice-ufrag/ice-pwd", what)
	case len(t.ufrag) > 256 || len(t.pwd) > 256:
		return fmt.Errorf("%s: ice credentials too long", what)
	case t.fp == nil:
		return fmt.Errorf("%s: no DTLS fingerprint", what)
	}
	return nil
}

func cutPT(v string) (uint8, string, bool) {
	pt, rest, ok := strings.Cut(v, " ")
	n, err := strconv.Atoi(pt)
	if !ok || err != nil || n < 0 || n > 127 {
		return 0, "", false
	}
	return uint8(n), strings.TrimSpace(rest), true
}

// match finds the offered codec for t: the same name and clock rate; among
// those an identical fmtp wins, then (H.264) the same packetization mode and
// profile, then the same packetization mode, as DownTrack.Bind chooses for a
// PeerConnection (a constrained-baseline viewer plays a baseline stream).
func (sec *section) match(t Track) *offeredCodec {
	_, name, _ := strings.Cut(t.MimeType, "/")
	h264 := strings.EqualFold(name, "h264")
	var best *offeredCodec
	bestScore := -1
	for i := range sec.codecs {
		c := &sec.codecs[i]
		if !strings.EqualFold(c.name, name) || c.clock != t.ClockRate {
			continue
		}
		score := 0
		switch {
		case c.fmtp == t.Fmtp:
			score = 3
		case h264 && h264Mode(c.fmtp) == h264Mode(t.Fmtp) && h264Profile(c.fmtp) == h264Profile(t.Fmtp):
			score = 2
		case h264 && h264Mode(c.fmtp) == h264Mode(t.Fmtp):
			score = 1
		}
		if score > bestScore {
			best, bestScore = c, score
		}
	}
	return best
}

// transportCC is the id of the section's transport-wide sequence number
// extension if the viewer offered it and transport-cc feedback for c.
func (sec *section) transportCC(c *offeredCodec) uint8 {
	fb := false
	for _, f := range c.fb {
		fb = fb || strings.EqualFold(f, "transport-cc")
	}
	if !fb {
		return 0
	}
	return extIn(sec.exts, uriTransportCC)
}

func fmtpParam(fmtp, key string) string {
	for _, kv := range strings.Split(fmtp, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && strings.EqualFold(k, key) {
			return strings.ToLower(v)
		}
	}
	return ""
}

func h264Mode(fmtp string) string {
	if v := fmtpParam(fmtp, "packetization-mode"); v != "" {
		return v
	}
	return "0"
}

// h264Profile is profile_idc and the constraint flags of profile-level-id
// (the level does not have to match: RFC 6184 8.2.2).
func h264Profile(fmtp string) string {
	v := fmtpParam(fmtp, "profile-level-id")
	return v[:min(4, len(v))]
}

// answerParams is what the answer says besides the negotiation.
type answerParams struct {
	ufrag, pwd, fingerprint string
	ips                     []net.IP
	port, tcpPort           int // tcpPort 0: no ICE-TCP
	cname                   string
}

// negotiate assigns each track to the first offered section of its kind that
// can receive its codec, and writes the answer: ICE-lite, the server's host
// candidates, setup:passive, BUNDLE of the accepted sections, rtcp-mux, the
// offered NACK/PLI/FIR feedback, and transport-cc with the transport-wide
// sequence number extension where the viewer offered both (the server then
// estimates the viewer's bandwidth from its feedback). No REMB. Sections
// nothing is sent in are rejected (port 0).
func negotiate(o *offer, tracks []Track, p answerParams, ssrc func() uint32) (string, []Sender, error) {
	senders := make([]Sender, len(tracks))
	assigned := make([]int, len(o.sections)) // track index + 1, 0 = none
	chosen := make([]*offeredCodec, len(o.sections))
	for ti, t := range tracks {
		found := false
		for si := range o.sections {
			sec := &o.sections[si]
			if assigned[si] != 0 || sec.kind != t.Kind || (sec.port == 0 && !sec.bundleOnly) || !sec.recv || sec.mid == "" {
				continue
			}
			if c := sec.match(t); c != nil {
				assigned[si], chosen[si] = ti+1, c
				senders[ti] = Sender{PT: c.pt, SSRC: ssrc(), Mid: sec.mid, TransportCC: sec.transportCC(c)}
				found = true
				break
			}
		}
		if !found {
			return "", nil, fmt.Errorf("%w (%s %s)", errNoMedia, t.Kind, t.MimeType)
		}
	}
	s := &sdp.SessionDescription{
		Origin:           sdp.Origin{Username: "-", SessionID: uint64(ssrc())<<16 | uint64(ssrc()&0xffff), SessionVersion: 2, NetworkType: "IN", AddressType: "IP4", UnicastAddress: "0.0.0.0"},
		SessionName:      "-",
		TimeDescriptions: []sdp.TimeDescription{{Timing: sdp.Timing{}}},
	}
	// Audio and video sections nothing is sent in stay in the BUNDLE group,
	// inactive: a viewer offering video and audio of an audio-only
	// publication keeps its first section (the BUNDLE tag, which carries the
	// transport). Other sections (data channels) are rejected.
	inBundle := make([]bool, len(o.sections))
	var mids []string
	for si, sec := range o.sections {
		media := (sec.kind == "audio" || sec.kind == "video") && len(sec.codecs) > 0
		if assigned[si] != 0 || (media && sec.mid != "" && (sec.port != 0 || sec.bundleOnly)) {
			inBundle[si] = true
			mids = append(mids, sec.mid)
		}
	}
	s = s.WithPropertyAttribute("ice-lite").WithValueAttribute("group", "BUNDLE "+strings.Join(mids, " "))
	for si := range o.sections {
		sec := &o.sections[si]
		protos := sec.protos
		if len(protos) == 0 {
			protos = []string{"UDP", "TLS", "RTP", "SAVPF"}
		}
		m := &sdp.MediaDescription{
			MediaName:             sdp.MediaName{Media: sec.kind, Port: sdp.RangedPort{Value: 9}, Protos: protos},
			ConnectionInformation: &sdp.ConnectionInformation{NetworkType: "IN", AddressType: "IP4", Address: &sdp.Address{Address: "0.0.0.0"}},
		}
		if !inBundle[si] {
			m.MediaName.Port.Value = 0
			m.MediaName.Formats = sec.formats
			if len(m.MediaName.Formats) == 0 {
				m.MediaName.Formats = []string{"0"}
			}
			if sec.mid != "" {
				m = m.WithValueAttribute("mid", sec.mid)
			}
			s.MediaDescriptions = append(s.MediaDescriptions, m.WithPropertyAttribute("inactive"))
			continue
		}
		direction := "inactive"
		c := &sec.codecs[0]
		if assigned[si] != 0 {
			direction, c = "sendonly", chosen[si]
		}
		m.MediaName.Formats = []string{strconv.Itoa(int(c.pt))}
		m = m.WithValueAttribute("mid", sec.mid).
			WithICECredentials(p.ufrag, p.pwd).
			WithFingerprint("sha-256", p.fingerprint).
			WithValueAttribute("setup", "passive").
			WithPropertyAttribute(direction).
			WithPropertyAttribute("rtcp-mux")
		if sec.rsize {
			m = m.WithPropertyAttribute("rtcp-rsize")
		}
		m = m.WithValueAttribute("rtpmap", fmt.Sprintf("%d %s", c.pt, c.rtpmap))
		if c.fmtp != "" {
			m = m.WithValueAttribute("fmtp", fmt.Sprintf("%d %s", c.pt, c.fmtp))
		}
		twcc := uint8(0)
		if assigned[si] != 0 {
			twcc = senders[assigned[si]-1].TransportCC
		}
		for _, fb := range c.fb {
			switch f := strings.ToLower(fb); {
			case f == "nack", f == "nack pli", f == "ccm fir", f == "transport-cc" && twcc != 0:
				m = m.WithValueAttribute("rtcp-fb", fmt.Sprintf("%d %s", c.pt, fb))
			}
		}
		if twcc != 0 {
			m = m.WithValueAttribute("extmap", fmt.Sprintf("%d %s", twcc, uriTransportCC))
		}
		if assigned[si] != 0 {
			t, snd := tracks[assigned[si]-1], senders[assigned[si]-1]
			msid := t.StreamID + " " + t.ID
			m = m.WithValueAttribute("msid", msid).
				WithValueAttribute("ssrc", fmt.Sprintf("%d cname:%s", snd.SSRC, p.cname)).
				WithValueAttribute("ssrc", fmt.Sprintf("%d msid:%s", snd.SSRC, msid))
		}
		m = withCandidates(m, p.ips, p.port, p.tcpPort)
		s.MediaDescriptions = append(s.MediaDescriptions, m.WithPropertyAttribute("end-of-candidates"))
	}
	b, err := s.Marshal()
	return string(b), senders, err
}

// withCandidates adds the server's host candidates to an SDP section: one
// UDP candidate per address on port and, with ICE-TCP (tcpPort), a passive
// TCP one (RFC 6544) with a lower priority, so that a client that can use
// both prefers UDP.
func withCandidates(m *sdp.MediaDescription, ips []net.IP, port, tcpPort int) *sdp.MediaDescription {
	for _, c := range candidates(ips, port, tcpPort) {
		m = m.WithValueAttribute("candidate", c)
	}
	return m
}

// candidates are the server's host candidates (the values of a=candidate).
func candidates(ips []net.IP, port, tcpPort int) []string {
	var out []string
	for i, ip := range ips {
		// Type preference 126 (host), local preference 65535-i, component 1.
		out = append(out, fmt.Sprintf("%d 1 udp %d %s %d typ host", i+1, 126<<24|(65535-i)<<8|255, ip, port))
	}
	if tcpPort == 0 {
		return out
	}
	for i, ip := range ips {
		// RFC 6544 4.2: local preference (2^13 * direction preference
		// (passive: 4) + other preference), under every UDP one.
		out = append(out, fmt.Sprintf("%d 1 tcp %d %s %d typ host tcptype passive", len(ips)+i+1, 126<<24|(4<<13+8191-i)<<8|255, ip, tcpPort))
	}
	return out
}
