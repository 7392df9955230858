package session

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/sdp/v3"

	"github.com/petrel-sfu/petrel/rtc/datachan"
	"github.com/petrel-sfu/petrel/rtc/dtlsrec"
)

// A data session is a connection that carries only data channels, which the
// client offers: the publisher connection of a room participant that may
// not publish media (a webinar's audience). It is a Session like the others
// (ICE-lite, the shared UDP socket, the server's DTLS certificate) whose
// DTLS connection stays up and carries an SCTP association instead of
// giving SRTP keys: no PeerConnection, no ICE agent, no SRTP session.

// DataHandler hears about a data session: Handler's events, and each data
// channel the client opens (already acknowledged, ready to read and write).
// OnDataChannel runs on the session's accept goroutine.
type DataHandler interface {
	Handler
	OnDataChannel(dc *datachan.Channel)
}

// DataSession is a session of data channels alone.
type DataSession struct{ *Session }

// RTT is the SCTP association's smoothed round-trip time (0: not measured).
func (v *DataSession) RTT() time.Duration {
	if st, ok := v.SCTPStats(); ok {
		return st.SRTT
	}
	return 0
}

// dataSide is what a data session has besides a Session's ICE and DTLS.
type dataSide struct {
	h          DataHandler
	mu         sync.Mutex
	rufrag     string // the client's ufrag, changed by an ICE restart
	mid        string // the data section's mid, kept by every later offer
	maxMessage uint32 // the largest message the server accepts
	assoc      *datachan.Association
	offer      string // the client's last offer
	// rec is set once the association reads its packets from rec through
	// drainSCTP; draining: a drain runs.
	rec      atomic.Pointer[dtlsrec.Conn]
	draining atomic.Bool
}

// dataQueue is how many DTLS records wait for a data session's SCTP reader
// (a media session's DTLS only runs its handshake: lean.HandshakeQueue): a
// whole receive window's worth (datachan's 4 MiB in packets of 1200 bytes),
// since a sender in slow start sends it in one burst and a record dropped
// here is a loss to SCTP. The queue's buffer grows only while records wait.
const dataQueue = 4096

// NewDataSession answers a client's offer for a connection with data
// channels only. Audio and video sections of the offer are rejected;
// maxMessage bounds the messages the server accepts (a=max-message-size).
func (s *Server) NewDataSession(offerSDP string, maxMessage uint32, h DataHandler) (*DataSession, string, error) {
	if err := s.open(); err != nil {
		return nil, "", err
	}
	o, err := parseOffer(offerSDP)
	if err != nil {
		return nil, "", err
	}
	mid, err := dataSection(o, "")
	if err != nil {
		return nil, "", err
	}
	// mid is copied: a substring would keep the whole parsed offer alive.
	v := &Session{s: s, h: h, fpAlg: o.fpAlg, fp: o.fp,
		data: &dataSide{h: h, rufrag: o.ufrag, mid: strings.Clone(mid), maxMessage: maxMessage, offer: offerSDP}}
	v.setClient(o.ufrag, o.pwd)
	c := newCreds(nil)
	v.creds.Store(c)
	answer, err := v.dataAnswer(o, c)
	if err != nil {
		return nil, "", err
	}
	s.serve(v, dataQueue)
	return &DataSession{v}, answer, nil
}

// Reoffer answers a later offer of a data session's client: a
// renegotiation, or an ICE restart (new client credentials), which gives
// the server new ones too. The DTLS fingerprint may not change.
func (v *DataSession) Reoffer(offerSDP string) (string, error) {
	d := v.data
	if d == nil {
		return "", errors.New("session: not a data session")
	}
	o, err := parseOffer(offerSDP)
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if o.fpAlg != v.fpAlg || !slices.Equal(o.fp, v.fp) {
		return "", errors.New("offer: the DTLS fingerprint changed")
	}
	if v.in == nil {
		if _, err := dataSection(o, d.mid); err != nil {
			return "", err
		}
	} else {
		if d.mid != "" {
			if _, err := dataSection(o, d.mid); err != nil {
				return "", err
			}
		}
		if err := v.in.update(o); err != nil {
			return "", err
		}
	}
	c := v.creds.Load()
	if o.ufrag != d.rufrag {
		c = newCreds(c)
		v.creds.Store(c)
		v.s.addUfrag(v.Session, c.ufrag)
		d.rufrag = o.ufrag
	}
	v.setClient(o.ufrag, o.pwd)
	answer, err := v.dataAnswer(o, c)
	if err == nil {
		d.offer = offerSDP
	}
	return answer, err
}

// LastOffer is the client's last offer of a data or publisher session (a
// WHIP ICE restart is that offer with new credentials).
func (v *DataSession) LastOffer() string {
	if d := v.data; d != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.offer
	}
	return ""
}

