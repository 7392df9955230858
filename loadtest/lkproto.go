package loadtest

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

// LiveKit's signalling messages, encoded and decoded by hand with protowire.
// Field numbers are those of livekit_rtc.proto and livekit_models.proto in
// github.com/livekit/protocol v1.54.0. The generated package would bring
// about a hundred packages (gRPC, zap, cel-go, twirp) into every petrel
// binary and register LiveKit's whole schema at start-up (measured: +17 MB
// binary, +11 MB RSS before main), for the dozen messages the generator needs.

// SignalRequest fields (a oneof: one per message).
const (
	lkReqOffer        protowire.Number = 1
	lkReqAnswer       protowire.Number = 2
	lkReqTrickle      protowire.Number = 3
	lkReqAddTrack     protowire.Number = 4
	lkReqSubscription protowire.Number = 6
	lkReqTrackSetting protowire.Number = 7
	lkReqLeave        protowire.Number = 8
	lkReqPing         protowire.Number = 16 // ping_req (Ping)
)

// SignalResponse fields.
const (
	lkResJoin           protowire.Number = 1
	lkResAnswer         protowire.Number = 2
	lkResOffer          protowire.Number = 3
	lkResTrickle        protowire.Number = 4
	lkResTrackPublished protowire.Number = 6
	lkResLeave          protowire.Number = 8
	lkResSubscription   protowire.Number = 21 // subscription_response
	lkResRequest        protowire.Number = 22 // request_response
)

// Enum values used.
const (
	lkTargetPublisher  = 0 // SignalTarget
	lkTargetSubscriber = 1
	lkTrackAudio       = 0 // TrackType
	lkTrackVideo       = 1
	lkSourceCamera     = 1 // TrackSource
	lkSourceMicrophone = 2
	lkQualityHigh      = 2 // VideoQuality
	lkClientInitiated  = 1 // DisconnectReason
)

