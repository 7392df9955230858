package session

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"
	"github.com/pion/srtp/v3"
	"github.com/pion/transport/v5/packetio"

	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/rtc"
)

// A publisher session is a data session that also receives the client's
// audio and video: the publisher side of a room participant without a
// PeerConnection. Its SRTP is decrypted by the socket's reader goroutine,
// which hands each packet to the interceptors that feed the publisher back
// (NACKs, receiver reports, transport-wide feedback: the interceptors a
// publisher PeerConnection runs) and then to the track's layer: queued for
// its forwarding goroutine, or, once that goroutine took over (PushTo),
// forwarded on the reader itself with no goroutine hand-off, where a
// PeerConnection makes four (docs/sessions.md, "Publishers").

// IngestHandler hears about a publisher session: a data session's events,
// and each stream of media as its first packet arrives. OnTrack calls are
// made one at a time, each on a goroutine of its own.
type IngestHandler interface {
	DataHandler
	OnTrack(t *InTrack)
}

// Ingest is what a publisher session receives with.
type Ingest struct {
	// Codecs are the formats the server forwards, best first; each media
	// section takes the first codec of the client's offer that is one of them.
	Codecs []Track
	// Interceptors makes the session's RTCP feedback: NACK generator,
	// receiver reports, transport-wide congestion control feedback.
	Interceptors func() (interceptor.Interceptor, error)
	// Feedback and Extensions are the RTCP feedback types ("nack", "nack
	// pli", "ccm fir", "transport-cc") and header extension URIs the server
	// accepts; the answer keeps those the offer has.
	Feedback   []string
	Extensions []string
}

// InTrack is one stream a publisher sends: a track, or one simulcast
// encoding of it. It is what the forwarding goroutine reads.
type InTrack struct {
	Mid, Kind    string
	ID, StreamID string // the section's msid
	MimeType     string
	ClockRate    uint32
	Channels     uint16
	Fmtp         string
	PT           uint8
	// Header extension ids the forwarding path reads (0: not negotiated).
	AudioLevelExt, DependencyExt uint8

	rid    string
	ssrc   uint32
	v      *Session
	sec    *inSection
	rtp    *packetio.Buffer
	rtcp   *packetio.Buffer
	reader interceptor.RTPReader
	info   *interceptor.StreamInfo
	// push, once set (PushTo), takes each packet on the socket's reader
	// instead of the queue; pushMu orders setting it against queueing.
	push   atomic.Pointer[func([]byte)]
	pushMu sync.Mutex
}

// inQueue is how many packets wait for a track's forwarding goroutine: a
// keyframe's worth at a few Mbit/s, with room for a scheduling hiccup.
const inQueue = 1024

// maxStreams bounds the streams of one session (tracks times encodings).
const maxStreams = 32

type ingestSide struct {
	cfg Ingest
	h   IngestHandler
	// The interceptors (and their timer goroutines) come with the first
	// stream: most room participants never publish. Under mu; rtcpIn is read
	// by the rtcp goroutine.
	chain  interceptor.Interceptor
	rtcpIn atomic.Pointer[interceptor.RTCPReader]

	mu      sync.Mutex
	secs    []*inSection // media sections, in offer order
	streams atomic.Pointer[map[uint32]*InTrack]
	trackMu sync.Mutex // OnTrack, one at a time

	// xrSSRC names the server in its RTCP XR receiver reference times; rtt
	// is the round trip the publisher's DLRR answers gave (ns, 0: none yet).
	xrSSRC uint32
	rtt    atomic.Int64

	// The socket reader's, once DTLS set rx; busy keeps a second reader
	// (the UDP socket's and an ICE-TCP connection's, while the client
	// moves between them) out: its packet is dropped, NACKs recover it.
	busy atomic.Bool
	rx   atomic.Pointer[srtp.Context]
	hdr  rtp.Header
	dec  []byte
	// attrs hands the interceptors hdr, parsed already, under the key they
	// look for it by (rtc.HeaderKey): each would otherwise allocate a map
	// and a header and parse the packet again.
	attrs interceptor.Attributes
	n     int // what the innermost interceptor reader reports
	rtcN  int // the same for RTCP (the rtcp goroutine's)
}

