package protocol

import (
	"encoding/json"
)

// The messages of the room protocol, both directions. These types are the one
// definition of the wire: web/sdk/protocol.gen.ts is generated from them
// (go generate ./protocol), and a test fails when the two differ.
//
// Each message marshals as a flat JSON object whose "type" is its MsgType. A
// `ts` struct tag gives the TypeScript type where the Go type says less than
// the wire does (an enumeration kept in a Go string, a browser type).

//go:generate go run ./tsgen -o ../web/sdk/protocol.gen.ts

// Message is one message of the room protocol.
type Message interface {
	// MsgType is the message's "type" on the wire.
	MsgType() string
}

// TrackKind is the media kind of a track.
type TrackKind string

// Track kinds.
const (
	KindAudio TrackKind = "audio"
	KindVideo TrackKind = "video"
)

// TrackSource says what a track shows or plays.
type TrackSource string

// Track sources.
const (
	SourceCamera      TrackSource = "camera"
	SourceMicrophone  TrackSource = "microphone"
	SourceScreen      TrackSource = "screen"
	SourceScreenAudio TrackSource = "screen_audio"
	SourceUnknown     TrackSource = "unknown"
)

// PcTarget names one of a client's two peer connections.
type PcTarget string

// Peer connections.
const (
	TargetPublisher  PcTarget = "publisher"
	TargetSubscriber PcTarget = "subscriber"
)

// VideoQuality is a simulcast layer a subscriber asks for.
type VideoQuality string

// Qualities, lowest first.
const (
	QualityLow    VideoQuality = "low"
	QualityMedium VideoQuality = "medium"
	QualityHigh   VideoQuality = "high"
)

// LayerRID is the RID of a simulcast encoding: q, h, f from low to full resolution.
type LayerRID string

// Simulcast RIDs, lowest first.
const (
	RIDQuarter LayerRID = "q"
	RIDHalf    LayerRID = "h"
	RIDFull    LayerRID = "f"
)

// RoomRecording describes one room recording (docs/recording.md, Room recording).
type RoomRecording struct {
	ID   string `json:"id"`
	Room string `json:"room"`
	// Start and End are Unix ms; End is 0 while recording.
	Start  int64 `json:"start"`
	End    int64 `json:"end,omitempty"`
	Active bool  `json:"active"`
	// By is "admin", "config" or the identity that started it.
	By string `json:"startedBy,omitempty"`
	// Crashed is set when the server died while recording (End is then the
	// end of what survived).
	Crashed bool            `json:"crashed,omitempty"`
	Tracks  []RoomTrackInfo `json:"tracks"`
}

// RoomTrackInfo is one recorded track.
type RoomTrackInfo struct {
	// Key is the track's directory in the recording.
	Key            string `json:"key"`
	Identity       string `json:"identity"`
	ParticipantSid string `json:"participantSid"`
	TrackSid       string `json:"trackSid"`
	Kind           string `json:"kind"`
	Source         string `json:"source,omitempty"`
	MimeType       string `json:"mimeType"`
	// Ranges are filled in answers, not stored.
	Ranges []Range `json:"ranges,omitempty"`
}

// Range is a stretch of continuous recording in Unix milliseconds.
type Range struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// --- client → server -------------------------------------------------------

// Join is the first message: who the client is (its token) and how it joins.
type Join struct {
	// Token is the access token (JWT), never sent in the URL.
	Token string `json:"token"`
	// Protocol is the protocol version the client speaks.
	Protocol      int     `json:"protocol"`
	Metadata      *string `json:"metadata,omitempty"`
	Name          *string `json:"name,omitempty"`
	AutoSubscribe *bool   `json:"autoSubscribe,omitempty"`
	// Resume takes over a participant whose WebSocket was lost.
	Resume *Resume `json:"resume,omitempty"`
}

// Offer is an SDP offer: the client's publisher offer, or the server's
// subscriber offer.
type Offer struct {
	SDP string `json:"sdp"`
}

// Answer is an SDP answer: the server's to a publisher offer (with the offer's
// id), or the client's to a subscriber offer.
type Answer struct {
	ID  *int64 `json:"id,omitempty"`
	SDP string `json:"sdp"`
}

