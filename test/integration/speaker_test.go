package integration

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/rtc"
)

// avPublisher sends Opus-like audio carrying RFC 6464 levels (speech or room
// noise) and VP8-like video that answers keyframe requests like an encoder.
type avPublisher struct {
	speaking atomic.Bool
	forceKey atomic.Bool
	plis     atomic.Int64 // keyframe requests received for the camera
	videoSid string
}

func publishAV(t *testing.T, c *client.Client) *avPublisher {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	p := &avPublisher{}
	audio, _ := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "mic", "av")
	video, _ := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}, "cam", "av")
	c.OnPublisherRTCP = func(id string, pkts []rtcp.Packet) {
		for _, x := range pkts {
			if _, ok := x.(*rtcp.PictureLossIndication); ok && id == "cam" {
				p.plis.Add(1)
				p.forceKey.Store(true)
			}
		}
	}
	_, asender, err := c.Publish(ctx, audio, "microphone")
	if err != nil {
		t.Fatal(err)
	}
	sid, _, err := c.Publish(ctx, video, "camera")
	if err != nil {
		t.Fatal(err)
	}
	p.videoSid = sid
	levelID := audioLevelID(t, asender)
	everyFrame(t, func(n int) {
		level := byte(95) // room noise, dBov
		if p.speaking.Load() && n%15 >= 3 {
			level = byte(35 + n%10) // speech, with a pause every 300 ms
		}
		ap := &rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(n), Timestamp: uint32(n * 960)}, Payload: make([]byte, 60)}
		_ = ap.Header.SetExtension(levelID, []byte{level})
		_ = audio.WriteRTP(ap)
		if n%2 == 0 {
			payload := make([]byte, 300)
			payload[0] = 0x10
			payload[1] = 0x01
			if n%100 == 0 || p.forceKey.Swap(false) {
				payload[1] = 0x00
			}
			_ = video.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(n / 2), Timestamp: uint32(n * 1800), Marker: true}, Payload: payload})
		}
	})
	return p
}

// audioLevelID is the RFC 6464 audio level extension's id on sender's track.
func audioLevelID(t *testing.T, sender *webrtc.RTPSender) uint8 {
	t.Helper()
	for _, x := range sender.GetParameters().HeaderExtensions {
		if x.URI == rtc.ExtAudioLevel {
			return uint8(x.ID)
		}
	}
	t.Fatal("audio level extension not negotiated")
	return 0
}

// everyFrame calls f with 0, 1, 2, ... every 20 ms (an Opus frame) until the
// test ends.
func everyFrame(t *testing.T, f func(n int)) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			f(n)
		}
	}()
}

// videoFrom counts video packets per publishing participant on a receiver.
func videoFrom(t *testing.T, c *client.Client, want int) map[string]*atomic.Int64 {
	t.Helper()
	counts := map[string]*atomic.Int64{}
	for i := 0; i < want; i++ {
		tr := waitTrack(t, c, 10*time.Second)
		n := &atomic.Int64{}
		if tr.Remote.Kind() == webrtc.RTPCodecTypeVideo {
			counts[tr.ParticipantSid] = n
		}
		go func() {
			for {
				if _, _, err := tr.Remote.ReadRTP(); err != nil {
					return
				}
				n.Add(1)
			}
		}()
	}
	return counts
}

func flowing(n *atomic.Int64) bool {
	a := n.Load()
	time.Sleep(400 * time.Millisecond)
	return n.Load() > a+3
}

func sidOf(c *client.Client) string {
	return c.Joined["participant"].(map[string]any)["sid"].(string)
}

func TestDominantSpeakerAndLastN(t *testing.T) {
	e := start(t, func(c *config.Config) { c.RTC.LastN = 1 })
	ctx := ctxT(t, 60*time.Second)
	alice := e.join("ds", "alice")
	bob := e.join("ds", "bob")
	carol := e.join("ds", "carol")
	pa := publishAV(t, alice)
	pb := publishAV(t, bob)
	pc := publishAV(t, carol)
	_ = pc
	seen := videoFrom(t, carol, 4)
	a, b := seen[sidOf(alice)], seen[sidOf(bob)]
	if a == nil || b == nil {
		t.Fatalf("carol's video tracks: %v", seen)
	}

	events := record(carol)
	pa.speaking.Store(true)
	waitSpeaker := func(want string) {
		t.Helper()
		events.wait(t, 10*time.Second, "dominantSpeaker "+want, func(m protocol.Msg) bool {
			return m["type"] == "dominantSpeaker" && m["participantSid"] == want
		})
	}
	waitSpeaker(sidOf(alice))
	waitFor(t, 3*time.Second, "alice's video at carol", func() bool { return flowing(a) })
	if flowing(b) {
		t.Fatal("carol gets bob's video with Last-N 1 while alice speaks")
	}

	pa.speaking.Store(false)
	pb.speaking.Store(true)
	waitSpeaker(sidOf(bob))
	waitFor(t, 3*time.Second, "bob's video at carol", func() bool { return flowing(b) })
	waitFor(t, 3*time.Second, "alice's video paused at carol", func() bool { return !flowing(a) })

	// A pinned participant takes one of the N places, before any speaker.
	if _, err := carol.Request(ctx, protocol.Msg{"type": "pin", "participantSids": []string{sidOf(alice)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "pinned alice's video at carol", func() bool { return flowing(a) && !flowing(b) })
	// With room for two, carol gets the pinned alice and the speaker bob.
	if _, err := carol.Request(ctx, protocol.Msg{"type": "setLastN", "n": 2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "alice and bob at carol", func() bool { return flowing(a) && flowing(b) })

	// Nobody receives carol's video (she never spoke): she is told to stop sending it.
	events.wait(t, 5*time.Second, "trackDemand inactive for carol's video", func(m protocol.Msg) bool {
		return m["type"] == "trackDemand" && m["trackSid"] == pc.videoSid && m["active"] == false
	})
	_ = ctx
}

// recorder keeps every event a client receives, for assertions in any order.
type recorder struct {
	mu  sync.Mutex
	evs []protocol.Msg
	at  []time.Time // when each event arrived
}

func record(c *client.Client) *recorder {
	r := &recorder{}
	go func() {
		for {
			select {
			case m := <-c.Events:
				r.mu.Lock()
				r.evs = append(r.evs, m)
				r.at = append(r.at, time.Now())
				r.mu.Unlock()
			case <-c.Done():
				return
			}
		}
	}()
	return r
}

func (r *recorder) wait(t *testing.T, d time.Duration, what string, match func(protocol.Msg) bool) {
	t.Helper()
	waitFor(t, d, what, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, m := range r.evs {
			if match(m) {
				return true
			}
		}
		return false
	})
}
