package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/petrel-sfu/petrel/rtc/sctptune"
	"github.com/pion/ice/v4"
	"github.com/pion/transport/v5/stdnet"
	"github.com/pion/webrtc/v4"
)

// newAPI builds a Pion API whose ICE uses only this host's lab address:
// no mDNS, no STUN, no other interface.
func newAPI(local net.IP, t sctptune.Tuning, v variant) *webrtc.API {
	var se webrtc.SettingEngine
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetIPFilter(func(ip net.IP) bool { return ip.Equal(local) })
	t.Apply(&se)
	if v.detach {
		se.DetachDataChannels()
	}
	if v.noMux && t.SocketBuffer > 0 {
		// ICE's own socket per candidate, read by the candidate's goroutine:
		// one goroutine hand-off fewer per packet than the UDP mux.
		if n, err := stdnet.NewNet(); err == nil {
			se.SetNet(bufNet{n, t.SocketBuffer})
		}
	} else if t.SocketBuffer > 0 {
		// One socket for all of ICE, with big buffers; it lives as long
		// as this peer process.
		if c, err := sctptune.ListenUDP(&net.UDPAddr{IP: local}, t.SocketBuffer); err == nil {
			se.SetICEUDPMux(ice.NewUDPMuxDefault(ice.UDPMuxParams{UDPConn: c}))
		}
	}
	return webrtc.NewAPI(webrtc.WithSettingEngine(se))
}

// bufNet is the standard network whose UDP sockets get big kernel buffers.
type bufNet struct {
	*stdnet.Net
	size int
}

func (n bufNet) ListenPacket(network, address string) (net.PacketConn, error) {
	c, err := n.Net.ListenPacket(network, address)
	if uc, ok := c.(*net.UDPConn); ok {
		sctptune.SetSocketBuffers(uc, n.size)
	}
	return c, err
}

// variant is how the lab peer itself runs, beside the SCTP tuning: knobs
// for experiments on the receive pipeline (`-tune detach=1,nomux=1`).
type variant struct {
	detach bool // read detached data channels with one big buffer
	noMux  bool // no ICE UDP mux: a socket (with SocketBuffer) per candidate
}

func tuningFor(c PeerConfig) (sctptune.Tuning, variant) {
	t := sctptune.Default
	if c.Tuned {
		t = sctptune.Petrel
	}
	if c.MsgSize > 0 {
		t.MessageSize = c.MsgSize
	}
	var v variant
	for _, kv := range strings.Split(c.Tune, ",") {
		switch {
		case kv == "", strings.HasPrefix(kv, "procs="), strings.HasPrefix(kv, "env."): // PeerMain's
		case kv == "detach=1":
			v.detach = true
		case kv == "nomux=1":
			v.noMux = true
		default:
			if err := t.Set(kv); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
	}
	return t, v
}

func probeInit(mode string) *webrtc.DataChannelInit {
	f, t := false, true
	var zero uint16
	switch mode {
	case "unordered":
		return &webrtc.DataChannelInit{Ordered: &f}
	case "partial":
		return &webrtc.DataChannelInit{Ordered: &f, MaxRetransmits: &zero}
	}
	return &webrtc.DataChannelInit{Ordered: &t}
}

func stackName(c PeerConfig) string {
	if c.Tuned {
		return "pion-tuned"
	}
	return "pion"
}

// acceptSignaling takes host a's signaling connection on c.Addr; a sender
// that never comes must not keep this peer forever.
func acceptSignaling(c PeerConfig) (net.Conn, error) {
	ln, err := net.Listen("tcp4", c.Addr)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(c.Duration + 60*time.Second))
	return ln.Accept()
}

// dcAnswer is host b: it takes the offer over a TCP signaling connection
// across the emulated link, answers, and measures what arrives.
func dcAnswer(c PeerConfig) (Result, error) {
	sig, err := acceptSignaling(c)
	if err != nil {
		return Result{}, err
	}
	defer sig.Close()
	m := newMeter(c.Duration)
	local := sig.LocalAddr().(*net.TCPAddr).IP
	t, v := tuningFor(c)
	pc, err := newAPI(local, t, v).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return Result{}, err
	}
	defer closeWithin(pc, 5*time.Second)
	pc.OnDataChannel(func(dc *webrtc.DataChannel) {
		deliver := m.channel(dc.Label())
		if deliver == nil {
			return
		}
		if !v.detach {
			dc.OnMessage(func(msg webrtc.DataChannelMessage) { deliver(len(msg.Data), msg.Data) })
			return
		}
		dc.OnOpen(func() {
			rw, err := dc.Detach()
			if err != nil {
				fmt.Fprintln(os.Stderr, "detach:", err)
				return
			}
			// One buffer for the channel's life: no copy per message.
			buf := make([]byte, max(t.MessageSize, 64<<10))
			for {
				n, err := rw.Read(buf)
				if err != nil {
					return
				}
				deliver(n, buf)
			}
		})
	})
	r := bufio.NewReader(sig)
	var offer webrtc.SessionDescription
	if err := readJSON(r, &offer); err != nil {
		return Result{}, fmt.Errorf("read offer: %w", err)
	}
	if err := pc.SetRemoteDescription(offer); err != nil {
		return Result{}, err
	}
	answer, err := pc.CreateAnswer(nil)
	if err != nil {
		return Result{}, err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(answer); err != nil {
		return Result{}, err
	}
	<-gathered
	if err := json.NewEncoder(sig).Encode(pc.LocalDescription()); err != nil {
		return Result{}, err
	}
	select {
	case <-m.done:
	case <-time.After(c.Duration + 30*time.Second):
		return m.result(stackName(c), c.Probe), fmt.Errorf("no bulk data within 30 s (ICE %s, peer connection %s)",
			pc.ICEConnectionState(), pc.ConnectionState())
	}
	res := m.result(stackName(c), c.Probe)
	sig.Write([]byte("\"done\"\n"))
	return res, nil
}

