package sfu

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/metrics"
)

// DownTrack is one publication as one subscriber receives it: the end of the
// packet path. It is a webrtc.TrackLocal bound to the subscriber's connection, and
// it rewrites each packet's SSRC, payload type, sequence number and timestamp into
// the subscriber's stream, so that the subscriber sees one continuous stream even
// across pauses (and, later, layer switches).
//
// writeRTP runs on the publication's reader goroutine only; RTCP from the
// subscriber is handled by the DownTrack's own goroutine.
type DownTrack struct {
	pub      *Publication
	sub      *Participant
	id       string
	streamID string
	sender   *webrtc.RTPSender

	mu     sync.Mutex // bind state
	writer webrtc.TrackLocalWriter
	ssrc   uint32
	pt     uint8
	clock  uint32
	bound  atomic.Bool

	// Stream rewriting, owned by the reader goroutine except where atomic.
	started   bool
	needSync  atomic.Bool
	syncSeq   uint16
	seqOffset atomic.Uint32 // uint16 value: out = in + offset
	tsOffset  atomic.Uint32
	lastSeq   uint16
	lastTS    uint32
	lastAt    int64
	hdr       rtp.Header

	// For sender reports (read by the participant's report loop).
	lastOutTS atomic.Uint32
	lastOutAt atomic.Int64
	packets   atomic.Uint32
	octets    atomic.Uint32
	srSent    atomic.Uint64 // NTP time of the last SR, for RTT from receiver reports

	rtt         atomic.Int64 // ns
	nacks       atomic.Uint64
	retransmits atomic.Uint64
	plis        atomic.Uint64
	lossFrac    atomic.Uint32 // fraction lost ×256 from the last receiver report

	closed chan struct{}
	once   sync.Once
}

func newDownTrack(pub *Publication, sub *Participant) *DownTrack {
	d := &DownTrack{
		pub:      pub,
		sub:      sub,
		id:       pub.sid,
		streamID: pub.owner.sid,
		closed:   make(chan struct{}),
	}
	d.needSync.Store(true)
	return d
}

// ID, RID, StreamID and Kind implement webrtc.TrackLocal: the subscriber's msid
// is (publisher participant sid, track sid).
func (d *DownTrack) ID() string                { return d.id }
func (d *DownTrack) RID() string               { return "" }
func (d *DownTrack) StreamID() string          { return d.streamID }
func (d *DownTrack) Kind() webrtc.RTPCodecType { return d.pub.kind }
func (d *DownTrack) Publication() *Publication { return d.pub }
func (d *DownTrack) RTT() time.Duration        { return time.Duration(d.rtt.Load()) }

var errNoCodec = errors.New("subscriber does not support the publisher's codec")

// Bind is called by Pion when the subscriber's answer has been applied.
func (d *DownTrack) Bind(ctx webrtc.TrackLocalContext) (webrtc.RTPCodecParameters, error) {
	want := d.pub.codec
	var chosen *webrtc.RTPCodecParameters
	for _, c := range ctx.CodecParameters() {
		if !strings.EqualFold(c.MimeType, want.MimeType) {
			continue
		}
		c := c
		if chosen == nil || fmtpEqual(c.SDPFmtpLine, want.SDPFmtpLine) {
			chosen = &c
		}
	}
	if chosen == nil {
		return webrtc.RTPCodecParameters{}, errNoCodec
	}
	d.mu.Lock()
	d.writer = ctx.WriteStream()
	d.ssrc = uint32(ctx.SSRC())
	d.pt = uint8(chosen.PayloadType)
	d.clock = chosen.ClockRate
	d.mu.Unlock()
	d.bound.Store(true)
	d.pub.RequestKeyframe()
	return *chosen, nil
}

// Unbind is called when the transceiver stops.
func (d *DownTrack) Unbind(webrtc.TrackLocalContext) error {
	d.bound.Store(false)
	return nil
}

func fmtpEqual(a, b string) bool {
	pl := func(s string) string {
		for _, kv := range strings.Split(s, ";") {
			if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k == "profile-level-id" {
				return strings.ToLower(v[:min(4, len(v))]) // profile, ignoring level
			}
		}
		return ""
	}
	return pl(a) == pl(b)
}

// resync makes the next forwarded packet a keyframe that continues the outgoing
// sequence and timestamp where they stopped.
func (d *DownTrack) resync() { d.needSync.Store(true) }

// writeRTP forwards one packet. It returns whether the packet was sent.
func (d *DownTrack) writeRTP(p *Packet) bool {
	if !d.bound.Load() {
		return false
	}
	if d.needSync.Load() {
		if d.pub.kind == webrtc.RTPCodecTypeVideo && !p.Keyframe {
			return false
		}
		d.sync(p)
	} else if int16(p.Header.SequenceNumber-d.syncSeq) < 0 {
		return false // older than where this subscriber's stream started
	}
	h := &d.hdr
	h.Version = 2
	h.Padding = p.Header.Padding
	h.PaddingSize = p.Header.PaddingSize
	h.Marker = p.Header.Marker
	h.PayloadType = d.pt
	h.SequenceNumber = p.Header.SequenceNumber + uint16(d.seqOffset.Load())
	h.Timestamp = p.Header.Timestamp + d.tsOffset.Load()
	h.SSRC = d.ssrc
	h.CSRC = h.CSRC[:0]
	h.Extension = false
	h.Extensions = h.Extensions[:0]
	if _, err := d.writer.WriteRTP(h, p.Payload); err != nil {
		return false
	}
	if int16(h.SequenceNumber-d.lastSeq) > 0 || !d.started {
		d.lastSeq = h.SequenceNumber
		d.lastTS = h.Timestamp
		d.lastAt = p.Arrival
		d.lastOutTS.Store(h.Timestamp)
		d.lastOutAt.Store(p.Arrival)
	}
	d.started = true
	d.packets.Add(1)
	d.octets.Add(uint32(len(p.Payload)))
	return true
}

