package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

// TestAudienceThroughLeanEgress: with the lean egress, a participant that
// may not publish has no PeerConnection at all: its publisher connection (the
// room data channels) is a data session, its subscriber connection the lean
// egress. It receives video, exchanges data messages both ways, keeps them
// through an ICE restart, and a client that can only use ICE-TCP gets lean
// sessions over ICE-TCP for both.
func TestAudienceThroughLeanEgress(t *testing.T) {
	e := start(t, func(c *config.Config) { c.RTC.LeanEgress = true })
	ctx := ctxT(t, 30*time.Second)
	alice := e.join("aud", "alice")
	v := newVideo("cam")
	if _, _, err := alice.Publish(ctx, v.track, "camera"); err != nil {
		t.Fatal(err)
	}
	v.run(t)

	audience := auth.Grants{Subscribe: true, PublishData: true}
	bob, err := client.Join(ctx, e.ws, e.token("aud", "bob", audience, time.Hour), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	tr := waitTrack(t, bob, 10*time.Second)
	readPackets(t, tr.Remote, 20, 5*time.Second)
	for name, pc := range map[string]*webrtc.PeerConnection{"publisher": bob.Pub, "subscriber": bob.Sub} {
		if d := pc.RemoteDescription(); d == nil || !strings.Contains(d.SDP, "a=ice-lite") {
			t.Errorf("bob's %s connection is not served by the lean egress", name)
		}
	}
	// bob's two sides and alice's publisher session (alone with her own
	// track, she has no subscriber side yet).
	waitFor(t, 5*time.Second, "three lean sessions", func() bool { return e.srv.LeanEgress.Viewers() == 3 })

	exchange := func(when string) {
		t.Helper()
		if err := alice.SendData([]byte("to the audience "+when), true, true); err != nil {
			t.Fatal(err)
		}
		if err := bob.SendData([]byte("from the audience "+when), true, false); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*client.Client{bob, alice} {
			select {
			case d := <-c.DataIn:
				if !strings.HasSuffix(string(d.Payload), when) {
					t.Fatalf("%s: got %q", when, d.Payload)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: a data message did not arrive", when)
			}
		}
	}
	exchange("first")

	// An ICE restart of the data session keeps its channels.
	before := bob.Pub.RemoteDescription().SDP
	if err := bob.NegotiatePublisher(ctx, true); err != nil {
		t.Fatal(err)
	}
	if bob.Pub.RemoteDescription().SDP == before {
		t.Fatal("the ICE restart answer is the old one")
	}
	time.Sleep(300 * time.Millisecond)
	exchange("after the restart")

	// A client that can only use ICE-TCP gets lean sessions too.
	tcpOnly := client.LoopbackAPI(func(se *webrtc.SettingEngine) {
		se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeTCP4})
	})
	carol, err := client.Join(ctx, e.ws, e.token("aud", "carol", audience, time.Hour), client.Options{API: tcpOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer carol.Close()
	readPackets(t, waitTrack(t, carol, 10*time.Second).Remote, 20, 5*time.Second)
	for name, pc := range map[string]*webrtc.PeerConnection{"publisher": carol.Pub, "subscriber": carol.Sub} {
		if d := pc.RemoteDescription(); d == nil || !strings.Contains(d.SDP, "a=ice-lite") {
			t.Errorf("carol's %s connection is not served by the lean egress", name)
		}
	}
	if err := alice.SendData([]byte("to carol"), true, true, "carol"); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-carol.DataIn:
		if string(d.Payload) != "to carol" {
			t.Fatalf("carol got %q", d.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("carol's data message did not arrive")
	}

	n := e.srv.LeanEgress.Viewers()
	bob.Close()
	waitFor(t, 5*time.Second, "bob's sessions to go", func() bool { return e.srv.LeanEgress.Viewers() == n-2 })
}

// TestAudienceChoiceWithoutCandidates: an audience member's first publisher
// offer waits for the client's candidates; one that sends none gets the
// lean server's answer (ICE-lite, with its ICE-TCP candidate for a client
// that cannot use UDP) after about a second, and junk offered meanwhile is
// refused without ending the session.
func TestAudienceChoiceWithoutCandidates(t *testing.T) {
	e := start(t, func(c *config.Config) { c.RTC.LeanEgress = true })
	r := dialRaw(t, e)
	r.send(t, protocol.Msg{"type": "join", "protocol": 1, "token": e.token("aud2", "quiet", auth.Grants{Subscribe: true, PublishData: true}, time.Hour)})
	if m, _ := r.recv(t); m["type"] != "joined" {
		t.Fatalf("join: %v", m)
	}
	pc, err := client.LoopbackAPI().NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, err := pc.CreateDataChannel("_reliable", nil); err != nil {
		t.Fatal(err)
	}
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.SetLocalDescription(offer); err != nil { // candidates are gathered but never sent
		t.Fatal(err)
	}
	start := time.Now()
	r.send(t, protocol.Msg{"type": "offer", "id": 1, "sdp": offer.SDP})
	r.send(t, protocol.Msg{"type": "ping", "id": 2}) // read while the offer waits
	r.send(t, protocol.Msg{"type": "offer", "id": 5, "sdp": offer.SDP})
	// One first offer at a time: whichever reaches the participant second
	// is refused, the other answered.
	var answer, refused protocol.Msg
	for answer == nil || refused == nil {
		m, _ := r.recv(t)
		if m == nil {
			t.Fatalf("replies to two first offers: answer %v, refusal %v", answer != nil, refused != nil)
		}
		switch id := m["id"]; {
		case m["type"] == "answer" && (id == float64(1) || id == float64(5)):
			answer = m
		case m["type"] == "error" && (id == float64(1) || id == float64(5)):
			refused = m
		}
	}
	if answer["id"] == refused["id"] {
		t.Fatalf("offer %v both answered and refused", answer["id"])
	}
	if waited := time.Since(start); waited < 900*time.Millisecond || waited > 3*time.Second {
		t.Errorf("the answer came after %v, want about a second", waited)
	}
	sdp, _ := answer["sdp"].(string)
	if !strings.Contains(sdp, "a=ice-lite") || !strings.Contains(sdp, "tcptype passive") || !strings.Contains(sdp, "webrtc-datachannel") {
		t.Errorf("without candidates the publisher side should be the lean server's, with ICE-TCP:\n%s", sdp)
	}
	// Junk as a renegotiation: refused, the session goes on.
	r.send(t, protocol.Msg{"type": "offer", "id": 3, "sdp": "v=0\r\nnot an offer"})
	for {
		m, _ := r.recv(t)
		if m == nil {
			t.Fatal("no reply to the junk offer")
		}
		if m["type"] == "error" {
			break
		}
	}
	r.send(t, protocol.Msg{"type": "ping", "id": 4})
	for {
		m, _ := r.recv(t)
		if m == nil {
			t.Fatal("the session ended after a junk offer")
		}
		if m["type"] == "pong" || m["id"] == float64(4) {
			break
		}
	}
}
