package sfu

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

func claims(identity string, g auth.Grants) *auth.Claims {
	return &auth.Claims{Room: "r", Grants: g, RegisteredClaims: jwt.RegisteredClaims{Subject: identity}}
}

// offerOf is an offer with n video sections and a data channel's.
func offerOf(n int) string {
	var b strings.Builder
	b.WriteString("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:%d\r\na=sendonly\r\na=rtpmap:96 VP8/90000\r\n", i)
	}
	return b.String()
}

// TestOfferSectionLimit: an offer with more media sections than the track
// limit and a small allowance is refused with too_many_tracks before the
// transport parses it; one within the allowance passes. The hostile suite
// sends such offers over WHIP, WHEP and the room protocol.
func TestOfferSectionLimit(t *testing.T) {
	cfg := config.Default()
	cfg.Limits.MaxTracksPerParticipant = 2
	m := NewManager(cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	max := 2 + sectionAllowance
	if err := m.checkSections(offerOf(max)); err != nil {
		t.Fatalf("an offer of %d sections: %v", max, err)
	}
	for _, n := range []int{max + 1, 500} {
		if err := m.checkSections(offerOf(n)); protocol.CodeOf(err) != protocol.CodeTooManyTracks {
			t.Errorf("an offer of %d sections: %v, want %s", n, err, protocol.CodeTooManyTracks)
		}
	}
	// Sections are counted by line, whatever the line ending.
	if err := m.checkSections(strings.ReplaceAll(offerOf(max+1), "\r\n", "\n")); protocol.CodeOf(err) != protocol.CodeTooManyTracks {
		t.Errorf("an offer with LF endings: %v", err)
	}
}

// TestMediaSections: the count finds every line Pion's parser reads as a
// media section, whatever line ends a client writes.
func TestMediaSections(t *testing.T) {
	for text, want := range map[string]int{
		"":                                  0,
		"m=audio":                           1,
		"v=0\r\nm=audio 9\r\nm=video 9\r\n": 2,
		"v=0\nm=a\n\r\rm=b\rm=c":            3,
		"v=0\r\na=x:m=audio\r\nam=video":    0,
	} {
		if got := MediaSections(text); got != want {
			t.Errorf("MediaSections(%q) = %d, want %d", text, got, want)
		}
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
	vp8 := Codec{MimeType: "video/VP8", ClockRate: 90000, PayloadType: 96}
	first, extra := newBlockSource(), newBlockSource()
	p.publishStream(first, "a", Video, vp8, 0, 0)
	p.publishStream(extra, "b", Video, vp8, 0, 0)
	if first.stopped.Load() || len(p.Publications()) != 1 {
		t.Fatalf("the first track: stopped %v, %d publications", first.stopped.Load(), len(p.Publications()))
	}
	if !extra.stopped.Load() {
		t.Fatal("the track over the limit was refused but not stopped")
	}
}
