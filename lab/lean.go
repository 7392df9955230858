package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/rtc/datachan"
	"github.com/petrel-sfu/petrel/rtc/sctptune"
	"github.com/petrel-sfu/petrel/session"
)

// The petrel-lean stack: host b is what the server gives a room's audience
// for its data channels, a data session (session/data.go: ICE-lite,
// DTLS and pion/sctp on a socket the session's server reads, no
// PeerConnection), and host a is the tuned Pion PeerConnection offering to
// it, as a client would.

// leanMeter is a data session's handler that feeds the meter.
type leanMeter struct{ m *meter }

func (leanMeter) OnICE()                 {}
func (leanMeter) OnDTLS()                {}
func (leanMeter) OnRTCP(_ []rtcp.Packet) {}
func (leanMeter) OnClose(_ string)       {}

func (l leanMeter) OnDataChannel(dc *datachan.Channel) {
	deliver := l.m.channel(dc.Label())
	if deliver == nil {
		return
	}
	go func() {
		buf := make([]byte, 1<<20)
		for {
			n, err := dc.Read(buf)
			if err != nil {
				return
			}
			deliver(n, buf)
		}
	}()
}

// dcAnswerLean is dcAnswer with a lean data session in place of the
// PeerConnection.
func dcAnswerLean(c PeerConfig) (Result, error) {
	m := newMeter(c.Duration)
	var res Result
	err := leanSession(c, leanMeter{m}, func(v *session.DataSession, _ <-chan error) error {
		select {
		case <-m.done:
		case <-time.After(c.Duration + 30*time.Second):
			res = m.result("petrel-lean", c.Probe)
			return fmt.Errorf("no bulk data within 30 s (session ready %v)", v.Ready())
		}
		res = m.result("petrel-lean", c.Probe)
		return nil
	})
	return res, err
}

// leanSender is a data session's handler that sends: bulk data on the
// client's "bulk" channel, probes on its "probe" channel.
type leanSender struct {
	t    sctptune.Tuning
	stop chan struct{}
}

func (leanSender) OnICE()                 {}
func (leanSender) OnDTLS()                {}
func (leanSender) OnRTCP(_ []rtcp.Packet) {}
func (leanSender) OnClose(_ string)       {}

func (l leanSender) OnDataChannel(dc *datachan.Channel) {
	switch dc.Label() {
	case "bulk":
		go sendBulk(petrelBulk{dc}, l.t, l.stop)
	case "probe":
		go prober(func(b []byte) error { return dc.Send(b, false) }, l.stop)
	}
}

// dcAnswerSendLean is dcAnswerSend with a lean data session: Petrel's own
// SCTP sends to the browser, which measures.
func dcAnswerSendLean(c PeerConfig) error {
	t, _ := tuningFor(c)
	t.SendHigh, t.SendLow = max(t.SendHigh, 8<<20), max(t.SendLow, 4<<20) // as dcOfferPetrel
	h := leanSender{t: t, stop: make(chan struct{})}
	defer close(h.stop)
	return leanSession(c, h, func(v *session.DataSession, ended <-chan error) error {
		go logStats("petrel data session sender", func() datachan.Stats { s, _ := v.SCTPStats(); return s }, h.stop)
		<-ended // the browser measures, and says "done"
		return nil
	})
}

// leanSession answers host a's offer with a lean data session on host b's
// lab address and runs wait while it lasts; ended yields when host a says
// "done" or closes signaling. When wait returns, host a is told "done".
func leanSession(c PeerConfig, h session.DataHandler, wait func(v *session.DataSession, ended <-chan error) error) error {
	sig, err := acceptSignaling(c)
	if err != nil {
		return err
	}
	defer sig.Close()
	local := sig.LocalAddr().(*net.TCPAddr).IP
	conn, err := sctptune.ListenUDP(&net.UDPAddr{IP: local}, sctptune.Petrel.SocketBuffer)
	if err != nil {
		return err
	}
	srv, err := session.New(conn, []net.IP{local}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer srv.Close()
	go srv.Serve()
	r := bufio.NewReader(sig)
	var offer webrtc.SessionDescription
	if err := readJSON(r, &offer); err != nil {
		return fmt.Errorf("read offer: %w", err)
	}
	v, answer, err := srv.NewDataSession(offer.SDP, 1<<20, h)
	if err != nil {
		return err
	}
	defer v.Close("done")
	if err := json.NewEncoder(sig).Encode(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		return err
	}
	ended := make(chan error, 1)
	go func() {
		var done string
		sig.SetReadDeadline(time.Now().Add(c.Duration + 60*time.Second))
		ended <- readJSON(r, &done)
	}()
	err = wait(v, ended)
	sig.Write([]byte("\"done\"\n"))
	return err
}
