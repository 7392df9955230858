package signal

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/pprof"

	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// The REST admin API: rooms and participants, for tokens with the admin grant,
// from loopback unless admin.allow_remote.
func (s *Server) adminRoutes(mux *http.ServeMux) {
	h := func(pattern string, f func(http.ResponseWriter, *http.Request) (any, error)) {
		mux.Handle(pattern, s.admin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v, err := f(w, r)
			if err != nil {
				httpError(w, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		})))
	}
	// Go's profiles of the running server (CPU, heap, goroutines, execution
	// trace), for finding where the time and memory go under real load:
	// GET /v1/admin/debug/pprof/profile?seconds=N and the other names of
	// net/http/pprof.
	mux.Handle("GET /v1/admin/debug/pprof/", s.admin(http.StripPrefix("/v1/admin", http.HandlerFunc(pprof.Index))))
	mux.Handle("GET /v1/admin/debug/pprof/profile", s.admin(http.HandlerFunc(pprof.Profile)))
	mux.Handle("GET /v1/admin/debug/pprof/trace", s.admin(http.HandlerFunc(pprof.Trace)))
	if s.cameras != nil {
		s.cameras.AdminRoutes(h)
		s.cameras.Routes(mux, s.verify, s) // viewer routes (live.mp4), viewer tokens
	}
	if s.adminExtra != nil {
		s.adminExtra(mux, s.admin)
	}
	h("GET /v1/admin/rooms", func(w http.ResponseWriter, r *http.Request) (any, error) {
		out := []protocol.RoomInfo{}
		for _, room := range s.mgr.Rooms() {
			out = append(out, room.Info())
		}
		return out, nil
	})
	h("POST /v1/admin/rooms", func(w http.ResponseWriter, r *http.Request) (any, error) {
		var req struct {
			Name            string `json:"name"`
			MaxParticipants int    `json:"maxParticipants"`
			Metadata        string `json:"metadata"`
			// AudioMix: the server mixes the room's audio (docs/audiomix.md);
			// absent leaves an existing room's setting as it is.
			AudioMix *bool `json:"audioMix"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
			return nil, jsonBodyError(err, "body must be {name, maxParticipants?, metadata?, audioMix?}")
		}
		room, err := s.mgr.CreateRoom(req.Name, req.MaxParticipants, req.Metadata)
		if err != nil {
			return nil, err
		}
		if req.AudioMix != nil {
			room.SetAudioMix(*req.AudioMix)
		}
		return room.Info(), nil
	})
	h("DELETE /v1/admin/rooms/{room}", func(w http.ResponseWriter, r *http.Request) (any, error) {
		room, err := s.room(r)
		if err != nil {
			return nil, err
		}
		room.Close("room_closed")
		return map[string]bool{"closed": true}, nil
	})
	h("GET /v1/admin/rooms/{room}/participants", func(w http.ResponseWriter, r *http.Request) (any, error) {
		room, err := s.room(r)
		if err != nil {
			return nil, err
		}
		out := []protocol.ParticipantInfo{}
		for _, p := range room.Participants() {
			out = append(out, p.Info())
		}
		return out, nil
	})
	h("GET /v1/admin/rooms/{room}/participants/{identity}", func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.participant(r)
		if err != nil {
			return nil, err
		}
		return map[string]any{"participant": p.Info(), "stats": p.Stats()}, nil
	})
	h("DELETE /v1/admin/rooms/{room}/participants/{identity}", func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.participant(r)
		if err != nil {
			return nil, err
		}
		p.Kick("kicked", "removed by an administrator")
		return map[string]bool{"kicked": true}, nil
	})
	h("PATCH /v1/admin/rooms/{room}/participants/{identity}", s.updateParticipant)
	h("POST /v1/admin/rooms/{room}/data", s.sendData)
	h("POST /v1/admin/rooms/{room}/participants/{identity}/move", s.moveParticipant)
	h("POST /v1/admin/rooms/{room}/participants/{identity}/tracks/{track}/mute", func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.participant(r)
		if err != nil {
			return nil, err
		}
		var req struct {
			Muted *bool `json:"muted"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil || req.Muted == nil {
			return nil, jsonBodyError(err, "body must be {muted: bool}")
		}
		if err := p.MuteTrack(r.PathValue("track"), *req.Muted); err != nil {
			return nil, err
		}
		return map[string]bool{"muted": *req.Muted}, nil
	})
}

// jsonBodyError is a JSON body's refusal: message_too_large (413) when it went
// over its limit, as WHIP's, else bad_request with what was wanted.
func jsonBodyError(err error, want string) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return protocol.Errorf(protocol.CodeTooLarge, "body over %d bytes", tooBig.Limit)
	}
	if err != nil {
		return protocol.Errorf(protocol.CodeBadRequest, "%s: %v", want, err)
	}
	return protocol.Errorf(protocol.CodeBadRequest, "%s", want)
}

// admin lets through requests with an admin token from loopback (unless
// admin.allow_remote) and logs them.
func (s *Server) admin(h http.Handler) http.Handler {
	return s.adminOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.verify(bearer(r))
		if err != nil {
			s.refused.Note("admin", r, err)
			httpError(w, err)
			return
		}
		if !c.Grants.Admin {
			httpError(w, protocol.Errorf(protocol.CodeForbidden, "the token has no admin grant"))
			return
		}
		s.log.Info("admin request", "method", r.Method, "path", r.URL.Path, "identity", c.Identity())
		h.ServeHTTP(w, r)
	}))
}

func (s *Server) room(r *http.Request) (*sfu.Room, error) {
	room := s.mgr.Room(r.PathValue("room"))
	if room == nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "no room %q", r.PathValue("room"))
	}
	return room, nil
}

func (s *Server) participant(r *http.Request) (*sfu.Participant, error) {
	room, err := s.room(r)
	if err != nil {
		return nil, err
	}
	p := room.ByIdentity(r.PathValue("identity"))
	if p == nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "no participant %q in room %q", r.PathValue("identity"), room.Name())
	}
	return p, nil
}