// Trickle carries one ICE candidate for a peer connection (null: end of candidates).
type Trickle struct {
	Target    PcTarget   `json:"target"`
	Candidate *Candidate `json:"candidate" ts:"RTCIceCandidateInit | null"`
}

// PublishTrack announces a track before the offer that carries it.
type PublishTrack struct {
	// Cid is the MediaStreamTrack id, matched against the SDP msid.
	Cid    string      `json:"cid"`
	Kind   TrackKind   `json:"kind"`
	Source TrackSource `json:"source"`
	Name   *string     `json:"name,omitempty"`
	Muted  *bool       `json:"muted,omitempty"`
	Width  int         `json:"width,omitempty"`
	Height int         `json:"height,omitempty"`
	// Layers are the simulcast encodings, at most 3.
	Layers []LayerInfo `json:"layers,omitempty"`
}

// UnpublishTrack stops publishing a track.
type UnpublishTrack struct {
	TrackSid string `json:"trackSid"`
}

// UpdateTrackSettings says how a subscribed video is shown.
type UpdateTrackSettings struct {
	TrackSid string `json:"trackSid"`
	// Width and Height are the size shown: the server sends the smallest
	// simulcast layer that covers it.
	Width   int          `json:"width,omitempty"`
	Height  int          `json:"height,omitempty"`
	Quality VideoQuality `json:"quality,omitempty"`
	// Paused stops forwarding while the video is hidden.
	Paused *bool `json:"paused,omitempty"`
}

// MuteTrack mutes or unmutes a published track.
type MuteTrack struct {
	TrackSid string `json:"trackSid"`
	Muted    *bool  `json:"muted"`
}

// Subscribe subscribes to or unsubscribes from tracks.
type Subscribe struct {
	TrackSids []string `json:"trackSids"`
	Subscribe *bool    `json:"subscribe"`
}

// SetLastN sets how many other participants' video to receive, most recent
// speakers first (0: all, -1: the room's default).
type SetLastN struct {
	N *int `json:"n"`
}

// Pin sets whose video to receive always, whatever Last-N says.
type Pin struct {
	ParticipantSids []string `json:"participantSids"`
}

// SetMaxBitrate caps what this receiver is sent, in bit/s (0: no cap).
type SetMaxBitrate struct {
	Bitrate *int64 `json:"bitrate"`
}

// UpdateMetadata changes the participant's metadata or name (those given).
type UpdateMetadata struct {
	Metadata *string `json:"metadata,omitempty"`
	Name     *string `json:"name,omitempty"`
}

// RestartICE asks for an ICE restart of the subscriber connection.
type RestartICE struct{}

// StartRecording starts recording the room (record grant).
type StartRecording struct{}

// StopRecording stops the room's recording (record grant).
type StopRecording struct{}

// Relay is signalling for a direct peer-to-peer connection, delivered to To.
type Relay struct {
	// To is the participant sid to deliver to.
	To   string          `json:"to"`
	Data json.RawMessage `json:"data"`
}

// Ping asks for a pong; T is echoed.
type Ping struct {
	T *float64 `json:"t,omitempty"`
}

// Leave ends the session; the server closes the socket.
type Leave struct{}

// --- server → client -------------------------------------------------------

// Joined answers join.
type Joined struct {
	ID       *int64   `json:"id,omitempty"`
	Protocol int      `json:"protocol"`
	Room     RoomInfo `json:"room"`
	// Participant is the client itself.
	Participant ParticipantInfo `json:"participant"`
	// Participants are the others.
	Participants []ParticipantInfo `json:"participants"`
	IceServers   []ICEServer       `json:"iceServers"`
	ResumeToken  string            `json:"resumeToken"`
	Resumed      bool              `json:"resumed"`
	// WebTransport describes the WebTransport endpoint, when there is one.
	WebTransport *WebTransportInfo `json:"webtransport,omitempty"`
}

// WebTransportInfo is where the WebTransport media endpoint is (in joined and
// from GET /v1/wt-cert-hash); the certificate fields come with a development
// certificate, for serverCertificateHashes.
type WebTransportInfo struct {
	URL       string   `json:"url"`
	Protocols []string `json:"protocols"`
	Algorithm string   `json:"algorithm,omitempty"`
	// Value is the certificate's hash in base64, Hex the same in hex.
	Value string `json:"value,omitempty"`
	Hex   string `json:"hex,omitempty"`
	// Expires is the certificate's expiry (RFC 3339).
	Expires string `json:"expires,omitempty"`
}