type inSection struct {
	mid, kind string
	// codecs are the offered codecs the server forwards, in the client's
	// order of preference, all in the answer: a sender with a fixed codec
	// (a Pion track, an encoder) sends the one it has. A stream is bound to
	// the codec of its first packet's payload type.
	codecs  []inCodec
	sending bool
	rids    []string
	ssrcs   []uint32
	msid    string
	exts    []extmap
	fb      []string
	tracks  []*InTrack
	// stopped: the server stopped the track (Stop); its SSRCs are not
	// bound again until an offer ends or replaces it.
	stopped bool
}

type inCodec struct {
	offeredCodec
	mime string
}

// has reports whether pt is one of the section's codecs.
func (sec *inSection) has(pt uint8) *inCodec {
	for i := range sec.codecs {
		if sec.codecs[i].pt == pt {
			return &sec.codecs[i]
		}
	}
	return nil
}

// Publisher is a publisher session: a data session that also receives the
// client's audio and video.
type Publisher struct{ *DataSession }

// NewPublisher answers a client's offer for a publisher connection: its audio
// and video sections are received, its data channel section (if any) is a
// data session's. maxMessage bounds the data channel messages.
func (s *Server) NewPublisher(offerSDP string, cfg Ingest, maxMessage uint32, h IngestHandler) (*Publisher, string, error) {
	if err := s.open(); err != nil {
		return nil, "", err
	}
	o, err := parseOffer(offerSDP)
	if err != nil {
		return nil, "", err
	}
	mid, _ := dataSection(o, "") // a publisher may send media alone
	in := &ingestSide{cfg: cfg, h: h, dec: make([]byte, mtu+srtpOverhead), xrSSRC: randomSSRC(), attrs: interceptor.Attributes{}}
	empty := map[uint32]*InTrack{}
	in.streams.Store(&empty)
	v := &Session{s: s, h: h, fpAlg: o.fpAlg, fp: o.fp, in: in,
		data: &dataSide{h: h, rufrag: o.ufrag, mid: mid, maxMessage: maxMessage, offer: offerSDP}}
	v.setClient(o.ufrag, o.pwd)
	if err := in.update(o); err != nil {
		return nil, "", err
	}
	c := newCreds(nil)
	v.creds.Store(c)
	answer, err := v.dataAnswer(o, c)
	if err != nil {
		return nil, "", err
	}
	s.serve(v, dataQueue)
	return &Publisher{&DataSession{v}}, answer, nil
}

// update takes the media sections of an offer: new ones are added with
// their codec, ones the client no longer sends in end their streams.
func (in *ingestSide) update(o *offer) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	var ended []*InTrack
	for i := range o.sections {
		sec := &o.sections[i]
		if sec.kind != "audio" && sec.kind != "video" || sec.mid == "" {
			continue
		}
		cur := in.section(sec.mid)
		if cur == nil {
			if sec.port == 0 && !sec.bundleOnly {
				continue
			}
			cs := in.choose(sec)
			if len(cs) == 0 {
				continue // answered inactive: nothing the server forwards
			}
			if len(in.secs) >= maxStreams {
				return errors.New("offer: too many media sections")
			}
			cur = &inSection{mid: sec.mid, kind: sec.kind, codecs: cs}
			in.secs = append(in.secs, cur)
		} else if !slices.ContainsFunc(sec.codecs, func(c offeredCodec) bool {
			k := cur.has(c.pt)
			return k != nil && strings.EqualFold(c.name, k.name)
		}) {
			return fmt.Errorf("offer: section %q dropped its codecs", sec.mid)
		}
		sending := sec.send && (sec.port != 0 || sec.bundleOnly)
		if !sending || sec.msid != cur.msid {
			// A track that stopped, or was replaced by another (a new
			// msid in the same transceiver), ends its streams.
			ended = append(ended, cur.tracks...)
			cur.tracks, cur.stopped = nil, false
		}
		cur.sending, cur.rids, cur.ssrcs, cur.msid = sending, sec.rids, sec.ssrcs, sec.msid
		cur.exts = cur.exts[:0]
		for _, x := range sec.exts {
			if slices.Contains(in.cfg.Extensions, x.uri) {
				cur.exts = append(cur.exts, x)
			}
		}
		cur.fb = cur.fb[:0]
		for _, fb := range cur.offeredFeedback(sec) {
			if slices.Contains(in.cfg.Feedback, strings.ToLower(fb)) {
				cur.fb = append(cur.fb, strings.ToLower(fb))
			}
		}
	}
	in.drop(ended)
	return nil
}

