package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"log/slog"
	"net/http"

	"github.com/petrel-sfu/petrel/cluster"
	"github.com/petrel-sfu/petrel/config"
)

// startCluster joins the cluster (cluster.redis set) and routes /v1/cluster/
// to it. The link secret derives from the API secret, which every node of a
// cluster shares anyway (a token must be valid on any node).
func (s *Server) startCluster(cfg config.Config, apiSecret string, edge http.Handler, log *slog.Logger) (http.Handler, error) {
	m := hmac.New(sha256.New, []byte(apiSecret))
	m.Write([]byte("petrel cluster"))
	var err error
	s.Cluster, err = cluster.Start(cluster.Options{Config: cfg, Manager: s.Manager, Engine: s.Engine,
		Secret: m.Sum(nil), HTTPAddr: s.HTTPAddr, Log: log})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/cluster/", s.Cluster.Handler())
	mux.Handle("/", edge)
	return mux, nil
}