// ParticipantJoined announces a participant.
type ParticipantJoined struct {
	Participant ParticipantInfo `json:"participant"`
}

// ParticipantLeft announces a departure.
type ParticipantLeft struct {
	ParticipantSid string `json:"participantSid"`
	Identity       string `json:"identity"`
	Reason         string `json:"reason"`
}

// ParticipantUpdated announces a participant's new name, metadata or grants.
type ParticipantUpdated struct {
	Participant ParticipantInfo `json:"participant"`
}

// TrackPublished announces a track.
type TrackPublished struct {
	ParticipantSid string    `json:"participantSid"`
	Track          TrackInfo `json:"track"`
}

// TrackUnpublished announces the end of a track.
type TrackUnpublished struct {
	ParticipantSid string `json:"participantSid"`
	TrackSid       string `json:"trackSid"`
}

// TrackMuted announces a mute or unmute.
type TrackMuted struct {
	ParticipantSid string `json:"participantSid"`
	TrackSid       string `json:"trackSid"`
	Muted          bool   `json:"muted"`
}

// DominantSpeaker announces the room's dominant speaker.
type DominantSpeaker struct {
	ParticipantSid string `json:"participantSid"`
}

// TrackDemand tells a publisher which encodings of its track some receiver needs.
type TrackDemand struct {
	TrackSid string `json:"trackSid"`
	Active   bool   `json:"active"`
	// Layers are by simulcast layer, low first.
	Layers []bool `json:"layers,omitempty"`
}

// TrackSubscribed says a subscriber track comes in the next offer.
type TrackSubscribed struct {
	ParticipantSid string `json:"participantSid"`
	TrackSid       string `json:"trackSid"`
	Mid            string `json:"mid,omitempty"`
}

// TrackUnsubscribed says a subscriber track is gone.
type TrackUnsubscribed struct {
	ParticipantSid string `json:"participantSid"`
	TrackSid       string `json:"trackSid"`
}

// Relayed delivers a Relay: From is the sender's participant sid.
type Relayed struct {
	From string          `json:"from"`
	Data json.RawMessage `json:"data"`
}

// Response is the success reply to a request with an id.
type Response struct {
	ID int64 `json:"id"`
	// Track answers publishTrack.
	Track *TrackInfo `json:"track,omitempty"`
	// Recording answers startRecording and stopRecording.
	Recording *RoomRecording `json:"recording,omitempty"`
}

