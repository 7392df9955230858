package metrics

import "github.com/prometheus/client_golang/prometheus"

// The session server (session/, docs/sessions.md).
var (
	Sessions = prometheus.NewGauge(prometheus.GaugeOpts{Name: "petrel_webrtc_sessions", Help: "WebRTC sessions the server holds (viewers, publishers, data sessions, room subscribers)."})
	// SessionDropped counts datagrams from sessions' addresses that were of
	// no use: why is stun, dtls, srtcp, rtp, srtp (a publisher's media that
	// does not decrypt or route) or duplicate (a retransmission that came
	// twice: normal, not logged).
	SessionDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_webrtc_dropped_total", Help: "Datagrams from WebRTC sessions' addresses dropped as malformed, unauthenticated or unexpected."}, []string{"why"})
	// SessionTCP counts ICE-TCP events: a connection refused by the limits,
	// one closed before it belonged to a session (no valid binding request
	// in time, garbage), and a packet dropped because a slow client's send
	// queue was full (send_dropped).
	SessionTCP = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_webrtc_tcp_total", Help: "ICE-TCP connections refused or closed, and packets dropped on full send queues."}, []string{"event"})
)

func init() {
	Registry.MustRegister(Sessions, SessionDropped, SessionTCP)
}