// remoteUfrag is the client's ICE ufrag.
func (v *Session) remoteUfrag() string {
	if d := v.data; d != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.rufrag
	}
	return v.creds.Load().remote
}

// dataSection finds the offer's data channel section (mid, if given, is the
// one earlier offers had).
func dataSection(o *offer, mid string) (string, error) {
	for _, sec := range o.sections {
		if sec.kind != "application" || sec.mid == "" || (sec.port == 0 && !sec.bundleOnly) ||
			!slices.Contains(sec.formats, "webrtc-datachannel") {
			continue
		}
		if mid == "" || sec.mid == mid {
			return sec.mid, nil
		}
	}
	if mid != "" {
		return "", fmt.Errorf("offer: the data channel section %q is gone", mid)
	}
	return "", errors.New("offer: no data channel section (m=application … webrtc-datachannel)")
}

// dataAnswer writes the answer: ICE-lite, setup:passive, the data section
// accepted and, for a publisher session, the media sections it receives
// (ingest.go), all in one BUNDLE group; every other section rejected.
func (v *Session) dataAnswer(o *offer, c *iceCreds) (string, error) {
	s := &sdp.SessionDescription{
		Origin:           sdp.Origin{Username: "-", SessionID: uint64(randomSSRC()), SessionVersion: 2, NetworkType: "IN", AddressType: "IP4", UnicastAddress: "0.0.0.0"},
		SessionName:      "-",
		TimeDescriptions: []sdp.TimeDescription{{Timing: sdp.Timing{}}},
	}
	isData := func(sec *section) bool { return v.data.mid != "" && sec.mid == v.data.mid }
	isMedia := func(sec *section) bool {
		return v.in != nil && sec.mid != "" && (sec.kind == "audio" || sec.kind == "video") && v.in.accepts(sec.mid)
	}
	var bundle []string
	for i := range o.sections {
		if sec := &o.sections[i]; isData(sec) || isMedia(sec) {
			bundle = append(bundle, sec.mid)
		}
	}
	if len(bundle) == 0 {
		return "", errors.New("offer: no data channel or media section this server takes")
	}
	s = s.WithPropertyAttribute("ice-lite").WithValueAttribute("group", "BUNDLE "+strings.Join(bundle, " "))
	for i := range o.sections {
		sec := &o.sections[i]
		m := &sdp.MediaDescription{
			MediaName:             sdp.MediaName{Media: sec.kind, Port: sdp.RangedPort{Value: 0}, Protos: sec.protos, Formats: sec.formats},
			ConnectionInformation: &sdp.ConnectionInformation{NetworkType: "IN", AddressType: "IP4", Address: &sdp.Address{Address: "0.0.0.0"}},
		}
		if len(m.MediaName.Protos) == 0 {
			m.MediaName.Protos = []string{"UDP", "TLS", "RTP", "SAVPF"}
		}
		if len(m.MediaName.Formats) == 0 {
			m.MediaName.Formats = []string{"0"}
		}
		data, media := isData(sec), isMedia(sec)
		if !data && !media {
			if sec.mid != "" {
				m = m.WithValueAttribute("mid", sec.mid)
			}
			s.MediaDescriptions = append(s.MediaDescriptions, m.WithPropertyAttribute("inactive"))
			continue
		}
		m.MediaName.Port.Value = 9
		m = m.WithValueAttribute("mid", sec.mid).
			WithICECredentials(c.ufrag, c.pwd).
			WithFingerprint("sha-256", v.s.cert.Fingerprint).
			WithValueAttribute("setup", "passive")
		if data {
			m.MediaName.Protos = []string{"UDP", "DTLS", "SCTP"}
			m.MediaName.Formats = []string{"webrtc-datachannel"}
			m = m.WithValueAttribute("sctp-port", "5000").
				WithValueAttribute("max-message-size", strconv.FormatUint(uint64(v.data.maxMessage), 10))
		} else {
			if sec.rsize {
				m = m.WithPropertyAttribute("rtcp-rsize")
			}
			m = v.in.mediaAnswer(m, sec.mid)
		}
		m = withCandidates(m, v.s.ips, v.s.port, v.s.tcpPort)
		s.MediaDescriptions = append(s.MediaDescriptions, m.WithPropertyAttribute("end-of-candidates"))
	}
	b, err := s.Marshal()
	return string(b), err
}

