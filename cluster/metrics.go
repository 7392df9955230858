package cluster

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/petrel-sfu/petrel/metrics"
)

// Cluster metrics carry the node id (several nodes may share a process in
// tests and benchmarks) and, for links, the peer's. Link counters are read at
// scrape time from the links' own atomics: nothing is added per packet here.
var (
	mNodesLost    = prometheus.NewCounter(prometheus.CounterOpts{Name: "petrel_cluster_nodes_lost_total", Help: "Nodes this process saw lost (heartbeat expired)."})
	mLinkFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "petrel_cluster_link_failures_total", Help: "Node links that failed to come up."})
	mRedisErrors  = prometheus.NewCounter(prometheus.CounterOpts{Name: "petrel_cluster_redis_errors_total", Help: "Failed heartbeats (Redis unreachable or slow)."})
	mReplaced     = prometheus.NewCounter(prometheus.CounterOpts{Name: "petrel_cluster_replacements_total", Help: "Participants this node's placements asked to move to another node (re-placement of a growing room)."})

	nodes sync.Map // *Node -> struct{}: the nodes of this process
)

var (
	dNodes        = prometheus.NewDesc("petrel_cluster_nodes", "Live nodes seen by this node.", []string{"node"}, nil)
	dCPU          = prometheus.NewDesc("petrel_cluster_node_cpu", "CPU share of the machine this node reports (0-1).", []string{"node"}, nil)
	dPPS          = prometheus.NewDesc("petrel_cluster_node_packets_per_second", "RTP packets per second received by this node's tracks.", []string{"node"}, nil)
	dLastN        = prometheus.NewDesc("petrel_cluster_shed_level", "Load shedding level (0: none; each step lowers Last-N by one).", []string{"node"}, nil)
	dDraining     = prometheus.NewDesc("petrel_cluster_draining", "1 while the node drains.", []string{"node"}, nil)
	dLinkPackets  = prometheus.NewDesc("petrel_cluster_link_packets_total", "RTP packets over a node link.", []string{"node", "peer", "direction"}, nil)
	dLinkBytes    = prometheus.NewDesc("petrel_cluster_link_bytes_total", "Media bytes over a node link.", []string{"node", "peer", "direction"}, nil)
	dLinkLayer    = prometheus.NewDesc("petrel_cluster_link_layer_packets_total", "Packets sent over a node link by simulcast layer.", []string{"node", "peer", "layer"}, nil)
	dLinkFiltered = prometheus.NewDesc("petrel_cluster_link_filtered_total", "Packets not sent because no receiver on the peer needed them.", []string{"node", "peer"}, nil)
	dLinkRTX      = prometheus.NewDesc("petrel_cluster_link_retransmissions_total", "Retransmissions sent on the peer's request.", []string{"node", "peer"}, nil)
	dLinkNackIgn  = prometheus.NewDesc("petrel_cluster_link_nacks_ignored_total", "Retransmission requests ignored (less than one RTT after the send).", []string{"node", "peer"}, nil)
	dLinkRTT      = prometheus.NewDesc("petrel_cluster_link_rtt_seconds", "Smoothed round-trip time of a node link.", []string{"node", "peer"}, nil)
)

type collector struct{}

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dNodes, dCPU, dPPS, dLastN, dDraining, dLinkPackets, dLinkBytes, dLinkLayer, dLinkFiltered, dLinkRTX, dLinkNackIgn, dLinkRTT} {
		ch <- d
	}
}

func (collector) Collect(ch chan<- prometheus.Metric) {
	nodes.Range(func(k, _ any) bool {
		n := k.(*Node)
		id := n.id
		ch <- prometheus.MustNewConstMetric(dNodes, prometheus.GaugeValue, float64(len(n.Nodes())), id)
		cpu, pps := n.load.last()
		ch <- prometheus.MustNewConstMetric(dCPU, prometheus.GaugeValue, cpu, id)
		ch <- prometheus.MustNewConstMetric(dPPS, prometheus.GaugeValue, pps, id)
		ch <- prometheus.MustNewConstMetric(dLastN, prometheus.GaugeValue, float64(n.shed.level.Load()), id)
		dr := 0.0
		if n.draining.Load() {
			dr = 1
		}
		ch <- prometheus.MustNewConstMetric(dDraining, prometheus.GaugeValue, dr, id)
		for peer, l := range n.Links() {
			s := l.Stats()
			ch <- prometheus.MustNewConstMetric(dLinkPackets, prometheus.CounterValue, float64(s.SentPackets), id, peer, "out")
			ch <- prometheus.MustNewConstMetric(dLinkPackets, prometheus.CounterValue, float64(s.RecvPackets), id, peer, "in")
			ch <- prometheus.MustNewConstMetric(dLinkBytes, prometheus.CounterValue, float64(s.SentBytes), id, peer, "out")
			ch <- prometheus.MustNewConstMetric(dLinkBytes, prometheus.CounterValue, float64(s.RecvBytes), id, peer, "in")
			for i, v := range s.SentLayer {
				ch <- prometheus.MustNewConstMetric(dLinkLayer, prometheus.CounterValue, float64(v), id, peer, strconv.Itoa(i))
			}
			ch <- prometheus.MustNewConstMetric(dLinkFiltered, prometheus.CounterValue, float64(s.Filtered), id, peer)
			ch <- prometheus.MustNewConstMetric(dLinkRTX, prometheus.CounterValue, float64(s.Retransmitted), id, peer)
			ch <- prometheus.MustNewConstMetric(dLinkNackIgn, prometheus.CounterValue, float64(s.NackIgnored), id, peer)
			ch <- prometheus.MustNewConstMetric(dLinkRTT, prometheus.GaugeValue, s.RTT.Seconds(), id, peer)
		}
		return true
	})
}

func init() {
	metrics.Registry.MustRegister(mNodesLost, mLinkFailures, mRedisErrors, mReplaced, collector{})
}
