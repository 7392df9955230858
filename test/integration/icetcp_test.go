package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
)

// tcpOnlyAPI is a Pion client that can reach the server only over ICE-TCP.
func tcpOnlyAPI() *webrtc.API {
	return client.LoopbackAPI(func(se *webrtc.SettingEngine) {
		se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeTCP4})
	})
}

// tcpOffer is pcOffer for a client restricted to ICE-TCP.
func tcpOffer(t *testing.T, setup func(pc *webrtc.PeerConnection)) (*webrtc.PeerConnection, string) {
	return apiOffer(t, tcpOnlyAPI(), setup)
}

// selectedTCP fails the test unless the ICE transport's selected pair is TCP.
func selectedTCP(t *testing.T, who string, ice *webrtc.ICETransport) {
	t.Helper()
	var p *webrtc.ICECandidatePair
	waitFor(t, 5*time.Second, who+"'s selected pair", func() bool {
		p, _ = ice.GetSelectedCandidatePair()
		return p != nil
	})
	if p.Local.Protocol != webrtc.ICEProtocolTCP || p.Remote.Protocol != webrtc.ICEProtocolTCP {
		t.Fatalf("%s: selected pair %v, want ICE-TCP", who, p)
	}
}

// leanAnswer fails the test unless an SDP of the server's is the lean
// stack's (ICE-lite) with a passive TCP host candidate.
func leanAnswer(t *testing.T, who, sdp string) {
	t.Helper()
	if !strings.Contains(sdp, "a=ice-lite") || !strings.Contains(sdp, " tcp ") || !strings.Contains(sdp, "typ host tcptype passive") {
		t.Fatalf("%s: not a lean answer with an ICE-TCP candidate:\n%s", who, sdp)
	}
}