func (cur *inSection) offeredFeedback(sec *section) []string {
	for _, c := range sec.codecs {
		if c.pt == cur.codecs[0].pt {
			return c.fb
		}
	}
	return nil
}

func (in *ingestSide) section(mid string) *inSection {
	for _, s := range in.secs {
		if s.mid == mid {
			return s
		}
	}
	return nil
}

// choose is the section's codecs: those offered that the server forwards,
// in the client's order (its preference).
func (in *ingestSide) choose(sec *section) []inCodec {
	var out []inCodec
	for i := range sec.codecs {
		c := &sec.codecs[i]
		for _, t := range in.cfg.Codecs {
			if t.Kind != sec.kind {
				continue
			}
			one := section{codecs: []offeredCodec{*c}}
			// Any H.264 profile is forwarded as it is (a camera's SPS names
			// its own); the packetization mode must be one the server takes.
			if m := one.match(t); m != nil && (!strings.EqualFold(c.name, "h264") || h264Mode(c.fmtp) == h264Mode(t.Fmtp)) {
				out = append(out, inCodec{*c, t.MimeType})
				break
			}
		}
	}
	return out
}

// drop ends streams: their queues close (the forwarding goroutines see the
// end), the interceptors forget them, the SSRCs no longer route.
func (in *ingestSide) drop(ts []*InTrack) {
	if len(ts) == 0 {
		return
	}
	old := *in.streams.Load()
	next := make(map[uint32]*InTrack, len(old))
	for ssrc, t := range old {
		if !slices.Contains(ts, t) {
			next[ssrc] = t
		}
	}
	in.streams.Store(&next)
	for _, t := range ts {
		_ = t.rtp.Close()
		_ = t.rtcp.Close()
		in.chain.UnbindRemoteStream(t.info)
	}
}

// close ends every stream and the interceptors.
func (in *ingestSide) close() {
	in.mu.Lock()
	var all []*InTrack
	for _, s := range in.secs {
		all = append(all, s.tracks...)
		s.tracks = nil
	}
	in.drop(all)
	chain := in.chain
	in.mu.Unlock()
	if chain != nil {
		_ = chain.Close()
	}
}

// feedback builds the interceptor chain at the first stream. Under mu.
func (in *ingestSide) feedback(v *Session) (interceptor.Interceptor, error) {
	if in.chain != nil {
		return in.chain, nil
	}
	chain, err := in.cfg.Interceptors()
	if err != nil {
		return nil, err
	}
	chain.BindRTCPWriter(interceptor.RTCPWriterFunc(func(pkts []rtcp.Packet, _ interceptor.Attributes) (int, error) {
		return 0, v.WriteRTCP(in.withRRTR(pkts))
	}))
	r := chain.BindRTCPReader(interceptor.RTCPReaderFunc(func(_ []byte, a interceptor.Attributes) (int, interceptor.Attributes, error) {
		return in.rtcN, a, nil
	}))
	in.rtcpIn.Store(&r)
	in.chain = chain
	return chain, nil
}

