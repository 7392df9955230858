package moqt

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
)

// Control message types of draft-18 that Petrel sends or accepts.
const (
	TypeSetup            = 0x2F00
	TypeRequestUpdate    = 0x2
	TypeSubscribe        = 0x3
	TypeSubscribeOK      = 0x4
	TypeRequestError     = 0x5
	TypePublishNamespace = 0x6
	TypeRequestOK        = 0x7
	TypePublishDone      = 0xb
	TypeUnsubscribe      = 0xa
	TypeGoAway           = 0x10
)

// Parameter keys (setup and message parameters).
const (
	ParamPath           = 0x1
	ParamAuthToken      = 0x3
	ParamAuthority      = 0x5
	ParamImplementation = 0x7
	ParamForward        = 0x10
	ParamSubPriority    = 0x20
	ParamGroupOrder     = 0x22
	ParamLargestObject  = 0x09
	// ParamPetrel (setup, bytes) announces Petrel's extensions: JSON {"ext":[...]}.
	ParamPetrel = 0x2A1
	// ParamDelivery (SUBSCRIBE, vi) asks for datagram delivery (1) or streams (0).
	ParamDelivery = 0x2A0
)

// Request error codes.
const (
	ErrCodeInternal     = 0x0
	ErrCodeUnauthorized = 0x1
	ErrCodeNotSupported = 0x3
	ErrCodeDoesNotExist = 0x4
)

// Session close codes.
const (
	CloseNoError           = 0x0
	CloseInternal          = 0x1
	CloseUnauthorized      = 0x2
	CloseProtocolViolation = 0x3
)

// MaxMessage bounds a control message payload (u16 length: 65535 anyway).
const MaxMessage = 1<<16 - 1

// Pair is one key-value pair: Int for even keys, Bytes for odd ones (and the
// fixed-width exceptions of message parameters).
type Pair struct {
	Key   uint64
	Int   uint64
	Bytes []byte
}

// Pairs is an ordered list of pairs.
type Pairs []Pair

// Get returns the pair with key k.
func (ps Pairs) Get(k uint64) (Pair, bool) {
	for _, p := range ps {
		if p.Key == k {
			return p, true
		}
	}
	return Pair{}, false
}

// kvp value shapes that are neither vi nor bytes in message parameters.
func u8Param(k uint64) bool {
	return k == ParamForward || k == ParamSubPriority || k == ParamGroupOrder
}
func twoVIParam(k uint64) bool { return k == ParamLargestObject }

// appendPairs writes pairs sorted by key with delta-coded keys. msgParams
// selects the message-parameter value shapes.
func appendPairs(b []byte, ps Pairs, msgParams bool) []byte {
	sorted := append(Pairs(nil), ps...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Key < sorted[j].Key })
	var prev uint64
	for _, p := range sorted {
		b = AppendVI(b, p.Key-prev)
		prev = p.Key
		switch {
		case msgParams && u8Param(p.Key):
			b = append(b, byte(p.Int))
		case msgParams && twoVIParam(p.Key):
			b = append(b, p.Bytes...) // kept encoded
		case p.Key%2 == 0:
			b = AppendVI(b, p.Int)
		default:
			b = AppendBytes(b, p.Bytes)
		}
	}
	return b
}

// readPair reads one pair after prev.
func readPair(r *Reader, prev uint64, msgParams bool) Pair {
	d := r.VI()
	k := prev + d
	if k < prev {
		r.err = errors.New("moqt: parameter key overflow")
		return Pair{}
	}
	p := Pair{Key: k}
	switch {
	case msgParams && u8Param(k):
		p.Int = uint64(r.U8())
	case msgParams && twoVIParam(k):
		start := r.b
		r.VI()
		r.VI()
		if r.err == nil {
			p.Bytes = start[:len(start)-len(r.b)]
		}
	case k%2 == 0:
		p.Int = r.VI()
	default:
		p.Bytes = r.Bytes(MaxMessage)
	}
	return p
}

// readPairsCount reads vi count + pairs (message parameters).
func readPairsCount(r *Reader) Pairs {
	n := r.VI()
	if r.err == nil && n > uint64(r.Len()) {
		r.err = errors.New("moqt: parameter count exceeds message")
		return nil
	}
	var ps Pairs
	var prev uint64
	for i := uint64(0); i < n && r.err == nil; i++ {
		p := readPair(r, prev, true)
		prev = p.Key
		ps = append(ps, p)
	}
	return ps
}

