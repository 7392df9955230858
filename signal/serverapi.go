package signal

import (
	"encoding/base64"
	"encoding/json"
	"net/http"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// Limits of the server API's bodies, as the room protocol's for the same fields.
const (
	maxNameLen     = 256
	maxMetadataLen = 16 << 10
)

// decodeStrict reads a JSON body of at most limit bytes, refusing unknown
// fields (a misspelt grant must not pass for a no-op).
func decodeStrict(w http.ResponseWriter, r *http.Request, limit int64, v any, want string) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonBodyError(err, want)
	}
	return nil
}

// ownParticipant is the participant the request names, if this node answers
// for it: another node's client (a mirror) is changed on its node, and the
// server's own participants are not the API's to change.
func (s *Server) ownParticipant(r *http.Request) (*sfu.Participant, error) {
	p, err := s.participant(r)
	if err != nil {
		return nil, err
	}
	switch p.Origin() {
	case sfu.Mirror:
		return nil, protocol.Errorf(protocol.CodeNotFound, "participant %q is connected to another node of the cluster: call that node", p.Identity())
	case sfu.Server:
		return nil, protocol.Errorf(protocol.CodeForbidden, "participant %q is the server's own", p.Identity())
	}
	return p, nil
}

func (s *Server) updateParticipant(w http.ResponseWriter, r *http.Request) (any, error) {
	p, err := s.ownParticipant(r)
	if err != nil {
		return nil, err
	}
	var req protocol.UpdateParticipant
	if err := decodeStrict(w, r, 64<<10, &req, "body must be {name?, metadata?, permissions?: {publish?, subscribe?, publishData?, admin?, ptz?, record?}}"); err != nil {
		return nil, err
	}
	if req.Name != nil && len(*req.Name) > maxNameLen || req.Metadata != nil && len(*req.Metadata) > maxMetadataLen {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "name over %d or metadata over %d bytes", maxNameLen, maxMetadataLen)
	}
	if req.Name == nil && req.Metadata == nil && req.Permissions == nil {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "nothing to update: give name, metadata or permissions")
	}
	if req.Name != nil || req.Metadata != nil {
		p.UpdateMetadata(req.Name, req.Metadata)
	}
	if req.Permissions != nil {
		p.SetGrants(req.Permissions.Apply(p.Grants()))
	}
	return p.Info(), nil
}

func (s *Server) sendData(w http.ResponseWriter, r *http.Request) (any, error) {
	room, err := s.room(r)
	if err != nil {
		return nil, err
	}
	var req protocol.SendData
	// Base64 takes 4/3 of the payload.
	limit := int64(s.cfg.Limits.MaxDataBytes)*4/3 + 8<<10
	if err := decodeStrict(w, r, limit, &req, "body must be {data, encoding?, topic?, to?, reliable?}"); err != nil {
		return nil, err
	}
	payload := []byte(req.Data)
	switch req.Encoding {
	case "", "text":
	case "base64":
		if payload, err = base64.StdEncoding.DecodeString(req.Data); err != nil {
			return nil, protocol.Errorf(protocol.CodeBadRequest, "data is not base64: %v", err)
		}
	default:
		return nil, protocol.Errorf(protocol.CodeBadRequest, "encoding must be text or base64")
	}
	if len(payload) == 0 && req.Topic == "" {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "nothing to send: give data or a topic")
	}
	reliable := req.Reliable == nil || *req.Reliable
	n, err := room.SendData(reliable, req.Topic, req.Encoding != "base64", req.To, payload)
	if err != nil {
		return nil, err
	}
	return map[string]int{"delivered": n}, nil
}

func (s *Server) moveParticipant(w http.ResponseWriter, r *http.Request) (any, error) {
	p, err := s.ownParticipant(r)
	if err != nil {
		return nil, err
	}
	var req protocol.MoveParticipant
	if err := decodeStrict(w, r, 4096, &req, "body must be {room}"); err != nil {
		return nil, err
	}
	switch {
	case req.Room == "" || len(req.Room) > 128:
		return nil, protocol.Errorf(protocol.CodeBadRequest, "room must be 1 to 128 bytes")
	case req.Room == p.Room().Name():
		return nil, protocol.Errorf(protocol.CodeBadRequest, "participant %q is already in room %q", p.Identity(), req.Room)
	}
	// The token the client joins with: who it is and may do, in the new room,
	// as long as any token this server accepts (later reconnects use it too).
	info := p.Info()
	c := auth.Claims{Room: req.Room, Name: info.Name, Metadata: info.Metadata, Grants: p.Grants()}
	c.Subject = p.Identity()
	tok, err := s.keys.Sign(s.apiKey, c, s.cfg.Limits.MaxTokenLifetime)
	if err != nil {
		return nil, err
	}
	if err := p.MoveTo(req.Room, tok); err != nil {
		return nil, err
	}
	return map[string]string{"room": req.Room}, nil
}
