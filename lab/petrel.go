package lab

import (
	"bufio"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/pion/dtls/v3"
	"github.com/pion/dtls/v3/pkg/crypto/fingerprint"
	"github.com/pion/dtls/v3/pkg/crypto/selfsign"
	dtlsnet "github.com/pion/dtls/v3/pkg/net"
	"github.com/pion/ice/v4"
	"github.com/pion/logging"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/rtc/datachan"
	"github.com/petrel-sfu/petrel/rtc/dtlsrec"
	"github.com/petrel-sfu/petrel/rtc/lean"
	"github.com/petrel-sfu/petrel/rtc/sctptune"
	"github.com/petrel-sfu/petrel/session"
)

// The petrel stack: both ends run Petrel's own data channels
// (rtc/datachan). Host b is the lean data session (dc-answer-lean, as in
// the petrel-lean stack); host a is a client of it with no PeerConnection:
// Pion's ICE agent, a DTLS client and datachan's association, which is how
// the server sends on a data session too.

// dcOfferPetrel is host a of the petrel stack.
func dcOfferPetrel(c PeerConfig) error {
	sig, err := dialRetry(c.Addr)
	if err != nil {
		return err
	}
	defer sig.Close()
	t, _ := tuningFor(c)
	local := sig.LocalAddr().(*net.TCPAddr).IP
	udp, err := sctptune.ListenUDP(&net.UDPAddr{IP: local}, t.SocketBuffer)
	if err != nil {
		return err
	}
	mux := ice.NewUDPMuxDefault(ice.UDPMuxParams{UDPConn: udp})
	defer mux.Close()
	quiet := logging.NewDefaultLoggerFactory()
	quiet.DefaultLogLevel = logging.LogLevelDisabled
	agent, err := ice.NewAgent(&ice.AgentConfig{
		NetworkTypes:     []ice.NetworkType{ice.NetworkTypeUDP4},
		CandidateTypes:   []ice.CandidateType{ice.CandidateTypeHost},
		UDPMux:           mux,
		MulticastDNSMode: ice.MulticastDNSModeDisabled,
		IPFilter:         func(ip net.IP) bool { return ip.Equal(local) },
		LoggerFactory:    quiet,
	})
	if err != nil {
		return err
	}
	defer agent.Close()
	gathered := make(chan struct{})
	var cands []string
	if err := agent.OnCandidate(func(cand ice.Candidate) {
		if cand == nil {
			close(gathered)
			return
		}
		cands = append(cands, cand.Marshal())
	}); err != nil {
		return err
	}
	if err := agent.GatherCandidates(); err != nil {
		return err
	}
	<-gathered
	cert, err := selfsign.GenerateSelfSigned()
	if err != nil {
		return err
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return err
	}
	fp, err := fingerprint.Fingerprint(leaf, crypto.SHA256)
	if err != nil {
		return err
	}
	ufrag, pwd, err := agent.GetLocalUserCredentials()
	if err != nil {
		return err
	}
	var o strings.Builder
	fmt.Fprintf(&o, "v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n"+
		"m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\n"+
		"a=ice-ufrag:%s\r\na=ice-pwd:%s\r\na=fingerprint:sha-256 %s\r\na=setup:actpass\r\n"+
		"a=sctp-port:5000\r\na=max-message-size:%d\r\n", ufrag, pwd, fp, 1<<20)
	for _, cand := range cands {
		fmt.Fprintf(&o, "a=candidate:%s\r\n", cand)
	}
	o.WriteString("a=end-of-candidates\r\n")
	if err := json.NewEncoder(sig).Encode(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: o.String()}); err != nil {
		return err
	}
	r := bufio.NewReader(sig)
	var answer webrtc.SessionDescription
	if err := readJSON(r, &answer); err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	rufrag, rpwd, err := iceFromAnswer(answer.SDP, agent)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := agent.Dial(ctx, rufrag, rpwd)
	if err != nil {
		return fmt.Errorf("ice: %w", err)
	}
	// Application data records are Petrel's own after the handshake, as on
	// the server's side (rtc/dtlsrec).
	rec := dtlsrec.New(dtlsnet.PacketConnFromConn(conn), conn.RemoteAddr())
	defer rec.Close()
	dc, err := dtls.ClientWithOptions(rec.Transport(), conn.RemoteAddr(),
		dtls.WithCertificates(cert),
		dtls.WithInsecureSkipVerify(true), // a lab: the server is the one host b started
		dtls.WithSRTPProtectionProfiles(lean.SRTPProfiles...),
		dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret),
		dtls.WithReplayProtectionWindow(int(t.DTLSReplayWindow)))
	if err != nil {
		return err
	}
	defer dc.Close()
	if err := dc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("dtls: %w", err)
	}
	if err := rec.Handoff(dc); err != nil {
		return err
	}
	a := datachan.New(datachan.Config{Conn: rec, Client: true, MaxMessage: 1 << 20, MaxMTU: session.SCTPMaxMTU()})
	defer a.Close()
	select {
	case <-a.Ready():
	case <-a.Done():
		return a.Err()
	case <-ctx.Done():
		return errors.New("sctp: no association within 30 s")
	}
	stop := make(chan struct{})
	defer close(stop)
	if c.Probe != "none" {
		probe, err := a.Open("probe", probeOptions(c.Probe))
		if err != nil {
			return err
		}
		go prober(func(b []byte) error { return probe.Send(b, false) }, stop)
	}
	bulk, err := a.Open("bulk", datachan.Options{})
	if err != nil {
		return err
	}
	// datachan's buffered amount counts what is in flight, as Pion's does,
	// but here the window is not the limit it is in Pion: keep enough queued
	// for a long path's window (the probe does not wait behind it: streams
	// share the window by bytes).
	t.SendHigh, t.SendLow = max(t.SendHigh, 8<<20), max(t.SendLow, 4<<20)
	go sendBulk(petrelBulk{bulk}, t, stop)
	go logStats("petrel sender", a.Stats, stop)
	sig.SetReadDeadline(time.Now().Add(c.Duration + 60*time.Second))
	var done string
	readJSON(r, &done)
	return nil
}

