package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/petrel-sfu/petrel/cluster"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/gate"
)

// startCluster joins the cluster (cluster.redis set) and routes /v1/cluster/
// to it. The link secret derives from the API secret, which every node of a
// cluster shares anyway (a token must be valid on any node).
func (s *Server) startCluster(cfg config.Config, apiSecret string, edge http.Handler, log *slog.Logger) (http.Handler, error) {
	m := hmac.New(sha256.New, []byte(apiSecret))
	m.Write([]byte("petrel cluster"))
	var err error
	s.Cluster, err = cluster.Start(cluster.Options{Config: cfg, Manager: s.Manager, Engine: s.Engine,
		Secret: m.Sum(nil), HTTPAddr: s.HTTPAddr, Log: log,
		Verify: func(token string) (string, string, error) {
			c, err := s.Keys.Verify(token)
			if err != nil {
				return "", "", err
			}
			return c.Room, c.Identity(), nil
		}})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/cluster/", s.Cluster.Handler())
	mux.Handle("/v1/admin/cluster/", s.adminOnly(cfg, s.Cluster.AdminHandler(), log))
	mux.Handle("/", edge)
	return mux, nil
}

// adminOnly lets through requests with an admin token, from loopback unless
// admin.allow_remote: the same rule as the room admin API (signal/admin.go).
func (s *Server) adminOnly(cfg config.Config, h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cfg.Admin.AllowRemote {
			var hosts []string
			if u, err := url.Parse(cfg.Cluster.URL); err == nil && u.Hostname() != "" {
				hosts = append(hosts, u.Hostname())
			}
			if err := gate.Local(r, hosts...); err != nil {
				log.Info("cluster admin request refused", "remote", r.RemoteAddr, "err", err)
				http.Error(w, `{"error":"admin endpoints answer only local clients (admin.allow_remote)"}`, http.StatusForbidden)
				return
			}
		}
		c, err := s.Keys.Verify(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		if err != nil || !c.Grants.Admin {
			log.Info("cluster admin request refused", "remote", r.RemoteAddr, "err", err)
			http.Error(w, `{"error":"an admin token is required"}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// pullRoom brings a room's tracks to this node for a WHEP viewer when the
// room's publishers are on other nodes (cluster.Node.Pull); a single node
// has nothing to pull.
func (s *Server) pullRoom(ctx context.Context, room string) func() {
	if s.Cluster == nil {
		return func() {}
	}
	return s.Cluster.Pull(ctx, room)
}
