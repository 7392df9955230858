package sfu

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/rtc"
)

func limitedManager(t *testing.T, maxTracks int) *Manager {
	t.Helper()
	cfg := config.Default()
	cfg.Loopback = true
	cfg.RTC.UDPPort, cfg.RTC.TCPPort = 0, -1
	cfg.Limits.MaxTracksPerParticipant = maxTracks
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := rtc.NewEngine(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	m := NewManager(cfg, e, log)
	t.Cleanup(m.Shutdown)
	return m
}

func claims(identity string, g auth.Grants) *auth.Claims {
	return &auth.Claims{Room: "r", Grants: g, RegisteredClaims: jwt.RegisteredClaims{Subject: identity}}
}

// offerOf is a Pion client's publisher offer with n video sections.
func offerOf(t *testing.T, pc *webrtc.PeerConnection, n int) string {
	t.Helper()
	for len(pc.GetTransceivers()) < n {
		if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly}); err != nil {
			t.Fatal(err)
		}
	}
	o, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	return o.SDP
}

func clientPC(t *testing.T) *webrtc.PeerConnection {
	t.Helper()
	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	return pc
}

// TestOfferSectionLimit: an offer with more media sections than the track
// limit and a small allowance is refused with too_many_tracks before Pion
// makes a transceiver of each, on every way an offer comes in (WHIP, WHEP,
// a room participant's renegotiation); one within the allowance is answered.
func TestOfferSectionLimit(t *testing.T) {
	m := limitedManager(t, 2)
	max := 2 + sectionAllowance
	pub := claims("pub", auth.Grants{Publish: true})

	pc := clientPC(t)
	p, _, err := m.PublishWHIP(pub, offerOf(t, pc, max))
	if err != nil {
		t.Fatalf("an offer of %d sections: %v", max, err)
	}
	if _, err := p.HandleOffer(offerOf(t, pc, max+1)); protocol.CodeOf(err) != protocol.CodeTooManyTracks {
		t.Errorf("a renegotiation to %d sections: %v, want %s", max+1, err, protocol.CodeTooManyTracks)
	}

	big := offerOf(t, clientPC(t), 500)
	if _, _, err := m.PublishWHIP(claims("whip", auth.Grants{Publish: true}), big); protocol.CodeOf(err) != protocol.CodeTooManyTracks {
		t.Errorf("WHIP offer of 500 sections: %v, want %s", err, protocol.CodeTooManyTracks)
	}
	if _, _, err := m.PlayWHEP(claims("whep", auth.Grants{Subscribe: true}), big, "", nil); protocol.CodeOf(err) != protocol.CodeTooManyTracks {
		t.Errorf("WHEP offer of 500 sections: %v, want %s", err, protocol.CodeTooManyTracks)
	}
	if n := len(m.Room("r").Participants()); n != 1 {
		t.Errorf("%d participants in the room, want the one publisher", n)
	}
}

// blockSource is a stream that sends nothing until it is stopped.
type blockSource struct {
	stopped atomic.Bool
	done    chan struct{}
}

func newBlockSource() *blockSource { return &blockSource{done: make(chan struct{})} }

func (s *blockSource) ReadRTP([]byte) (int, error)  { <-s.done; return 0, io.EOF }
func (s *blockSource) ReadRTCP([]byte) (int, error) { <-s.done; return 0, io.EOF }
func (s *blockSource) SSRC() uint32                 { return 7 }
func (s *blockSource) RID() string                  { return "" }
func (s *blockSource) RequestKeyframe()             {}
func (s *blockSource) Stop() {
	if s.stopped.CompareAndSwap(false, true) {
		close(s.done)
	}
}

// TestRefusedTrackIsStopped: a stream beyond the track limit is stopped, so
// that nothing reads or queues its packets.
func TestRefusedTrackIsStopped(t *testing.T) {
	m := NewManager(func() config.Config { c := config.Default(); c.Limits.MaxTracksPerParticipant = 1; return c }(), nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	p, err := m.newParticipant(claims("pub", auth.Grants{Publish: true}), false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close("done")
	vp8 := webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, PayloadType: 96}
	first, extra := newBlockSource(), newBlockSource()
	p.publishStream(first, "a", webrtc.RTPCodecTypeVideo, vp8, 0, 0)
	p.publishStream(extra, "b", webrtc.RTPCodecTypeVideo, vp8, 0, 0)
	if first.stopped.Load() || len(p.Publications()) != 1 {
		t.Fatalf("the first track: stopped %v, %d publications", first.stopped.Load(), len(p.Publications()))
	}
	if !extra.stopped.Load() {
		t.Fatal("the track over the limit was refused but not stopped")
	}
}
