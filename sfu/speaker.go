package sfu

import (
	"math"
	"sync"
	"time"
)

// Dominant-speaker identification from the RFC 6464 audio levels publishers put in
// each packet, without decoding audio. It follows the structure of Volfin and
// Cohen's method ("Dominant speaker identification for multipoint
// videoconferencing", 2013): speech activity scored on three time scales, each
// score the log-likelihood that the observed amount of activity is speech rather
// than noise, and a change of speaker only when a challenger beats the current
// speaker on all three. Levels are taken relative to a per-participant noise
// floor, so a loud room or a hot microphone does not win by loudness alone.
//
// Time scales (50 audio frames a second):
//   immediate: the level of the last frame (max over 3 frames to ride out jitter),
//              as 0..n1 steps of 3 dB above the noise floor;
//   medium:    how many of the last n2 sub-windows of 4 frames (80 ms) were active;
//   long:      how many of the last n3 sub-windows of 400 ms were active.

const (
	n1, n2, n3         = 13, 5, 10
	lambda1            = 0.78
	lambda2            = 24
	lambda3            = 47
	stepDB             = 3.0
	activeImmediate    = 6 // ≥ 18 dB above the floor counts as an active frame
	framesPerMedium    = 4
	activeFramesMedium = 2
	mediumsPerLong     = 5
	activeMediumsLong  = 3
	switchC1           = 3.0
	switchC2           = 2.0
	switchC3           = 0.0
	minScore           = 1e-10
	// floorRise lets the noise floor follow a room that gets louder (dB per frame).
	floorRise = 0.02
	// staleAfter: a participant without audio levels this long is silent.
	staleAfter = 200 * time.Millisecond
	// loudAttack and loudRelease smooth the loudness per frame: a word's first
	// frames count at once, a pause between words (a few hundred ms) barely.
	loudAttack  = 0.5
	loudRelease = 0.03
	// loudDecay is how fast the loudness of a participant sending no packets
	// (muted, or Opus DTX in silence) fades: the release, per frame of 20 ms.
	loudDecay = 20 * time.Millisecond
)

// activity is one participant's speech history. Observe is called by the audio
// reader goroutine; the detector reads it under the same small lock.
type activity struct {
	mu      sync.Mutex
	floor   float64
	hasData bool
	last    [3]uint8 // last three immediates
	lastAt  time.Time

	frames       int // frames in the current medium sub-window
	activeFrames int
	mediums      [n2]bool // ring of medium sub-windows
	mi           int
	mediumCount  int // medium sub-windows in the current long sub-window
	activeMeds   int
	longs        [n3]bool
	li           int

	// loud is the recent loudness in steps above the floor, rising fast and
	// falling slowly (audiolastn.go ranks speakers by it); onset is when it last
	// rose past activeImmediate: where the current speech began.
	loud  float64
	onset time.Time
}

// Observe records one audio level: dBov as in RFC 6464 (0 loudest, 127 silence).
func (a *activity) Observe(dBov uint8, at time.Time) {
	if dBov > 127 {
		dBov = 127
	}
	loud := float64(127 - dBov)
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.hasData || loud < a.floor {
		a.floor = loud
		a.hasData = true
	} else {
		a.floor += floorRise
	}
	imm := uint8(math.Min(n1, math.Max(0, (loud-a.floor)/stepDB)))
	a.last[2], a.last[1], a.last[0] = a.last[1], a.last[0], imm
	a.lastAt = at
	prevLoud := a.loud
	if v := float64(imm); v > a.loud {
		a.loud += (v - a.loud) * loudAttack
	} else {
		a.loud += (v - a.loud) * loudRelease
	}
	if prevLoud < activeImmediate && a.loud >= activeImmediate {
		a.onset = at
	}
	a.frames++
	if imm >= activeImmediate {
		a.activeFrames++
	}
	if a.frames == framesPerMedium {
		active := a.activeFrames >= activeFramesMedium
		a.mediums[a.mi] = active
		a.mi = (a.mi + 1) % n2
		a.frames, a.activeFrames = 0, 0
		a.mediumCount++
		if active {
			a.activeMeds++
		}
		if a.mediumCount == mediumsPerLong {
			a.longs[a.li] = a.activeMeds >= activeMediumsLong
			a.li = (a.li + 1) % n3
			a.mediumCount, a.activeMeds = 0, 0
		}
	}
}

