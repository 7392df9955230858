// Package rtc sets up Pion for Petrel: the shared sockets (one UDP port for every
// peer, one ICE-TCP port), the codecs and header extensions negotiated, the
// interceptors that run per connection, and the embedded TURN server.
package rtc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/nack"
	"github.com/pion/interceptor/pkg/report"
	"github.com/pion/transport/v5/packetio"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/rtc/sctptune"
)

// rtpQueuePackets bounds what waits per incoming stream: about half a second of
// 2.5 Mbit/s video, and a keyframe burst fits.
const rtpQueuePackets = 128

// Engine opens the shared media sockets and builds the node links' Pion
// peer connections; every client's session is the session server's
// (session/), which sits in front of the UDP mux (SetFilter) and takes the
// ICE-TCP port (TCPListener).
type Engine struct {
	api    *webrtc.API
	cert   webrtc.Certificate
	udp    net.PacketConn
	filter *filterConn // udp as the ICE mux reads it (filter.go)
	tcp    net.Listener
	udpMux ice.UDPMux
	// LocalIPs are the addresses offered as host candidates.
	LocalIPs []net.IP
	UDPPort  int
	TCPPort  int
}

// NewEngine opens the shared media sockets and prepares the Pion APIs.
func NewEngine(cfg config.Config, log *slog.Logger) (*Engine, error) {
	e := &Engine{}
	bindIP := "0.0.0.0"
	if cfg.Loopback {
		bindIP = "127.0.0.1"
	}
	conns, err := listenUDPGroup("udp4", net.JoinHostPort(bindIP, strconv.Itoa(cfg.RTC.UDPPort)), udpReaders(cfg.RTC.UDPReaders))
	if err != nil {
		return nil, fmt.Errorf("rtc udp port: %w", err)
	}
	udp := conns[0]
	e.udp = udp
	e.UDPPort = udp.LocalAddr().(*net.UDPAddr).Port
	// Large socket buffers absorb bursts from many peers sharing one socket
	// (and keep bulk data channels from taking kernel drops for congestion).
	for _, c := range conns {
		sctptune.SetSocketBuffers(c, sctptune.Petrel.SocketBuffer)
	}
	if cfg.RTC.TCPPort >= 0 {
		tcp, err := net.Listen("tcp4", net.JoinHostPort(bindIP, strconv.Itoa(cfg.RTC.TCPPort)))
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("rtc tcp port: %w", err)
		}
		e.tcp = tcp
		e.TCPPort = tcp.Addr().(*net.TCPAddr).Port
	}

	e.filter = newFilterConn(udp, conns[1:]...)
	if cfg.Loopback {
		e.LocalIPs = []net.IP{net.IPv4(127, 0, 0, 1)}
		e.udpMux = webrtc.NewICEUDPMux(nil, e.filter)
	} else {
		// One socket on the unspecified address; the mux learns each interface's
		// address so that host candidates name real addresses.
		e.udpMux = ice.NewUDPMuxDefault(ice.UDPMuxParams{UDPConn: e.filter})
		e.LocalIPs = interfaceIPs()
		if cfg.RTC.NodeIP != "" {
			ip := net.ParseIP(cfg.RTC.NodeIP)
			if ip == nil {
				return nil, fmt.Errorf("rtc node_ip %q is not an IP address", cfg.RTC.NodeIP)
			}
			e.LocalIPs = append(e.LocalIPs, ip)
		}
	}

	if e.cert, err = NewCertificate(); err != nil {
		return nil, err
	}

	se := e.settingEngine(cfg)
	if e.api, err = newAPI(se); err != nil {
		return nil, err
	}
	log.Info("media sockets", "udp", udp.LocalAddr().String(), "udp_readers", len(conns), "tcp", e.TCPPort, "loopback", cfg.Loopback)
	return e, nil
}

// maxUDPReaders bounds the UDP port's sockets: past a few cores, one
// reader's forwarding is rarely what limits a server.
const maxUDPReaders = 8

// udpReaders is how many sockets (and reader goroutines) the UDP port gets:
// as configured, else one per two cores Go runs on. A narrow fan-out runs on
// the reader that received the packet, and its sendmmsg(2)s take about as
// much CPU again in the kernel; on 2 cores a second reader cost ~15 % more
// CPU per packet (more wake-ups, smaller batches) for no gain.
func udpReaders(configured int) int {
	if configured > 0 {
		return configured
	}
	return min(max(runtime.GOMAXPROCS(0)/2, 1), maxUDPReaders)
}

func (e *Engine) settingEngine(cfg config.Config) webrtc.SettingEngine {
	var se webrtc.SettingEngine
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetICEUDPMux(e.udpMux)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	if cfg.Loopback {
		OnlyAddress(&se, net.IPv4(127, 0, 0, 1))
	} else if cfg.RTC.NodeIP != "" {
		se.SetNAT1To1IPs([]string{cfg.RTC.NodeIP}, webrtc.ICECandidateTypeHost)
	}
	// Clients on flaky networks come back through ICE restart; a disconnected
	// transport is declared failed soon enough for the SDK to act.
	se.SetICETimeouts(5*time.Second, 15*time.Second, 2*time.Second)
	se.SetReceiveMTU(1500)
	// Data channels: the SCTP and DTLS settings the lab found (docs/benchmarks.md).
	sctptune.TuneSCTP(&se)
	// sfu reads data channels itself, without a 64 KiB buffer per channel.
	se.DetachDataChannels()
	// A forwarder that falls behind must lose packets (which NACK and keyframe
	// requests repair) rather than queue seconds of media: Pion's default 1 MB
	// receive buffer per stream is seconds of video.
	se.BufferFactory = func(t packetio.BufferPacketType, _ uint32) io.ReadWriteCloser {
		b := packetio.NewBuffer()
		if t == packetio.RTPBufferPacket {
			b.SetLimitCount(rtpQueuePackets)
			b.SetLimitSize(256 << 10)
		} else {
			b.SetLimitSize(100 << 10)
		}
		return PacketBuffer{b}
	}
	// Lite would be enough for a server with public addresses, but full ICE lets
	// the server work behind NAT and with ICE-TCP active candidates.
	return se
}

