package cluster

import (
	"encoding/binary"
	"errors"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// A node link carries two data channels over one DTLS association (a Pion
// PeerConnection per node pair): "ctl", reliable and ordered, with the JSON
// messages below, and "media", unordered without retransmission, with RTP in
// the binary frame of mediaHeader. All rooms the two nodes share use the same
// link; a track is named by a number the sending node assigns (ctlMsg.N).

// Media frame kinds.
const (
	frameRTP = 1 // an original packet
	frameRTX = 2 // a retransmission answering a nack
)

// mediaHeader is kind (1 byte), track number (4 bytes), layer (1 byte).
const mediaHeader = 6

func putMediaHeader(b []byte, kind byte, n uint32, layer int8) {
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:5], n)
	b[5] = byte(layer)
}

var errShortFrame = errors.New("media frame shorter than its header")

func parseMediaHeader(b []byte) (kind byte, n uint32, layer int8, rtp []byte, err error) {
	if len(b) < mediaHeader+12 {
		return 0, 0, 0, nil, errShortFrame
	}
	layer = int8(b[5])
	if layer < 0 || layer > 2 {
		return 0, 0, 0, nil, errors.New("media frame: bad layer")
	}
	return b[0], binary.BigEndian.Uint32(b[1:5]), layer, b[mediaHeader:], nil
}

// Control message types.
const (
	msgRooms  = "rooms" // the rooms the sender hosts (has participants of its own in)
	msgPart   = "part"  // a participant of the sender's joined a shared room
	msgLeave  = "leave" // it left
	msgPub    = "pub"   // it publishes a track (N names the track on this link)
	msgUnpub  = "unpub" // the track ended
	msgWant   = "want"  // the receiver's demand for track N: Mask bits 0-2 layers, bit 8 any
	msgPLI    = "pli"   // keyframe request for track N, layer L
	msgNack   = "nack"  // retransmission request for track N, layer L, Seqs
	msgData   = "data"  // a room data message from participant ID
	msgMute   = "mute"  // track N was muted or unmuted (Muted)
	msgPing   = "ping"  // TS echoed in a pong: the link's RTT
	msgPong   = "pong"
	maxCtlMsg = 256 << 10
)

// codecJSON is a track's codec as it crosses a link.
type codecJSON struct {
	MimeType    string `json:"mime"`
	ClockRate   uint32 `json:"clock"`
	Channels    uint16 `json:"channels,omitempty"`
	SDPFmtpLine string `json:"fmtp,omitempty"`
	PayloadType uint8  `json:"pt"`
}

func codecToJSON(c sfu.Codec) *codecJSON { j := codecJSON(c); return &j }

func (c *codecJSON) params() sfu.Codec { return sfu.Codec(*c) }

// ctlMsg is every control message; T says which fields matter.
type ctlMsg struct {
	T        string              `json:"t"`
	Room     string              `json:"room,omitempty"`
	Rooms    []string            `json:"rooms,omitempty"`
	ID       string              `json:"id,omitempty"` // participant identity
	Name     string              `json:"name,omitempty"`
	Meta     string              `json:"meta,omitempty"`
	Grants   *auth.Grants        `json:"grants,omitempty"` // msgPart: the participant's, for its mirrors
	N        uint32              `json:"n,omitempty"`
	Info     *protocol.TrackInfo `json:"info,omitempty"`
	Codec    *codecJSON          `json:"codec,omitempty"`
	Layers   []int8              `json:"layers,omitempty"`
	ALevel   uint8               `json:"alevel,omitempty"`
	Mask     uint32              `json:"mask,omitempty"`
	L        int8                `json:"l,omitempty"`
	Seqs     []uint16            `json:"seqs,omitempty"`
	TS       int64               `json:"ts,omitempty"`
	Reliable bool                `json:"reliable,omitempty"`
	Topic    string              `json:"topic,omitempty"`
	To       []string            `json:"to,omitempty"`
	Payload  []byte              `json:"payload,omitempty"`
	Muted    bool                `json:"muted,omitempty"`
}

// maskOf packs a demand the way msgWant carries it.
func maskOf(layers [3]bool, active bool) uint32 {
	var m uint32
	for i, on := range layers {
		if on {
			m |= 1 << i
		}
	}
	if active {
		m |= 1 << 8
	}
	return m
}