// ErrorMessage is the server's error, answering request ID when set.
type ErrorMessage struct {
	ID      *int64 `json:"id,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Pong answers ping.
type Pong struct {
	ID *int64   `json:"id,omitempty"`
	T  *float64 `json:"t,omitempty"`
	// ServerTime is in ms since the epoch.
	ServerTime int64 `json:"serverTime"`
}

// LeaveNotice tells the client its session ends and why.
type LeaveNotice struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Reconnect sends the client to another node of a cluster.
type Reconnect struct {
	URL    string `json:"url"`
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// Move sends the client to another room (server API).
type Move struct {
	Room  string `json:"room"`
	Token string `json:"token"`
}

// ClientMessages and ServerMessages list every message of each direction (a
// zero value of each), for parsing and for the TypeScript generator.
var (
	ClientMessages = []Message{Join{}, Offer{}, Answer{}, Trickle{}, PublishTrack{}, UnpublishTrack{},
		UpdateTrackSettings{}, MuteTrack{}, Subscribe{}, SetLastN{}, Pin{}, SetMaxBitrate{}, UpdateMetadata{},
		RestartICE{}, StartRecording{}, StopRecording{}, Relay{}, Ping{}, Leave{}}
	ServerMessages = []Message{Joined{}, Answer{}, Offer{}, Trickle{}, ParticipantJoined{}, ParticipantLeft{},
		ParticipantUpdated{}, TrackPublished{}, TrackUnpublished{}, TrackMuted{}, DominantSpeaker{}, TrackDemand{},
		TrackSubscribed{}, TrackUnsubscribed{}, Relayed{}, Response{}, ErrorMessage{}, Pong{}, LeaveNotice{},
		Reconnect{}, Move{}}
)

// tagged marshals v (a message without its type) with "type" first.
func tagged(typ string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b)+len(typ)+12)
	out = append(out, `{"type":"`...)
	out = append(out, typ...)
	out = append(out, '"')
	if len(b) > 2 {
		out = append(out, ',')
	}
	return append(out, b[1:]...), nil
}

func (Join) MsgType() string                { return "join" }
func (Offer) MsgType() string               { return "offer" }
func (Answer) MsgType() string              { return "answer" }
func (Trickle) MsgType() string             { return "trickle" }
func (PublishTrack) MsgType() string        { return "publishTrack" }
func (UnpublishTrack) MsgType() string      { return "unpublishTrack" }
func (UpdateTrackSettings) MsgType() string { return "updateTrackSettings" }
func (MuteTrack) MsgType() string           { return "muteTrack" }
func (Subscribe) MsgType() string           { return "subscribe" }
func (SetLastN) MsgType() string            { return "setLastN" }
func (Pin) MsgType() string                 { return "pin" }
func (SetMaxBitrate) MsgType() string       { return "setMaxBitrate" }
func (UpdateMetadata) MsgType() string      { return "updateMetadata" }
func (RestartICE) MsgType() string          { return "restartIce" }
func (StartRecording) MsgType() string      { return "startRecording" }
func (StopRecording) MsgType() string       { return "stopRecording" }
func (Relay) MsgType() string               { return "relay" }
func (Ping) MsgType() string                { return "ping" }
func (Leave) MsgType() string               { return "leave" }
func (Joined) MsgType() string              { return "joined" }
func (ParticipantJoined) MsgType() string   { return "participantJoined" }
func (ParticipantLeft) MsgType() string     { return "participantLeft" }
func (ParticipantUpdated) MsgType() string  { return "participantUpdated" }
func (TrackPublished) MsgType() string      { return "trackPublished" }
func (TrackUnpublished) MsgType() string    { return "trackUnpublished" }
func (TrackMuted) MsgType() string          { return "trackMuted" }
func (DominantSpeaker) MsgType() string     { return "dominantSpeaker" }
func (TrackDemand) MsgType() string         { return "trackDemand" }
func (TrackSubscribed) MsgType() string     { return "trackSubscribed" }
func (TrackUnsubscribed) MsgType() string   { return "trackUnsubscribed" }
func (Relayed) MsgType() string             { return "relay" }
func (Response) MsgType() string            { return "response" }
func (ErrorMessage) MsgType() string        { return "error" }
func (Pong) MsgType() string                { return "pong" }
func (LeaveNotice) MsgType() string         { return "leave" }
func (Reconnect) MsgType() string           { return "reconnect" }
func (Move) MsgType() string                { return "move" }

// MarshalJSON methods put the type in; each converts to a method-less copy of
// itself so that json.Marshal does not recurse.

func (m Join) MarshalJSON() ([]byte, error)   { type t Join; return tagged(m.MsgType(), t(m)) }
func (m Offer) MarshalJSON() ([]byte, error)  { type t Offer; return tagged(m.MsgType(), t(m)) }
func (m Answer) MarshalJSON() ([]byte, error) { type t Answer; return tagged(m.MsgType(), t(m)) }
func (m Trickle) MarshalJSON() ([]byte, error) {
	type t Trickle
	return tagged(m.MsgType(), t(m))
}
func (m PublishTrack) MarshalJSON() ([]byte, error) {
	type t PublishTrack
	return tagged(m.MsgType(), t(m))
}
func (m UnpublishTrack) MarshalJSON() ([]byte, error) {
	type t UnpublishTrack
	return tagged(m.MsgType(), t(m))
}
func (m UpdateTrackSettings) MarshalJSON() ([]byte, error) {
	type t UpdateTrackSettings
	return tagged(m.MsgType(), t(m))
}
func (m MuteTrack) MarshalJSON() ([]byte, error) {
	type t MuteTrack
	return tagged(m.MsgType(), t(m))
}
func (m Subscribe) MarshalJSON() ([]byte, error) {
	type t Subscribe
	return tagged(m.MsgType(), t(m))
}
func (m SetLastN) MarshalJSON() ([]byte, error) { type t SetLastN; return tagged(m.MsgType(), t(m)) }
func (m Pin) MarshalJSON() ([]byte, error)      { type t Pin; return tagged(m.MsgType(), t(m)) }
func (m SetMaxBitrate) MarshalJSON() ([]byte, error) {
	type t SetMaxBitrate
	return tagged(m.MsgType(), t(m))
}
func (m UpdateMetadata) MarshalJSON() ([]byte, error) {
	type t UpdateMetadata
	return tagged(m.MsgType(), t(m))
}
func (m RestartICE) MarshalJSON() ([]byte, error)     { return tagged(m.MsgType(), struct{}{}) }
func (m StartRecording) MarshalJSON() ([]byte, error) { return tagged(m.MsgType(), struct{}{}) }
func (m StopRecording) MarshalJSON() ([]byte, error)  { return tagged(m.MsgType(), struct{}{}) }
func (m Relay) MarshalJSON() ([]byte, error)          { type t Relay; return tagged(m.MsgType(), t(m)) }
func (m Ping) MarshalJSON() ([]byte, error)           { type t Ping; return tagged(m.MsgType(), t(m)) }
func (m Leave) MarshalJSON() ([]byte, error)          { return tagged(m.MsgType(), struct{}{}) }
func (m Joined) MarshalJSON() ([]byte, error)         { type t Joined; return tagged(m.MsgType(), t(m)) }
func (m ParticipantJoined) MarshalJSON() ([]byte, error) {
	type t ParticipantJoined
	return tagged(m.MsgType(), t(m))
}
func (m ParticipantLeft) MarshalJSON() ([]byte, error) {
	type t ParticipantLeft
	return tagged(m.MsgType(), t(m))
}
func (m ParticipantUpdated) MarshalJSON() ([]byte, error) {
	type t ParticipantUpdated
	return tagged(m.MsgType(), t(m))
}
func (m TrackPublished) MarshalJSON() ([]byte, error) {
	type t TrackPublished
	return tagged(m.MsgType(), t(m))
}
func (m TrackUnpublished) MarshalJSON() ([]byte, error) {
	type t TrackUnpublished
	return tagged(m.MsgType(), t(m))
}
func (m TrackMuted) MarshalJSON() ([]byte, error) {
	type t TrackMuted
	return tagged(m.MsgType(), t(m))
}
func (m DominantSpeaker) MarshalJSON() ([]byte, error) {
	type t DominantSpeaker
	return tagged(m.MsgType(), t(m))
}
func (m TrackDemand) MarshalJSON() ([]byte, error) {
	type t TrackDemand
	return tagged(m.MsgType(), t(m))
}
func (m TrackSubscribed) MarshalJSON() ([]byte, error) {
	type t TrackSubscribed
	return tagged(m.MsgType(), t(m))
}
func (m TrackUnsubscribed) MarshalJSON() ([]byte, error) {
	type t TrackUnsubscribed
	return tagged(m.MsgType(), t(m))
}
func (m Relayed) MarshalJSON() ([]byte, error)  { type t Relayed; return tagged(m.MsgType(), t(m)) }
func (m Response) MarshalJSON() ([]byte, error) { type t Response; return tagged(m.MsgType(), t(m)) }
func (m ErrorMessage) MarshalJSON() ([]byte, error) {
	type t ErrorMessage
	return tagged(m.MsgType(), t(m))
}
func (m Pong) MarshalJSON() ([]byte, error) { type t Pong; return tagged(m.MsgType(), t(m)) }
func (m LeaveNotice) MarshalJSON() ([]byte, error) {
	type t LeaveNotice
	return tagged(m.MsgType(), t(m))
}
func (m Reconnect) MarshalJSON() ([]byte, error) { type t Reconnect; return tagged(m.MsgType(), t(m)) }
func (m Move) MarshalJSON() ([]byte, error)      { type t Move; return tagged(m.MsgType(), t(m)) }

// NewRelay makes a Relay of data marshalled; a value that does not marshal
// becomes null, which the server refuses as bad_request.
func NewRelay(to string, data any) Relay {
	b, err := json.Marshal(data)
	if err != nil {
		b = []byte("null")
	}
	return Relay{To: to, Data: b}
}
