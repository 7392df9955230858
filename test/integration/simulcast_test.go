package integration

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtcp"
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
	checkICELite(t, alice)
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

// TestDemandFollowsWhatReceiversWant: a publisher that, like the SDK, sends only
// the encodings the server's trackDemand asks for. A receiver that asks for the
// low layer turns the high one off; when it asks for high again, the demand
// must follow that wish (not the layer it currently gets, which is the only one
// still sending) so that the high layer comes back and the receiver gets it.
func TestDemandFollowsWhatReceiversWant(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 40*time.Second)
	alice := e.join("demand", "alice")
	bob := e.join("demand", "bob")

	vp8 := webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}
	rids := []string{"q", "h"}
	var layers [2]*webrtc.TrackLocalStaticRTP
	for i, rid := range rids {
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
	// Keyframe requests, per encoding: the next frame of that layer is a keyframe.
	var wantKey [2]atomic.Bool
	for i, rid := range rids {
		go func() {
			buf := make([]byte, 1500)
			for {
				n, _, err := sender.ReadSimulcast(buf, rid)
				if err != nil {
					return
				}
				if pkts, err := rtcp.Unmarshal(buf[:n]); err == nil {
					for _, p := range pkts {
						switch p.(type) {
						case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
							wantKey[i].Store(true)
						}
					}
				}
			}
		}()
	}
	if err := alice.NegotiatePublisher(ctx, false); err != nil {
		t.Fatal(err)
	}
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
	// The encodings the server asks for, from alice's trackDemand messages; all
	// of them until the first demand.
	var sending [2]atomic.Bool
	sending[0].Store(true)
	sending[1].Store(true)
	demands := make(chan []bool, 64)
	go func() {
		for m := range alice.Events {
			if m["type"] != "trackDemand" || m["trackSid"] != sid {
				continue
			}
			active, _ := m["active"].(bool)
			ls, _ := m["layers"].([]any)
			var got []bool
			for i := range sending {
				on := active && i < len(ls) && ls[i] == true
				sending[i].Store(on)
				got = append(got, on)
			}
			demands <- got
		}
	}()
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
				if !sending[i].Load() {
					continue
				}
				p := make([]byte, 200)
				p[0] = 0x10 // S=1
				p[1] = 0x01 // inter frame
				// Rare periodic keyframes: switches must come from requests.
				if n%100 == 0 || wantKey[i].Swap(false) {
					p[1] = 0x00
				}
				p[2] = byte(i)
				pkt := &rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: seq[i], Timestamp: ts[i], Marker: true}, Payload: p}
				_ = pkt.Header.SetExtension(midID, []byte(mid))
				_ = pkt.Header.SetExtension(ridID, []byte(rids[i]))
				_ = layers[i].WriteRTP(pkt)
				seq[i]++
				ts[i] += 1800
			}
		}
	}()

	tr := waitTrack(t, bob, 10*time.Second)
	layerOf := func(p rtp.Packet) byte { return p.Payload[2] }
	untilLayer := func(want byte, what string) {
		t.Helper()
		for i := 0; ; i++ {
			if layerOf(readPackets(t, tr.Remote, 1, 5*time.Second)[0]) == want {
				return
			}
			if i > 300 {
				t.Fatalf("no packet of layer %d: %s", want, what)
			}
		}
	}
	untilLayer(1, "the best layer by default")
	waitDemand := func(want []bool) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case d := <-demands:
				if d[0] == want[0] && d[1] == want[1] {
					return
				}
			case <-deadline:
				t.Fatalf("no trackDemand %v within 5 s", want)
			}
		}
	}

	if _, err := bob.Request(ctx, protocol.Msg{"type": "updateTrackSettings", "trackSid": sid, "quality": "low"}); err != nil {
		t.Fatal(err)
	}
	waitDemand([]bool{true, false})
	untilLayer(0, "after asking for low")
	// The high layer is off at the publisher now; wait until the server sees it
	// silent, so that only the receiver's wish can bring it back.
	time.Sleep(1500 * time.Millisecond)

	if _, err := bob.Request(ctx, protocol.Msg{"type": "updateTrackSettings", "trackSid": sid, "quality": "high"}); err != nil {
		t.Fatal(err)
	}
	waitDemand([]bool{true, true})
	untilLayer(1, "after asking for high again: the publisher was asked to resume it")
}
