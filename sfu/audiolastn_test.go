package sfu

import (
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/pion/rtp"
)

func selected(m map[string]bool) []string {
	var out []string
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func TestChooseAudioLoudestWithMargin(t *testing.T) {
	c := func(loud ...float64) []audioCandidate {
		var out []audioCandidate
		for i, l := range loud {
			out = append(out, audioCandidate{sid: string(rune('a' + i)), loud: l})
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		prev  []string
		cands []audioCandidate
		n     int
		want  []string
	}{
		{"the loudest three", nil, c(1, 9, 3, 12, 7), 3, []string{"b", "d", "e"}},
		{"all when n is 0", nil, c(1, 9, 3), 0, []string{"a", "b", "c"}},
		{"all when n is negative", nil, c(1, 9, 3), -1, []string{"a", "b", "c"}},
		{"all when no more than n", []string{"a"}, c(1, 9), 3, []string{"a", "b"}},
		{"an incumbent stays against a slightly louder one", []string{"a", "b", "c"}, c(8, 9, 7, 8.9), 3, []string{"a", "b", "c"}},
		{"a clearly louder one takes the quietest place", []string{"a", "b", "c"}, c(8, 9, 5, 7.5), 3, []string{"a", "b", "d"}},
		{"two challengers take two places", []string{"a", "b", "c"}, c(1, 9, 2, 12, 13), 3, []string{"b", "d", "e"}},
		{"a gone incumbent's place is filled", []string{"a", "b", "x"}, c(1, 9, 2, 0), 3, []string{"a", "b", "c"}},
		{"fewer places keep the loudest incumbents", []string{"a", "b", "c"}, c(8, 9, 7, 20), 2, []string{"b", "d"}},
	} {
		prev := map[string]bool{}
		for _, s := range tc.prev {
			prev[s] = true
		}
		if got := selected(chooseAudio(prev, tc.cands, tc.n)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Four people talk at once, two of them at nearly the same level for the last
// place: with the detector's smoothing and the margin the selection, once
// the noise floors are known, stays, where ranking by each instant's level changes it all the time.
func TestAudioSelectionDoesNotFlap(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	speech := map[string]uint8{"a": 40, "b": 45, "c": 60, "d": 61}
	acts := map[string]*activity{}
	for id := range speech {
		acts[id] = &activity{}
	}
	start := time.Unix(1000, 0)
	var sel, instant map[string]bool
	changes, instantChanges := 0, 0
	for f := 0; f < 20*50; f++ {
		at := start.Add(time.Duration(f) * 20 * time.Millisecond)
		lv := map[string]uint8{}
		for _, id := range []string{"a", "b", "c", "d"} { // in order: the draws are the same each run
			s := speech[id]
			l := uint8(95 + rng.Intn(4))
			if (f+int(id[0]))%15 >= 3 { // syllables, each talker's pauses at its own time
				l = s + uint8(rng.Intn(10))
			}
			lv[id] = l
			acts[id].Observe(l, at)
		}
		if f%5 != 4 { // decide every 100 ms
			continue
		}
		var cands, inst []audioCandidate
		for _, id := range []string{"a", "b", "c", "d"} {
			l, _ := acts[id].loudness(at)
			cands = append(cands, audioCandidate{id, l})
			inst = append(inst, audioCandidate{id, float64(127 - lv[id])})
		}
		next := chooseAudio(sel, cands, 3)
		// Counted once the noise floors are known (the first second or two).
		settled := f >= 2*50
		if settled && !slices.Equal(selected(next), selected(sel)) {
			changes++
			t.Logf("%v: %v -> %v", time.Duration(f)*20*time.Millisecond, selected(sel), selected(next))
		}
		sel = next
		ni := chooseAudio(nil, inst, 3)
		if settled && !slices.Equal(selected(ni), selected(instant)) {
			instantChanges++
		}
		instant = ni
	}
	if got := selected(sel); !slices.Contains(got, "a") || !slices.Contains(got, "b") {
		t.Fatalf("the two loud talkers are not both selected: %v", got)
	}
	if changes > 0 {
		t.Fatalf("the selection changed %d times in 18 s", changes)
	}
	if instantChanges < 10 {
		t.Fatalf("the instant levels changed the selection only %d times in 18 s: the test does not exercise hysteresis", instantChanges)
	}
}

// testAudioPub is an audio publication with one bound subscriber whose writer
// keeps what it is given.
func testAudioPub() (*Publication, *layer, *recWriter) {
	pub := &Publication{sid: "TR_a", kind: Audio, ck: codecOther, cacheSize: 128, owner: &Participant{sid: "PA_a"}}
	empty := []*DownTrack{}
	pub.downs.Store(&empty)
	l := &layer{pub: pub, src: &nopSource{}, cache: NewPacketCache(128), speaker: &activity{}}
	pub.layers[0].Store(l)
	d := newDownTrack(pub, nil)
	w := &recWriter{keep: true}
	d.writer, d.ssrc, d.pt, d.clock = w, 7, 111, 48000
	d.bound.Store(true)
	pub.addDown(d)
	return pub, l, w
}

func opusPacket(seq uint16) []byte {
	p := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: seq, Timestamp: uint32(seq) * 960, SSRC: 9}, Payload: make([]byte, 80)}
	b, _ := p.Marshal()
	return b
}

// send feeds packets from..to-1 through the publication's reader path.
func send(t *testing.T, pub *Publication, l *layer, from, to uint16) {
	t.Helper()
	var pkt Packet
	for s := from; s != to; s++ {
		// Distinct arrival times: the replay starts at one packet's.
		for at := now(); now() == at; {
		}
		if !l.parse(&pkt, opusPacket(s)) {
			t.Fatal("parse")
		}
		pub.deliver(&pkt, nil, nil)
	}
}

// checkGapless asserts that the subscriber's stream has no sequence gaps
// and rising timestamps.
func checkGapless(t *testing.T, hdrs []rtp.Header) {
	t.Helper()
	for i := 1; i < len(hdrs); i++ {
		if hdrs[i].SequenceNumber != hdrs[i-1].SequenceNumber+1 {
			t.Fatalf("packet %d: seq %d after %d", i, hdrs[i].SequenceNumber, hdrs[i-1].SequenceNumber)
		}
		if int32(hdrs[i].Timestamp-hdrs[i-1].Timestamp) <= 0 {
			t.Fatalf("packet %d: timestamp %d after %d", i, hdrs[i].Timestamp, hdrs[i-1].Timestamp)
		}
	}
}

func TestAudioWithheldThenReplayedFromHistory(t *testing.T) {
	pub, l, w := testAudioPub()
	send(t, pub, l, 100, 110) // forwarded: 100..109
	pub.setAudioForwarded(false, 0)
	send(t, pub, l, 110, 140) // withheld
	if len(w.hdrs) != 10 {
		t.Fatalf("%d packets while withheld, want the 10 before", len(w.hdrs))
	}
	// Selected again with speech that began at 130: 130..139 are replayed
	// before 140; the stream continues without a gap.
	pub.setAudioForwarded(true, l.cache.Arrival(130))
	send(t, pub, l, 140, 145)
	if len(w.hdrs) != 10+10+5 {
		t.Fatalf("%d packets, want 10 + 10 replayed + 5", len(w.hdrs))
	}
	checkGapless(t, w.hdrs)
	// The replayed packets keep their spacing (one frame, 960 ticks) from 130 on.
	if d := w.hdrs[11].Timestamp - w.hdrs[10].Timestamp; d != 960 {
		t.Fatalf("replayed packets %d ticks apart", d)
	}

	// A short gap the history covers: the stream resumes exactly where it
	// stopped, every packet delivered, the publisher's spacing kept.
	pub.setAudioForwarded(false, 0)
	send(t, pub, l, 145, 150)
	pub.setAudioForwarded(true, l.cache.Arrival(120))
	send(t, pub, l, 150, 152)
	h := w.hdrs[25:]
	if len(h) != 7 {
		t.Fatalf("%d packets after the short gap, want 5 replayed + 2", len(h))
	}
	checkGapless(t, w.hdrs)
	if d := h[0].Timestamp - w.hdrs[24].Timestamp; d != 960 {
		t.Fatalf("resumed %d ticks after the last packet, want 960 (no resync)", d)
	}
}

func TestAudioReplayToNewSubscriber(t *testing.T) {
	pub, l, w := testAudioPub()
	pub.setAudioForwarded(false, 0)
	send(t, pub, l, 1, 30)
	if len(w.hdrs) != 0 {
		t.Fatalf("%d packets while withheld", len(w.hdrs))
	}
	pub.setAudioForwarded(true, l.cache.Arrival(25))
	send(t, pub, l, 30, 31)
	if len(w.hdrs) != 6 {
		t.Fatalf("%d packets, want 25..30", len(w.hdrs))
	}
	checkGapless(t, w.hdrs)
}

// BenchmarkAudioFanout is one audio packet to 50 subscribers: forwarded, and
// withheld by audio Last-N.
func BenchmarkAudioFanout(b *testing.B) {
	for _, withheld := range []bool{false, true} {
		name := "forwarded"
		if withheld {
			name = "withheld"
		}
		b.Run(name, func(b *testing.B) {
			pub, l, _ := testAudioPub()
			for i := 1; i < 50; i++ {
				d := newDownTrack(pub, nil)
				d.writer, d.ssrc, d.pt, d.clock = &recWriter{}, uint32(100+i), 111, 48000
				d.bound.Store(true)
				pub.addDown(d)
			}
			for _, d := range pub.Subscribers() {
				d.writer.(*recWriter).keep = false
			}
			pub.setAudioForwarded(!withheld, 0)
			raws := make([][]byte, 256)
			for i := range raws {
				raws[i] = opusPacket(uint16(i))
			}
			var pkt Packet
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				raw := raws[i%len(raws)]
				seq := uint16(i)
				raw[2], raw[3] = byte(seq>>8), byte(seq)
				l.parse(&pkt, raw)
				pub.deliver(&pkt, nil, nil)
			}
		})
	}
}
