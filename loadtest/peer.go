package loadtest

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
)

// Peer is one simulated participant: one or more peer connections, the streams
// it receives and the setup times it went through.
type Peer struct {
	ID   string
	Role string
	tot  *Counters

	start time.Time

	iceAt, dtlsAt, rtpAt, frameAt atomic.Int64 // ns after start; 0 = not yet
	failed                        atomic.Value // string
	up                            atomic.Bool  // counted as connected
	pairSeen                      atomic.Bool

	mu      sync.Mutex
	streams []*streamRx
	closers []func()

	nacksRecv, plisRecv atomic.Uint64
	inline              map[uint32]*inlineStream

	// Events, when set, sees state changes (the controller forwards them).
	Events func(ev string, fields map[string]any)
}

// NewPeer starts a peer's clock.
func NewPeer(id, role string, tot *Counters) *Peer {
	return &Peer{ID: id, Role: role, tot: tot, start: time.Now()}
}

func (p *Peer) mark(v *atomic.Int64) bool {
	return v.CompareAndSwap(0, max(int64(time.Since(p.start)), 1))
}

func (p *Peer) emit(ev string, f map[string]any) {
	if e := p.Events; e != nil {
		e(ev, f)
	}
}

// Fail records the first error of the peer.
func (p *Peer) Fail(err error) {
	if err != nil {
		p.failed.CompareAndSwap(nil, err.Error())
	}
}

// Failed is the peer's first error, "" if none.
func (p *Peer) Failed() string {
	s, _ := p.failed.Load().(string)
	return s
}

// Up is whether the peer's media connection completed DTLS.
func (p *Peer) Up() bool { return p.up.Load() }

// OnClose adds a cleanup step, run in reverse order by Close.
func (p *Peer) OnClose(f func()) {
	p.mu.Lock()
	p.closers = append(p.closers, f)
	p.mu.Unlock()
}

// Close tears the peer down.
func (p *Peer) Close() {
	p.mu.Lock()
	cs := p.closers
	p.closers = nil
	p.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// Watch times pc's ICE and DTLS (connection state) and receives its tracks.
// media says whether this connection is the one whose setup times count.
func (p *Peer) Watch(pc *webrtc.PeerConnection, media bool) {
	pc.OnICEConnectionStateChange(func(s webrtc.ICEConnectionState) {
		p.emit("ice-state", map[string]any{"state": s.String()})
		if s == webrtc.ICEConnectionStateConnected && media && p.pairSeen.CompareAndSwap(false, true) {
			p.mark(&p.iceAt)
			if pair, err := pc.SCTP().Transport().ICETransport().GetSelectedCandidatePair(); err == nil && pair != nil {
				p.emit("selected-pair", map[string]any{"local": pair.Local.String(), "remote": pair.Remote.String()})
			}
		}
	})
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		switch s {
		case webrtc.PeerConnectionStateConnected:
			if media {
				p.mark(&p.iceAt)
				p.mark(&p.dtlsAt)
				if p.up.CompareAndSwap(false, true) {
					p.emit("webrtcup", nil)
				}
			}
		case webrtc.PeerConnectionStateFailed:
			p.Fail(errFailed)
			p.up.Store(false)
			p.emit("hangup", map[string]any{"reason": "ice/dtls failed"})
		case webrtc.PeerConnectionStateClosed:
			p.up.Store(false)
		}
	})
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { p.Receive(tr, pc) })
}

type peerError string

func (e peerError) Error() string { return string(e) }

const errFailed = peerError("peer connection failed")

// Receive counts track's packets until it ends.
func (p *Peer) Receive(tr *webrtc.TrackRemote, pc *webrtc.PeerConnection) {
	if p.adoptInline(tr, pc) {
		return
	}
	st := &streamRx{kind: tr.Kind().String(), clock: float64(tr.Codec().ClockRate), start: p.start}
	if st.clock == 0 {
		st.clock = 90000
	}
	p.mu.Lock()
	p.streams = append(p.streams, st)
	p.mu.Unlock()
	go func() {
		receive(tr, pc, st, p.tot, p.onFirst)
		st.mu.Lock()
		st.ended = true
		st.mu.Unlock()
	}()
}