// onRTP decrypts one SRTP packet, routes it by SSRC, lets the interceptors
// see it and queues it for its track. It runs on the socket's reader.
func (in *ingestSide) onRTP(v *Session, b []byte) {
	rx := in.rx.Load()
	if rx == nil {
		v.s.drop("srtp", "SRTP before the DTLS handshake finished", v.remoteAddr(), len(b))
		return
	}
	if !in.busy.CompareAndSwap(false, true) {
		v.s.drop("srtp", "SRTP on two paths at once", v.remoteAddr(), len(b))
		return
	}
	defer in.busy.Store(false)
	out, err := rx.DecryptRTP(in.dec[:0], b, &in.hdr)
	if err != nil {
		if msg := err.Error(); strings.HasSuffix(msg, "duplicated packet") {
			// A retransmission of what arrived after all: normal on a
			// lossy or reordering path, counted, not logged.
			metrics.SessionDropped.WithLabelValues("duplicate").Inc()
		} else {
			v.s.drop("srtp", "SRTP: "+msg, v.remoteAddr(), len(b))
		}
		return
	}
	if len(out) > 0 && &out[0] != &in.dec[0] {
		in.dec = out[:cap(out)] // grown: keep the larger buffer
	}
	t := (*in.streams.Load())[in.hdr.SSRC]
	if t == nil {
		if t = in.bind(v, &in.hdr); t == nil {
			v.s.drop("srtp", "RTP of an SSRC no offered section or rid matches", v.remoteAddr(), len(b))
			return
		}
	}
	if in.hdr.PayloadType != t.PT {
		v.s.drop("srtp", "RTP with another payload type than its stream's", v.remoteAddr(), len(b))
		return
	}
	in.n = len(out)
	if rtc.HeaderKey != nil {
		in.attrs[rtc.HeaderKey] = &in.hdr
	}
	_, _, _ = t.reader.Read(out, in.attrs) // NACK generator, receiver reports, TWCC: they keep no error
	if p := t.push.Load(); p != nil {
		(*p)(out)
		return
	}
	t.pushMu.Lock()
	if p := t.push.Load(); p != nil {
		t.pushMu.Unlock()
		(*p)(out)
		return
	}
	_, err = t.rtp.Write(out, nil)
	t.pushMu.Unlock()
	if err != nil {
		v.s.drop("srtp", "track queue full", v.remoteAddr(), len(b))
	}
}

// bind makes the stream of a new SSRC: the section its a=ssrc lines or its
// mid extension name, the encoding its rid extension names.
func (in *ingestSide) bind(v *Session, h *rtp.Header) *InTrack {
	in.mu.Lock()
	defer in.mu.Unlock()
	streams := *in.streams.Load()
	if t := streams[h.SSRC]; t != nil {
		return t
	}
	if len(streams) >= maxStreams {
		return nil
	}
	sec, rid := in.find(h)
	if sec == nil || !sec.sending || sec.stopped {
		return nil
	}
	if len(sec.rids) > 0 && !slices.Contains(sec.rids, rid) || len(sec.rids) == 0 && rid != "" {
		return nil
	}
	for _, t := range sec.tracks {
		if t.rid == rid {
			return nil // the encoding has its SSRC already
		}
	}
	streamID, trackID, _ := strings.Cut(sec.msid, " ")
	if trackID == "" {
		trackID = sec.mid
	}
	c := sec.has(h.PayloadType)
	if c == nil {
		return nil
	}
	t := &InTrack{Mid: sec.mid, rid: rid, Kind: sec.kind, ID: trackID, StreamID: streamID,
		MimeType: c.mime, ClockRate: c.clock, Fmtp: c.fmtp, PT: c.pt,
		ssrc: h.SSRC, v: v, sec: sec, rtp: packetio.NewBuffer(), rtcp: packetio.NewBuffer()}
	if _, ch, ok := strings.Cut(strings.TrimPrefix(c.rtpmap, c.name+"/"), "/"); ok {
		if n, err := strconv.Atoi(ch); err == nil && n > 0 && n < 256 {
			t.Channels = uint16(n)
		}
	}
	t.AudioLevelExt = extIn(sec.exts, "urn:ietf:params:rtp-hdrext:ssrc-audio-level")
	t.DependencyExt = extIn(sec.exts, uriDependency)
	t.rtp.SetLimitCount(inQueue)
	t.rtcp.SetLimitCount(16)
	t.info = &interceptor.StreamInfo{SSRC: h.SSRC, PayloadType: c.pt, MimeType: c.mime,
		ClockRate: c.clock, Channels: t.Channels, SDPFmtpLine: c.fmtp}
	for _, x := range sec.exts {
		t.info.RTPHeaderExtensions = append(t.info.RTPHeaderExtensions, interceptor.RTPHeaderExtension{URI: x.uri, ID: int(x.id)})
	}
	for _, fb := range sec.fb {
		typ, param, _ := strings.Cut(fb, " ")
		t.info.RTCPFeedback = append(t.info.RTCPFeedback, interceptor.RTCPFeedback{Type: typ, Parameter: param})
	}
	chain, err := in.feedback(v)
	if err != nil {
		v.s.log.Error("publisher session: interceptors", "err", err)
		return nil
	}
	t.reader = chain.BindRemoteStream(t.info, interceptor.RTPReaderFunc(func(_ []byte, a interceptor.Attributes) (int, interceptor.Attributes, error) {
		return in.n, a, nil
	}))
	sec.tracks = append(sec.tracks, t)
	next := make(map[uint32]*InTrack, len(streams)+1)
	for k, x := range streams {
		next[k] = x
	}
	next[h.SSRC] = t
	in.streams.Store(&next)
	go func() {
		in.trackMu.Lock()
		defer in.trackMu.Unlock()
		in.h.OnTrack(t)
	}()
	return t
}