func lkString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func lkVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func lkBytes(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// lkRequest is a SignalRequest carrying msg in its oneof field.
func lkRequest(field protowire.Number, msg []byte) []byte { return lkBytes(nil, field, msg) }

// lkSessionDescription: type = 1, sdp = 2, id = 3.
func lkSessionDescription(typ, sdp string, id uint32) []byte {
	return lkVarint(lkString(lkString(nil, 1, typ), 2, sdp), 3, uint64(id))
}

// lkTrickle: candidateInit = 1 (JSON of RTCIceCandidateInit), target = 2.
func lkTrickle(candidateInit string, target int) []byte {
	return lkVarint(lkString(nil, 1, candidateInit), 2, uint64(target))
}

// lkAddTrack: cid = 1, name = 2, type = 3, width = 4, height = 5, source = 8.
func lkAddTrack(cid, name string, typ, width, height, source int) []byte {
	b := lkString(lkString(nil, 1, cid), 2, name)
	b = lkVarint(lkVarint(lkVarint(b, 3, uint64(typ)), 4, uint64(width)), 5, uint64(height))
	return lkVarint(b, 8, uint64(source))
}

// lkUpdateSubscription: track_sids = 1, subscribe = 2.
func lkUpdateSubscription(sids []string, subscribe bool) []byte {
	var b []byte
	for _, s := range sids {
		b = lkString(b, 1, s)
	}
	if subscribe {
		b = lkVarint(b, 2, 1)
	}
	return b
}

// lkUpdateTrackSettings: track_sids = 1, disabled = 3 (false), quality = 4,
// width = 5, height = 6.
func lkUpdateTrackSettings(sids []string, quality, width, height int) []byte {
	var b []byte
	for _, s := range sids {
		b = lkString(b, 1, s)
	}
	return lkVarint(lkVarint(lkVarint(b, 4, uint64(quality)), 5, uint64(width)), 6, uint64(height))
}

// lkLeave: reason = 2 (action 3 = DISCONNECT, the zero value).
func lkLeave(reason int) []byte { return lkVarint(nil, 2, uint64(reason)) }

// lkPing: timestamp = 1 (ms), rtt = 2.
func lkPing(ms, rtt int64) []byte { return lkVarint(lkVarint(nil, 1, uint64(ms)), 2, uint64(rtt)) }

// lkEach calls f for every field of message b: a varint's value in v, a
// length-delimited field's bytes in p. Other wire types are skipped.
func lkEach(b []byte, f func(num protowire.Number, v uint64, p []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			f(num, v, nil)
			b = b[n:]
		case protowire.BytesType:
			p, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			f(num, 0, p)
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return nil
}

// lkResponse is the part of a SignalResponse the generator acts on.
type lkResponse struct {
	kind protowire.Number // the oneof field set; 0 for none
	body []byte

	// join (JoinResponse)
	sid                       string // participant.sid
	pingInterval, pingTimeout int    // seconds
	subscriberPrimary         bool
	sdpType, sdp              string // offer, answer
	sdpID                     uint32
	candidate                 string // trickle
	target                    int
	final                     bool
	cid, trackSid             string // track_published; subscription_response's track_sid
	reason, action, subErr    int    // leave; subscription_response err; request_response reason
	message                   string // request_response
}

var errLKEmpty = errors.New("livekit: signal response with no message")

// parseLKResponse decodes a SignalResponse.
func parseLKResponse(b []byte) (*lkResponse, error) {
	r := &lkResponse{}
	if err := lkEach(b, func(num protowire.Number, _ uint64, p []byte) {
		r.kind, r.body = num, p // pong is a varint
	}); err != nil {
		return nil, err
	}
	if r.kind == 0 {
		return nil, errLKEmpty
	}
	var err error
	switch r.kind {
	case lkResJoin:
		err = lkEach(r.body, func(num protowire.Number, v uint64, p []byte) {
			switch num {
			case 2: // participant: ParticipantInfo, sid = 1
				_ = lkEach(p, func(n protowire.Number, _ uint64, q []byte) {
					if n == 1 {
						r.sid = string(q)
					}
				})
			case 6:
				r.subscriberPrimary = v != 0
			case 10:
				r.pingTimeout = int(int32(v))
			case 11:
				r.pingInterval = int(int32(v))
			}
		})
	case lkResOffer, lkResAnswer:
		err = lkEach(r.body, func(num protowire.Number, v uint64, p []byte) {
			switch num {
			case 1:
				r.sdpType = string(p)
			case 2:
				r.sdp = string(p)
			case 3:
				r.sdpID = uint32(v)
			}
		})
	case lkResTrickle:
		err = lkEach(r.body, func(num protowire.Number, v uint64, p []byte) {
			switch num {
			case 1:
				r.candidate = string(p)
			case 2:
				r.target = int(v)
			case 3:
				r.final = v != 0
			}
		})
	case lkResTrackPublished: // cid = 1, track = 2 (TrackInfo, sid = 1)
		err = lkEach(r.body, func(num protowire.Number, _ uint64, p []byte) {
			switch num {
			case 1:
				r.cid = string(p)
			case 2:
				_ = lkEach(p, func(n protowire.Number, _ uint64, q []byte) {
					if n == 1 {
						r.trackSid = string(q)
					}
				})
			}
		})
	case lkResLeave:
		err = lkEach(r.body, func(num protowire.Number, v uint64, _ []byte) {
			switch num {
			case 2:
				r.reason = int(v)
			case 3:
				r.action = int(v)
			}
		})
	case lkResSubscription: // track_sid = 1, err = 2
		err = lkEach(r.body, func(num protowire.Number, v uint64, p []byte) {
			switch num {
			case 1:
				r.trackSid = string(p)
			case 2:
				r.subErr = int(v)
			}
		})
	case lkResRequest: // request_id = 1, reason = 2, message = 3
		err = lkEach(r.body, func(num protowire.Number, v uint64, p []byte) {
			switch num {
			case 2:
				r.reason = int(v)
			case 3:
				r.message = string(p)
			}
		})
	}
	return r, err
}