// loudness is the smoothed loudness at t (steps of 3 dB above the noise floor),
// faded for the time without packets since the last one, and where the
// current speech began.
func (a *activity) loudness(t time.Time) (float64, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.loud
	if gap := t.Sub(a.lastAt); a.hasData && gap > staleAfter {
		l *= math.Pow(1-loudRelease, float64(gap/loudDecay))
	}
	return l, a.onset
}

// scores returns the three activity scores at time t.
func (a *activity) scores(t time.Time) (s1, s2, s3 float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var v1, v2, v3 int
	if a.hasData && t.Sub(a.lastAt) < staleAfter {
		v1 = int(max(a.last[0], a.last[1], a.last[2]))
	}
	for _, m := range a.mediums {
		if m {
			v2++
		}
	}
	for _, l := range a.longs {
		if l {
			v3++
		}
	}
	return score(v1, n1, lambda1), score(v2, n2, lambda2), score(v3, n3, lambda3)
}

// score is the log-likelihood ratio of v active units out of n being speech
// (binomial, p = 1/2) rather than noise (exponential with rate lambda).
func score(v, n int, lambda float64) float64 {
	s := lnChoose(n, v) + float64(n)*math.Log(0.5) - math.Log(lambda) + lambda*float64(v)
	return math.Max(s, minScore)
}

func lnChoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

// Speakers decides the dominant speaker of a room.
type Speakers struct {
	mu       sync.Mutex
	active   map[string]*activity // by participant sid
	dominant string
}

// NewSpeakers returns an empty detector.
func NewSpeakers() *Speakers { return &Speakers{active: map[string]*activity{}} }

// Track returns the activity record of a participant, creating it.
func (s *Speakers) Track(sid string) *activity {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.active[sid]
	if a == nil {
		a = &activity{}
		s.active[sid] = a
	}
	return a
}

// Forget drops a participant.
func (s *Speakers) Forget(sid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.active, sid)
	if s.dominant == sid {
		s.dominant = ""
	}
}

// Dominant is the current dominant speaker's sid ("" if none yet).
func (s *Speakers) Dominant() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dominant
}

// Decide runs one decision at time t and reports whether the dominant speaker
// changed. The first speaker is whoever shows sustained activity first; after
// that a challenger must beat the speaker on all three time scales.
func (s *Speakers) Decide(t time.Time) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	type sc struct{ s1, s2, s3 float64 }
	scores := make(map[string]sc, len(s.active))
	for sid, a := range s.active {
		s1, s2, s3 := a.scores(t)
		scores[sid] = sc{s1, s2, s3}
	}
	cur, ok := scores[s.dominant]
	if !ok {
		// No speaker yet: the most active over the medium scale, once someone has
		// been active in at least two medium sub-windows.
		best, bestS := "", score(1, n2, lambda2)
		for sid, x := range scores {
			if x.s2 > bestS {
				best, bestS = sid, x.s2
			}
		}
		if best == "" {
			return s.dominant, false
		}
		s.dominant = best
		return best, true
	}
	best, bestC2 := "", 0.0
	for sid, x := range scores {
		if sid == s.dominant {
			continue
		}
		c1 := math.Log(x.s1 / cur.s1)
		c2 := math.Log(x.s2 / cur.s2)
		c3 := math.Log(x.s3 / cur.s3)
		if c1 > switchC1 && c2 > switchC2 && c3 > switchC3 && c2 > bestC2 {
			best, bestC2 = sid, c2
		}
	}
	if best == "" {
		return s.dominant, false
	}
	s.dominant = best
	return best, true
}
