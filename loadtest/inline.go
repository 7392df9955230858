package loadtest

import (
	"sync"
	"sync/atomic"

	"github.com/pion/transport/v4/packetio"
	"github.com/pion/webrtc/v4"
)

// inlineStream is the receive buffer Pion's SRTP session writes a stream's
// decrypted RTP into. Instead of queuing packets for a reader goroutine (a
// copy, a lock and a wake-up per packet, then Pion's receiver and track read
// path), it counts each packet in the session's own goroutine. Only the first
// packet is queued: Pion peeks at it to learn the payload type before it fires
// OnTrack.
type inlineStream struct {
	peer   *Peer
	ssrc   uint32
	st     *streamRx
	inner  *packetio.Buffer
	handed atomic.Bool
	pc     atomic.Pointer[webrtc.PeerConnection]
	nk     *nacker
	nkMu   sync.Mutex
}

func (p *Peer) newInlineStream(ssrc uint32) *inlineStream {
	s := &inlineStream{peer: p, ssrc: ssrc, st: &streamRx{kind: "unknown", clock: 90000, start: p.start},
		inner: packetio.NewBuffer(), nk: newNacker()}
	s.inner.SetLimitSize(4 << 10)
	p.mu.Lock()
	if p.inline == nil {
		p.inline = map[uint32]*inlineStream{}
	}
	p.inline[ssrc] = s
	p.streams = append(p.streams, s.st)
	p.mu.Unlock()
	return s
}

func (s *inlineStream) Write(b []byte) (int, error) {
	if !s.handed.Load() {
		s.handed.Store(true)
		_, _ = s.inner.Write(b)
	}
	p := s.peer
	if gapFrom, gapN := s.st.onPacket(b, p.tot, p.onFirst); gapN > 0 {
		s.nkMu.Lock()
		s.nk.send(s.pc.Load(), s.ssrc, gapFrom, gapN)
		s.nkMu.Unlock()
	}
	return len(b), nil
}

func (s *inlineStream) Read(b []byte) (int, error) { return s.inner.Read(b) }

func (s *inlineStream) Close() error {
	s.st.mu.Lock()
	s.st.ended = true
	s.st.mu.Unlock()
	return s.inner.Close()
}

// onFirst marks the peer's first packet and first complete frame.
// Media decrypted means ICE and DTLS are done, whatever Pion's state
// callbacks (which run later, on their own goroutine) have said so far.
func (p *Peer) onFirst(frame bool) {
	p.mark(&p.iceAt)
	p.mark(&p.dtlsAt)
	if frame {
		p.mark(&p.frameAt)
	} else {
		p.mark(&p.rtpAt)
	}
}

// adoptInline is OnTrack in inline mode: the stream is already being counted;
// it learns its kind and clock rate and the connection to send NACKs on.
func (p *Peer) adoptInline(tr *webrtc.TrackRemote, pc *webrtc.PeerConnection) bool {
	p.mu.Lock()
	s := p.inline[uint32(tr.SSRC())]
	p.mu.Unlock()
	if s == nil {
		return false
	}
	s.st.mu.Lock()
	s.st.kind = tr.Kind().String()
	if c := tr.Codec().ClockRate; c > 0 && float64(c) != s.st.clock {
		s.st.clock = float64(c)
		s.st.jitter = 0
	}
	s.st.mu.Unlock()
	s.pc.Store(pc)
	return true
}