// TestICETCPThroughLeanStack: clients that can reach the server only over
// TCP (a WHIP publisher, a WHEP viewer, a room participant that publishes,
// subscribes and sends data) are served by the lean stack, each a session of
// the lean server over ICE-TCP, none a PeerConnection.
func TestICETCPThroughLeanStack(t *testing.T) {
	e := start(t)
	ctx := ctxT(t, 40*time.Second)
	pubTok := e.token("tcp", "obs", auth.Grants{Publish: true}, time.Hour)
	subTok := e.token("tcp", "viewer", auth.Grants{Subscribe: true}, time.Hour)

	// WHIP over TCP.
	v := newVideo("v")
	a := newAudio("a")
	pub, offer := tcpOffer(t, func(pc *webrtc.PeerConnection) {
		if _, err := pc.AddTrack(v.track); err != nil {
			t.Fatal(err)
		}
		if _, err := pc.AddTrack(a.track); err != nil {
			t.Fatal(err)
		}
	})
	// Pion's TCP-only client offers no candidate: it dials the server's
	// passive ones.
	if strings.Contains(offer, " udp ") {
		t.Fatalf("the client is not TCP-only:\n%s", offer)
	}
	resp, answer := post(t, e.url+"/whip/tcp", "application/sdp", pubTok, offer)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("WHIP: %d %s", resp.StatusCode, answer)
	}
	leanAnswer(t, "WHIP", answer)
	if err := pub.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		t.Fatal(err)
	}
	v.run(t)
	a.run(t)
	waitFor(t, 10*time.Second, "WHIP tracks published over TCP", func() bool {
		r := e.srv.Manager.Room("tcp")
		return r != nil && len(r.Participants()) == 1 && len(r.Participants()[0].Info().Tracks) == 2
	})
	selectedTCP(t, "WHIP publisher", pub.SCTP().Transport().ICETransport())
	if n := e.srv.Sessions.Viewers(); n != 1 {
		t.Fatalf("%d lean sessions after the WHIP publisher, want 1", n)
	}

	// WHEP over TCP.
	tracks := make(chan *webrtc.TrackRemote, 2)
	var recv *webrtc.RTPReceiver
	viewer, voffer := tcpOffer(t, func(pc *webrtc.PeerConnection) {
		for _, k := range []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo, webrtc.RTPCodecTypeAudio} {
			tr, _ := pc.AddTransceiverFromKind(k, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly})
			if recv == nil {
				recv = tr.Receiver()
			}
		}
		pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { tracks <- tr })
	})
	resp, vanswer := post(t, e.url+"/whep/tcp", "application/sdp", subTok, voffer)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("WHEP: %d %s", resp.StatusCode, vanswer)
	}
	leanAnswer(t, "WHEP", vanswer)
	if err := viewer.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: vanswer}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		select {
		case tr := <-tracks:
			readPackets(t, tr, 10, 5*time.Second)
		case <-time.After(10 * time.Second):
			t.Fatal("the WHEP viewer over TCP got no track")
		}
	}
	selectedTCP(t, "WHEP viewer", recv.Transport().ICETransport())
	if n := e.srv.Sessions.Viewers(); n != 2 {
		t.Fatalf("%d lean sessions after the WHEP viewer, want 2", n)
	}

	// A room: alice over UDP, carol over TCP only; carol publishes,
	// subscribes to the WHIP tracks and alice's, and exchanges data.
	alice := e.join("tcp", "alice")
	av := newVideo("alice-cam")
	if _, _, err := alice.Publish(ctx, av.track, "camera"); err != nil {
		t.Fatal(err)
	}
	av.run(t)
	waitFor(t, 10*time.Second, "alice's lean sessions", func() bool { return e.srv.Sessions.Viewers() == 4 })

	carol, err := client.Join(ctx, e.ws, e.token("tcp", "carol", all, time.Hour), client.Options{API: tcpOnlyAPI()})
	if err != nil {
		t.Fatal(err)
	}
	defer carol.Close()
	cv := newVideo("carol-cam")
	if _, _, err := carol.Publish(ctx, cv.track, "camera"); err != nil {
		t.Fatal(err)
	}
	cv.run(t)
	got := map[string]bool{}
	deadline := time.After(15 * time.Second)
	for len(got) < 3 {
		select {
		case tr := <-carol.Tracks:
			readPackets(t, tr.Remote, 10, 5*time.Second)
			got[tr.Remote.ID()] = true
		case <-deadline:
			t.Fatalf("carol received %v, want the WHIP video and audio and alice's camera", got)
		}
	}
	for name, pc := range map[string]*webrtc.PeerConnection{"publisher": carol.Pub, "subscriber": carol.Sub} {
		d := pc.RemoteDescription()
		if d == nil {
			t.Fatalf("carol's %s connection has no remote description", name)
		}
		leanAnswer(t, "carol's "+name+" connection", d.SDP)
		selectedTCP(t, "carol's "+name+" connection", pc.SCTP().Transport().ICETransport())
	}
	// alice receives the WHIP tracks and carol's camera, published over TCP.
	seen := map[string]bool{}
	deadline = time.After(15 * time.Second)
	for len(seen) < 3 {
		select {
		case tr := <-alice.Tracks:
			readPackets(t, tr.Remote, 10, 5*time.Second)
			seen[tr.Remote.ID()] = true
		case <-deadline:
			t.Fatalf("alice received %v, want the WHIP video and audio and carol's camera", seen)
		}
	}
	// Both of carol's sides are lean sessions: no PeerConnection for her.
	waitFor(t, 5*time.Second, "carol's two lean sessions", func() bool { return e.srv.Sessions.Viewers() == 6 })

	if err := alice.SendData([]byte("to carol"), true, true, "carol"); err != nil {
		t.Fatal(err)
	}
	if err := carol.SendData([]byte("from carol"), true, true); err != nil {
		t.Fatal(err)
	}
	for who, c := range map[string]*client.Client{"carol": carol, "alice": alice} {
		select {
		case d := <-c.DataIn:
			if !strings.Contains(string(d.Payload), "carol") {
				t.Fatalf("%s got %q", who, d.Payload)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the data message did not arrive", who)
		}
	}

	// An ICE restart over TCP (the client dials new connections and drops
	// the old ones) keeps carol's sessions and her data channels.
	if err := carol.NegotiatePublisher(ctx, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := carol.SendData([]byte("from carol after the restart"), true, true); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-alice.DataIn:
		if !strings.Contains(string(d.Payload), "after the restart") {
			t.Fatalf("alice got %q", d.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("carol's data message after her ICE restart did not arrive")
	}
	if n := e.srv.Sessions.Viewers(); n != 6 {
		t.Fatalf("%d lean sessions after carol's ICE restart, want 6", n)
	}

	// Leaving closes carol's TCP connections and her sessions.
	carol.Close()
	waitFor(t, 10*time.Second, "carol's sessions to go", func() bool { return e.srv.Sessions.Viewers() == 4 })
}
