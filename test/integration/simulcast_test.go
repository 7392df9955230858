package integration

import (
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/protocol"
)

// TestSimulcastLayerSelection publishes two encodings (rids q and h) from Pion and
// checks that a subscriber gets the best one by default, the low one when it says
// its tile is small, and one continuous stream throughout.
func TestSimulcastLayerSelection(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 30*time.Second)
	alice := e.join("sc", "alice")
	bob := e.join("sc", "bob")

	vp8 := webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}
	var layers [2]*webrtc.TrackLocalStaticRTP
	for i, rid := range []string{"q", "h"} {
		tr, err := webrtc.NewTrackLocalStaticRTP(vp8, "video", "cam", webrtc.WithRTPStreamID(rid))
		if err != nil {
			t.Fatal(err)
		}
		layers[i] = tr
	}
	r, err := alice.Request(ctx, protocol.Msg{"type": "publishTrack", "cid": "video", "kind": "video", "source": "camera",
		"layers": []protocol.LayerInfo{{RID: "q", Width: 320, Height: 180}, {RID: "h", Width: 640, Height: 360}}})
	if err != nil {
		t.Fatal(err)
	}
	sid := r["track"].(map[string]any)["sid"].(string)
	sender, err := alice.Pub.AddTrack(layers[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.AddEncoding(layers[1]); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := sender.Read(buf); err != nil {
				return
			}
		}
	}()
	if err := alice.NegotiatePublisher(ctx, false); err != nil {
		t.Fatal(err)
	}
	// Browsers mark simulcast packets with the mid and rid header extensions, which
	// is how a receiver tells the encodings apart; Pion's sender leaves it to us.
	var midID, ridID uint8
	for _, x := range sender.GetParameters().HeaderExtensions {
		switch x.URI {
		case sdp.SDESMidURI:
			midID = uint8(x.ID)
		case sdp.SDESRTPStreamIDURI:
			ridID = uint8(x.ID)
		}
	}
	mid := ""
	for _, tr := range alice.Pub.GetTransceivers() {
		if tr.Sender() == sender {
			mid = tr.Mid()
		}
	}
	if midID == 0 || ridID == 0 || mid == "" {
		t.Fatalf("mid/rid extensions not negotiated (%d, %d, %q)", midID, ridID, mid)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		seq := [2]uint16{1000, 50000}
		ts := [2]uint32{0, 1 << 30}
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for i := range layers {
				p := make([]byte, 200)
				p[0] = 0x10              // S=1
				p[1] = byte(n%10) | 0x01 // inter frame
				if n%10 == 0 {
					p[1] = 0x00 // keyframe every 10 frames
				}
				p[2] = byte(i) // layer mark
				pkt := &rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq[i], Timestamp: ts[i], Marker: true}, Payload: p}
				_ = pkt.Header.SetExtension(midID, []byte(mid))
				_ = pkt.Header.SetExtension(ridID, []byte(layers[i].RID()))
				_ = layers[i].WriteRTP(pkt)
				seq[i]++
				ts[i] += 1800
			}
		}
	}()

	tr := waitTrack(t, bob, 10*time.Second)
	if tr.TrackSid != sid {
		t.Fatalf("got track %s, want %s", tr.TrackSid, sid)
	}
	layerOf := func(p rtp.Packet) byte { return p.Payload[2] }
	pkts := readPackets(t, tr.Remote, 30, 5*time.Second)
	if l := layerOf(pkts[len(pkts)-1]); l != 1 {
		t.Fatalf("default layer %d, want the best (1)", l)
	}
	// A small tile: the low layer is enough.
	if _, err := bob.Request(ctx, protocol.Msg{"type": "updateTrackSettings", "trackSid": sid, "width": 300, "height": 170}); err != nil {
		t.Fatal(err)
	}
	var all []rtp.Packet
	all = append(all, pkts...)
	switched := false
	for i := 0; i < 100 && !switched; i++ {
		p := readPackets(t, tr.Remote, 1, 5*time.Second)[0]
		all = append(all, p)
		switched = layerOf(p) == 0
	}
	if !switched {
		t.Fatal("no switch to the low layer after a small tile size")
	}
	all = append(all, readPackets(t, tr.Remote, 20, 5*time.Second)...)
	for i := 1; i < len(all); i++ {
		if all[i].SequenceNumber != all[i-1].SequenceNumber+1 {
			t.Fatalf("sequence %d after %d across the switch", all[i].SequenceNumber, all[i-1].SequenceNumber)
		}
		if d := int32(all[i].Timestamp - all[i-1].Timestamp); d <= 0 || d > 90000 {
			t.Fatalf("timestamp step %d across the switch", d)
		}
		if all[i].SSRC != all[0].SSRC {
			t.Fatal("SSRC changed across the switch")
		}
	}
	// Quality names work too, and paused stops the stream.
	if _, err := bob.Request(ctx, protocol.Msg{"type": "updateTrackSettings", "trackSid": sid, "quality": "high"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if layerOf(readPackets(t, tr.Remote, 1, 5*time.Second)[0]) == 1 {
			break
		}
		if i > 100 {
			t.Fatal("no switch back to the high layer")
		}
	}
	if _, err := bob.Request(ctx, protocol.Msg{"type": "updateTrackSettings", "trackSid": "TR_none", "quality": "low"}); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("settings for an unknown track: %v", err)
	}
}

// TestBandwidthEstimateFollowsFeedback checks that the server estimates each
// subscriber's bandwidth from its transport-wide feedback (Pion's client sends
// it like a browser) and exposes it with the allocated layers.
func TestBandwidthEstimateFollowsFeedback(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 20*time.Second)
	alice := e.join("bw", "alice")
	bob := e.join("bw", "bob")
	v := newVideo("cam")
	if _, _, err := alice.Publish(ctx, v.track, "camera"); err != nil {
		t.Fatal(err)
	}
	v.run(t)
	readPackets(t, waitTrack(t, bob, 10*time.Second).Remote, 30, 5*time.Second)
	p := e.srv.Manager.Room("bw").ByIdentity("bob")
	// The stream is about 700 kbit/s; the feedback says what bob received, and on
	// a clear path the estimate does not fall below its start.
	waitFor(t, 8*time.Second, "the received rate from feedback", func() bool {
		got, _ := p.Stats()["receivedBps"].(int)
		return got > 300_000 && got < 2_000_000
	})
	if est, _ := p.Stats()["estimateBps"].(int); est < 3_000_000 {
		t.Fatalf("estimate fell to %d on loopback", est)
	}
}
