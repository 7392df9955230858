package camera

import (
	"bufio"
	"io"
	"testing"

	"github.com/bluenviron/mediacommon/pkg/codecs/mpeg4audio"
)

// Lip sync of transcoded AAC: an Opus packet is stamped with the AAC
// timestamp of the input it encodes (48 kHz), across a lost access unit and a
// camera restart, and the camera's sender reports convert AAC timestamps the
// same way, so the NTP time a browser derives for a packet is the one the
// camera gave its AAC.
func TestAACTimestampsFollowTheAACClock(t *testing.T) {
	tc := &aacTranscoder{base48: 100000}
	tc.newSession(mpeg4audio.AudioSpecificConfig{Type: mpeg4audio.ObjectTypeAACLC, SampleRate: 16000, ChannelCount: 1})
	w := bufio.NewWriter(io.Discard)
	au := []byte{0x21, 0x10, 0x04, 0x60, 0x8c, 0x1c}
	feed := func(ts uint32) {
		if err := tc.feed(w, aacAU{ts: ts, au: au}); err != nil {
			t.Fatal(err)
		}
	}
	// Four access units, then one lost (ts 5096), then two more.
	for _, ts := range []uint32{1000, 2024, 3048, 4072, 6120, 7144} {
		feed(ts)
	}
	// ffmpeg's output: 48 kHz samples since its first packet; 1024 AAC
	// samples at 16 kHz are 3072 at 48 kHz.
	out := func(off int64) uint32 {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		ts, ok := tc.outTime(off)
		if !ok {
			t.Fatal("no mapping")
		}
		return ts
	}
	sr := func(aac uint32) uint32 {
		ts, ok := tc.srTime(aac)
		if !ok {
			t.Fatal("no sender report mapping")
		}
		return ts
	}
	for _, c := range []struct {
		off int64  // into ffmpeg's output
		aac uint32 // the AAC timestamp of that input sample
	}{
		{0, 1000}, {960, 1320}, {3 * 3072, 4072}, {4 * 3072, 6120}, {4*3072 + 960, 6440}, {5 * 3072, 7144},
	} {
		if got, want := out(c.off), sr(c.aac); got != want {
			t.Errorf("output +%d: Opus timestamp %d, the sender report puts AAC %d at %d (%+d)", c.off, got, c.aac, want, int32(got-want))
		}
	}
	if got := sr(1000 + 16000); got != 100000+48000 {
		t.Errorf("one second of AAC is %d Opus ticks", got-100000)
	}
	// A camera restart: its AAC clock starts anywhere; the Opus clock goes on
	// past the last packet, and packets and reports still agree.
	tc.newSession(mpeg4audio.AudioSpecificConfig{Type: mpeg4audio.ObjectTypeAACLC, SampleRate: 16000, ChannelCount: 1})
	last := out(5*3072 + 3071)
	feed(900000)
	feed(901024)
	first := out(6 * 3072)
	if int32(first-last) <= 0 || int32(first-last) > 48000 {
		t.Fatalf("after the restart the Opus clock moved %d ticks", int32(first-last))
	}
	if got, want := out(7*3072), sr(901024); got != want {
		t.Errorf("after the restart: Opus %d, sender report %d", got, want)
	}
}
