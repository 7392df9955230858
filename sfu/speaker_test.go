package sfu

import (
	"math/rand"
	"testing"
	"time"
)

// trace drives a detector with synthetic audio levels, 50 frames a second,
// deciding every 300 ms, and returns who was dominant at each second.
type talker struct {
	floor  uint8 // dBov of the background
	speech uint8 // dBov while talking
	talks  func(t time.Duration) bool
}

func runTrace(t *testing.T, seconds int, ts map[string]talker) (timeline []string, changes []time.Duration) {
	t.Helper()
	s := NewSpeakers()
	rng := rand.New(rand.NewSource(1))
	acts := map[string]*activity{}
	for id := range ts {
		acts[id] = s.Track(id)
	}
	start := time.Unix(1000, 0)
	frame := 20 * time.Millisecond
	for f := 0; f < seconds*50; f++ {
		el := time.Duration(f) * frame
		at := start.Add(el)
		for id, tk := range ts {
			lvl := tk.floor
			if tk.talks(el) && f%15 >= 3 {
				// Speech varies syllable by syllable, with a short pause every 300 ms.
				lvl = tk.speech + uint8(rng.Intn(12))
			} else {
				lvl = tk.floor + uint8(rng.Intn(4))
			}
			acts[id].Observe(lvl, at)
		}
		if f%15 == 14 {
			if _, changed := s.Decide(at); changed {
				changes = append(changes, el)
			}
		}
		if f%50 == 49 {
			timeline = append(timeline, s.Dominant())
		}
	}
	return timeline, changes
}

func between(a, b time.Duration) func(time.Duration) bool {
	return func(t time.Duration) bool { return t >= a && t < b }
}

func never(time.Duration) bool { return false }

const sec = time.Second

func TestDominantSpeakerTurns(t *testing.T) {
	tl, changes := runTrace(t, 12, map[string]talker{
		"alice": {floor: 90, speech: 40, talks: between(0, 5*sec)},
		"bob":   {floor: 90, speech: 40, talks: between(6*sec, 12*sec)},
		"carol": {floor: 90, speech: 40, talks: never},
	})
	if tl[3] != "alice" {
		t.Fatalf("after 4 s of alice alone: %q (%v)", tl[3], tl)
	}
	if tl[10] != "bob" {
		t.Fatalf("5 s into bob's turn: %q (%v)", tl[10], tl)
	}
	if len(changes) != 2 {
		t.Fatalf("%d speaker changes, want 2: %v", len(changes), changes)
	}
	// The switch follows bob's start within a few decisions.
	if d := changes[1] - 6*sec; d < 0 || d > 2500*time.Millisecond {
		t.Fatalf("switch to bob %v after he started", d)
	}
}

func TestNoSwitchOnNoiseBurstOrInterjection(t *testing.T) {
	tl, changes := runTrace(t, 12, map[string]talker{
		"alice": {floor: 90, speech: 40, talks: between(0, 12*sec)},
		// A cough (200 ms) and a "yes, right" (600 ms) while alice talks on.
		"bob": {floor: 90, speech: 30, talks: func(t time.Duration) bool {
			return between(4*sec, 4*sec+200*time.Millisecond)(t) || between(8*sec, 8*sec+600*time.Millisecond)(t)
		}},
	})
	for i, d := range tl {
		if d != "alice" && i >= 2 {
			t.Fatalf("second %d: dominant %q (%v)", i+1, d, tl)
		}
	}
	if len(changes) != 1 {
		t.Fatalf("changes %v, want only the first choice", changes)
	}
}

func TestSimultaneousTalkKeepsTheSpeaker(t *testing.T) {
	tl, _ := runTrace(t, 10, map[string]talker{
		"alice": {floor: 90, speech: 40, talks: between(0, 10*sec)},
		"bob":   {floor: 90, speech: 40, talks: between(3*sec, 10*sec)},
	})
	for i := 2; i < len(tl); i++ {
		if tl[i] != "alice" {
			t.Fatalf("second %d: %q took over while alice kept talking (%v)", i+1, tl[i], tl)
		}
	}
}

func TestNoiseFloorBeatsLoudness(t *testing.T) {
	// Dave sits by a loud fan (-35 dBov, steady) and says nothing; erin speaks
	// quietly (-60 dBov) in a quiet room (-100 dBov). Erin is the speaker.
	tl, _ := runTrace(t, 8, map[string]talker{
		"dave": {floor: 35, speech: 35, talks: never},
		"erin": {floor: 100, speech: 60, talks: between(1*sec, 8*sec)},
	})
	if tl[len(tl)-1] != "erin" {
		t.Fatalf("dominant %v, want erin", tl)
	}
}

func TestForgetDominant(t *testing.T) {
	s := NewSpeakers()
	s.Track("a")
	s.dominant = "a"
	s.Forget("a")
	if s.Dominant() != "" {
		t.Fatal("forgotten participant still dominant")
	}
}
