package metrics

import "github.com/prometheus/client_golang/prometheus"

// Lean egress (egress/, docs/sessions.md).
var (
	LeanEgressViewers = prometheus.NewGauge(prometheus.GaugeOpts{Name: "petrel_lean_egress_viewers", Help: "WHEP viewers served by the lean egress (no Pion PeerConnection)."})
	// LeanEgressDropped counts datagrams from lean viewers' addresses that were
	// of no use: why is stun, dtls, srtcp, rtp, srtp (a publisher's media that
	// does not decrypt or route) or duplicate (a retransmission that came
	// twice: normal, not logged).
	LeanEgressDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_lean_egress_dropped_total", Help: "Datagrams from lean-egress viewers dropped as malformed, unauthenticated or unexpected."}, []string{"why"})
	// LeanEgressTCP counts ICE-TCP events: a connection refused by the
	// limits, one closed before it belonged to a session (no valid binding
	// request in time, garbage), and a packet dropped because a slow
	// client's send queue was full (send_dropped).
	LeanEgressTCP = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_lean_egress_tcp_total", Help: "ICE-TCP connections of the lean egress refused or closed, and packets dropped on full send queues."}, []string{"event"})
)

func init() {
	Registry.MustRegister(LeanEgressViewers, LeanEgressDropped, LeanEgressTCP)
}
