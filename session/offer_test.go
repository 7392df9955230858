package session

import (
	"strings"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/rtc/lean"
)

var roomVideo = Track{Kind: "video", MimeType: "video/VP8", ClockRate: 90000, ID: "TR_v", StreamID: "PA_x"}
var roomAudio = Track{Kind: "audio", MimeType: "audio/opus", ClockRate: 48000, Channels: 2, Fmtp: "minptime=10;useinbandfec=1", ID: "TR_a", StreamID: "PA_x"}

// pionClient is a room client's subscriber connection: a Pion
// PeerConnection on loopback, answering what the server offers.
func pionClient(t *testing.T) (*webrtc.PeerConnection, chan *webrtc.TrackRemote) {
	t.Helper()
	m := &webrtc.MediaEngine{}
	if err := m.RegisterDefaultCodecs(); err != nil {
		t.Fatal(err)
	}
	se := webrtc.SettingEngine{}
	se.SetIncludeLoopbackCandidate(true)
	se.SetICEMulticastDNSMode(0)
	se.SetInterfaceFilter(func(name string) bool { return name == "lo" })
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	pc, err := webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithSettingEngine(se)).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	tracks := make(chan *webrtc.TrackRemote, 8)
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { tracks <- tr })
	return pc, tracks
}

// answerWith applies the server's offer to pc and returns pc's answer.
func answerWith(t *testing.T, pc *webrtc.PeerConnection, offer string) string {
	t.Helper()
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
		t.Fatalf("the client refused the offer: %v\n%s", err, offer)
	}
	ans, err := pc.CreateAnswer(nil)
	if err != nil {
		t.Fatal(err)
	}
	done := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(ans); err != nil {
		t.Fatal(err)
	}
	<-done
	return pc.LocalDescription().SDP
}

// TestSubscriberOfferedToPion: the server offers a room subscriber two
// tracks, a Pion PeerConnection answers (setup:passive, so the server is the
// DTLS client), media written to the session arrives, and a track that goes
// leaves its section to the next one, which the client sees arrive as a new
// track.
func TestSubscriberOfferedToPion(t *testing.T) {
	s := startServer(t)
	ev := newEvents()
	v, err := s.NewSubscriber(ev)
	if err != nil {
		t.Fatal(err)
	}
	video, err := v.AddTrack(roomVideo)
	if err != nil {
		t.Fatal(err)
	}
	audio, err := v.AddTrack(roomAudio)
	if err != nil {
		t.Fatal(err)
	}
	if video.PT != 96 || audio.PT != 111 || video.Mid == audio.Mid {
		t.Fatalf("senders %+v %+v", video, audio)
	}
	offer, err := v.Offer(false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a=ice-lite", "a=setup:actpass", "a=sendonly", "a=msid:PA_x TR_v", "a=rtpmap:111 opus/48000/2", "transport-wide-cc", "a=rtcp-fb:96 nack pli"} {
		if !strings.Contains(offer, want) {
			t.Errorf("the offer has no %q", want)
		}
	}
	pc, tracks := pionClient(t)
	acc, err := v.ApplyAnswer(answerWith(t, pc, offer))
	if err != nil {
		t.Fatal(err)
	}
	if len(acc) != 2 || !acc[0].OK || !acc[1].OK || acc[0].TransportCC != extTransportCC || acc[0].SSRC != video.SSRC {
		t.Fatalf("accepted %+v", acc)
	}
	if _, err := v.ApplyAnswer(pc.LocalDescription().SDP); err == nil {
		t.Error("a second answer to one offer was applied")
	}
	wait(t, ev.dtls, "DTLS")
	if !v.off.dtlsClient.Load() {
		t.Error("Pion answered passive, yet the server was not the DTLS client")
	}

	// Media flows: the client sees the video track and reads its packets.
	stop := make(chan struct{})
	defer close(stop)
	send := func(ssrc uint32, pt uint8) {
		h := rtp.Header{Version: 2, PayloadType: pt, SSRC: ssrc}
		payload := []byte{0x10, 0, 0x9d, 0x01, 0x2a, 1, 2, 3}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			h.SequenceNumber, h.Timestamp, h.Marker = uint16(i), uint32(i*3000), true
			if _, err := v.WriteRTP(&h, payload); err != nil {
				return
			}
		}
	}
	go send(video.SSRC, video.PT)
	readFrom := func(id string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case tr := <-tracks:
				if tr.ID() != id {
					continue
				}
				p, _, err := tr.ReadRTP()
				if err != nil || len(p.Payload) != 8 {
					t.Fatalf("read %v: %v", p, err)
				}
				return
			case <-deadline:
				t.Fatalf("the client never received track %s", id)
			}
		}
	}
	readFrom("TR_v")

	// The video goes and another comes: it reuses the section once an answer
	// took the old one off, and arrives at the client as a new track.
	v.RemoveTrack(video.Mid)
	offer, err = v.Offer(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.ApplyAnswer(answerWith(t, pc, offer)); err != nil {
		t.Fatal(err)
	}
	next := roomVideo
	next.ID = "TR_v2"
	second, err := v.AddTrack(next)
	if err != nil {
		t.Fatal(err)
	}
	if second.Mid != video.Mid {
		t.Errorf("the new video got section %s, not the freed %s", second.Mid, video.Mid)
	}
	offer, err = v.Offer(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.ApplyAnswer(answerWith(t, pc, offer)); err != nil {
		t.Fatal(err)
	}
	go send(second.SSRC, second.PT)
	readFrom("TR_v2")
}

// TestSubscriberRefusesBadAnswers: answers come from the network.
func TestSubscriberRefusesBadAnswers(t *testing.T) {
	s := startServer(t)
	v, err := s.NewSubscriber(newEvents())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.AddTrack(roomVideo); err != nil {
		t.Fatal(err)
	}
	cert, err := lean.NewCert()
	if err != nil {
		t.Fatal(err)
	}
	answer := func(setup, fp string, sections int) string {
		a := "v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"
		for i := 0; i < sections; i++ {
			a += "m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n" +
				"a=fingerprint:sha-256 " + fp + "\r\na=setup:" + setup + "\r\na=recvonly\r\na=rtcp-mux\r\na=rtpmap:96 VP8/90000\r\n"
		}
		return a
	}
	if _, err := v.ApplyAnswer(answer("active", cert.Fingerprint, 1)); err == nil {
		t.Error("an answer before any offer was applied")
	}
	if _, err := v.Offer(false); err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]string{
		"garbage":          "not sdp at all",
		"no fingerprint":   strings.ReplaceAll(answer("active", cert.Fingerprint, 1), "a=fingerprint:sha-256 "+cert.Fingerprint+"\r\n", ""),
		"bad fingerprint":  answer("active", "ZZ:TOP", 1),
		"setup:actpass":    answer("actpass", cert.Fingerprint, 1),
		"two sections":     answer("active", cert.Fingerprint, 2),
		"no ice":           strings.ReplaceAll(answer("active", cert.Fingerprint, 1), "a=ice-ufrag:abcd\r\n", ""),
		"another mid":      strings.ReplaceAll(answer("active", cert.Fingerprint, 1), "a=mid:0", "a=mid:7"),
		"long credentials": strings.ReplaceAll(answer("active", cert.Fingerprint, 1), "a=ice-ufrag:abcd", "a=ice-ufrag:"+strings.Repeat("u", 300)),
	} {
		if _, err := v.ApplyAnswer(a); err == nil {
			t.Errorf("%s: applied", name)
		}
	}
	acc, err := v.ApplyAnswer(answer("active", cert.Fingerprint, 1))
	if err != nil || len(acc) != 1 || !acc[0].OK || acc[0].TransportCC != 0 {
		t.Fatalf("a good answer: %+v, %v", acc, err)
	}
	// A new DTLS session is not supported: the fingerprint stays.
	if _, err := v.Offer(false); err != nil {
		t.Fatal(err)
	}
	other, err := lean.NewCert()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.ApplyAnswer(answer("active", other.Fingerprint, 1)); err == nil {
		t.Error("an answer with another fingerprint was applied")
	}
}

