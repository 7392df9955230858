// Package protocol defines the JSON messages of the room protocol (docs/protocol.md)
// and how they are parsed. Everything here treats its input as hostile.
package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Version is the protocol version this server speaks.
const Version = 1

// Error codes (docs/protocol.md lists them with their meaning).
const (
	CodeInvalidJSON     = "invalid_json"
	CodeBadRequest      = "bad_request"
	CodeUnknownType     = "unknown_type"
	CodeProtocolVersion = "protocol_version"
	CodeTooLarge        = "message_too_large"
	CodeRateLimited     = "rate_limited"
	CodeUnauthorized    = "unauthorized"
	CodeTokenExpired    = "token_expired"
	CodeForbidden       = "forbidden"
	CodeRoomFull        = "room_full"
	CodeTooManyTracks   = "too_many_tracks"
	CodeNotJoined       = "not_joined"
	CodeNotFound        = "not_found"
	CodeSDPInvalid      = "sdp_invalid"
	CodeJoinTimeout     = "join_timeout"
	CodeServerBusy      = "server_busy"
	CodeInternal        = "internal"
	// CodeIdentityReserved: the token names an identity the server uses for
	// its own participants (a camera, a recording played back).
	CodeIdentityReserved = "identity_reserved"
	// CodeTooManySessions: the identity already holds limits.max_sessions_per_identity
	// sessions in the room.
	CodeTooManySessions = "too_many_sessions"
)

// Error is a protocol error: a code for programs and a message for people.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf makes an *Error.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err, or internal.
func CodeOf(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return CodeInternal
}

// Grants mirror the token's grants in ParticipantInfo.
type Grants struct {
	Publish     bool `json:"publish"`
	Subscribe   bool `json:"subscribe"`
	PublishData bool `json:"publishData"`
	Admin       bool `json:"admin"`
	Record      bool `json:"record,omitempty"`
}

// RoomInfo describes a room.
type RoomInfo struct {
	Sid             string `json:"sid"`
	Name            string `json:"name"`
	Metadata        string `json:"metadata"`
	NumParticipants int    `json:"numParticipants"`
	MaxParticipants int    `json:"maxParticipants"`
	CreatedAt       int64  `json:"createdAt"`
	// AudioMix: the server mixes the room's audio (docs/audio.md).
	AudioMix bool `json:"audioMix,omitempty"`
}

// ParticipantInfo describes a participant.
type ParticipantInfo struct {
	Sid         string      `json:"sid"`
	Identity    string      `json:"identity"`
	Name        string      `json:"name"`
	Metadata    string      `json:"metadata"`
	JoinedAt    int64       `json:"joinedAt"`
	Permissions Grants      `json:"permissions"`
	Tracks      []TrackInfo `json:"tracks"`
}

// TrackInfo describes a published track.
type TrackInfo struct {
	Sid       string      `json:"sid"`
	Cid       string      `json:"cid,omitempty"`
	Kind      string      `json:"kind"`
	Source    string      `json:"source"`
	Name      string      `json:"name,omitempty"`
	MimeType  string      `json:"mimeType,omitempty"`
	Muted     bool        `json:"muted"`
	Width     int         `json:"width,omitempty"`
	Height    int         `json:"height,omitempty"`
	SSRC      uint32      `json:"ssrc,omitempty"`
	Simulcast bool        `json:"simulcast"`
	Layers    []LayerInfo `json:"layers,omitempty"`
}

// LayerInfo describes one simulcast encoding as the publisher announced it.
type LayerInfo struct {
	RID        string `json:"rid"`
	Width      int    `json:"width,omitempty"`
	Height     int    `json:"height,omitempty"`
	MaxBitrate int    `json:"maxBitrate,omitempty"`
}

// ICEServer is handed to clients in joined.
type ICEServer struct {
	URLs       []string `json:"urls"`
	Username   string   `json:"username,omitempty"`
	Credential string   `json:"credential,omitempty"`
}