// readPairsToEnd reads pairs until the input ends (SETUP, track extensions,
// object extension headers).
func readPairsToEnd(r *Reader) Pairs {
	var ps Pairs
	var prev uint64
	for r.Len() > 0 && r.err == nil {
		p := readPair(r, prev, false)
		prev = p.Key
		ps = append(ps, p)
	}
	return ps
}

// Message is a decoded control message. Draft-18 sends every response
// (SUBSCRIBE_OK, REQUEST_OK, REQUEST_ERROR, PUBLISH_DONE) and UNSUBSCRIBE on the
// request's own bidirectional stream and without the Request ID: the stream
// names the request. Their RequestID fields are therefore never on the wire.
type Message interface{ msgType() uint64 }

// Setup is draft-18's unified SETUP (version is agreed by ALPN / WT-Protocol).
type Setup struct{ Params Pairs }

// Subscribe asks for a track.
type Subscribe struct {
	RequestID uint64
	Namespace []string
	Track     string
	Params    Pairs
}

// SubscribeOK accepts a subscription and names the alias data will carry.
type SubscribeOK struct {
	RequestID  uint64
	TrackAlias uint64
	Params     Pairs
	Extensions Pairs
}

// RequestError refuses a request.
type RequestError struct {
	RequestID     uint64
	Code          uint64
	RetryInterval uint64
	Reason        string
}

// RequestOK accepts a request that has no other answer (PUBLISH_NAMESPACE).
type RequestOK struct {
	RequestID uint64
	Params    Pairs
}

// PublishNamespace announces a namespace the sender publishes in.
type PublishNamespace struct {
	RequestID uint64
	Namespace []string
	Params    Pairs
}

// Unsubscribe ends a subscription.
type Unsubscribe struct{ RequestID uint64 }

// PublishDone tells a subscriber the publisher finished the track.
type PublishDone struct {
	RequestID   uint64
	Status      uint64
	StreamCount uint64
	Reason      string
}

// GoAway asks the peer to move to another URI.
type GoAway struct{ URI string }

// Unknown is a message type Petrel does not implement.
type Unknown struct {
	Type    uint64
	Payload []byte
}

func (Setup) msgType() uint64            { return TypeSetup }
func (Subscribe) msgType() uint64        { return TypeSubscribe }
func (SubscribeOK) msgType() uint64      { return TypeSubscribeOK }
func (RequestError) msgType() uint64     { return TypeRequestError }
func (RequestOK) msgType() uint64        { return TypeRequestOK }
func (PublishNamespace) msgType() uint64 { return TypePublishNamespace }
func (Unsubscribe) msgType() uint64      { return TypeUnsubscribe }
func (PublishDone) msgType() uint64      { return TypePublishDone }
func (GoAway) msgType() uint64           { return TypeGoAway }
func (u Unknown) msgType() uint64        { return u.Type }

func appendNamespace(b []byte, ns []string) []byte {
	b = AppendVI(b, uint64(len(ns)))
	for _, f := range ns {
		b = AppendBytes(b, []byte(f))
	}
	return b
}

// MaxNamespaceFields and MaxName bound names as draft-18 does.
const (
	MaxNamespaceFields = 32
	MaxName            = 4096
)

func readNamespace(r *Reader) []string {
	n := r.VI()
	if r.err != nil {
		return nil
	}
	if n < 1 || n > MaxNamespaceFields {
		r.err = fmt.Errorf("moqt: namespace with %d fields", n)
		return nil
	}
	ns := make([]string, 0, n)
	total := 0
	for i := uint64(0); i < n && r.err == nil; i++ {
		f := r.Bytes(MaxName)
		if r.err == nil && len(f) == 0 {
			r.err = errors.New("moqt: empty namespace field")
		}
		total += len(f)
		ns = append(ns, string(f))
	}
	if total > MaxName {
		r.err = errors.New("moqt: namespace too long")
	}
	return ns
}

