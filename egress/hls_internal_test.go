package egress

import (
	"bytes"
	"testing"
	"time"
)

func TestFileNames(t *testing.T) {
	for _, f := range []string{"index.m3u8", "video1_stream.m3u8", "0a1b2c3d4e5f_video1_init.mp4", "0a1b2c3d4e5f_audio2_part17.mp4", "0a1b2c3d4e5f_video1_seg9.mp4"} {
		if !fileName.MatchString(f) {
			t.Errorf("%q refused", f)
		}
	}
	for _, f := range []string{"", ".m3u8", "../index.m3u8", "a/b.mp4", "x.txt", "index.m3u8.mp4x", "a b.mp4", "x.MP4", string(bytes.Repeat([]byte("a"), 65)) + ".mp4"} {
		if fileName.MatchString(f) {
			t.Errorf("%q accepted", f)
		}
	}
}

// The RTP clock wraps at 2^32: the muxer's timeline goes on through it, and a
// packet reordered across the wrap goes back by its own step only.
func TestClockWraps(t *testing.T) {
	start := time.Unix(100, 0)
	var c clock
	if got := c.at(0xffffff00, start.Add(2*time.Second), start, 90000); got != 180000 {
		t.Fatalf("first packet at %d, want its arrival (2 s = 180000)", got)
	}
	if got := c.at(0x00000100, start, start, 90000); got != 180000+0x200 {
		t.Fatalf("after the wrap %d, want %d", got, 180000+0x200)
	}
	if got := c.at(0xfffffff0, start, start, 90000); got != 180000+0x100-0x10 {
		t.Fatalf("reordered before the wrap %d, want %d", got, 180000+0x100-0x10)
	}
}

func TestSpropParameterSets(t *testing.T) {
	sps, pps := spropParameterSets("packetization-mode=1; sprop-parameter-sets=Z0LAHtkDxWhAAAADAEAAAAwDxYuS,aMuMsg==;profile-level-id=42c01e")
	if len(sps) == 0 || sps[0]&0x1f != 7 || len(pps) == 0 || pps[0]&0x1f != 8 {
		t.Fatalf("sps %x pps %x", sps, pps)
	}
	for _, bad := range []string{"", "sprop-parameter-sets=", "sprop-parameter-sets=!!!,???", "sprop-parameter-sets"} {
		if s, p := spropParameterSets(bad); s != nil || p != nil {
			t.Fatalf("%q gave %x %x", bad, s, p)
		}
	}
}