// Resume identifies a participant to take over after a lost WebSocket.
type Resume struct {
	ParticipantSid string `json:"participantSid"`
	ResumeToken    string `json:"resumeToken"`
}

// Request is any client message. Fields not used by a type stay zero; Parse
// checks that the ones a type needs are present.
type Request struct {
	Type string `json:"type"`
	ID   *int64 `json:"id,omitempty"`

	// join
	Token         string  `json:"token,omitempty"`
	Protocol      int     `json:"protocol,omitempty"`
	Metadata      *string `json:"metadata,omitempty"`
	Name          *string `json:"name,omitempty"`
	AutoSubscribe *bool   `json:"autoSubscribe,omitempty"`
	Resume        *Resume `json:"resume,omitempty"`

	// offer, answer
	SDP string `json:"sdp,omitempty"`

	// trickle
	Target    string     `json:"target,omitempty"`
	Candidate *Candidate `json:"candidate,omitempty"`

	// publishTrack
	Cid    string      `json:"cid,omitempty"`
	Kind   string      `json:"kind,omitempty"`
	Source string      `json:"source,omitempty"`
	Width  int         `json:"width,omitempty"`
	Height int         `json:"height,omitempty"`
	Layers []LayerInfo `json:"layers,omitempty"`

	// updateTrackSettings (with TrackSid, Width, Height)
	Quality string `json:"quality,omitempty"`
	Paused  *bool  `json:"paused,omitempty"`

	// unpublishTrack, muteTrack, subscribe
	TrackSid  string   `json:"trackSid,omitempty"`
	Muted     *bool    `json:"muted,omitempty"`
	TrackSids []string `json:"trackSids,omitempty"`
	Subscribe *bool    `json:"subscribe,omitempty"`

	// relay: signaling for a direct (peer-to-peer) connection, passed through
	To   string          `json:"to,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`

	// setLastN, pin
	N               *int     `json:"n,omitempty"`
	ParticipantSids []string `json:"participantSids,omitempty"`

	// ping
	T *float64 `json:"t,omitempty"`

	// setMaxBitrate: the most this receiver wants to be sent, bit/s (0: no cap)
	Bitrate *int64 `json:"bitrate,omitempty"`
}

// Limits on fields, so that a parsed request is safe to keep and broadcast.
const (
	maxNameLen     = 256
	maxMetadataLen = 16 << 10
	maxIDLen       = 128
	maxTrackSids   = 256
	maxRelayBytes  = 16 << 10
)

var sources = map[string]bool{"camera": true, "microphone": true, "screen": true, "screen_audio": true, "unknown": true, "": true}

// Parse decodes and validates one client frame.
func Parse(b []byte) (*Request, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, Errorf(CodeInvalidJSON, "a message must be a JSON object")
	}
	var r Request
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&r); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, Errorf(CodeBadRequest, "field %q has the wrong type", te.Field)
		}
		return nil, Errorf(CodeInvalidJSON, "%v", err)
	}
	if dec.More() {
		return nil, Errorf(CodeInvalidJSON, "trailing data after the JSON object")
	}
	return &r, r.validate()
}

