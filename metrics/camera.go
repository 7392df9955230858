package metrics

import "github.com/prometheus/client_golang/prometheus"

// Camera gateway and time-to-stream metrics (docs/cameras.md).
var (
	// GOPStarts counts subscribers started from a cached keyframe instead of
	// waiting for the next one.
	GOPStarts = prometheus.NewCounter(prometheus.CounterOpts{Name: "petrel_gop_starts_total", Help: "Subscribers started from the cached last GOP."})
	// TimeToStream has one histogram per step of a viewing session, in seconds
	// since the first signaling message: pc_created, offer_applied,
	// answer_created, ice_connected, dtls_connected, first_rtp, and
	// ice (first remote candidate or offer to ICE connected: the hole punch).
	TimeToStream = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "petrel_time_to_stream_seconds",
		Help:    "Viewing-session setup steps, seconds from the first signaling message (step=ice: from the first remote candidate to ICE connected).",
		Buckets: []float64{.005, .01, .025, .05, .075, .1, .15, .2, .3, .4, .6, .8, 1, 1.5, 2, 3, 5}}, []string{"step"})
	CameraReconnects = prometheus.NewCounter(prometheus.CounterOpts{Name: "petrel_camera_reconnects_total", Help: "Upstream camera sessions reopened after a drop."})
)

func init() {
	Registry.MustRegister(GOPStarts, TimeToStream, CameraReconnects)
}
