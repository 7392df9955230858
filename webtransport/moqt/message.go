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

	TypeNamespace            = 0x8  // on a SUBSCRIBE_NAMESPACE stream: a namespace appeared
	TypePublishNamespaceDone = 0x9  // on a PUBLISH_NAMESPACE stream: the publisher withdraws it
	TypeTrackStatus          = 0xd  // not implemented: answered NOT_SUPPORTED
	TypeNamespaceDone        = 0xe  // on a SUBSCRIBE_NAMESPACE stream: a namespace went away
	TypeFetch                = 0x16 // past objects of a track, on a request stream; objects on a FETCH data stream
	TypeFetchOK              = 0x18
	TypePublish              = 0x1d // publisher-initiated subscription
	TypePublishOK            = 0x1e
	TypeSubscribeNamespace   = 0x50
	TypeSubscribeTracks      = 0x51 // not implemented: answered NOT_SUPPORTED
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
	// ParamSubscriptionFilter (SUBSCRIBE, bytes): vi filter type, then a start
	// location for 3 and 4 and an end group for 4.
	ParamSubscriptionFilter = 0x21
	// ParamPetrel (setup, bytes) announces Petrel's extensions: JSON {"ext":[...]}.
	ParamPetrel = 0x2A1
	// ParamDelivery (SUBSCRIBE, vi) asks for datagram delivery (1) or streams (0).
	ParamDelivery = 0x2A0
)

// Request error codes (draft-18's REQUEST_ERROR registry).
const (
	ErrCodeInternal              = 0x0
	ErrCodeUnauthorized          = 0x1
	ErrCodeNotSupported          = 0x3
	ErrCodeDoesNotExist          = 0x10
	ErrCodeInvalidRange          = 0x11
	ErrCodeInvalidJoiningRequest = 0x32
)

// Session close codes.
const (
	CloseNoError             = 0x0
	CloseInternal            = 0x1
	CloseUnauthorized        = 0x2
	CloseProtocolViolation   = 0x3
	CloseDuplicateTrackAlias = 0x5
)

// Subscription filter types (ParamSubscriptionFilter).
const (
	FilterNextGroupStart = 0x1
	FilterLargestObject  = 0x2
	FilterAbsoluteStart  = 0x3
	FilterAbsoluteRange  = 0x4
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
// (SUBSCRIBE_OK, REQUEST_OK, REQUEST_ERROR, PUBLISH_OK, FETCH_OK, NAMESPACE…)
// and the follow-ups (UNSUBSCRIBE, PUBLISH_DONE, PUBLISH_NAMESPACE_DONE) on the
// request's own bidirectional stream and without a Request ID: the stream names
// the request. Only the messages that start a request carry one.
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
	TrackAlias uint64
	Params     Pairs
	Extensions Pairs
}

// RequestError refuses a request.
type RequestError struct {
	Code          uint64
	RetryInterval uint64
	Reason        string
}

// RequestOK accepts a request that has no other answer (PUBLISH_NAMESPACE).
type RequestOK struct {
	Params Pairs
}

// PublishNamespace announces a namespace the sender publishes in.
type PublishNamespace struct {
	RequestID uint64
	Namespace []string
	Params    Pairs
}

// Unsubscribe ends a subscription.
type Unsubscribe struct{}

// PublishDone tells a subscriber the publisher finished the track.
type PublishDone struct {
	Status      uint64
	StreamCount uint64
	Reason      string
}

// GoAway asks the peer to move to another URI.
type GoAway struct{ URI string }

// Location is a (group, object) position in a track.
type Location struct{ Group, Object uint64 }

// Less orders locations.
func (l Location) Less(o Location) bool {
	return l.Group < o.Group || l.Group == o.Group && l.Object < o.Object
}

// SubscribeNamespace asks for the namespaces under Prefix, now and as they
// come and go (NAMESPACE / NAMESPACE_DONE on the request stream).
type SubscribeNamespace struct {
	RequestID uint64
	Prefix    []string // 0–32 fields
	Params    Pairs
}

// Namespace tells a SUBSCRIBE_NAMESPACE requester that a namespace under its
// prefix is published; Suffix is the namespace without the prefix.
type Namespace struct{ Suffix []string }

// NamespaceDone tells it the namespace is no longer published.
type NamespaceDone struct{ Suffix []string }

// PublishNamespaceDone withdraws a PUBLISH_NAMESPACE (on its request stream).
type PublishNamespaceDone struct{}

// Publish offers a track to the peer (publisher-initiated subscription): the
// publisher chooses the alias its data carries.
type Publish struct {
	RequestID  uint64
	Namespace  []string
	Track      string
	TrackAlias uint64
	Params     Pairs
	Extensions Pairs
}