// AppendMessage encodes m with its type and u16 length.
func AppendMessage(b []byte, m Message) ([]byte, error) {
	var p []byte
	switch m := m.(type) {
	case Setup:
		p = appendPairs(nil, m.Params, false)
	case Subscribe:
		p = AppendVI(p, m.RequestID)
		p = appendNamespace(p, m.Namespace)
		p = AppendBytes(p, []byte(m.Track))
		p = AppendVI(p, uint64(len(m.Params)))
		p = appendPairs(p, m.Params, true)
	case SubscribeOK:
		p = AppendVI(p, m.TrackAlias)
		p = AppendVI(p, uint64(len(m.Params)))
		p = appendPairs(p, m.Params, true)
		p = appendPairs(p, m.Extensions, false)
	case RequestError:
		p = AppendVI(p, m.Code)
		p = AppendVI(p, m.RetryInterval)
		p = AppendBytes(p, []byte(m.Reason))
	case RequestOK:
		p = AppendVI(p, uint64(len(m.Params)))
		p = appendPairs(p, m.Params, true)
	case PublishNamespace:
		p = AppendVI(p, m.RequestID)
		p = appendNamespace(p, m.Namespace)
		p = AppendVI(p, uint64(len(m.Params)))
		p = appendPairs(p, m.Params, true)
	case Unsubscribe:
	case PublishDone:
		p = AppendVI(p, m.Status)
		p = AppendVI(p, m.StreamCount)
		p = AppendBytes(p, []byte(m.Reason))
	case GoAway:
		p = AppendBytes(p, []byte(m.URI))
	case Unknown:
		p = m.Payload
	default:
		return b, fmt.Errorf("moqt: cannot encode %T", m)
	}
	if len(p) > MaxMessage {
		return b, errors.New("moqt: message too long")
	}
	b = AppendVI(b, m.msgType())
	b = append(b, byte(len(p)>>8), byte(len(p)))
	return append(b, p...), nil
}

// ParseMessage decodes the payload of a message of type t. Unknown types come back
// as Unknown; the caller decides whether that is an error where it appears.
func ParseMessage(t uint64, payload []byte) (Message, error) {
	r := NewReader(payload)
	var m Message
	switch t {
	case TypeSetup:
		m = Setup{Params: readPairsToEnd(r)}
	case TypeSubscribe:
		s := Subscribe{RequestID: r.VI(), Namespace: readNamespace(r)}
		s.Track = string(r.Bytes(MaxName))
		s.Params = readPairsCount(r)
		m = s
	case TypeSubscribeOK:
		s := SubscribeOK{TrackAlias: r.VI()}
		s.Params = readPairsCount(r)
		s.Extensions = readPairsToEnd(r)
		m = s
	case TypeRequestError:
		m = RequestError{Code: r.VI(), RetryInterval: r.VI(), Reason: string(r.Bytes(MaxMessage))}
	case TypeRequestOK:
		m = RequestOK{Params: readPairsCount(r)}
	case TypePublishNamespace:
		p := PublishNamespace{RequestID: r.VI(), Namespace: readNamespace(r)}
		p.Params = readPairsCount(r)
		m = p
	case TypeUnsubscribe:
		m = Unsubscribe{}
	case TypePublishDone:
		m = PublishDone{Status: r.VI(), StreamCount: r.VI(), Reason: string(r.Bytes(MaxMessage))}
	case TypeGoAway:
		m = GoAway{URI: string(r.Bytes(MaxName))}
	default:
		return Unknown{Type: t, Payload: payload}, nil
	}
	if r.Err() != nil {
		return nil, fmt.Errorf("moqt: message 0x%x: %w", t, r.Err())
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("moqt: message 0x%x: %d trailing bytes", t, r.Len())
	}
	return m, nil
}

// ReadMessage reads one framed message from a stream.
func ReadMessage(br *bufio.Reader) (Message, error) {
	t, err := ReadVI(br)
	if err != nil {
		return nil, err
	}
	return ReadMessageAfterType(br, t)
}

// ReadMessageAfterType reads the length and payload of a message of type t.
func ReadMessageAfterType(br *bufio.Reader, t uint64) (Message, error) {
	var l [2]byte
	if _, err := io.ReadFull(br, l[:]); err != nil {
		return nil, fmt.Errorf("moqt: message 0x%x length: %w", t, err)
	}
	p := make([]byte, int(l[0])<<8|int(l[1]))
	if _, err := io.ReadFull(br, p); err != nil {
		return nil, fmt.Errorf("moqt: message 0x%x payload: %w", t, err)
	}
	return ParseMessage(t, p)
}
