// Package protocol defines the JSON messages of the room protocol (docs/protocol.md)
// and how they are parsed. Everything here treats its input as hostile.
package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"

	"github.com/petrel-sfu/petrel/auth"
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

// MessageOf returns the message of err without its code, or err's text.
func MessageOf(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
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
	// AudioMix: the server mixes the room's audio (docs/audiomix.md).
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
	Kind      string      `json:"kind" ts:"TrackKind"`
	Source    string      `json:"source" ts:"TrackSource"`
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
	RID        string `json:"rid" ts:"LayerRID"`
	Width      int    `json:"width,omitempty"`
	Height     int    `json:"height,omitempty"`
	MaxBitrate int    `json:"maxBitrate,omitempty"`
}

// ICEServer is handed to clients in joined.
type ICEServer struct {
	URLs       []string `json:"urls" ts:"string[]"` // never nil
	Username   string   `json:"username,omitempty"`
	Credential string   `json:"credential,omitempty"`
}

// Resume identifies a participant to take over after a lost WebSocket.
type Resume struct {
	ParticipantSid string `json:"participantSid"`
	ResumeToken    string `json:"resumeToken"`
}

// Request is one parsed client message: its type, its id if it has one, and
// the message itself (one of ClientMessages' types).
type Request struct {
	Type string
	ID   *int64
	Msg  Message
}

// envelope is what every client message has.
type envelope struct {
	Type string `json:"type"`
	ID   *int64 `json:"id,omitempty"`
}

// Limits on fields, so that a parsed request is safe to keep and broadcast.
const (
	maxNameLen     = 256
	maxMetadataLen = 16 << 10
	maxIDLen       = 128
	maxTrackSids   = 256
	maxRelayBytes  = 16 << 10
)

var sources = map[TrackSource]bool{SourceCamera: true, SourceMicrophone: true, SourceScreen: true, SourceScreenAudio: true, SourceUnknown: true, "": true}

// requests makes an empty message of each client type, to parse into.
var requests = func() map[string]func() Message {
	m := map[string]func() Message{}
	for _, z := range ClientMessages {
		t := reflect.TypeOf(z)
		m[z.MsgType()] = func() Message { return reflect.New(t).Interface().(Message) }
	}
	return m
}()

// Parse decodes and validates one client frame. On a validation error the
// Request is returned too, so that the error can answer its id.
func Parse(b []byte) (*Request, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, Errorf(CodeInvalidJSON, "a message must be a JSON object")
	}
	var e envelope
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&e); err != nil {
		return nil, decodeError(err)
	}
	if dec.More() {
		return nil, Errorf(CodeInvalidJSON, "trailing data after the JSON object")
	}
	r := &Request{Type: e.Type, ID: e.ID}
	mk := requests[e.Type]
	switch {
	case e.Type == "":
		return r, Errorf(CodeBadRequest, "message has no type")
	case mk == nil:
		return r, Errorf(CodeUnknownType, "unknown message type %q", truncate(e.Type, 64))
	}
	ptr := mk()
	if err := json.Unmarshal(b, ptr); err != nil {
		return r, decodeError(err)
	}
	if v, ok := ptr.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return r, err
		}
	}
	r.Msg = reflect.ValueOf(ptr).Elem().Interface().(Message)
	return r, nil
}

func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return Errorf(CodeBadRequest, "field %q has the wrong type", te.Field)
	}
	return Errorf(CodeInvalidJSON, "%v", err)
}

func bad(f string, a ...any) error { return Errorf(CodeBadRequest, f, a...) }

func checkNames(name, metadata *string) error {
	if name != nil && len(*name) > maxNameLen {
		return bad("name longer than %d bytes", maxNameLen)
	}
	if metadata != nil && len(*metadata) > maxMetadataLen {
		return bad("metadata longer than %d bytes", maxMetadataLen)
	}
	return nil
}

func checkSize(w, h int) error {
	if w < 0 || h < 0 || w > 16384 || h > 16384 {
		return bad("width and height must be between 0 and 16384")
	}
	return nil
}

func (m *Join) validate() error {
	if err := checkNames(m.Name, m.Metadata); err != nil {
		return err
	}
	if m.Token == "" {
		return Errorf(CodeUnauthorized, "join needs a token")
	}
	if m.Resume != nil && (m.Resume.ParticipantSid == "" || m.Resume.ResumeToken == "") {
		return bad("resume needs participantSid and resumeToken")
	}
	return nil
}

func (m *Offer) validate() error {
	if m.SDP == "" {
		return bad("offer needs sdp")
	}
	return nil
}

