package session

import (
	"strconv"
	"strings"
	"testing"
)

// TestOfferWithTooManySections: an offer with far more media sections than
// any session uses is refused before it is parsed into sections.
func TestOfferWithTooManySections(t *testing.T) {
	s := startServer(t)
	c := newClient(t)
	good := c.offer()
	_, video, _ := strings.Cut(good, "m=video")
	video, _, _ = strings.Cut(video, "m=audio")
	var b strings.Builder
	b.WriteString(good)
	for i := 0; i < 600; i++ {
		b.WriteString(strings.Replace("m=video"+video, "a=mid:0", "a=mid:x"+strconv.Itoa(i), 1))
	}
	_, _, err := s.NewViewer(b.String(), testTracks, newEvents())
	if err == nil || !strings.Contains(err.Error(), "media sections") {
		t.Fatalf("an offer of 603 sections: %v, want refused for its media sections", err)
	}
	if s.Viewers() != 0 {
		t.Errorf("%d viewers after a refused offer", s.Viewers())
	}
}
