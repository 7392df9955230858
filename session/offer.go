package session

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/sdp/v3"

	"github.com/petrel-sfu/petrel/rtc"
	"github.com/petrel-sfu/petrel/rtc/lean"
	"github.com/petrel-sfu/petrel/sfu"
)

// A session the server offers is a room participant's subscriber side: the
// server adds and removes tracks, writes an offer for what it sends, and
// applies the client's answer. It is a Session like a WHEP viewer's (ICE-lite,
// DTLS server, the same write path), with the negotiation the other way round.

// Header extension ids of a server-offered session. The answerer keeps the
// offerer's ids (RFC 8285 5), so they are the same in every section.
const (
	extTransportCC = 3
	extDependency  = 11

	uriTransportCC = "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"
	uriDependency  = "https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension"
)

// offerer is the negotiation state of a server-offered session.
type offerer struct {
	mu sync.Mutex
	// secs are the media sections in offer order; a section whose track
	// went is offered inactive and given to the next track of its kind once
	// an answer took it off (so the client sees a new track arrive).
	secs    []offSection
	offered []offSection // secs as the outstanding (or last) offer wrote them
	pts     map[string]uint8
	version uint64 // of the last offer written
	// answeredV is the version of the last offer answered.
	answeredV uint64
	cname     string
	sessionID uint64

	answered     chan struct{} // closed by the first answer
	answeredOnce sync.Once
	hasAnswer    atomic.Bool
	// dtlsClient: the first answer said setup:passive, so the server is the
	// DTLS client.
	dtlsClient atomic.Bool
}

type offSection struct {
	mid, kind string
	active    bool
	track     Track
	pt        uint8
	ssrc      uint32
	// freedIn is the version of the first offer that had the section
	// inactive (0: in use, or not offered inactive yet).
	freedIn uint64
	// rejected: an answer rejected it (port 0, e.g. a codec the browser cannot
	// decode); browsers keep such a section rejected, so no track reuses it.
	rejected bool
}

func (o *offerer) wasAnswered() bool { return o.hasAnswer.Load() }

// Subscriber is a room participant's subscriber session: the server offers
// its tracks (AddTrack, Offer) and applies the client's answers.
type Subscriber struct{ *Session }

// NewSubscriber makes a session the server offers to. It has no tracks and
// waits for AddTrack and Offer; h hears about it as about a WHEP viewer.
func (s *Server) NewSubscriber(h Handler) (*Subscriber, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	v := &Session{s: s, h: h, off: &offerer{pts: map[string]uint8{}, cname: lean.Token(16),
		sessionID: uint64(randomSSRC())<<16 | uint64(randomSSRC()&0xffff), answered: make(chan struct{})}}
	v.creds.Store(newCreds(nil))
	s.serve(v, lean.HandshakeQueue)
	return &Subscriber{v}, nil
}