// dcOffer is host a: it offers a reliable ordered "bulk" channel and a
// "probe" channel, then keeps the bulk channel's buffer between the
// watermarks until the receiver says the window is over.
func dcOffer(c PeerConfig) error {
	sig, err := dialRetry(c.Addr)
	if err != nil {
		return err
	}
	defer sig.Close()
	t, v := tuningFor(c)
	v.detach = false // senders use the channel's own API
	local := sig.LocalAddr().(*net.TCPAddr).IP
	pc, err := newAPI(local, t, v).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return err
	}
	defer closeWithin(pc, 5*time.Second)
	bulk, err := pc.CreateDataChannel("bulk", nil)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	defer close(stop)
	if c.Probe != "none" {
		probe, err := pc.CreateDataChannel("probe", probeInit(c.Probe))
		if err != nil {
			return err
		}
		probe.OnOpen(func() { go prober(probe.Send, stop) })
	}
	bulk.OnOpen(func() { go sendBulk(pionBulk{bulk}, t, stop) })
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		return err
	}
	<-gathered
	if err := json.NewEncoder(sig).Encode(pc.LocalDescription()); err != nil {
		return err
	}
	r := bufio.NewReader(sig)
	var answer webrtc.SessionDescription
	if err := readJSON(r, &answer); err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if err := pc.SetRemoteDescription(answer); err != nil {
		return err
	}
	// Wait for the receiver's "done" (or its exit) before closing.
	sig.SetReadDeadline(time.Now().Add(c.Duration + 60*time.Second))
	var done string
	readJSON(r, &done)
	return nil
}

// bulkChannel is what sendBulk needs of a data channel: a Pion one
// (pionBulk) or Petrel's own (petrelBulk, lab/petrel.go).
type bulkChannel interface {
	Send([]byte) error
	BufferedAmount() uint64
	OnLow(threshold uint64, f func())
}

type pionBulk struct{ *webrtc.DataChannel }

func (b pionBulk) OnLow(threshold uint64, f func()) {
	b.SetBufferedAmountLowThreshold(threshold)
	b.OnBufferedAmountLow(f)
}

// sendBulk keeps a channel's buffer between the tuning's watermarks until
// stop or an error.
func sendBulk(bulk bulkChannel, t sctptune.Tuning, stop <-chan struct{}) {
	ready := make(chan struct{}, 1)
	bulk.OnLow(t.SendLow, func() {
		select {
		case ready <- struct{}{}:
		default:
		}
	})
	buf := make([]byte, t.MessageSize)
	for {
		for bulk.BufferedAmount() < t.SendHigh {
			if err := bulk.Send(buf); err != nil {
				select {
				case <-stop:
				default:
					fmt.Fprintf(os.Stderr, "lab peer: bulk send: %v\n", err)
				}
				return
			}
		}
		select {
		case <-ready:
		case <-stop:
			return
		}
	}
}

// whenOpen runs f once dc is open (at once if it already is).
func whenOpen(dc *webrtc.DataChannel, f func()) {
	if dc.ReadyState() == webrtc.DataChannelStateOpen {
		go f()
		return
	}
	dc.OnOpen(func() { go f() })
}

// dcAnswerSend is host b sending to a browser in host a: it answers the
// browser's offer and sends on the channels the browser opened, until the
// browser (which measures) says "done".
func dcAnswerSend(c PeerConfig) error {
	sig, err := acceptSignaling(c)
	if err != nil {
		return err
	}
	defer sig.Close()
	t, v := tuningFor(c)
	v.detach = false // senders use the channel's own API
	local := sig.LocalAddr().(*net.TCPAddr).IP
	pc, err := newAPI(local, t, v).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return err
	}
	defer closeWithin(pc, 5*time.Second)
	stop := make(chan struct{})
	defer close(stop)
	pc.OnDataChannel(func(dc *webrtc.DataChannel) {
		switch dc.Label() {
		case "bulk":
			whenOpen(dc, func() {
				// Not above what the peer takes: webrtcbin's offer has no
				// max-message-size, and Pion then allows 65535 bytes.
				t := t
				if m := int(pc.SCTP().GetCapabilities().MaxMessageSize); m > 0 && m < t.MessageSize {
					t.MessageSize = m
				}
				sendBulk(pionBulk{dc}, t, stop)
			})
		case "probe":
			whenOpen(dc, func() { prober(dc.Send, stop) })
		}
	})
	r := bufio.NewReader(sig)
	var offer webrtc.SessionDescription
	if err := readJSON(r, &offer); err != nil {
		return fmt.Errorf("read offer: %w", err)
	}
	if err := pc.SetRemoteDescription(offer); err != nil {
		return err
	}
	answer, err := pc.CreateAnswer(nil)
	if err != nil {
		return err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(answer); err != nil {
		return err
	}
	<-gathered
	if err := json.NewEncoder(sig).Encode(pc.LocalDescription()); err != nil {
		return err
	}
	sig.SetReadDeadline(time.Now().Add(c.Duration + 60*time.Second))
	var done string
	readJSON(r, &done)
	return nil
}

// closeWithin closes a peer connection but waits for it at most d. A peer
// whose association was still busy has hung in Close (seen on
// long-100mbit, with both Pion versions) and was killed before it printed
// its result; the stacks of a hung Close go to stderr.
func closeWithin(pc *webrtc.PeerConnection, d time.Duration) {
	done := make(chan struct{})
	go func() { pc.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		fmt.Fprintf(os.Stderr, "peer connection Close did not return within %v\n", d)
		dumpStacks("close")
	}
}
