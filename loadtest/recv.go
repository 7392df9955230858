package loadtest

import (
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
)

// DelayHist is a log-scale histogram of one-way delays shared by every receiver
// (atomic adds, no lock on the packet path): bucket i holds delays below
// 50 µs × 1.25^i, up to about 70 s.
type DelayHist struct {
	b [64]atomic.Uint64
}

const histBase = 50 * time.Microsecond

func histBucket(d time.Duration) int {
	if d < histBase {
		return 0
	}
	i := int(math.Log(float64(d)/float64(histBase))/math.Log(1.25)) + 1
	return min(i, 63)
}

func histUpper(i int) time.Duration {
	return time.Duration(float64(histBase) * math.Pow(1.25, float64(i)))
}

// Add records one delay.
func (h *DelayHist) Add(d time.Duration) { h.b[histBucket(d)].Add(1) }

// Count is the number of delays recorded.
func (h *DelayHist) Count() uint64 {
	var n uint64
	for i := range h.b {
		n += h.b[i].Load()
	}
	return n
}

// Quantile is the upper bound of the bucket holding quantile q (0..1).
func (h *DelayHist) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(n)))
	var c uint64
	for i := range h.b {
		c += h.b[i].Load()
		if c >= want && c > 0 {
			return histUpper(i)
		}
	}
	return histUpper(63)
}

// Counters are totals over every peer of a run, read by the progress line.
type Counters struct {
	Packets   atomic.Uint64
	Bytes     atomic.Uint64
	Lost      atomic.Int64
	NACKsSent atomic.Uint64
	NACKsRecv atomic.Uint64
	PLIsRecv  atomic.Uint64
	Delay     DelayHist // the whole run
	// SteadyDelay holds the delays of the steady window only (while Steady
	// is set): joins, handshakes and keyframe bursts of the ramp stay out.
	SteadyDelay DelayHist
	Steady      atomic.Bool
}

// StreamStats is what one receiver measured on one incoming stream.
type StreamStats struct {
	Kind         string  `json:"kind"`
	Packets      uint64  `json:"packets"`
	Bytes        uint64  `json:"bytes"`
	Lost         int64   `json:"lost"`
	NACKsSent    uint64  `json:"nacksSent"`
	JitterMs     float64 `json:"jitterMs"`
	DelayMeanMs  float64 `json:"delayMeanMs,omitempty"`
	DelayMaxMs   float64 `json:"delayMaxMs,omitempty"`
	FirstRTPMs   float64 `json:"firstRtpMs"`
	FirstFrameMs float64 `json:"firstFrameMs"`
	BitrateKbps  float64 `json:"bitrateKbps"`
}

// streamRx counts one incoming RTP stream from its headers. Only its reader
// goroutine writes the plain fields; snapshot takes mu.
type streamRx struct {
	// What every packet touches first, in as few cache lines as it fits (a
	// thousand lean viewers each see a packet every few milliseconds: their
	// state is cold by then).
	mu        sync.Mutex
	maxSeq    uint32 // extended
	started   bool
	packets   uint64
	bytes     uint64
	clock     float64
	jitter    float64 // in RTP timestamp units
	lastTrans float64
	lastRx    time.Time
	delaySum  time.Duration
	delayN    uint64
	delayMax  time.Duration

	kind     string
	start    time.Time // when the peer began (for first-RTP times)
	firstRTP time.Time
	firstFrm time.Time
	baseSeq  uint32
	nacks    uint64
	ended    bool
	_        [47]byte // 256 bytes: an allocation that starts a cache line
}

// nacker sends one NACK per gap, reusing its packet (no allocation unless a
// gap is seen and Pion's RTCP marshal allocates).
type nacker struct {
	pkts [1]rtcp.Packet
	nack *rtcp.TransportLayerNack
}

func newNacker() *nacker {
	n := &nacker{nack: &rtcp.TransportLayerNack{Nacks: make([]rtcp.NackPair, 1)}}
	n.pkts[0] = n.nack
	return n
}

// send NACKs up to 17 packets from gapFrom (a PID and its bitmask).
func (n *nacker) send(pc *webrtc.PeerConnection, ssrc, gapFrom, gapN uint32) {
	if pc == nil {
		return
	}
	pair := rtcp.NackPair{PacketID: uint16(gapFrom)}
	for i := uint32(1); i < min(gapN, 17); i++ {
		pair.LostPackets |= 1 << (i - 1)
	}
	n.nack.MediaSSRC = ssrc
	n.nack.Nacks[0] = pair
	_ = pc.WriteRTCP(n.pkts[:])
}