// AddTrack gives t a media section (a new one, or one a removed track left
// and an answer took off) and returns what t is sent with. The client learns
// of it with the next offer.
func (v *Subscriber) AddTrack(t Track) (Sender, error) {
	o := v.off
	if o == nil {
		return Sender{}, errors.New("session: a WHEP viewer's tracks are fixed by its offer")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	pt, err := o.payloadType(t)
	if err != nil {
		return Sender{}, err
	}
	sec := offSection{kind: t.Kind, active: true, track: t, pt: pt, ssrc: randomSSRC()}
	for i := range o.secs {
		x := &o.secs[i]
		if !x.active && !x.rejected && x.kind == t.Kind && x.freedIn != 0 && x.freedIn <= o.answeredV {
			sec.mid = x.mid
			*x = sec
			return Sender{PT: pt, SSRC: sec.ssrc, Mid: sec.mid}, nil
		}
	}
	if len(o.secs) >= maxSections {
		return Sender{}, fmt.Errorf("session: more than %d media sections", maxSections)
	}
	sec.mid = strconv.Itoa(len(o.secs))
	o.secs = append(o.secs, sec)
	return Sender{PT: pt, SSRC: sec.ssrc, Mid: sec.mid}, nil
}

// maxSections bounds a session's media sections (a room's tracks, and the
// ones that went but were not reused yet).
const maxSections = 512

// RemoveTrack stops the section mid; the next offer has it inactive.
func (v *Subscriber) RemoveTrack(mid string) {
	o := v.off
	if o == nil {
		return
	}
	var gone []uint32
	o.mu.Lock()
	for i := range o.secs {
		if x := &o.secs[i]; x.mid == mid && x.active {
			x.active, x.freedIn = false, 0
			gone = append(gone, x.ssrc)
		}
	}
	o.mu.Unlock()
	// Its stream's rollover counter goes too (a reused section gets a new SSRC).
	v.wmu.Lock()
	if v.gtx != nil {
		for _, ssrc := range gone {
			v.gtx.forget(ssrc)
		}
	}
	v.wmu.Unlock()
}

// preferredPT is the payload type rtc.Codecs gives a codec (its first entry
// of that name), which offers use when it is free.
func preferredPT(name string) (uint8, bool) {
	for _, c := range rtc.Codecs {
		if _, n, _ := strings.Cut(c.MimeType, "/"); strings.EqualFold(n, name) {
			return uint8(c.PayloadType), true
		}
	}
	return 0, false
}

// payloadType is the session's payload type for t's codec: one per codec
// and fmtp across the session, as BUNDLE needs. The usual numbers first.
func (o *offerer) payloadType(t Track) (uint8, error) {
	_, name, _ := strings.Cut(t.MimeType, "/")
	key := strings.ToLower(name) + "/" + strconv.Itoa(int(t.ClockRate)) + "/" + t.Fmtp
	if pt, ok := o.pts[key]; ok {
		return pt, nil
	}
	used := map[uint8]bool{}
	for _, pt := range o.pts {
		used[pt] = true
	}
	pt, ok := preferredPT(name)
	if !ok || used[pt] {
		ok = false
		for p := uint8(96); p < 128; p++ {
			if !used[p] && p != 111 {
				pt, ok = p, true
				break
			}
		}
	}
	if !ok {
		return 0, errors.New("session: out of payload types")
	}
	o.pts[key] = pt
	return pt, nil
}

// Offer writes an offer for the session's sections. restart gives the
// server new ICE credentials (the old ones answer checks until the client
// switched).
func (v *Subscriber) Offer(restart bool) (string, error) {
	o := v.off
	if o == nil {
		return "", errors.New("session: a WHEP viewer is not offered to")
	}
	if restart {
		c := newCreds(v.creds.Load())
		v.creds.Store(c)
		v.s.addUfrag(v.Session, c.ufrag)
	}
	c := v.creds.Load()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.version++
	for i := range o.secs {
		if x := &o.secs[i]; !x.active && x.freedIn == 0 {
			x.freedIn = o.version
		}
	}
	o.offered = append(o.offered[:0], o.secs...)
	s := &sdp.SessionDescription{
		Origin:           sdp.Origin{Username: "-", SessionID: o.sessionID, SessionVersion: o.version + 1, NetworkType: "IN", AddressType: "IP4", UnicastAddress: "0.0.0.0"},
		SessionName:      "-",
		TimeDescriptions: []sdp.TimeDescription{{Timing: sdp.Timing{}}},
	}
	mids := make([]string, len(o.secs))
	for i, x := range o.secs {
		mids[i] = x.mid
	}
	s = s.WithPropertyAttribute("ice-lite").
		WithValueAttribute("group", "BUNDLE "+strings.Join(mids, " ")).
		WithValueAttribute("msid-semantic", " WMS *")
	for _, x := range o.secs {
		m := &sdp.MediaDescription{
			MediaName:             sdp.MediaName{Media: x.kind, Port: sdp.RangedPort{Value: 9}, Protos: []string{"UDP", "TLS", "RTP", "SAVPF"}, Formats: []string{strconv.Itoa(int(x.pt))}},
			ConnectionInformation: &sdp.ConnectionInformation{NetworkType: "IN", AddressType: "IP4", Address: &sdp.Address{Address: "0.0.0.0"}},
		}
		direction := "inactive"
		if x.active {
			direction = "sendonly"
		}
		m = m.WithValueAttribute("mid", x.mid).
			WithICECredentials(c.ufrag, c.pwd).
			WithFingerprint("sha-256", v.s.cert.Fingerprint).
			WithValueAttribute("setup", "actpass").
			WithPropertyAttribute(direction).
			WithPropertyAttribute("rtcp-mux").
			WithValueAttribute("extmap", fmt.Sprintf("%d %s", extTransportCC, uriTransportCC))
		if x.kind == "video" {
			m = m.WithValueAttribute("extmap", fmt.Sprintf("%d %s", extDependency, uriDependency))
		}
		m = m.WithValueAttribute("rtpmap", fmt.Sprintf("%d %s", x.pt, rtpmap(x.track)))
		if x.track.Fmtp != "" {
			m = m.WithValueAttribute("fmtp", fmt.Sprintf("%d %s", x.pt, x.track.Fmtp))
		}
		fb := []string{"transport-cc"}
		if x.kind == "video" {
			fb = append(fb, "ccm fir", "nack", "nack pli")
		}
		for _, f := range fb {
			m = m.WithValueAttribute("rtcp-fb", fmt.Sprintf("%d %s", x.pt, f))
		}
		if x.active {
			msid := x.track.StreamID + " " + x.track.ID
			m = m.WithValueAttribute("msid", msid).
				WithValueAttribute("ssrc", fmt.Sprintf("%d cname:%s", x.ssrc, o.cname)).
				WithValueAttribute("ssrc", fmt.Sprintf("%d msid:%s", x.ssrc, msid))
		}
		m = withCandidates(m, v.s.ips, v.s.port, v.s.tcpPort)
		s.MediaDescriptions = append(s.MediaDescriptions, m.WithPropertyAttribute("end-of-candidates"))
	}
	b, err := s.Marshal()
	return string(b), err
}

// rtpmap is a=rtpmap's value for t: "opus/48000/2", "VP8/90000".
func rtpmap(t Track) string {
	_, name, _ := strings.Cut(t.MimeType, "/")
	if name == "" {
		name = "unknown"
	}
	r := name + "/" + strconv.Itoa(int(t.ClockRate))
	if t.Channels > 1 {
		r += "/" + strconv.Itoa(int(t.Channels))
	}
	return r
}

// Accepted is what the client's answer did with one track's section.
type Accepted struct {
	Mid  string
	SSRC uint32
	PT   uint8
	// OK: the client receives the track (its section was not rejected).
	OK bool
	// TransportCC and Dependency are the ids of the transport-wide sequence
	// number and dependency descriptor extensions, 0 if the answer left them
	// out.
	TransportCC, Dependency uint8
}

// ApplyAnswer applies the client's answer to the last offer and says, for
// every track section it offered, whether the client takes it. The answer
// comes from the network: everything in it is checked.
func (v *Subscriber) ApplyAnswer(text string) ([]Accepted, error) {
	o := v.off
	if o == nil {
		return nil, errors.New("session: a WHEP viewer answers nothing")
	}
	if n := sfu.MediaSections(text); n > maxSections {
		return nil, fmt.Errorf("answer: %d media sections, at most %d", n, maxSections)
	}
	var s sdp.SessionDescription
	if err := s.UnmarshalString(text); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	var t transport
	if err := t.read(s.Attributes, "answer"); err != nil {
		return nil, err
	}
	for _, m := range s.MediaDescriptions {
		if err := t.read(m.Attributes, "answer"); err != nil {
			return nil, err
		}
	}
	if err := t.check("answer"); err != nil {
		return nil, err
	}
	if t.setup != "active" && t.setup != "passive" {
		return nil, fmt.Errorf("answer: setup:%q (an answer to actpass is active or passive)", t.setup)
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	if o.answeredV == o.version {
		return nil, errors.New("answer: no offer is waiting for one")
	}
	if len(s.MediaDescriptions) != len(o.offered) {
		return nil, fmt.Errorf("answer: %d media sections for an offer of %d", len(s.MediaDescriptions), len(o.offered))
	}
	if v.fp != nil && (t.fpAlg != v.fpAlg || string(t.fp) != string(v.fp)) {
		return nil, errors.New("answer: the DTLS fingerprint changed (a new DTLS session is not supported)")
	}
	var out []Accepted
	var rejected []int // offered sections the answer rejects, marked once it is all checked
	for i, m := range s.MediaDescriptions {
		x := &o.offered[i]
		mid, _ := m.Attribute("mid")
		if mid != x.mid {
			return nil, fmt.Errorf("answer: section %d has mid %q, the offer's is %q", i, mid, x.mid)
		}
		if m.MediaName.Port.Value == 0 {
			rejected = append(rejected, i)
		}
		if !x.active {
			continue
		}
		a := Accepted{Mid: x.mid, SSRC: x.ssrc, PT: x.pt}
		_, inactive := m.Attribute("inactive")
		for _, f := range m.MediaName.Formats {
			if f == strconv.Itoa(int(x.pt)) {
				a.OK = m.MediaName.Port.Value != 0 && !inactive
			}
		}
		for _, at := range m.Attributes {
			if at.Key != "extmap" {
				continue
			}
			id, uri, _ := strings.Cut(at.Value, " ")
			id, _, _ = strings.Cut(id, "/")
			n, err := strconv.Atoi(id)
			if err != nil || n < 1 || n > 255 {
				continue
			}
			switch strings.TrimSpace(uri) {
			case uriTransportCC:
				a.TransportCC = uint8(n)
			case uriDependency:
				a.Dependency = uint8(n)
			}
		}
		out = append(out, a)
	}
	for _, i := range rejected {
		if i < len(o.secs) && o.secs[i].mid == o.offered[i].mid {
			o.secs[i].rejected = true
		}
	}
	o.answeredV = o.version
	v.fpAlg, v.fp = t.fpAlg, t.fp
	for { // an ICE restart's Offer may replace the credentials meanwhile
		old := v.creds.Load()
		c := *old
		c.remote = t.ufrag
		if v.creds.CompareAndSwap(old, &c) {
			break
		}
	}
	v.setClient(t.ufrag, t.pwd)
	o.answeredOnce.Do(func() {
		o.dtlsClient.Store(t.setup == "passive")
		v.lastCheck.Store(time.Now().UnixNano()) // the consent clock starts now
		o.hasAnswer.Store(true)
		close(o.answered)
		// The client checks as soon as it has the offer: its first checks
		// came before its password did.
		v.wmu.Lock()
		r, tc := v.remote, v.tcp
		v.wmu.Unlock()
		if r.IsValid() {
			v.nudge(r, tc)
		}
	})
	return out, nil
}