// PublishOK accepts a PUBLISH.
type PublishOK struct{ Params Pairs }

// Fetch types.
const (
	FetchStandalone      = 0x1
	FetchRelativeJoining = 0x2
	FetchAbsoluteJoining = 0x3
)

// Fetch asks for past objects: a range of a track (standalone), or the objects
// before an existing subscription's first one (joining: JoiningStart groups
// before it when relative, from group JoiningStart when absolute).
type Fetch struct {
	RequestID uint64
	Type      uint64
	// Standalone.
	Namespace  []string
	Track      string
	Start, End Location // End.Object 0: through the end of End.Group, else up to End.Object−1
	// Joining.
	JoiningRequestID uint64
	JoiningStart     uint64
	Params           Pairs
}

// FetchOK accepts a FETCH: End is one past the last object the FETCH stream
// will carry.
type FetchOK struct {
	EndOfTrack bool
	End        Location
	Params     Pairs
	Extensions Pairs
}

// Unknown is a message type Petrel does not implement.
type Unknown struct {
	Type    uint64
	Payload []byte
}

func (Setup) msgType() uint64                { return TypeSetup }
func (Subscribe) msgType() uint64            { return TypeSubscribe }
func (SubscribeOK) msgType() uint64          { return TypeSubscribeOK }
func (RequestError) msgType() uint64         { return TypeRequestError }
func (RequestOK) msgType() uint64            { return TypeRequestOK }
func (PublishNamespace) msgType() uint64     { return TypePublishNamespace }
func (Unsubscribe) msgType() uint64          { return TypeUnsubscribe }
func (PublishDone) msgType() uint64          { return TypePublishDone }
func (GoAway) msgType() uint64               { return TypeGoAway }
func (u Unknown) msgType() uint64            { return u.Type }
func (SubscribeNamespace) msgType() uint64   { return TypeSubscribeNamespace }
func (Namespace) msgType() uint64            { return TypeNamespace }
func (NamespaceDone) msgType() uint64        { return TypeNamespaceDone }
func (PublishNamespaceDone) msgType() uint64 { return TypePublishNamespaceDone }
func (Publish) msgType() uint64              { return TypePublish }
func (PublishOK) msgType() uint64            { return TypePublishOK }
func (Fetch) msgType() uint64                { return TypeFetch }
func (FetchOK) msgType() uint64              { return TypeFetchOK }

// Type is m's message type.
func Type(m Message) uint64 { return m.msgType() }

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

func readNamespace(r *Reader) []string { return readFields(r, 1) }

