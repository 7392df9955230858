package ingest

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
	"github.com/petrel-sfu/petrel/webhook"
)

// Ingresses are the admin API's stream keys (auth.IngressKeys decides what
// one allows); this file keeps their state and reports it.

type ingressState struct {
	publishing bool
	since      time.Time
}

// mediaStarted marks an ingress publishing at its first media and reports
// ingress_started. On the reading goroutine.
func (p *publisher) mediaStarted() {
	if p.ingress == nil || p.started.Load() {
		return
	}
	p.started.Store(true)
	p.srv.setState(p.ingress.ID, nil, ingressState{publishing: true, since: time.Now()})
	p.emit(webhook.IngressStarted, protocol.IngressPublishing)
}

// ended marks the ingress inactive and reports ingress_ended if it started.
func (p *publisher) ended() {
	if p.ingress == nil {
		return
	}
	state := protocol.IngressInactive
	if !p.srv.setState(p.ingress.ID, p, ingressState{since: time.Now()}) {
		state = protocol.IngressPublishing // the publisher that replaced this one
	}
	if p.started.Load() {
		p.emit(webhook.IngressEnded, state)
	}
}

func (p *publisher) emit(kind, state string) {
	in := p.ingress
	p.srv.o.Manager.Emit(sfu.Event{Kind: kind, Room: p.part.Room().Info(), Info: protocol.IngressInfo{ID: in.ID, Kind: in.Kind,
		Room: in.Room, Identity: in.Identity, Name: in.Name, State: state, Since: time.Now().UnixMilli()}})
}

// setState records an ingress's state while the ingress exists. A publisher
// ending (leaving, not nil) leaves the state alone while another one with the
// same key publishes: the one that replaced it in the room. It says whether
// it set st.
func (s *Server) setState(id string, leaving *publisher, st ingressState) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if leaving != nil {
		for _, o := range s.conns {
			if o != nil && o != leaving && o.ingress != nil && o.ingress.ID == id && o.started.Load() {
				return false
			}
		}
	}
	if s.o.Ingress.Exists(id) {
		s.states[id] = st
	} else {
		delete(s.states, id)
	}
	return true
}

// Disconnect closes the connections publishing with ingress id's key and
// says how many there were.
func (s *Server) Disconnect(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.states, id)
	n := 0
	for c, p := range s.conns {
		if p != nil && p.ingress != nil && p.ingress.ID == id {
			_ = c.Close()
			n++
		}
	}
	return n
}

// ingressInfo describes in with its state; host names this server as the
// admin request reached it (for a listener bound to every address).
func (s *Server) ingressInfo(in auth.Ingress, host string) protocol.IngressInfo {
	out := protocol.IngressInfo{ID: in.ID, Kind: in.Kind, Room: in.Room, Identity: in.Identity, Name: in.Name,
		StreamKey: in.Key, State: protocol.IngressInactive, Since: in.Created.UnixMilli()}
	s.mu.Lock()
	if st, ok := s.states[in.ID]; ok {
		out.Since = st.since.UnixMilli()
		if st.publishing {
			out.State = protocol.IngressPublishing
		}
	}
	s.mu.Unlock()
	switch in.Kind {
	case auth.IngressRTMP:
		out.URL = "rtmp://" + publicAddr(s.Addr(), host) + "/live"
	case auth.IngressSRT:
		out.URL = "srt://" + publicAddr(s.SRTAddr(), host) + "?streamid=" + url.QueryEscape(in.Key)
	}
	return out
}

// publicAddr is listen address addr with an unspecified host replaced by
// reqHost's (the name the admin client reached the server by).
func publicAddr(addr, reqHost string) string {
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); ip == nil || ip.IsUnspecified() {
		if rh, _, err := net.SplitHostPort(reqHost); err == nil {
			h = rh
		} else if reqHost != "" {
			h = reqHost
		}
	}
	return net.JoinHostPort(h, port)
}

// AdminRoutes adds the ingress calls to the admin API, each wrapped with
// admin (docs/protocol.md, "Ingress").
func (s *Server) AdminRoutes(mux *http.ServeMux, admin func(http.Handler) http.Handler) {
	h := func(pattern string, f func(w http.ResponseWriter, r *http.Request) (any, error)) {
		mux.Handle(pattern, admin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v, err := f(w, r)
			if err != nil {
				apiError(w, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			_ = json.NewEncoder(w).Encode(v)
		})))
	}
	h("POST /v1/admin/ingress", func(w http.ResponseWriter, r *http.Request) (any, error) {
		var req protocol.CreateIngress
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10)).Decode(&req); err != nil {
			return nil, protocol.Errorf(protocol.CodeBadRequest, "body must be {kind: rtmp|srt, room, identity, name?}: %v", err)
		}
		if (req.Kind == auth.IngressRTMP && s.ln == nil) || (req.Kind == auth.IngressSRT && s.srtLn == nil) {
			return nil, protocol.Errorf(protocol.CodeBadRequest, "this server does not listen for %s (ingest.%s)", req.Kind, req.Kind)
		}
		in, err := s.o.Ingress.Create(req.Kind, req.Room, req.Identity, req.Name)
		switch {
		case errors.Is(err, auth.ErrReserved):
			return nil, protocol.Errorf(protocol.CodeIdentityReserved, "identity %q is reserved for the server's own participants", req.Identity)
		case err != nil:
			return nil, protocol.Errorf(protocol.CodeBadRequest, "%v", err)
		}
		s.log.Info("ingress created", "ingress", in.ID, "kind", in.Kind, "room", in.Room, "identity", in.Identity)
		return s.ingressInfo(in, r.Host), nil
	})
	h("GET /v1/admin/ingress", func(w http.ResponseWriter, r *http.Request) (any, error) {
		out := []protocol.IngressInfo{}
		for _, in := range s.o.Ingress.List() {
			out = append(out, s.ingressInfo(in, r.Host))
		}
		return out, nil
	})
	h("DELETE /v1/admin/ingress/{id}", func(w http.ResponseWriter, r *http.Request) (any, error) {
		id := r.PathValue("id")
		if _, ok := s.o.Ingress.Delete(id); !ok {
			return nil, protocol.Errorf(protocol.CodeNotFound, "no ingress %q", id)
		}
		n := s.Disconnect(id)
		s.log.Info("ingress deleted", "ingress", id, "disconnected", n)
		return map[string]any{"deleted": true, "disconnected": n}, nil
	})
}

// apiError answers err as the admin API does: its code and status.
func apiError(w http.ResponseWriter, err error) {
	code := protocol.CodeOf(err)
	status := map[string]int{protocol.CodeBadRequest: 400, protocol.CodeNotFound: 404, protocol.CodeIdentityReserved: 403}[code]
	if status == 0 {
		status = 500
	}
	msg := protocol.MessageOf(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}