func (r *Request) validate() error {
	bad := func(f string, a ...any) error { return Errorf(CodeBadRequest, f, a...) }
	if r.Name != nil && len(*r.Name) > maxNameLen {
		return bad("name longer than %d bytes", maxNameLen)
	}
	if r.Metadata != nil && len(*r.Metadata) > maxMetadataLen {
		return bad("metadata longer than %d bytes", maxMetadataLen)
	}
	switch r.Type {
	case "join":
		if r.Token == "" {
			return Errorf(CodeUnauthorized, "join needs a token")
		}
		if r.Resume != nil && (r.Resume.ParticipantSid == "" || r.Resume.ResumeToken == "") {
			return bad("resume needs participantSid and resumeToken")
		}
	case "offer", "answer":
		if r.SDP == "" {
			return bad("%s needs sdp", r.Type)
		}
	case "trickle":
		if r.Target != "publisher" && r.Target != "subscriber" {
			return bad("trickle target must be publisher or subscriber")
		}
	case "publishTrack":
		if r.Cid == "" || len(r.Cid) > maxIDLen {
			return bad("publishTrack needs cid (at most %d bytes)", maxIDLen)
		}
		if r.Kind != "audio" && r.Kind != "video" {
			return bad("kind must be audio or video")
		}
		if !sources[r.Source] {
			return bad("unknown source %q", r.Source)
		}
		if r.Width < 0 || r.Height < 0 || r.Width > 16384 || r.Height > 16384 {
			return bad("width and height must be between 0 and 16384")
		}
		if len(r.Layers) > 3 {
			return bad("at most 3 simulcast layers")
		}
		for _, l := range r.Layers {
			if l.RID == "" || len(l.RID) > 16 || l.Width < 0 || l.Height < 0 || l.Width > 16384 || l.Height > 16384 || l.MaxBitrate < 0 {
				return bad("each layer needs a rid (≤ 16 bytes) and non-negative sizes")
			}
		}
	case "updateTrackSettings":
		if r.TrackSid == "" {
			return bad("updateTrackSettings needs trackSid")
		}
		if r.Width < 0 || r.Height < 0 || r.Width > 16384 || r.Height > 16384 {
			return bad("width and height must be between 0 and 16384")
		}
		if r.Quality != "" && r.Quality != "low" && r.Quality != "medium" && r.Quality != "high" {
			return bad("quality must be low, medium or high")
		}
	case "unpublishTrack":
		if r.TrackSid == "" {
			return bad("unpublishTrack needs trackSid")
		}
	case "muteTrack":
		if r.TrackSid == "" || r.Muted == nil {
			return bad("muteTrack needs trackSid and muted")
		}
	case "subscribe":
		if len(r.TrackSids) == 0 || len(r.TrackSids) > maxTrackSids || r.Subscribe == nil {
			return bad("subscribe needs 1 to %d trackSids and subscribe", maxTrackSids)
		}
	case "setLastN":
		if r.N == nil || *r.N < -1 || *r.N > 1000 {
			return bad("setLastN needs n between -1 (the room's) and 1000 (0: all)")
		}
	case "relay":
		if r.To == "" || len(r.Data) == 0 || len(r.Data) > maxRelayBytes {
			return bad("relay needs to (a participant sid) and data (a JSON value of at most %d bytes)", maxRelayBytes)
		}
	case "pin":
		if len(r.ParticipantSids) > 64 {
			return bad("at most 64 pinned participants")
		}
	case "setMaxBitrate":
		if r.Bitrate == nil || *r.Bitrate < 0 || *r.Bitrate > 1e9 {
			return bad("setMaxBitrate needs bitrate between 0 (no cap) and 1e9 bit/s")
		}
	case "updateMetadata", "restartIce", "ping", "leave", "startRecording", "stopRecording":
	case "":
		return bad("message has no type")
	default:
		return Errorf(CodeUnknownType, "unknown message type %q", truncate(r.Type, 64))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Msg is a server message: a type and its fields, marshalled flat.
type Msg map[string]any

// ErrorMsg is the server's error message, answering request id when not nil.
func ErrorMsg(id *int64, err error) Msg {
	m := Msg{"type": "error", "code": CodeOf(err), "message": err.Error()}
	var pe *Error
	if errors.As(err, &pe) {
		m["message"] = pe.Message
	}
	if id != nil {
		m["id"] = *id
	}
	return m
}

// Response is the success reply to request id (nil: no reply needed).
func Response(id *int64, fields Msg) Msg {
	if id == nil {
		return nil
	}
	m := Msg{"type": "response", "id": *id}
	for k, v := range fields {
		m[k] = v
	}
	return m
}
