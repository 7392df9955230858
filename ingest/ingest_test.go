package ingest

import (
	"testing"

	"github.com/bluenviron/mediacommon/v2/pkg/codecs/mpeg4audio"
)

func TestStreamToken(t *testing.T) {
	for _, c := range []struct {
		id, tok string
		bad     bool
	}{
		{id: "abc.def.ghi", tok: "abc.def.ghi"},
		{id: "#!::r=abc.def.ghi,m=publish", tok: "abc.def.ghi"},
		{id: "#!::m=publish,r=abc.def.ghi,u=obs", tok: "abc.def.ghi"},
		{id: "#!::r=abc.def.ghi", tok: "abc.def.ghi"},
		{id: "#!::r=abc.def.ghi,m=request", bad: true},
		{id: "#!::m=publish", tok: ""},
		{id: "", tok: ""},
	} {
		tok, err := streamToken(c.id)
		if (err != nil) != c.bad || tok != c.tok {
			t.Errorf("%q: %q, %v; want %q (error %v)", c.id, tok, err, c.tok, c.bad)
		}
	}
}

// RTMP's millisecond timestamps put consecutive AAC access units 21 or 22 ms
// apart at 48 kHz; they must come out exactly 1024 samples apart, and a real
// gap must come through.
func TestAACTimeAbsorbsRounding(t *testing.T) {
	p := &publisher{aacRate: 48000}
	var prev uint32
	for i := 0; i < 200; i++ {
		ms := int64(i) * 1024 * 1000 / 48000 // what an FLV muxer writes
		ts := p.aacTime(ms * 48000 / 1000)
		if i > 0 && ts-prev != mpeg4audio.SamplesPerAccessUnit {
			t.Fatalf("access unit %d: %d samples after the last", i, ts-prev)
		}
		prev = ts
	}
	gap := int64(200+50) * 1024 // 50 access units lost
	if ts := p.aacTime(gap); ts != uint32(gap) {
		t.Fatalf("after a gap: %d, want %d", ts, gap)
	}
}

// The URL an ingress publishes to names the listener's host, or the admin
// request's host when the listener is bound to every address.
func TestPublicAddr(t *testing.T) {
	for _, c := range [][3]string{
		{"127.0.0.1:1935", "example.org:7880", "127.0.0.1:1935"},
		{"0.0.0.0:1935", "example.org:7880", "example.org:1935"},
		{"[::]:1935", "example.org", "example.org:1935"},
		{"[::]:9000", "[2001:db8::1]:7880", "[2001:db8::1]:9000"},
	} {
		if got := publicAddr(c[0], c[1]); got != c[2] {
			t.Errorf("publicAddr(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}