// TestSubscriberKeepsDeclinedSectionOut: a section the client rejected (port 0,
// as a browser does for a codec it cannot decode) declines that track only, and
// is not given to a later track: the client keeps it rejected.
func TestSubscriberKeepsDeclinedSectionOut(t *testing.T) {
	s := startServer(t)
	v, err := s.NewSubscriber(newEvents())
	if err != nil {
		t.Fatal(err)
	}
	high := roomVideo
	high.MimeType, high.Fmtp = "video/H264", "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=64000d"
	video, err := v.AddTrack(high)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.AddTrack(roomAudio); err != nil {
		t.Fatal(err)
	}
	cert, err := lean.NewCert()
	if err != nil {
		t.Fatal(err)
	}
	// The client's answer: the video section rejected, the audio taken.
	answer := func() string {
		return "v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 1\r\n" +
			"m=video 0 UDP/TLS/RTP/SAVPF 0\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=recvonly\r\na=rtcp-mux\r\n" +
			"m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:1\r\na=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n" +
			"a=fingerprint:sha-256 " + cert.Fingerprint + "\r\na=setup:active\r\na=recvonly\r\na=rtcp-mux\r\na=rtpmap:111 opus/48000/2\r\n"
	}
	if _, err := v.Offer(false); err != nil {
		t.Fatal(err)
	}
	acc, err := v.ApplyAnswer(answer())
	if err != nil || len(acc) != 2 || acc[0].OK || !acc[1].OK {
		t.Fatalf("answer with the video rejected: %+v, %v", acc, err)
	}
	// The High publisher goes and another video comes: it gets a new section.
	v.RemoveTrack(video.Mid)
	if _, err := v.Offer(false); err != nil {
		t.Fatal(err)
	}
	if _, err := v.ApplyAnswer(answer()); err != nil {
		t.Fatal(err)
	}
	next, err := v.AddTrack(roomVideo)
	if err != nil {
		t.Fatal(err)
	}
	if next.Mid == video.Mid {
		t.Fatalf("the new video got section %s, which the client rejected", next.Mid)
	}
}