// runSCTP starts Petrel's SCTP association (rtc/datachan) over the DTLS
// connection; the client's channels go to the handler as they open. Both
// ends of a WebRTC association send INIT (RFC 8831 6.2); the association
// resolves the collision as RFC 9260 5.2.1 says. With Petrel's DTLS
// records (rec) nothing waits for packets: the socket's reader starts a
// drain when records are queued (kickSCTP), so a quiet session holds no
// goroutine. Without them (a suite dtlsrec does not handle) the
// association reads pion/dtls's connection on a goroutine of its own.
func (v *Session) runSCTP(dc net.Conn, rec *dtlsrec.Conn, client bool) {
	d := v.data
	cfg := datachan.Config{Conn: dc, Client: client, MaxMessage: d.maxMessage, MTU: sctpMTU, Log: v.s.log,
		MaxChannels: v.s.MaxDataChannels, Input: rec != nil, OnChannel: d.h.OnDataChannel,
		OnClose: func(error) {
			if !v.closed.Load() { // not Close's own Abort (closeData)
				v.Close("sctp closed")
			}
		}}
	if rec != nil {
		cfg.MaxMTU = SCTPMaxMTU() // its records' overhead is the one SCTPMaxMTU leaves room for
	}
	a := datachan.New(cfg)
	d.mu.Lock()
	d.assoc = a
	d.mu.Unlock()
	if v.closed.Load() {
		a.Abort("session closed")
		return
	}
	time.AfterFunc(ConsentTimeout, func() {
		select {
		case <-a.Ready():
		case <-a.Done():
		default:
			v.Close("sctp: no association within " + ConsentTimeout.String())
		}
	})
	if rec != nil {
		rec.OnQueued(v.kickSCTP)
		d.rec.Store(rec)
		v.kickSCTP() // the client's INIT may be queued already
	}
}

// kickSCTP starts a drain of the queued DTLS records into the association
// unless one runs.
func (v *Session) kickSCTP() {
	d := v.data
	if d.rec.Load() != nil && d.draining.CompareAndSwap(false, true) {
		go v.drainSCTP()
	}
}

// sctpBufs are the drains' read buffers (an SCTP packet: at most datachan's 8192 bytes).
var sctpBufs = sync.Pool{New: func() any { return new([8192]byte) }}

// drainSCTP hands every queued record's SCTP packet to the association, and
// ends when none is left: a record queued after its last look starts the
// next drain (kickSCTP), or this one goes on if that found it running.
func (v *Session) drainSCTP() {
	d := v.data
	rec, a := d.rec.Load(), v.association()
	buf := sctpBufs.Get().(*[8192]byte)
	defer sctpBufs.Put(buf)
	for {
		for {
			n, ok, err := rec.TryRead(buf[:])
			if err != nil {
				a.Abort("dtls: " + err.Error())
				return // the association is closed: nothing to drain for
			}
			if !ok {
				break
			}
			a.Input(buf[:n], rec.Queued() > 0)
		}
		d.draining.Store(false)
		if rec.Queued() == 0 || !d.draining.CompareAndSwap(false, true) {
			return
		}
	}
}

// sctpMTU is the SCTP packet size: with DTLS's overhead the datagrams stay
// within 1280 bytes, so the lean path and a PeerConnection (whose Pion uses
// 1191) fit the same paths.
const sctpMTU = 1200

// SCTPMaxMTU is the largest SCTP packet path MTU discovery tries: an
// Ethernet frame's 1500 bytes (or the smallest MTU of this host's
// interfaces, if less) less IPv4's and UDP's headers, a TURN ChannelData
// header (a relayed path still fits) and a DTLS record's overhead, down to
// a multiple of 4. On an Ethernet path a data session sends 1428-byte
// packets, 16% fewer than at 1200 for the same bytes.
//
// The interfaces bound it because the kernel fragments a UDP datagram
// larger than its interface's MTU (Linux's default, IP_PMTUDISC_WANT): a
// probe would pass in fragments on a cloud VM whose interface has 1460, and
// every packet after it would go in two. The same default is what lets
// chunks cut for a larger path pass, in fragments, after the path shrank
// (rtc/datachan/pmtu.go).
// It is worked out on first use, not when the package loads: most of the
// binary's commands never open a data session.
var SCTPMaxMTU = sync.OnceValue(func() int { return sctpMaxMTU(interfaceMTU()) })

func sctpMaxMTU(linkMTU int) int { return (min(linkMTU, 1500) - 20 - 8 - 4 - dtlsrec.Overhead) &^ 3 }

// interfaceMTU is the smallest MTU of the host's interfaces that are up,
// loopback aside; 1500 if it has none.
func interfaceMTU() int {
	m := 1500
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagUp != 0 && i.Flags&net.FlagLoopback == 0 && i.MTU > 0 {
			m = min(m, i.MTU)
		}
	}
	return m
}

// SCTPStats are the counters of a data session's SCTP association, false
// before it started.
func (v *DataSession) SCTPStats() (datachan.Stats, bool) {
	if a := v.association(); a != nil {
		return a.Stats(), true
	}
	return datachan.Stats{}, false
}

// association is the data session's SCTP association, nil before it
// started (or on a session without data).
func (v *Session) association() *datachan.Association {
	d := v.data
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.assoc
}

// closeData ends the association (an ABORT to the client if it is up).
func (v *Session) closeData() {
	if a := v.association(); a != nil {
		a.Abort("session closed")
	}
}
