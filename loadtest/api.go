package loadtest

import (
	"fmt"
	"io"
	"net"

	"github.com/pion/interceptor"
	"github.com/pion/logging"
	"github.com/pion/transport/v5/packetio"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/rtc"
)

// APIOptions shape the lean Pion API every generated peer uses.
type APIOptions struct {
	// Bind is the local address peers gather on ("127.0.0.1" by default; a
	// namespace address to reach a server in a network namespace).
	Bind string
	// RTPBuffer and RTCPBuffer bound each stream's receive buffer in bytes.
	RTPBuffer, RTCPBuffer int
	// PionRead receives through Pion's track read path (a reader goroutine
	// per track) instead of counting packets inline in the SRTP session's
	// goroutine.
	PionRead bool
}

// Lean is a Pion API for cheap peers: no interceptors (receivers count loss and
// jitter from the headers and send their own NACKs), small per-stream buffers,
// one DTLS certificate for every peer connection it makes, and host candidates
// on one address only.
type Lean struct {
	API  *webrtc.API
	Cert webrtc.Certificate
	o    APIOptions
	se   webrtc.SettingEngine
	me   *webrtc.MediaEngine
}

// NewLean builds the API.
func NewLean(o APIOptions) (*Lean, error) {
	if o.Bind == "" {
		o.Bind = "127.0.0.1"
	}
	if o.RTPBuffer == 0 {
		o.RTPBuffer = 128 << 10
	}
	if o.RTCPBuffer == 0 {
		o.RTCPBuffer = 8 << 10
	}
	bind := net.ParseIP(o.Bind)
	if bind == nil || bind.To4() == nil {
		return nil, fmt.Errorf("bind %q: want an IPv4 address", o.Bind)
	}
	var se webrtc.SettingEngine
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	rtc.OnlyAddress(&se, bind)
	// Thousands of peers closing at once make Pion log every write to a
	// closed socket; the generator reports failures itself.
	lf := logging.NewDefaultLoggerFactory()
	lf.DefaultLogLevel = logging.LogLevelDisabled
	se.LoggerFactory = lf
	se.BufferFactory = func(t packetio.BufferPacketType, _ uint32) io.ReadWriteCloser {
		b := packetio.NewBuffer()
		if t == packetio.RTCPBufferPacket {
			b.SetLimitSize(o.RTCPBuffer)
		} else {
			b.SetLimitSize(o.RTPBuffer)
		}
		return rtc.PacketBuffer{Buffer: b}
	}
	m := &webrtc.MediaEngine{}
	if err := rtc.RegisterCodecs(m); err != nil {
		return nil, err
	}
	l := &Lean{o: o, se: se, me: m}
	l.API = webrtc.NewAPI(webrtc.WithSettingEngine(se), webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(&interceptor.Registry{}))
	cert, err := rtc.NewCertificate()
	if err != nil {
		return nil, err
	}
	l.Cert = cert
	return l, nil
}

// Config is a peer connection configuration with the shared certificate.
func (l *Lean) Config(servers ...webrtc.ICEServer) webrtc.Configuration {
	return webrtc.Configuration{ICEServers: servers, Certificates: []webrtc.Certificate{l.Cert}}
}

// NewPC makes a peer connection with the shared certificate.
func (l *Lean) NewPC() (*webrtc.PeerConnection, error) { return l.API.NewPeerConnection(l.Config()) }

// For is the API for p's peer connections: RTP they receive is counted inline
// into p (see inlineStream) unless PionRead is set.
func (l *Lean) For(p *Peer) *webrtc.API {
	if l.o.PionRead {
		return l.API
	}
	se := l.se
	rtcpLimit := l.o.RTCPBuffer
	se.BufferFactory = func(t packetio.BufferPacketType, ssrc uint32) io.ReadWriteCloser {
		if t == packetio.RTCPBufferPacket {
			b := packetio.NewBuffer()
			b.SetLimitSize(rtcpLimit)
			return rtc.PacketBuffer{Buffer: b}
		}
		return p.newInlineStream(ssrc)
	}
	return webrtc.NewAPI(webrtc.WithSettingEngine(se), webrtc.WithMediaEngine(l.me), webrtc.WithInterceptorRegistry(&interceptor.Registry{}))
}

// NewPCFor makes a peer connection for p with the shared certificate.
func (l *Lean) NewPCFor(p *Peer, servers ...webrtc.ICEServer) (*webrtc.PeerConnection, error) {
	return l.For(p).NewPeerConnection(l.Config(servers...))
}

// Close releases nothing today; peers own their sockets. (One shared socket
// for every peer was tried: servers that demultiplex by remote address, Petrel
// and Pion among them, then mix the peers up.)
func (l *Lean) Close() {}
