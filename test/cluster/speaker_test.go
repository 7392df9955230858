package cluster

import (
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// talk publishes Opus-like audio with RFC 6464 levels (extension id 1) from
// inside node n: room noise for the first second (the detector's noise floor),
// then speech if loud.
func talk(t *testing.T, n *node, room, identity string, loud bool) {
	p, err := n.srv.Manager.JoinLocal(sfu.LocalOptions{Room: room, Identity: identity, Name: identity,
		Grants: auth.Grants{Publish: true, PublishData: true, Subscribe: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close("done") })
	lt, err := p.PublishLocal(sfu.LocalTrackOptions{
		Info:          protocol.TrackInfo{Kind: "audio", Source: "microphone", SSRC: 7000},
		Codec:         sfu.Codec{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, PayloadType: 111},
		AudioLevelExt: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			level := byte(95) // room noise, dBov
			if loud && i > 50 && i%15 >= 3 {
				level = byte(35 + i%10) // speech, with a pause every 300 ms
			}
			pkt := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: uint16(i), Timestamp: uint32(i * 960), SSRC: 7000}, Payload: make([]byte, 60)}
			_ = pkt.Header.SetExtension(1, []byte{level})
			_ = lt.WritePacket(pkt)
		}
	}()
}

// The dominant speaker is the same person on every node: audio crosses links
// with its level extension, and each node's detector hears the same levels.
func TestDominantSpeakerAcrossNodes(t *testing.T) {
	_, a, b, c := clusterOf(t)
	talk(t, a, "spk", "talker", true)
	talk(t, c, "spk", "quiet", false)
	onA := join(t, a.ws, "spk", "alice")
	onB := join(t, b.ws, "spk", "bob")
	go func() {
		for tr := range onB.Tracks {
			go drainTrack(tr.Remote)
		}
	}()
	go func() {
		for tr := range onA.Tracks {
			go drainTrack(tr.Remote)
		}
	}()
	check := func(n *node, who string, got protocol.Msg) {
		t.Helper()
		r := n.srv.Manager.Room("spk")
		if r == nil {
			t.Fatalf("node %s has no room", n.id)
		}
		p := r.ByIdentity("talker")
		if p == nil {
			t.Fatalf("node %s does not know the talker", n.id)
		}
		if got["participantSid"] != p.Sid() {
			q := "someone else"
			for _, x := range r.Participants() {
				if x.Sid() == got["participantSid"] {
					q = x.Identity()
				}
			}
			t.Fatalf("%s on node %s: dominant speaker is %s, want talker", who, n.id, q)
		}
	}
	check(a, "alice", waitEvent(t, onA, "dominantSpeaker", 15*time.Second))
	check(b, "bob", waitEvent(t, onB, "dominantSpeaker", 15*time.Second))
}