// sync sets the offsets so that p follows the last packet sent, or keeps the
// publisher's numbering for the first packet.
func (d *DownTrack) sync(p *Packet) {
	d.needSync.Store(false)
	d.syncSeq = p.Header.SequenceNumber
	if !d.started {
		return
	}
	d.seqOffset.Store(uint32(d.lastSeq + 1 - p.Header.SequenceNumber))
	elapsed := uint32(uint64(max(p.Arrival-d.lastAt, 1)) * uint64(d.clock) / uint64(time.Second))
	d.tsOffset.Store(d.lastTS + max(elapsed, 1) - p.Header.Timestamp)
}

// readRTCP handles the subscriber's feedback: keyframe requests are aggregated at
// the publication, NACKs are answered from the publication's packet cache.
func (d *DownTrack) readRTCP() {
	buf := make([]byte, maxPacket)
	rtx := make([]byte, maxPacket)
	var hdr rtp.Header
	for {
		n, _, err := d.sender.Read(buf)
		if err != nil {
			return
		}
		pkts, err := rtcp.Unmarshal(buf[:n])
		if err != nil {
			continue
		}
		for _, pkt := range pkts {
			switch p := pkt.(type) {
			case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
				d.plis.Add(1)
				metrics.PLIsIn.Inc()
				d.pub.RequestKeyframe()
			case *rtcp.TransportLayerNack:
				for _, pair := range p.Nacks {
					pair.Range(func(seq uint16) bool {
						d.retransmit(seq, rtx, &hdr)
						return true
					})
				}
			case *rtcp.ReceiverReport:
				d.onReports(p.Reports)
			case *rtcp.SenderReport:
				d.onReports(p.Reports)
			}
		}
	}
}

func (d *DownTrack) retransmit(outSeq uint16, buf []byte, hdr *rtp.Header) {
	d.nacks.Add(1)
	metrics.NACKsIn.Inc()
	inSeq := outSeq - uint16(d.seqOffset.Load())
	if int16(inSeq-d.syncSeq) < 0 {
		return
	}
	n := d.pub.cache.Get(inSeq, buf)
	if n == 0 {
		metrics.CacheMiss.Inc()
		return
	}
	metrics.CacheHit.Inc()
	hn, err := hdr.Unmarshal(buf[:n])
	if err != nil {
		return
	}
	end := n
	hdr.PaddingSize = 0
	if hdr.Padding {
		pad := int(buf[n-1])
		if pad == 0 || hn+pad > n {
			return
		}
		end -= pad
		hdr.PaddingSize = byte(pad)
	}
	d.mu.Lock()
	w, ssrc, pt := d.writer, d.ssrc, d.pt
	d.mu.Unlock()
	if w == nil {
		return
	}
	hdr.SSRC = ssrc
	hdr.PayloadType = pt
	hdr.SequenceNumber = outSeq
	hdr.Timestamp += d.tsOffset.Load()
	hdr.Extension = false
	hdr.Extensions = hdr.Extensions[:0]
	hdr.CSRC = hdr.CSRC[:0]
	if _, err := w.WriteRTP(hdr, buf[hn:end]); err == nil {
		d.retransmits.Add(1)
	}
}

func (d *DownTrack) onReports(reports []rtcp.ReceptionReport) {
	for _, r := range reports {
		if r.SSRC != d.ssrc {
			continue
		}
		d.lossFrac.Store(uint32(r.FractionLost))
		if r.LastSenderReport == 0 {
			continue
		}
		// RTT = arrival − LSR − DLSR, in 1/65536 s (RFC 3550 §6.4.1).
		nowMid := uint32(ntpTime(time.Now()) >> 16)
		rtt := nowMid - r.LastSenderReport - r.Delay
		if rtt < 1<<31 {
			ns := int64(rtt) * int64(time.Second) >> 16
			d.rtt.Store(ns)
			metrics.RTT.Observe(float64(ns) / 1e9)
		}
	}
}

// senderReport describes what this DownTrack sent, in the publisher's media clock
// shifted into the subscriber's stream, for audio/video sync at the receiver.
func (d *DownTrack) senderReport(wall time.Time) *rtcp.SenderReport {
	if !d.bound.Load() || !d.started {
		return nil
	}
	n := now()
	var rtpTS uint32
	if at := d.pub.srAt.Load(); at != 0 {
		rtpTS = d.pub.srRTP.Load() + d.tsOffset.Load() + uint32(uint64(n-at)*uint64(d.clock)/uint64(time.Second))
	} else {
		rtpTS = d.lastOutTS.Load() + uint32(uint64(max(n-d.lastOutAt.Load(), 0))*uint64(d.clock)/uint64(time.Second))
	}
	ntp := ntpTime(wall)
	d.srSent.Store(ntp)
	return &rtcp.SenderReport{
		SSRC:        d.ssrc,
		NTPTime:     ntp,
		RTPTime:     rtpTS,
		PacketCount: d.packets.Load(),
		OctetCount:  d.octets.Load(),
	}
}

func ntpTime(t time.Time) uint64 {
	const ntpEpochOffset = 2208988800
	s := uint64(t.Unix()) + ntpEpochOffset
	f := uint64(t.Nanosecond()) << 32 / uint64(time.Second)
	return s<<32 | f
}

func (d *DownTrack) close() {
	d.once.Do(func() {
		close(d.closed)
		d.bound.Store(false)
	})
}
