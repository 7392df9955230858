package config

import (
	"errors"
	"time"
)

// Cluster joins this node to a Petrel cluster whose shared state is in Redis
// (docs/operations.md). Without Redis the server is a single node and no
// cluster code runs.
type Cluster struct {
	Redis         string `yaml:"redis" flag:"redis" usage:"Redis address (host:port) of the cluster state; empty: single node"`
	RedisPassword string `yaml:"redis_password" flag:"redis-password" usage:"Redis password (prefer PETREL_REDIS_PASSWORD)"`
	RedisTLS      bool   `yaml:"redis_tls" flag:"redis-tls" usage:"connect to Redis over TLS"`
	RedisTLSCA    string `yaml:"redis_tls_ca" flag:"redis-tls-ca" usage:"PEM file of the CA that signed Redis's certificate (implies redis_tls)"`
	// NodeID names this node in the cluster; empty: a random id per start.
	NodeID string `yaml:"node_id" flag:"node-id" usage:"this node's id in the cluster (default: random)"`
	// URL is how clients and other nodes reach this node's HTTP port.
	URL string `yaml:"url" flag:"node-url" usage:"this node's HTTP URL for clients and nodes (default: from the listen address)"`
	// Heartbeat is how often the node refreshes its record; a node whose record
	// is older than NodeTTL is taken for lost.
	Heartbeat time.Duration `yaml:"heartbeat" flag:"cluster-heartbeat" usage:"node heartbeat interval"`
	NodeTTL   time.Duration `yaml:"node_ttl" flag:"cluster-node-ttl" usage:"a node silent this long is lost"`
	// MaxCPU is the share of the machine's CPU (0 to 1) above which the node
	// sheds load (lower Last-N) and is offered to new participants last.
	MaxCPU float64 `yaml:"max_cpu"`
	// MaxEgressMbps is the media the node may send (Mbit/s, to subscribers
	// and node links) before it sheds load as over MaxCPU; 0: no limit.
	MaxEgressMbps float64 `yaml:"max_egress_mbps"`
	// DrainGrace is how long a draining node waits for participants to move
	// before it closes the remaining ones.
	DrainGrace time.Duration `yaml:"drain_grace" flag:"drain-grace" usage:"how long a drain waits before closing the rest"`
	// ForwardAll sends every layer of every track over node links, whatever
	// the receivers need: the baseline the selective forwarding is measured
	// against (bench/cluster), never for production.
	ForwardAll bool `yaml:"forward_all" flag:"cluster-forward-all" usage:"benchmark baseline: send every layer over node links"`
	// TLS puts node-to-node requests on HTTPS (cluster.tls).
	TLS ClusterTLS `yaml:"tls"`
}

// ClusterTLS secures the requests nodes make to each other (link offers):
// they go to a listener of their own over HTTPS, and each side shows a
// certificate the cluster's CA signed. Off unless ca_file is set.
type ClusterTLS struct {
	CAFile   string `yaml:"ca_file" flag:"cluster-tls-ca" usage:"PEM file of the CA that signs node certificates (turns on TLS between nodes)"`
	CertFile string `yaml:"cert_file" flag:"cluster-tls-cert" usage:"this node's certificate (PEM), for both serving and dialing other nodes"`
	KeyFile  string `yaml:"key_file" flag:"cluster-tls-key" usage:"this node's private key (PEM)"`
	Listen   string `yaml:"listen" flag:"cluster-tls-listen" usage:"address of the node-to-node HTTPS listener (host:port)"`
	// URL is how other nodes reach Listen; empty: https:// with the host of
	// cluster.url and the listener's port.
	URL string `yaml:"url" flag:"cluster-tls-url" usage:"this node's HTTPS URL for other nodes (default: from node-url and the listener)"`
}

// Enabled reports whether node links use TLS.
func (t ClusterTLS) Enabled() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

func (t ClusterTLS) validate() error {
	if t.Enabled() && (t.CAFile == "" || t.CertFile == "" || t.KeyFile == "" || t.Listen == "") {
		return errors.New("cluster.tls needs ca_file, cert_file, key_file and listen together")
	}
	return nil
}

func defaultCluster() Cluster {
	return Cluster{Heartbeat: 500 * time.Millisecond, NodeTTL: 3 * time.Second, MaxCPU: 0.85, DrainGrace: 30 * time.Second}
}