func (m *Answer) validate() error {
	if m.SDP == "" {
		return bad("answer needs sdp")
	}
	return nil
}

func (m *Trickle) validate() error {
	if m.Target != TargetPublisher && m.Target != TargetSubscriber {
		return bad("trickle target must be publisher or subscriber")
	}
	return nil
}

func (m *PublishTrack) validate() error {
	if err := checkNames(m.Name, nil); err != nil {
		return err
	}
	if m.Cid == "" || len(m.Cid) > maxIDLen {
		return bad("publishTrack needs cid (at most %d bytes)", maxIDLen)
	}
	if m.Kind != KindAudio && m.Kind != KindVideo {
		return bad("kind must be audio or video")
	}
	if !sources[m.Source] {
		return bad("unknown source %q", truncate(string(m.Source), 64))
	}
	if err := checkSize(m.Width, m.Height); err != nil {
		return err
	}
	if len(m.Layers) > 3 {
		return bad("at most 3 simulcast layers")
	}
	for _, l := range m.Layers {
		if l.RID == "" || len(l.RID) > 16 || l.Width < 0 || l.Height < 0 || l.Width > 16384 || l.Height > 16384 || l.MaxBitrate < 0 {
			return bad("each layer needs a rid (≤ 16 bytes) and non-negative sizes")
		}
	}
	return nil
}

func (m *UpdateTrackSettings) validate() error {
	if m.TrackSid == "" {
		return bad("updateTrackSettings needs trackSid")
	}
	if err := checkSize(m.Width, m.Height); err != nil {
		return err
	}
	if m.Quality != "" && m.Quality != QualityLow && m.Quality != QualityMedium && m.Quality != QualityHigh {
		return bad("quality must be low, medium or high")
	}
	return nil
}

func (m *UnpublishTrack) validate() error {
	if m.TrackSid == "" {
		return bad("unpublishTrack needs trackSid")
	}
	return nil
}

func (m *MuteTrack) validate() error {
	if m.TrackSid == "" || m.Muted == nil {
		return bad("muteTrack needs trackSid and muted")
	}
	return nil
}

func (m *Subscribe) validate() error {
	if len(m.TrackSids) == 0 || len(m.TrackSids) > maxTrackSids || m.Subscribe == nil {
		return bad("subscribe needs 1 to %d trackSids and subscribe", maxTrackSids)
	}
	return nil
}

func (m *SetLastN) validate() error {
	if m.N == nil || *m.N < -1 || *m.N > 1000 {
		return bad("setLastN needs n between -1 (the room's) and 1000 (0: all)")
	}
	return nil
}

func (m *Relay) validate() error {
	if m.To == "" || len(m.Data) == 0 || len(m.Data) > maxRelayBytes {
		return bad("relay needs to (a participant sid) and data (a JSON value of at most %d bytes)", maxRelayBytes)
	}
	return nil
}

func (m *Pin) validate() error {
	if len(m.ParticipantSids) > 64 {
		return bad("at most 64 pinned participants")
	}
	return nil
}

func (m *SetMaxBitrate) validate() error {
	if m.Bitrate == nil || *m.Bitrate < 0 || *m.Bitrate > 1e9 {
		return bad("setMaxBitrate needs bitrate between 0 (no cap) and 1e9 bit/s")
	}
	return nil
}

func (m *UpdateMetadata) validate() error { return checkNames(m.Name, m.Metadata) }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// ErrorMsg is the server's error message, answering request id when not nil.
func ErrorMsg(id *int64, err error) ErrorMessage {
	return ErrorMessage{ID: id, Code: CodeOf(err), Message: MessageOf(err)}
}

// Reply is the success reply to request id: r (nil: an empty response), or
// nothing when the request has no id.
func Reply(id *int64, r *Response) Message {
	if id == nil {
		return nil
	}
	if r == nil {
		r = &Response{}
	}
	r.ID = *id
	return *r
}

// Msg is a message decoded without its type known: how a Go client reads the
// server's messages generically, and how tests write deliberately malformed
// ones. The server sends only the typed messages of messages.go.
type Msg map[string]any

// TokenRefusal is the HTTP status and code for a token auth.Keys.Verify
// refused: 401 unauthorized or token_expired, 403 identity_reserved.
func TokenRefusal(err error) (status int, code string) {
	switch {
	case errors.Is(err, auth.ErrExpired):
		return http.StatusUnauthorized, CodeTokenExpired
	case errors.Is(err, auth.ErrReserved):
		return http.StatusForbidden, CodeIdentityReserved
	}
	return http.StatusUnauthorized, CodeUnauthorized
}
