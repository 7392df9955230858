package loadtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"io"
	"net"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/logging"
	"github.com/pion/transport/v4/packetio"
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
}

// Lean is a Pion API for cheap peers: no interceptors (receivers count loss and
// jitter from the headers and send their own NACKs), small per-stream buffers,
// one DTLS certificate for every peer connection it makes, and host candidates
// on one address only.
type Lean struct {
	API  *webrtc.API
	Cert webrtc.Certificate
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
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetIPFilter(func(ip net.IP) bool { return ip.Equal(bind) })
	if bind.IsLoopback() {
		se.SetIncludeLoopbackCandidate(true)
		se.SetInterfaceFilter(func(n string) bool { return n == "lo" })
	}
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
		return b
	}
	l := &Lean{}
	m := &webrtc.MediaEngine{}
	if err := rtc.RegisterCodecs(m); err != nil {
		return nil, err
	}
	l.API = webrtc.NewAPI(webrtc.WithSettingEngine(se), webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(&interceptor.Registry{}))
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cert, err := webrtc.GenerateCertificate(key)
	if err != nil {
		return nil, err
	}
	l.Cert = *cert
	return l, nil
}

// Config is a peer connection configuration with the shared certificate.
func (l *Lean) Config(servers ...webrtc.ICEServer) webrtc.Configuration {
	return webrtc.Configuration{ICEServers: servers, Certificates: []webrtc.Certificate{l.Cert}}
}

// NewPC makes a peer connection with the shared certificate.
func (l *Lean) NewPC() (*webrtc.PeerConnection, error) { return l.API.NewPeerConnection(l.Config()) }

// Close releases nothing today; peers own their sockets. (One shared socket
// for every peer was tried: servers that demultiplex by remote address, Petrel
// and Pion among them, then mix the peers up.)
func (l *Lean) Close() {}