// readFields reads a namespace or (minFields 0) a namespace prefix or suffix.
func readFields(r *Reader, minFields uint64) []string {
	n := r.VI()
	if r.err != nil {
		return nil
	}
	if n < minFields || n > MaxNamespaceFields {
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
	case SubscribeNamespace:
		p = AppendVI(p, m.RequestID)
		p = appendNamespace(p, m.Prefix)
		p = AppendVI(p, uint64(len(m.Params)))
		p = appendPairs(p, m.Params, true)
	case Namespace:
		p = appendNamespace(p, m.Suffix)
	case NamespaceDone:
		p = appendNamespace(p, m.Suffix)
	case PublishNamespaceDone:
	case Publish:
		p = AppendVI(p, m.RequestID)
		p = appendNamespace(p, m.Namespace)
		p = AppendBytes(p, []byte(m.Track))
		p = AppendVI(p, m.TrackAlias)
		p = AppendVI(p, uint64(len(m.Params)))
		p = appendPairs(p, m.Params, true)
		p = appendPairs(p, m.Extensions, false)
	case PublishOK:
		p = AppendVI(p, uint64(len(m.Params)))
		p = appendPairs(p, m.Params, true)
	case Fetch:
		p = AppendVI(p, m.RequestID)
		p = AppendVI(p, m.Type)
		switch m.Type {
		case FetchStandalone:
			p = appendNamespace(p, m.Namespace)
			p = AppendBytes(p, []byte(m.Track))
			p = AppendVI(AppendVI(p, m.Start.Group), m.Start.Object)
			p = AppendVI(AppendVI(p, m.End.Group), m.End.Object)
		case FetchRelativeJoining, FetchAbsoluteJoining:
			p = AppendVI(AppendVI(p, m.JoiningRequestID), m.JoiningStart)
		default:
			return b, fmt.Errorf("moqt: fetch type 0x%x", m.Type)
		}
		p = AppendVI(p, uint64(len(m.Params)))
		p = appendPairs(p, m.Params, true)
	case FetchOK:
		eot := byte(0)
		if m.EndOfTrack {
			eot = 1
		}
		p = append(p, eot)
		p = AppendVI(AppendVI(p, m.End.Group), m.End.Object)
		p = AppendVI(p, uint64(len(m.Params)))
		p = appendPairs(p, m.Params, true)
		p = appendPairs(p, m.Extensions, false)
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
	case TypeSubscribeNamespace:
		sn := SubscribeNamespace{RequestID: r.VI(), Prefix: readFields(r, 0)}
		sn.Params = readPairsCount(r)
		m = sn
	case TypeNamespace:
		m = Namespace{Suffix: readFields(r, 0)}
	case TypeNamespaceDone:
		m = NamespaceDone{Suffix: readFields(r, 0)}
	case TypePublishNamespaceDone:
		m = PublishNamespaceDone{}
	case TypePublish:
		p := Publish{RequestID: r.VI(), Namespace: readNamespace(r)}
		p.Track = string(r.Bytes(MaxName))
		p.TrackAlias = r.VI()
		p.Params = readPairsCount(r)
		p.Extensions = readPairsToEnd(r)
		m = p
	case TypePublishOK:
		m = PublishOK{Params: readPairsCount(r)}
	case TypeFetch:
		f := Fetch{RequestID: r.VI(), Type: r.VI()}
		switch f.Type {
		case FetchStandalone:
			f.Namespace = readNamespace(r)
			f.Track = string(r.Bytes(MaxName))
			f.Start = Location{r.VI(), r.VI()}
			f.End = Location{r.VI(), r.VI()}
		case FetchRelativeJoining, FetchAbsoluteJoining:
			f.JoiningRequestID, f.JoiningStart = r.VI(), r.VI()
		default:
			if r.err == nil {
				r.err = fmt.Errorf("moqt: fetch type 0x%x", f.Type)
			}
		}
		f.Params = readPairsCount(r)
		m = f
	case TypeFetchOK:
		f := FetchOK{}
		switch r.U8() {
		case 0:
		case 1:
			f.EndOfTrack = true
		default:
			if r.err == nil {
				r.err = errors.New("moqt: end-of-track is not 0 or 1")
			}
		}
		f.End = Location{r.VI(), r.VI()}
		f.Params = readPairsCount(r)
		f.Extensions = readPairsToEnd(r)
		m = f
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

// LargestObjectParam is the LARGEST_OBJECT parameter (SUBSCRIBE_OK): the
// largest location the publisher has sent.
func LargestObjectParam(l Location) Pair {
	return Pair{Key: ParamLargestObject, Bytes: AppendVI(AppendVI(nil, l.Group), l.Object)}
}

// LargestObject reads the LARGEST_OBJECT parameter.
func (ps Pairs) LargestObject() (Location, bool) {
	p, ok := ps.Get(ParamLargestObject)
	if !ok {
		return Location{}, false
	}
	r := NewReader(p.Bytes)
	l := Location{r.VI(), r.VI()}
	return l, r.Err() == nil
}

// Filter is a SUBSCRIPTION_FILTER.
type Filter struct {
	Type     uint64
	Start    Location // AbsoluteStart, AbsoluteRange
	EndGroup uint64   // AbsoluteRange
}

// FilterParam encodes f as a SUBSCRIPTION_FILTER parameter.
func FilterParam(f Filter) Pair {
	b := AppendVI(nil, f.Type)
	if f.Type == FilterAbsoluteStart || f.Type == FilterAbsoluteRange {
		b = AppendVI(AppendVI(b, f.Start.Group), f.Start.Object)
	}
	if f.Type == FilterAbsoluteRange {
		b = AppendVI(b, f.EndGroup)
	}
	return Pair{Key: ParamSubscriptionFilter, Bytes: b}
}

// Filter reads the SUBSCRIPTION_FILTER parameter (ok false: absent).
func (ps Pairs) Filter() (f Filter, ok bool, err error) {
	p, ok := ps.Get(ParamSubscriptionFilter)
	if !ok {
		return Filter{}, false, nil
	}
	r := NewReader(p.Bytes)
	f.Type = r.VI()
	switch f.Type {
	case FilterNextGroupStart, FilterLargestObject:
	case FilterAbsoluteStart:
		f.Start = Location{r.VI(), r.VI()}
	case FilterAbsoluteRange:
		f.Start = Location{r.VI(), r.VI()}
		f.EndGroup = r.VI()
	default:
		return f, true, fmt.Errorf("moqt: subscription filter type 0x%x", f.Type)
	}
	if r.Err() != nil || r.Len() != 0 {
		return f, true, errors.New("moqt: malformed subscription filter")
	}
	return f, true, nil
}
