package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
)

// TestAudience: a participant that may not publish has a data session for
// its publisher side (the room data channels) and a subscriber session. It
// receives video, exchanges data messages both ways, keeps them through an
// ICE restart, and a client that can only use ICE-TCP is served the same way.
func TestAudience(t *testing.T) {
	e := start(t)
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
			t.Errorf("bob's %s connection is not served by the session server", name)
		}
	}
	// bob's two sides and alice's (her subscriber side has nothing to
	// offer yet, but is there).
	waitFor(t, 5*time.Second, "four sessions", func() bool { return e.srv.Sessions.Viewers() == 4 })

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

	// A client that can only use ICE-TCP.
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
			t.Errorf("carol's %s connection is not served by the session server", name)
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

	n := e.srv.Sessions.Viewers()
	bob.Close()
	waitFor(t, 5*time.Second, "bob's sessions to go", func() bool { return e.srv.Sessions.Viewers() == n-2 })
}

// TestAudienceOfferWithoutCandidates: an audience member's first publisher
// offer is answered at once by a data session, whether the client trickles
// candidates or not (ICE-lite learns its address from its checks); a second
// offer is a renegotiation of the same session, and junk offered then is
// refused without ending the session.
func TestAudienceOfferWithoutCandidates(t *testing.T) {
	e := start(t)
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
	r.send(t, protocol.Msg{"type": "offer", "id": 5, "sdp": offer.SDP})
	answers := map[float64]string{}
	for len(answers) < 2 {
		m, _ := r.recv(t)
		if m == nil {
			t.Fatalf("answers to two offers: %d", len(answers))
		}
		if id, _ := m["id"].(float64); m["type"] == "answer" && (id == 1 || id == 5) {
			answers[id], _ = m["sdp"].(string)
		} else if m["type"] == "error" {
			t.Fatalf("an offer was refused: %v", m)
		}
	}
	if waited := time.Since(start); waited > 900*time.Millisecond {
		t.Errorf("the answers came after %v, want at once", waited)
	}
	for id, sdp := range answers {
		if !strings.Contains(sdp, "a=ice-lite") || !strings.Contains(sdp, "webrtc-datachannel") {
			t.Errorf("answer %v is not a data session's:\n%s", id, sdp)
		}
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
