package integration

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

// firstKeys records, per receiver, when the first video packet of a publisher
// arrives after a mark, and whether it was a keyframe (the synthetic VP8's
// key flag).
type firstKeys struct {
	mu    sync.Mutex
	mark  time.Time
	first map[string]time.Time // receiver → first packet of the watched publisher
	key   map[string]bool
	watch string
}

func (f *firstKeys) reset(watch string) {
	f.mu.Lock()
	f.mark, f.watch = time.Now(), watch
	f.first, f.key = map[string]time.Time{}, map[string]bool{}
	f.mu.Unlock()
}

func (f *firstKeys) read(t *testing.T, receiver string, c *client.Client, tracks int) {
	for i := 0; i < tracks; i++ {
		tr := waitTrack(t, c, 10*time.Second)
		if tr.Remote.Kind() != webrtc.RTPCodecTypeVideo {
			go func() {
				for {
					if _, _, err := tr.Remote.ReadRTP(); err != nil {
						return
					}
				}
			}()
			continue
		}
		from := tr.ParticipantSid
		go func() {
			for {
				p, _, err := tr.Remote.ReadRTP()
				if err != nil {
					return
				}
				f.mu.Lock()
				if f.first != nil && from == f.watch {
					if _, ok := f.first[receiver]; !ok {
						f.first[receiver] = time.Now()
						f.key[receiver] = len(p.Payload) > 1 && p.Payload[1]&0x01 == 0
					}
				}
				f.mu.Unlock()
			}
		}()
	}
}

// A speaker change under Last-N resumes the new speaker's video at every
// receiver with one keyframe request to the publisher, not one per receiver;
// every receiver starts with that keyframe. Also measures speaker change →
// first frame at the receivers (docs/benchmarks.md).
func TestSpeakerChangeOneKeyframe(t *testing.T) {
	e := start(t, func(c *config.Config) { c.RTC.LastN = 1 })
	alice := e.join("sk", "alice")
	bob := e.join("sk", "bob")
	pa := publishAV(t, alice)
	pb := publishAV(t, bob)
	speakers := map[string]*avPublisher{sidOf(alice): pa, sidOf(bob): pb}
	names := []string{"r1", "r2", "r3", "r4"}
	fk := &firstKeys{}
	var evs []*recorder
	for _, n := range names {
		c := e.join("sk", n)
		evs = append(evs, record(c))
		go fk.read(t, n, c, 4)
	}
	// alice and bob take turns; each turn makes the other one's video start
	// at all four receivers.
	var delays []time.Duration
	turn := []string{sidOf(alice), sidOf(bob), sidOf(alice), sidOf(bob), sidOf(alice)}
	for i, who := range turn {
		for sid, p := range speakers {
			p.speaking.Store(sid == who)
		}
		if i == 0 {
			evs[0].wait(t, 10*time.Second, "first dominant speaker", func(m protocol.Msg) bool {
				return m["type"] == "dominantSpeaker" && m["participantSid"] == who
			})
			time.Sleep(time.Second)
			continue
		}
		p := speakers[who]
		before := p.plis.Load()
		fk.reset(who)
		seen := speakerEvents(evs[0])
		waitFor(t, 10*time.Second, fmt.Sprintf("speaker change %d", i), func() bool { return speakerEvents(evs[0]) > seen })
		waitFor(t, 5*time.Second, "the new speaker's video at every receiver", func() bool {
			fk.mu.Lock()
			defer fk.mu.Unlock()
			return len(fk.first) == len(names)
		})
		// The decision is the event's time at the server; the event reaches r1
		// at about the time the server asks for the keyframe.
		decided := eventTime(evs[0], who)
		fk.mu.Lock()
		for _, n := range names {
			if !fk.key[n] {
				t.Errorf("turn %d: %s's first packet of the new speaker is not a keyframe", i, n)
			}
			delays = append(delays, fk.first[n].Sub(decided))
		}
		fk.mu.Unlock()
		time.Sleep(500 * time.Millisecond) // any late request would have come by now
		if got := p.plis.Load() - before; got != 1 {
			t.Errorf("turn %d: %d keyframe requests at the publisher for %d receivers, want 1", i, got, len(names))
		}
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	t.Logf("speaker change → first frame at %d receivers: median %v, p90 %v, max %v", len(delays),
		delays[len(delays)/2], delays[len(delays)*9/10], delays[len(delays)-1])
	if out := os.Getenv("PETREL_SPEAKERKEY_OUT"); out != "" {
		f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			for _, d := range delays {
				fmt.Fprintf(f, "%d\n", d.Microseconds())
			}
			f.Close()
		}
	}
}

func speakerEvents(r *recorder) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.evs {
		if m["type"] == "dominantSpeaker" {
			n++
		}
	}
	return n
}

// eventTime is when the recorder got the latest dominantSpeaker event naming sid.
func eventTime(r *recorder, sid string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.evs) - 1; i >= 0; i-- {
		if m := r.evs[i]; m["type"] == "dominantSpeaker" && m["participantSid"] == sid {
			return r.at[i]
		}
	}
	return time.Time{}
}
