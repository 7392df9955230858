package session

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/rtc/datachan"
)

// dataEvents is a DataHandler that echoes every message back on its channel.
type dataEvents struct {
	*events
	mu    sync.Mutex
	chans []*datachan.Channel
	got   chan string
}

func (e *dataEvents) OnDataChannel(dc *datachan.Channel) {
	e.mu.Lock()
	e.chans = append(e.chans, dc)
	e.mu.Unlock()
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, str, err := dc.ReadMessage(buf)
			if err != nil {
				return
			}
			e.got <- dc.Label() + ":" + string(buf[:n])
			if err := dc.Send(buf[:n], str); err != nil {
				return
			}
		}
	}()
}

// offerWith makes pc's offer, with its candidates in it.
func offerWith(t *testing.T, pc *webrtc.PeerConnection, opt *webrtc.OfferOptions) string {
	t.Helper()
	o, err := pc.CreateOffer(opt)
	if err != nil {
		t.Fatal(err)
	}
	done := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(o); err != nil {
		t.Fatal(err)
	}
	<-done
	return pc.LocalDescription().SDP
}

// TestDataSessionWithPion: a Pion PeerConnection offers two data channels
// (as a room client's publisher connection does); the data session answers
// them without a PeerConnection, echoes messages both ways, keeps the
// channels through an ICE restart, and ends when the client closes.
func TestDataSessionWithPion(t *testing.T) {
	s := startServer(t)
	ev := &dataEvents{events: newEvents(), got: make(chan string, 16)}
	pc, _ := pionClient(t)
	ordered := false
	zero := uint16(0)
	rel, err := pc.CreateDataChannel("_reliable", nil)
	if err != nil {
		t.Fatal(err)
	}
	lossy, err := pc.CreateDataChannel("_lossy", &webrtc.DataChannelInit{Ordered: &ordered, MaxRetransmits: &zero})
	if err != nil {
		t.Fatal(err)
	}
	echoes := make(chan string, 16)
	for _, dc := range []*webrtc.DataChannel{rel, lossy} {
		dc.OnMessage(func(m webrtc.DataChannelMessage) { echoes <- dc.Label() + ":" + string(m.Data) })
	}
	opened := make(chan string, 2)
	rel.OnOpen(func() { opened <- "_reliable" })
	lossy.OnOpen(func() { opened <- "_lossy" })

	offer := offerWith(t, pc, nil)
	v, answer, err := s.NewDataSession(offer, 65536, ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a=ice-lite", "a=setup:passive", "m=application 9 UDP/DTLS/SCTP webrtc-datachannel", "a=sctp-port:5000", "a=max-message-size:65536"} {
		if !strings.Contains(answer, want) {
			t.Errorf("the answer has no %q:\n%s", want, answer)
		}
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		t.Fatalf("the client refused the answer: %v\n%s", err, answer)
	}
	wait(t, ev.dtls, "DTLS")
	wait(t, opened, "a channel open")
	wait(t, opened, "the other channel open")
	if err := rel.SendText("hello"); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, ev.got, "the message at the server"); got != "_reliable:hello" {
		t.Fatalf("server got %q", got)
	}
	if got := wait(t, echoes, "the echo"); got != "_reliable:hello" {
		t.Fatalf("client got %q", got)
	}
	big := bytes.Repeat([]byte("x"), 60000)
	if err := rel.Send(big); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, ev.got, "a 60 kB message"); len(got) != len("_reliable:")+len(big) {
		t.Fatalf("server got %d bytes", len(got))
	}
	wait(t, echoes, "the 60 kB echo")

	// Junk from an address that passed an ICE check (a second candidate of
	// the client's): each datagram is dropped and counted, the channels go on.
	sendJunk(t, s, v, offer, answer, [][]byte{
		append([]byte{0x80, 0x60}, bytes.Repeat([]byte{7}, 40)...), // RTP
		append([]byte{0x80, 0xc8}, bytes.Repeat([]byte{7}, 40)...), // RTCP
		{0xff, 0xfe, 0xfd}, // nothing RFC 7983 knows
	})
	if err := rel.SendText("after junk"); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, ev.got, "a message after the junk"); got != "_reliable:after junk" {
		t.Fatalf("server got %q", got)
	}
	wait(t, echoes, "the echo after the junk")

	// An ICE restart: new credentials both ways, the channels stay.
	re := offerWith(t, pc, &webrtc.OfferOptions{ICERestart: true})
	answer2, err := v.Reoffer(re)
	if err != nil {
		t.Fatal(err)
	}
	if iceUfrag(answer2) == iceUfrag(answer) {
		t.Error("an ICE restart kept the server's ufrag")
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer2}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := lossy.SendText("after restart"); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, ev.got, "a message after the restart"); got != "_lossy:after restart" {
		t.Fatalf("server got %q", got)
	}
	wait(t, echoes, "the echo after the restart")

	// A renegotiation may not change the fingerprint.
	other, _ := pionClient(t)
	if _, err := other.CreateDataChannel("x", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Reoffer(offerWith(t, other, nil)); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Errorf("an offer with another fingerprint: %v", err)
	}

	_ = pc.Close()
	if r := wait(t, ev.closed, "close"); r == "" {
		t.Error("no reason")
	}
	if s.Viewers() != 0 {
		t.Errorf("%d sessions left", s.Viewers())
	}
}

func icePwd(sdp string) string {
	for _, l := range strings.Split(sdp, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "a=ice-pwd:"); ok {
			return v
		}
	}
	return ""
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !f(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func iceUfrag(sdp string) string {
	for _, l := range strings.Split(sdp, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "a=ice-ufrag:"); ok {
			return v
		}
	}
	return ""
}

// TestDataSessionBadOffers: offers without a data section, or without what
// DTLS and ICE need, are refused.
func TestDataSessionBadOffers(t *testing.T) {
	s := startServer(t)
	pc, _ := pionClient(t)
	if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo); err != nil {
		t.Fatal(err)
	}
	media := offerWith(t, pc, nil)
	ev := &dataEvents{events: newEvents(), got: make(chan string, 1)}
	for name, o := range map[string]string{
		"media only":     media,
		"no fingerprint": strings.ReplaceAll(media, "a=fingerprint:", "a=x-fingerprint:"),
		"garbage":        "v=0\r\nnonsense",
		"empty":          "",
	} {
		if _, _, err := s.NewDataSession(o, 65536, ev); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if s.Viewers() != 0 {
		t.Errorf("%d sessions left", s.Viewers())
	}
}

// sendJunk sends each datagram of junk to session v from a second address
// of the client's (one that passed an ICE check with the session's
// credentials), and waits until the server has dropped them all.
func sendJunk(t *testing.T, s *Server, v *DataSession, offer, answer string, junk [][]byte) {
	t.Helper()
	j := newClient(t)
	j.ufrag, j.sufrag, j.spwd = iceUfrag(offer), iceUfrag(answer), icePwd(answer)
	j.server = s.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	if err := j.check(false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the junk address to pass its check", func() bool { s.mu.RLock(); defer s.mu.RUnlock(); return len(v.addrs) >= 2 })
	before := s.Dropped()
	for _, b := range junk {
		_, _ = j.conn.WriteToUDPAddrPort(b, j.server)
	}
	waitFor(t, "the junk to be dropped", func() bool { return s.Dropped() >= before+uint64(len(junk)) })
}
