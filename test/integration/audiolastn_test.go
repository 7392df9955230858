package integration

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
)

// talker publishes Opus-like audio, 50 packets a second, each with its frame
// number in the payload and an RFC 6464 level: speech at level (dBov) with a
// short pause every 300 ms, room noise in the pauses.
type talker struct {
	level   atomic.Int32
	frame   atomic.Int64
	louder  atomic.Int32 // when set: the level to switch to at the next frame
	louderN atomic.Int64 // the frame number of the first frame at it
}

func publishTalker(t *testing.T, c *client.Client, level int32) *talker {
	t.Helper()
	tk := &talker{}
	tk.level.Store(level)
	tk.louderN.Store(-1)
	track, _ := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "mic", "a")
	_, sender, err := c.Publish(ctxT(t, 10*time.Second), track, "microphone")
	if err != nil {
		t.Fatal(err)
	}
	levelID := audioLevelID(t, sender)
	everyFrame(t, func(n int) {
		if l := tk.louder.Swap(0); l != 0 {
			tk.level.Store(l)
			tk.louderN.Store(int64(n))
		}
		level := byte(95 + n%4)
		if n%15 >= 3 {
			level = byte(tk.level.Load())
		}
		payload := make([]byte, 60)
		binary.BigEndian.PutUint32(payload, uint32(n))
		p := &rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(n), Timestamp: uint32(n * 960)}, Payload: payload}
		_ = p.Header.SetExtension(levelID, []byte{level})
		_ = track.WriteRTP(p)
		tk.frame.Store(int64(n))
	})
	return tk
}

// heard is what a listener received of one track.
type heard struct {
	mu    sync.Mutex
	pkts  []rtp.Header
	frame []uint32 // the publisher's frame number of each packet
	at    []time.Time
}

func (h *heard) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pkts)
}

// Eight people talk at different levels; a listener gets the audio of the
// three loudest only. A quiet one who starts talking loudly is heard within a
// bounded time, from the start of the loud speech (the server's history), and
// every track the listener receives stays one stream without gaps, also one
// that stops and comes back.
func TestAudioLastNForwardsTheLoudest(t *testing.T) {
	e := start(t, func(c *config.Config) { c.RTC.AudioLastN = 3 })
	// dBov: 0 is the loudest. Five quiet talkers, then three loud ones.
	levels := []int32{89, 89, 88, 88, 87, 71, 62, 56}
	var talkers []*talker
	sids := map[string]int{}
	for i, l := range levels {
		c := e.join("aln", string(rune('a'+i)))
		talkers = append(talkers, publishTalker(t, c, l))
		sids[sidOf(c)] = i
	}
	listener := e.join("aln", "listener")
	got := make([]*heard, len(levels))
	for range levels {
		tr := waitTrack(t, listener, 10*time.Second)
		i, ok := sids[tr.ParticipantSid]
		if !ok || tr.Remote.Kind() != webrtc.RTPCodecTypeAudio {
			t.Fatalf("unexpected track from %s", tr.ParticipantSid)
		}
		h := &heard{}
		got[i] = h
		go func() {
			for {
				p, _, err := tr.Remote.ReadRTP()
				if err != nil {
					return
				}
				h.mu.Lock()
				h.pkts = append(h.pkts, p.Header)
				h.frame = append(h.frame, binary.BigEndian.Uint32(p.Payload))
				h.at = append(h.at, time.Now())
				h.mu.Unlock()
			}
		}()
	}
	// flowing says which tracks the listener receives now.
	flowing := func() []bool {
		var before []int
		for _, h := range got {
			before = append(before, h.count())
		}
		time.Sleep(300 * time.Millisecond)
		var out []bool
		for i, h := range got {
			out = append(out, h.count() > before[i]+5)
		}
		return out
	}
	only := func(want ...int) func() bool {
		return func() bool {
			f := flowing()
			for i := range f {
				sel := false
				for _, w := range want {
					sel = sel || w == i
				}
				if f[i] != sel {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, 10*time.Second, "the three loudest (5, 6, 7) and only them", only(5, 6, 7))
	// Long enough withheld that the history does not reach back to what the
	// listener last got of talker 0: its stream resumes with a jump.
	time.Sleep(time.Second)

	// Talker 0 starts talking loudly.
	talkers[0].louder.Store(50)
	switched := time.Now()
	waitFor(t, 5*time.Second, "talker 0 heard instead of the quietest of the three", only(0, 6, 7))
	n0 := talkers[0].louderN.Load()
	h := got[0]
	h.mu.Lock()
	first := -1
	for i := range h.at {
		if h.at[i].After(switched) {
			first = i
			break
		}
	}
	if first < 0 {
		h.mu.Unlock()
		t.Fatal("nothing of talker 0 after the switch")
	}
	firstFrame, firstAt := int64(h.frame[first]), h.at[first]
	h.mu.Unlock()
	if d := firstAt.Sub(switched); d > time.Second {
		t.Errorf("talker 0 first heard %v after starting to talk", d)
	}
	// The loud speech began at frame n0: the listener's first packet of it
	// is from no later than there (and from at most the history's 500 ms before).
	if firstFrame > n0 || firstFrame < n0-25 {
		t.Errorf("talker 0's first packet after the switch is frame %d, the loud speech began at %d", firstFrame, n0)
	}
	t.Logf("talker 0 loud from frame %d; first heard %v later, from frame %d", n0, firstAt.Sub(switched), firstFrame)

	// Talker 0 falls quiet and talker 5, withheld for a while, talks loudly
	// again: its stream, which the listener had, goes on without a gap.
	before5 := got[5].count()
	talkers[0].level.Store(89)
	talkers[5].louder.Store(50)
	waitFor(t, 5*time.Second, "talker 5 heard again", only(5, 6, 7))
	if got[5].count() <= before5 {
		t.Fatal("talker 5 not heard again")
	}

	for i, h := range got {
		h.mu.Lock()
		for j := 1; j < len(h.pkts); j++ {
			a, b := h.pkts[j-1], h.pkts[j]
			if b.SequenceNumber != a.SequenceNumber+1 {
				t.Errorf("talker %d: sequence %d after %d (a loss to the receiver)", i, b.SequenceNumber, a.SequenceNumber)
				break
			}
			if int32(b.Timestamp-a.Timestamp) <= 0 {
				t.Errorf("talker %d: timestamp %d after %d", i, b.Timestamp, a.Timestamp)
				break
			}
		}
		h.mu.Unlock()
	}
}
