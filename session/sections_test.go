package session

import (
	"strconv"
	"strings"
	"testing"
)

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