// ReadSenderRTCP counts the NACKs and keyframe requests a server sends about a
// published track, without unmarshalling into objects.
// A keyframe request makes src (when not nil) send a keyframe next, as an
// encoder would.
func (p *Peer) ReadSenderRTCP(s *webrtc.RTPSender, src *Source) {
	go func() {
		buf := make([]byte, 1500)
		for {
			n, _, err := s.Read(buf)
			if err != nil {
				return
			}
			if p.countRTCP(buf[:n]) && src != nil {
				src.RequestKeyframe()
			}
		}
	}()
}

// countRTCP counts NACKed packets and keyframe requests in a compound packet
// and says whether it held a keyframe request.
func (p *Peer) countRTCP(b []byte) (key bool) {
	for len(b) >= 4 {
		fmt := b[0] & 0x1f
		pt := b[1]
		l := (int(binary.BigEndian.Uint16(b[2:])) + 1) * 4
		if l > len(b) {
			return key
		}
		switch {
		case pt == 205 && fmt == 1: // generic NACK: items of PID and bitmask after 12 bytes
			var k uint64
			for i := 12; i+4 <= l; i += 4 {
				k += 1 + uint64(bits.OnesCount16(binary.BigEndian.Uint16(b[i+2:])))
			}
			p.nacksRecv.Add(k)
			p.tot.NACKsRecv.Add(k)
		case pt == 206 && (fmt == 1 || fmt == 4): // PLI, FIR
			p.plisRecv.Add(1)
			p.tot.PLIsRecv.Add(1)
			key = true
		}
		b = b[l:]
	}
	return key
}

// PeerStats is one peer's record in the results.
type PeerStats struct {
	ID           string        `json:"id"`
	Role         string        `json:"role"`
	Error        string        `json:"error,omitempty"`
	ICEMs        float64       `json:"iceConnectedMs"`
	DTLSMs       float64       `json:"dtlsConnectedMs"`
	FirstRTPMs   float64       `json:"firstRtpMs"`
	FirstFrameMs float64       `json:"firstFrameMs"`
	NACKsRecv    uint64        `json:"nacksReceived"`
	PLIsRecv     uint64        `json:"plisReceived"`
	Streams      []StreamStats `json:"streams"`
}

// Stats snapshots the peer.
func (p *Peer) Stats() PeerStats {
	msOf := func(v *atomic.Int64) float64 { return float64(v.Load()) / 1e6 }
	s := PeerStats{ID: p.ID, Role: p.Role, Error: p.Failed(), ICEMs: msOf(&p.iceAt), DTLSMs: msOf(&p.dtlsAt),
		FirstRTPMs: msOf(&p.rtpAt), FirstFrameMs: msOf(&p.frameAt), NACKsRecv: p.nacksRecv.Load(), PLIsRecv: p.plisRecv.Load()}
	p.mu.Lock()
	sts := append([]*streamRx(nil), p.streams...)
	p.mu.Unlock()
	video := 0.0
	for _, st := range sts {
		ss := st.snapshot()
		s.Streams = append(s.Streams, ss)
		if ss.Kind == "video" && ss.FirstFrameMs > 0 && (video == 0 || ss.FirstFrameMs < video) {
			video = ss.FirstFrameMs
		}
	}
	// A peer that receives video has its first frame when a video frame is
	// complete: servers differ in whether they forward Opus's marker bit
	// (LiveKit clears it), so an audio packet is no frame to compare.
	if video > 0 {
		s.FirstFrameMs = video
	}
	// A stream's times are its packets' arrival (a batch's, when read with
	// recvmmsg), which can precede the marks taken while processing them;
	// each step was done by the time the next one's packet arrived.
	s.FirstRTPMs = earlier(s.FirstRTPMs, s.FirstFrameMs)
	s.DTLSMs = earlier(s.DTLSMs, s.FirstRTPMs)
	s.ICEMs = earlier(s.ICEMs, s.DTLSMs)
	return s
}

func (p *Peer) countParsed(pkts []rtcp.Packet, src *Source) {
	for _, k := range pkts {
		switch v := k.(type) {
		case *rtcp.TransportLayerNack:
			var n uint64
			for _, pair := range v.Nacks {
				n += uint64(len(pair.PacketList()))
			}
			p.nacksRecv.Add(n)
			p.tot.NACKsRecv.Add(n)
		case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
			p.plisRecv.Add(1)
			p.tot.PLIsRecv.Add(1)
			if src != nil {
				src.RequestKeyframe()
			}
		}
	}
}

// earlier is the earlier of two times, 0 meaning not yet.
func earlier(a, b float64) float64 {
	if a == 0 || b > 0 && b < a {
		return b
	}
	return a
}
