// Package metrics defines Petrel's Prometheus metrics. Packet-rate counters are fed
// in batches by the goroutines that own the packets, never once per packet per
// subscriber, so that scraping costs nothing on the media path.
package metrics

import "github.com/prometheus/client_golang/prometheus"

var (
	Registry = prometheus.NewRegistry()

	Rooms         = prometheus.NewGauge(prometheus.GaugeOpts{Name: "petrel_rooms", Help: "Open rooms."})
	Participants  = prometheus.NewGauge(prometheus.GaugeOpts{Name: "petrel_participants", Help: "Joined participants (including WHIP/WHEP sessions)."})
	Tracks        = prometheus.NewGauge(prometheus.GaugeOpts{Name: "petrel_tracks", Help: "Published tracks."})
	Subscriptions = prometheus.NewGauge(prometheus.GaugeOpts{Name: "petrel_subscriptions", Help: "Subscribed tracks (down tracks)."})

	Packets      = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_packets_total", Help: "RTP packets received from publishers (in) and sent to subscribers (out)."}, []string{"direction"})
	Bytes        = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_bytes_total", Help: "RTP payload and header bytes, in and out."}, []string{"direction"})
	NACKs        = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_nacks_total", Help: "NACKed packets: received from subscribers (in) and requested from publishers (out)."}, []string{"direction"})
	PLIs         = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_plis_total", Help: "Keyframe requests: from subscribers (in) and sent to publishers after aggregation (out)."}, []string{"direction"})
	Cache        = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_packet_cache_total", Help: "NACK answers from the packet cache, by result."}, []string{"result"})
	RTT          = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "petrel_rtt_seconds", Help: "Round-trip time to subscribers from receiver reports.", Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .2, .4, .8}})
	Joins        = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_joins_total", Help: "Join attempts by result."}, []string{"result"})
	SignalErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_signal_errors_total", Help: "Errors returned to clients, by code."}, []string{"code"})
	LayerSwitch  = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "petrel_layer_switch_seconds", Help: "From a subscriber's simulcast layer change (its request or the allocation's) to the new layer's keyframe reaching the server and being forwarded.", Buckets: []float64{.01, .025, .05, .1, .15, .2, .3, .5, 1, 2}})
	AudioPackets = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_audio_lastn_packets_total", Help: "Audio packets per subscriber: forwarded, or withheld by audio Last-N (the speaker is not among the loudest)."}, []string{"result"})
	DataMessages = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_data_messages_total", Help: "Room data messages by result."}, []string{"result"})

	PacketsIn  = Packets.WithLabelValues("in")
	PacketsOut = Packets.WithLabelValues("out")
	BytesIn    = Bytes.WithLabelValues("in")
	BytesOut   = Bytes.WithLabelValues("out")
	NACKsIn    = NACKs.WithLabelValues("in")
	PLIsIn     = PLIs.WithLabelValues("in")
	PLIsOut    = PLIs.WithLabelValues("out")
	CacheHit   = Cache.WithLabelValues("hit")
	CacheMiss  = Cache.WithLabelValues("miss")

	AudioForwarded = AudioPackets.WithLabelValues("forwarded")
	AudioWithheld  = AudioPackets.WithLabelValues("withheld")
)

func init() {
	Registry.MustRegister(Rooms, Participants, Tracks, Subscriptions, Packets, Bytes, NACKs, PLIs, Cache, RTT, LayerSwitch, AudioPackets, Joins, SignalErrors, DataMessages,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
}
