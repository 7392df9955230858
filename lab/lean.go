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

	"github.com/petrel-sfu/petrel/egress"
	"github.com/petrel-sfu/petrel/rtc/datachan"
	"github.com/petrel-sfu/petrel/rtc/sctptune"
)

// The petrel-lean stack: host b is what the server gives a room's audience
// for its data channels, a lean data session (egress/data.go: ICE-lite,
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
	sig, err := acceptSignaling(c)
	if err != nil {
		return Result{}, err
	}
	defer sig.Close()
	m := newMeter(c.Duration)
	local := sig.LocalAddr().(*net.TCPAddr).IP
	conn, err := sctptune.ListenUDP(&net.UDPAddr{IP: local}, sctptune.Petrel.SocketBuffer)
	if err != nil {
		return Result{}, err
	}
	srv, err := egress.New(conn, []net.IP{local}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return Result{}, err
	}
	defer srv.Close()
	go srv.Serve()
	r := bufio.NewReader(sig)
	var offer webrtc.SessionDescription
	if err := readJSON(r, &offer); err != nil {
		return Result{}, fmt.Errorf("read offer: %w", err)
	}
	v, answer, err := srv.NewDataSession(offer.SDP, 1<<20, leanMeter{m})
	if err != nil {
		return Result{}, err
	}
	defer v.Close("done")
	if err := json.NewEncoder(sig).Encode(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		return Result{}, err
	}
	select {
	case <-m.done:
	case <-time.After(c.Duration + 30*time.Second):
		return m.result("petrel-lean", c.Probe), fmt.Errorf("no bulk data within 30 s (session ready %v)", v.Ready())
	}
	res := m.result("petrel-lean", c.Probe)
	sig.Write([]byte("\"done\"\n"))
	return res, nil
}
