package egress

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/sfu"
)

// outQueue is how many packets of one track may wait for the sender; beyond
// it the sink drops (ffmpeg sees loss, as over a congested network).
const outQueue = 1024

// srEvery is how often a sender report maps the track's RTP clock onto the
// wall clock: ffmpeg aligns audio and video by them.
const srEvery = time.Second

// rtpOut sends one publication's packets to a local UDP port (ffmpeg's input),
// as one stream: one SSRC, continuous sequence numbers and timestamps across
// simulcast layer switches, with sender reports on the wall clock.
type rtpOut struct {
	pub   *sfu.Publication
	video bool
	pt    uint8
	ssrc  uint32
	rate  int64
	rtp   *net.UDPConn
	rtcp  *net.UDPConn

	q      chan *pkt
	pool   sync.Pool
	choice sfu.LayerChoice
	sent   atomic.Int64 // packets sent to ffmpeg

	// Owned by run.
	cur        int8
	started    bool
	base       time.Time // wall clock of the first packet sent
	ts0        uint32    // its output timestamp
	seqOff     uint16
	tsOff      uint32
	lastSeq    uint16
	lastKeyReq time.Time
	lastSR     time.Time
	out        [1500 + 12]byte
}

func newRTPOut(pub *sfu.Publication, video bool, pt uint8, ssrc uint32, port int) (*rtpOut, error) {
	dst := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	c, err := net.DialUDP("udp4", nil, dst)
	if err != nil {
		return nil, err
	}
	rc, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: dst.IP, Port: port + 1})
	if err != nil {
		c.Close()
		return nil, err
	}
	o := &rtpOut{pub: pub, video: video, pt: pt, ssrc: ssrc, rate: int64(pub.Codec().ClockRate), rtp: c, rtcp: rc,
		q: make(chan *pkt, outQueue), cur: -1}
	if o.rate == 0 {
		o.rate = 90000
	}
	o.pool.New = func() any { return new(pkt) }
	return o, nil
}

// WriteRTP runs on the forwarding goroutine: pick the layer, copy, queue,
// never block.
func (o *rtpOut) WriteRTP(p *sfu.Packet) {
	if len(p.Payload) > 1500 || o.video && !o.choice.Take(p) {
		return
	}
	// Padding (bandwidth probes) holds a sequence number and nothing ffmpeg
	// can use: it goes in to be numbered out, so ffmpeg sees no hole.
	o.queue(p)
}

func (o *rtpOut) queue(p *sfu.Packet) {
	q := o.pool.Get().(*pkt)
	q.layer, q.key, q.seq, q.ts, q.marker = p.Layer, p.Keyframe, p.Header.SequenceNumber, p.Header.Timestamp, p.Header.Marker
	q.arrival = time.Now()
	q.n = copy(q.buf[:], p.Payload)
	select {
	case o.q <- q:
	default:
		o.pool.Put(q)
	}
}

// run sends until done; keyEvery > 0 asks the publisher for a keyframe that
// often (RTMP services want a GOP of a few seconds, a WebRTC publisher sends
// one only when asked).
func (o *rtpOut) run(done <-chan struct{}, keyEvery time.Duration) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var lastKey time.Time
	for {
		select {
		case <-done:
			return
		case q := <-o.q:
			o.send(q)
			if q.key {
				lastKey = q.arrival
			}
			o.pool.Put(q)
		case now := <-tick.C:
			if o.started && now.Sub(o.lastSR) >= srEvery {
				o.senderReport(now)
			}
			if keyEvery > 0 && o.video && now.Sub(lastKey) > keyEvery {
				o.requestKey(o.cur)
			}
		}
	}
}

func (o *rtpOut) requestKey(layer int8) {
	if time.Since(o.lastKeyReq) < time.Second {
		return
	}
	o.lastKeyReq = time.Now()
	if layer > 0 {
		o.pub.RequestLayerKeyframe(layer)
	} else {
		o.pub.RequestKeyframe()
	}
}

func (o *rtpOut) send(q *pkt) {
	if q.n == 0 {
		if q.layer == o.cur {
			o.seqOff-- // the packets after it take its number
		}
		return
	}
	if q.layer != o.cur {
		// A new layer (or the first): it starts at a keyframe, its clock
		// continues from the wall-clock time since the first packet sent.
		if o.video && !q.key {
			o.requestKey(q.layer)
			return
		}
		if !o.started {
			o.started, o.base, o.ts0 = true, q.arrival, q.ts
			o.seqOff, o.tsOff = 0, 0
			o.senderReport(q.arrival)
		} else {
			want := o.ts0 + uint32(int64(q.arrival.Sub(o.base))*o.rate/int64(time.Second))
			o.tsOff = want - q.ts
			o.seqOff = o.lastSeq + 1 - q.seq
		}
		o.cur = q.layer
	}
	h := rtp.Header{Version: 2, PayloadType: o.pt, SequenceNumber: q.seq + o.seqOff, Timestamp: q.ts + o.tsOff,
		SSRC: o.ssrc, Marker: q.marker}
	n, err := h.MarshalTo(o.out[:])
	if err != nil {
		return
	}
	n += copy(o.out[n:], q.buf[:q.n])
	if _, err := o.rtp.Write(o.out[:n]); err == nil {
		o.sent.Add(1)
	}
	if int16(h.SequenceNumber-o.lastSeq) > 0 || o.sent.Load() == 1 {
		o.lastSeq = h.SequenceNumber
	}
}

// senderReport maps the RTP clock onto the wall clock at now.
func (o *rtpOut) senderReport(now time.Time) {
	o.lastSR = now
	ts := o.ts0 + uint32(int64(now.Sub(o.base))*o.rate/int64(time.Second))
	sr := rtcp.SenderReport{SSRC: o.ssrc, NTPTime: ntpTime(now), RTPTime: ts}
	if b, err := sr.Marshal(); err == nil {
		_, _ = o.rtcp.Write(b)
	}
}

func (o *rtpOut) close() {
	o.rtp.Close()
	o.rtcp.Close()
}

// ntpTime is t in NTP's 32.32 fixed point since 1900.
func ntpTime(t time.Time) uint64 {
	const ntpEpochOffset = 2208988800
	ns := t.UnixNano()
	sec := uint64(ns/1e9) + ntpEpochOffset
	frac := (uint64(ns%1e9) << 32) / 1e9
	return sec<<32 | frac
}