// receive reads track until it ends, counting into st and tot. It sends a NACK
// for each gap it sees (once), as a browser would, so that a server's
// retransmission path is exercised and NACKs can be counted; it never decodes.
func receive(tr *webrtc.TrackRemote, pc *webrtc.PeerConnection, st *streamRx, tot *Counters, onFirst func(frame bool)) {
	buf := make([]byte, 1500)
	nk := newNacker()
	for {
		n, _, err := tr.Read(buf)
		if err != nil {
			return
		}
		if gapFrom, gapN := st.onPacket(buf[:n], tot, onFirst); gapN > 0 {
			nk.send(pc, uint32(tr.SSRC()), gapFrom, gapN)
		}
	}
}

// onPacket counts one RTP packet and returns the gap before it, if any.
func (st *streamRx) onPacket(b []byte, tot *Counters, onFirst func(frame bool)) (gapFrom, gapN uint32) {
	return st.onPacketAt(b, tot, onFirst, time.Now())
}

// onPacketAt is onPacket with the arrival time (a batch of datagrams read
// at once shares one).
func (st *streamRx) onPacketAt(b []byte, tot *Counters, onFirst func(frame bool), now time.Time) (gapFrom, gapN uint32) {
	n := len(b)
	if n < 12 {
		return 0, 0
	}
	seq := uint32(binary.BigEndian.Uint16(b[2:]))
	ts := binary.BigEndian.Uint32(b[4:])
	marker := b[1]&0x80 != 0
	hl := 12 + 4*int(b[0]&0x0f)
	if b[0]&0x10 != 0 && n >= hl+4 {
		hl += 4 + 4*int(binary.BigEndian.Uint16(b[hl+2:]))
	}
	end := n
	if b[0]&0x20 != 0 {
		end -= int(b[n-1])
	}

	st.mu.Lock()
	if !st.started {
		st.started = true
		st.baseSeq, st.maxSeq = seq, seq
		st.firstRTP = now
		if onFirst != nil {
			onFirst(false)
		}
	} else {
		// Extend the 16-bit sequence number around the highest seen.
		ext := st.maxSeq&^0xffff | seq
		if d := int32(ext - st.maxSeq); d < -0x8000 {
			ext += 0x10000
		} else if d > 0x8000 {
			ext -= 0x10000
		}
		if ext > st.maxSeq {
			if ext > st.maxSeq+1 {
				gapFrom, gapN = st.maxSeq+1, ext-st.maxSeq-1
			}
			st.maxSeq = ext
		}
	}
	if marker && st.firstFrm.IsZero() {
		st.firstFrm = now
		if onFirst != nil {
			onFirst(true)
		}
	}
	st.packets++
	st.bytes += uint64(n)
	// RFC 3550 interarrival jitter, in timestamp units.
	arr := float64(now.UnixNano()) * st.clock / 1e9
	transit := arr - float64(ts)
	if st.packets > 1 {
		d := math.Abs(transit - st.lastTrans)
		if d < st.clock*10 { // a source loop or restart is not jitter
			st.jitter += (d - st.jitter) / 16
		}
	}
	st.lastTrans = transit
	st.lastRx = now
	if end > hl {
		if _, sent, ok := ReadStamp(b[hl:end]); ok {
			d := time.Duration(now.UnixNano() - sent)
			if d >= 0 {
				st.delaySum += d
				st.delayN++
				st.delayMax = max(st.delayMax, d)
				tot.Delay.Add(d)
				if tot.Steady.Load() {
					tot.SteadyDelay.Add(d)
				}
			}
		}
	}
	if gapN > 0 {
		st.nacks += uint64(min(gapN, 17))
	}
	st.mu.Unlock()

	tot.Packets.Add(1)
	tot.Bytes.Add(uint64(n))
	if gapN > 0 {
		tot.Lost.Add(int64(gapN))
		tot.NACKsSent.Add(uint64(min(gapN, 17)))
	}
	return gapFrom, gapN
}

func (st *streamRx) snapshot() StreamStats {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := StreamStats{Kind: st.kind, Packets: st.packets, Bytes: st.bytes, NACKsSent: st.nacks}
	if st.started {
		expected := int64(st.maxSeq-st.baseSeq) + 1
		s.Lost = max(expected-int64(st.packets), 0)
		s.FirstRTPMs = ms(st.firstRTP.Sub(st.start))
		if el := st.lastRx.Sub(st.firstRTP).Seconds(); el > 0 {
			s.BitrateKbps = float64(st.bytes) * 8 / el / 1000
		}
	}
	if !st.firstFrm.IsZero() {
		s.FirstFrameMs = ms(st.firstFrm.Sub(st.start))
	}
	if st.clock > 0 {
		s.JitterMs = st.jitter / st.clock * 1000
	}
	if st.delayN > 0 {
		s.DelayMeanMs = ms(st.delaySum / time.Duration(st.delayN))
		s.DelayMaxMs = ms(st.delayMax)
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
