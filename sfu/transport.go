package sfu

import (
	"errors"
	"io"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"
)

// Transport makes the WebRTC sessions of the room's clients. sfu says what a
// session must do; the transport package (session/) implements it, and sfu
// never imports it.
type Transport interface {
	// Viewer answers a client's offer to receive tracks (WHEP): one sender
	// per track, in the same order.
	Viewer(offer string, tracks []TrackSpec, h SessionHandler) (Viewer, []TrackSlot, string, error)
	// Subscriber makes the session a room participant's subscriptions are
	// offered on (the server offers; AddTrack and Offer).
	Subscriber(h SessionHandler) (Subscriber, error)
	// Publisher answers a client's offer to send: audio, video and the room's
	// data channels, or (media false) the data channels alone.
	Publisher(offer string, media bool, h PublisherHandler) (Publisher, string, error)
}

// TrackSpec is a track as a subscriber session writes it into SDP.
type TrackSpec struct {
	Kind     Kind
	Codec    Codec  // the publisher's
	ID       string // msid track id: the track's sid
	StreamID string // msid stream id: the publisher's sid
}

// TrackSlot is where one track goes in a subscriber session.
type TrackSlot struct {
	Mid  string
	SSRC uint32
	PT   uint8
	// Header extension ids the client kept (0: none).
	TransportCC, Dependency uint8
	// OK is false when the client's answer declined the track.
	OK bool
}

// Session is what every side of a participant has.
type Session interface {
	// RemoteUfrag is the ICE ufrag of the client's last offer or answer.
	RemoteUfrag() string
	Close(reason string)
}

// Downstream is the side that sends a participant its subscriptions. The
// DownTracks write to it directly (rtpWriter, batchWriter).
type Downstream interface {
	Session
	rtpWriter
	batchWriter
	rtcpWriter
}

// Viewer is a WHEP viewer's downstream: its tracks are fixed by its offer.
type Viewer interface {
	Downstream
	// RestartICE takes the client's new ICE credentials and returns the
	// server's new ones as an sdpfrag; DTLS and SRTP go on.
	RestartICE(ufrag, pwd string) (string, error)
}

// Subscriber is a room participant's downstream: the server offers.
type Subscriber interface {
	Downstream
	// AddTrack gives a track a media section in the next offer, RemoveTrack
	// takes it off; Offer writes that offer and ApplyAnswer reads the
	// client's answer.
	AddTrack(t TrackSpec) (mid string, err error)
	RemoveTrack(mid string)
	Offer(iceRestart bool) (string, error)
	ApplyAnswer(sdp string) ([]TrackSlot, error)
}

// Publisher is the side a participant's media and data arrive on.
type Publisher interface {
	Session
	// Reoffer answers the client's next offer (renegotiation, ICE restart).
	Reoffer(offer string) (string, error)
	// LastOffer is the client's last offer.
	LastOffer() string
	// RTT is the round-trip time to the client (0: unknown).
	RTT() time.Duration
}

// SessionHandler is told what happens to a session. Callbacks must not block.
type SessionHandler interface {
	OnICE()                    // the first ICE check was answered
	OnDTLS()                   // keys are in place: media flows from now on
	OnRTCP(pkts []rtcp.Packet) // the client's feedback on what it receives
	OnClose(reason string)     // the session is gone (consent expired, closed)
}

// PublisherHandler is also given what the client sends.
type PublisherHandler interface {
	SessionHandler
	// OnTrack is a new stream (a track, or a simulcast encoding of one).
	OnTrack(t IncomingTrack)
	// OnDataChannel is a channel the client opened.
	OnDataChannel(c DataChannel)
}

// IncomingTrack is one stream a publisher sends.
type IncomingTrack struct {
	Source
	ID    string // msid track id, as PublishTrack announced it
	Kind  Kind
	Codec Codec
	// Header extension ids the publisher uses (0: none).
	AudioLevelExt, DependencyExt uint8
}

// DataChannel is a data channel a client opened. Read returns the next
// message without waiting: ErrNoMessage when none waits, io.ErrShortBuffer
// (keeping it) when b is too small for it.
type DataChannel interface {
	io.Reader
	// OnReadable calls f, on the transport's goroutine, when a message may
	// be waiting: a quiet channel costs no goroutine.
	OnReadable(f func())
	Label() string
	Send(b []byte) error
	BufferedAmount() uint64
	Close() error
}

// ErrNoMessage is a DataChannel's Read when no message waits.
var ErrNoMessage = errors.New("no message waiting")

// Batch collects the datagrams of one packet's fan-out for one system call.
type Batch interface {
	// Flush sends what the batch holds and gives it back to its pool.
	Flush()
}

// batchWriter is a writer that can queue a packet into the fan-out's batch
// instead of sending it at once. The results mean what WriteRTP's do.
type batchWriter interface {
	NewBatch() Batch
	QueueRTP(b Batch, h *rtp.Header, payload []byte) (int, error)
}