// iceFromAnswer takes the answer's ICE credentials and candidates.
func iceFromAnswer(answer string, agent *ice.Agent) (string, string, error) {
	var s sdp.SessionDescription
	if err := s.UnmarshalString(answer); err != nil {
		return "", "", err
	}
	var ufrag, pwd string
	take := func(attrs []sdp.Attribute) error {
		for _, at := range attrs {
			switch at.Key {
			case "ice-ufrag":
				ufrag = at.Value
			case "ice-pwd":
				pwd = at.Value
			case "candidate":
				cand, err := ice.UnmarshalCandidate(at.Value)
				if err != nil {
					return err
				}
				if err := agent.AddRemoteCandidate(cand); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := take(s.Attributes); err != nil {
		return "", "", err
	}
	for _, m := range s.MediaDescriptions {
		if err := take(m.Attributes); err != nil {
			return "", "", err
		}
	}
	if ufrag == "" || pwd == "" {
		return "", "", errors.New("answer without ICE credentials")
	}
	return ufrag, pwd, nil
}

func probeOptions(mode string) datachan.Options {
	var zero uint32
	switch mode {
	case "unordered":
		return datachan.Options{Unordered: true}
	case "partial":
		return datachan.Options{Unordered: true, MaxRetransmits: &zero}
	}
	return datachan.Options{}
}

// petrelBulk is a datachan channel as sendBulk's bulkChannel.
type petrelBulk struct{ *datachan.Channel }

func (b petrelBulk) Send(p []byte) error              { return b.Channel.Send(p, false) }
func (b petrelBulk) OnLow(threshold uint64, f func()) { b.OnBufferedAmountLow(threshold, f) }

// logStats writes an association's state once a second until stop, for
// `petrel lab bench -v`.
func logStats(who string, stats func() datachan.Stats, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		s := stats()
		fmt.Fprintf(os.Stderr, "%s: mtu %d cwnd %d ssthresh %d flight %d peer window %d srtt %v minrtt %v reorder window %v, %d fast retransmits, %d timeouts, %d spurious, %d losses kept, %d presumed\n",
			who, s.MTU, s.Cwnd, s.Ssthresh, s.Flight, s.PeerWindow, s.SRTT.Round(time.Millisecond/10), s.MinRTT.Round(time.Millisecond/10),
			s.ReorderWindow.Round(time.Millisecond/10), s.FastRetransmits, s.Timeouts, s.SpuriousRetransmits, s.LossesKept, s.Presumed)
	}
}