// find is the section and rid of a new SSRC.
func (in *ingestSide) find(h *rtp.Header) (*inSection, string) {
	var sec *inSection
	for _, s := range in.secs {
		if slices.Contains(s.ssrcs, h.SSRC) {
			sec = s
			break
		}
	}
	var rid string
	for _, s := range in.secs {
		if sec == nil {
			if id := extIn(s.exts, sdp.SDESMidURI); id != 0 {
				if mid := h.GetExtension(id); len(mid) > 0 {
					sec = in.section(string(mid))
				}
			}
		}
		if id := extIn(s.exts, sdp.SDESRTPStreamIDURI); id != 0 && rid == "" {
			rid = string(h.GetExtension(id))
		}
	}
	if sec == nil {
		// No a=ssrc, no mid extension: the one sending section with this
		// payload type and no simulcast.
		for _, s := range in.secs {
			if s.sending && s.has(h.PayloadType) != nil && len(s.rids) == 0 && len(s.tracks) == 0 {
				if sec != nil {
					return nil, ""
				}
				sec = s
			}
		}
	}
	return sec, rid
}

func extIn(exts []extmap, uri string) uint8 {
	for _, x := range exts {
		if x.uri == uri {
			return x.id
		}
	}
	return 0
}

// onRTCP takes the publisher's RTCP (the rtcp goroutine's): the receiver
// report interceptor reads its sender reports, and each track gets those
// of its SSRC.
func (in *ingestSide) onRTCP(raw []byte, pkts []rtcp.Packet) {
	if r := in.rtcpIn.Load(); r != nil {
		in.rtcN = len(raw)
		_, _, _ = (*r).Read(raw, nil)
	}
	streams := *in.streams.Load()
	for _, p := range pkts {
		switch p := p.(type) {
		case *rtcp.SenderReport:
			if t := streams[p.SSRC]; t != nil {
				_, _ = t.rtcp.Write(raw, nil)
			}
		case *rtcp.ExtendedReport:
			in.onXR(p)
		}
	}
}

// withRRTR adds a receiver reference time (RTCP XR, RFC 3611 4.4) to each
// receiver report the interceptors send: a publisher that answers it with a
// DLRR block (libwebrtc does) gives the server its round-trip time, which
// ICE-lite (no checks of its own) and receiver reports (the publisher sends
// no media report blocks) cannot.
func (in *ingestSide) withRRTR(pkts []rtcp.Packet) []rtcp.Packet {
	for _, p := range pkts {
		if _, ok := p.(*rtcp.ReceiverReport); ok {
			xr := &rtcp.ExtendedReport{SenderSSRC: in.xrSSRC,
				Reports: []rtcp.ReportBlock{&rtcp.ReceiverReferenceTimeReportBlock{NTPTimestamp: ntpTime(time.Now())}}}
			return append(pkts[:len(pkts):len(pkts)], xr)
		}
	}
	return pkts
}

// onXR takes the round-trip time from a DLRR block answering the server's
// RRTR: arrival - LRR - DLRR, in 1/65536 s (RFC 3611 4.5).
func (in *ingestSide) onXR(xr *rtcp.ExtendedReport) {
	for _, b := range xr.Reports {
		d, ok := b.(*rtcp.DLRRReportBlock)
		if !ok {
			continue
		}
		for _, r := range d.Reports {
			if r.SSRC != in.xrSSRC || r.LastRR == 0 {
				continue
			}
			rtt := uint32(ntpTime(time.Now())>>16) - r.LastRR - r.DLRR
			if rtt < 10<<16 { // a forged or stale answer wraps around, or claims over 10 s
				in.rtt.Store(int64(rtt) * int64(time.Second) >> 16)
			}
		}
	}
}

// ntpTime is t as a 64-bit NTP timestamp.
func ntpTime(t time.Time) uint64 {
	const ntpEpochOffset = 2208988800
	s := uint64(t.Unix()) + ntpEpochOffset
	f := uint64(t.Nanosecond()) << 32 / uint64(time.Second)
	return s<<32 | f
}