// newAPI is the node links' Pion: data channels only, no interceptors.
func newAPI(se webrtc.SettingEngine) (*webrtc.API, error) {
	m := &webrtc.MediaEngine{}
	if err := RegisterCodecs(m); err != nil {
		return nil, err
	}
	return webrtc.NewAPI(webrtc.WithSettingEngine(se), webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(&interceptor.Registry{})), nil
}

// PublisherInterceptors are what a connection that receives media runs:
// they ask publishers for what the server lost, report reception, and give
// their congestion controllers transport-wide feedback so they ramp up. A
// publisher PeerConnection and a publisher session (session.Ingest)
// build theirs from it. Every timer here ticks per publisher connection;
// the intervals are Pion's defaults halved for NACK (faster recovery) and
// kept for the rest.
func PublisherInterceptors() (*interceptor.Registry, error) {
	ir := &interceptor.Registry{}
	gen, err := nack.NewGeneratorInterceptor(nack.GeneratorSize(1024), nack.GeneratorInterval(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	ir.Add(gen)
	rr, err := report.NewReceiverInterceptor(report.ReceiverInterval(time.Second))
	if err != nil {
		return nil, err
	}
	ir.Add(rr)
	ir.Add(&twccFactory{interval: 100 * time.Millisecond})
	return ir, nil
}

// NewPublisherInterceptor builds one publisher connection's interceptor
// chain from PublisherInterceptors, for a lean publisher session.
func NewPublisherInterceptor() (interceptor.Interceptor, error) {
	ir, err := PublisherInterceptors()
	if err != nil {
		return nil, err
	}
	return ir.Build("")
}

// Configuration is the per-connection configuration: the shared certificate (no
// key generation per join) and bundled, multiplexed transports.
func (e *Engine) Configuration(policy webrtc.ICETransportPolicy) webrtc.Configuration {
	return webrtc.Configuration{
		Certificates:       []webrtc.Certificate{e.cert},
		BundlePolicy:       webrtc.BundlePolicyMaxBundle,
		RTCPMuxPolicy:      webrtc.RTCPMuxPolicyRequire,
		ICETransportPolicy: policy,
		SDPSemantics:       webrtc.SDPSemanticsUnifiedPlan,
	}
}

// NewLinkPC makes a connection of a node link (cluster/): both ends are
// Petrel nodes, and its data channels carry the link.
func (e *Engine) NewLinkPC() (*webrtc.PeerConnection, error) {
	return e.api.NewPeerConnection(e.Configuration(webrtc.ICETransportPolicyAll))
}

// Close releases the shared sockets.
func (e *Engine) Close() error {
	var errs []error
	if e.udpMux != nil {
		errs = append(errs, e.udpMux.Close())
	}
	if e.tcp != nil {
		if err := e.tcp.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// TCPListener is the ICE-TCP port (nil with rtc.tcp_port -1): the session
// server accepts its connections.
func (e *Engine) TCPListener() net.Listener { return e.tcp }

// RelayPeers are the only addresses the embedded TURN server relays to: the
// ICE UDP port on each media address. Loopback is one only in loopback mode,
// where it is the sole address (interfaceIPs lists it, but the sessions
// never offer it as a candidate). Pion's TURN server relays UDP only,
// so the ICE-TCP port is never a peer.
func (e *Engine) RelayPeers() []net.UDPAddr {
	var out []net.UDPAddr
	for _, ip := range e.LocalIPs {
		if ip.IsLoopback() && len(e.LocalIPs) > 1 {
			continue
		}
		out = append(out, net.UDPAddr{IP: ip, Port: e.UDPPort})
	}
	return out
}

func interfaceIPs() []net.IP {
	var ips []net.IP
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			ips = append(ips, n.IP)
		}
	}
	return ips
}

// OnlyAddress makes a SettingEngine gather host candidates on ip alone, without
// mDNS: 127.0.0.1 for tests and benchmarks on one machine (loopback candidates
// are off by default in Pion), a namespace's address for the lab.
func OnlyAddress(se *webrtc.SettingEngine, ip net.IP) {
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetIPFilter(func(a net.IP) bool { return a.Equal(ip) })
	if ip.IsLoopback() {
		se.SetIncludeLoopbackCandidate(true)
		se.SetInterfaceFilter(func(name string) bool { return name == "lo" })
	}
}

// NewCertificate is a fresh ECDSA P-256 DTLS certificate: one per process is
// enough, and sharing it saves a key generation per connection.
func NewCertificate() (webrtc.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return webrtc.Certificate{}, err
	}
	cert, err := webrtc.GenerateCertificate(key)
	if err != nil {
		return webrtc.Certificate{}, err
	}
	return *cert, nil
}