// RTT is the round-trip time to the client: from its answers to RTCP XR
// receiver reference times, else its SCTP association's smoothed RTT; 0 if
// neither has been measured.
func (p *Publisher) RTT() time.Duration {
	if rtt := p.in.rtt.Load(); rtt > 0 {
		return time.Duration(rtt)
	}
	return p.DataSession.RTT()
}

// ReadRTP blocks for the stream's next packet (decrypted, as sent).
func (t *InTrack) ReadRTP(b []byte) (int, error) {
	n, _, err := t.rtp.Read(b, nil)
	return n, err
}

// PushTo makes the socket's reader hand every further packet of the stream
// to fn, on its own goroutine, once the queue ReadRTP reads is empty (false
// until then); PushTo(nil) queues the packets again.
func (t *InTrack) PushTo(fn func(b []byte)) bool {
	t.pushMu.Lock()
	defer t.pushMu.Unlock()
	if fn == nil {
		t.push.Store(nil)
		return true
	}
	if t.rtp.Count() > 0 {
		return false
	}
	t.push.Store(&fn)
	return true
}

// ReadRTCP blocks for the next RTCP compound packet with a sender report
// of the stream.
func (t *InTrack) ReadRTCP(b []byte) (int, error) {
	n, _, err := t.rtcp.Read(b, nil)
	return n, err
}

// RID is the simulcast encoding's rid, "" for a track sent once.
func (t *InTrack) RID() string { return t.rid }

// SSRC is the stream's SSRC.
func (t *InTrack) SSRC() uint32 { return t.ssrc }

// RequestKeyframe sends the publisher a PLI for the stream.
func (t *InTrack) RequestKeyframe() {
	_ = t.v.WriteRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: t.ssrc}})
}

// Stop ends every stream of the track (all its encodings), as stopping a
// PeerConnection's receiver does.
func (t *InTrack) Stop() {
	in := t.v.in
	in.mu.Lock()
	defer in.mu.Unlock()
	in.drop(t.sec.tracks)
	t.sec.tracks, t.sec.stopped = nil, true
}

// mediaAnswer is a media section of a publisher session's answer: the
// chosen codec, received (or inactive once the client stopped sending),
// with the feedback, extensions and simulcast encodings the server takes.
func (in *ingestSide) mediaAnswer(m *sdp.MediaDescription, mid string) *sdp.MediaDescription {
	in.mu.Lock()
	defer in.mu.Unlock()
	sec := in.section(mid)
	m.MediaName.Formats = m.MediaName.Formats[:0]
	for _, c := range sec.codecs {
		m.MediaName.Formats = append(m.MediaName.Formats, strconv.Itoa(int(c.pt)))
	}
	dir := "inactive"
	if sec.sending {
		dir = "recvonly"
	}
	m = m.WithPropertyAttribute(dir).WithPropertyAttribute("rtcp-mux")
	for _, c := range sec.codecs {
		m = m.WithValueAttribute("rtpmap", fmt.Sprintf("%d %s", c.pt, c.rtpmap))
		if c.fmtp != "" {
			m = m.WithValueAttribute("fmtp", fmt.Sprintf("%d %s", c.pt, c.fmtp))
		}
		for _, fb := range sec.fb {
			m = m.WithValueAttribute("rtcp-fb", fmt.Sprintf("%d %s", c.pt, fb))
		}
	}
	for _, x := range sec.exts {
		m = m.WithValueAttribute("extmap", fmt.Sprintf("%d %s", x.id, x.uri))
	}
	if len(sec.rids) > 0 && sec.sending {
		for _, r := range sec.rids {
			m = m.WithValueAttribute("rid", r+" recv")
		}
		m = m.WithValueAttribute("simulcast", "recv "+strings.Join(sec.rids, ";"))
	}
	return m
}

// accepts reports whether the answer receives the media section mid.
func (in *ingestSide) accepts(mid string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.section(mid) != nil
}

// ingestReplayWindow is the SRTP replay window of a publisher's packets:
// retransmissions come on the media SSRC (rtc.Codecs has no RTX), up to
// the NACK generator's 1024 packets behind the newest.
const ingestReplayWindow = 1024
