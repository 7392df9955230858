package session

import (
	"errors"
	"sync"

	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"

	"github.com/petrel-sfu/petrel/rtc"
	"github.com/petrel-sfu/petrel/rtc/datachan"
	"github.com/petrel-sfu/petrel/sfu"
)

// Transport is the server's one way of speaking WebRTC to the room's
// clients: it makes sfu's sessions on this Server.
type Transport struct {
	s      *Server
	ingest Ingest
	maxMsg uint32
}

// NewTransport serves the room's sessions on s; maxMessage is the largest
// data channel message a client may send.
func NewTransport(s *Server, maxMessage uint32) *Transport {
	codecs := make([]Track, len(rtc.Codecs))
	for i, c := range rtc.Codecs {
		codecs[i] = Track{Kind: rtc.KindOf(c).String(), MimeType: c.MimeType, ClockRate: c.ClockRate, Channels: c.Channels, Fmtp: c.SDPFmtpLine}
	}
	return &Transport{s: s, maxMsg: maxMessage, ingest: Ingest{
		Codecs:       codecs,
		Interceptors: rtc.NewPublisherInterceptor,
		Feedback:     []string{"nack", "nack pli", "ccm fir", "transport-cc"},
		Extensions:   []string{sdp.SDESMidURI, sdp.SDESRTPStreamIDURI, rtc.ExtTransportCC, rtc.ExtAudioLevel, rtc.ExtDependencyDes},
	}}
}

func trackOf(t sfu.TrackSpec) Track {
	return Track{Kind: t.Kind.String(), MimeType: t.Codec.MimeType, ClockRate: t.Codec.ClockRate,
		Channels: t.Codec.Channels, Fmtp: t.Codec.SDPFmtpLine, ID: t.ID, StreamID: t.StreamID}
}

// Viewer answers a WHEP viewer's offer.
func (t *Transport) Viewer(offer string, tracks []sfu.TrackSpec, h sfu.SessionHandler) (sfu.Viewer, []sfu.TrackSlot, string, error) {
	specs := make([]Track, len(tracks))
	for i, x := range tracks {
		specs[i] = trackOf(x)
	}
	v, answer, err := t.s.NewViewer(offer, specs, h)
	if err != nil {
		return nil, nil, "", err
	}
	slots := make([]sfu.TrackSlot, len(v.Senders))
	for i, s := range v.Senders {
		slots[i] = sfu.TrackSlot{Mid: s.Mid, SSRC: s.SSRC, PT: s.PT, TransportCC: s.TransportCC, OK: true}
	}
	return viewer{v}, slots, answer, nil
}

// Subscriber makes a room participant's subscriber side.
func (t *Transport) Subscriber(h sfu.SessionHandler) (sfu.Subscriber, error) {
	v, err := t.s.NewSubscriber(h)
	if err != nil {
		return nil, err
	}
	return subscriber{v}, nil
}

// Publisher answers a publisher's offer: a publisher session, or a data
// session for a client that may not publish media.
func (t *Transport) Publisher(offer string, media bool, h sfu.PublisherHandler) (sfu.Publisher, string, error) {
	if media {
		p, answer, err := t.s.NewPublisher(offer, t.ingest, t.maxMsg, publisherHandler{h})
		if err != nil {
			return nil, "", err
		}
		return p, answer, nil
	}
	d, answer, err := t.s.NewDataSession(offer, t.maxMsg, publisherHandler{h})
	if err != nil {
		return nil, "", err
	}
	return d, answer, nil
}

// viewer is a Viewer as sfu's Viewer.
type viewer struct{ *Viewer }

func (v viewer) NewBatch() sfu.Batch { return newBatch() }

func (v viewer) QueueRTP(b sfu.Batch, h *rtp.Header, payload []byte) (int, error) {
	return v.Session.QueueRTP(b.(pooledBatch).Batch, h, payload)
}

// subscriber is a Subscriber as sfu's Subscriber.
type subscriber struct{ *Subscriber }

func (s subscriber) AddTrack(t sfu.TrackSpec) (string, error) {
	snd, err := s.Subscriber.AddTrack(trackOf(t))
	return snd.Mid, err
}

func (s subscriber) ApplyAnswer(sdp string) ([]sfu.TrackSlot, error) {
	acc, err := s.Subscriber.ApplyAnswer(sdp)
	if err != nil {
		return nil, err
	}
	out := make([]sfu.TrackSlot, len(acc))
	for i, a := range acc {
		out[i] = sfu.TrackSlot{Mid: a.Mid, SSRC: a.SSRC, PT: a.PT, OK: a.OK, TransportCC: a.TransportCC, Dependency: a.Dependency}
	}
	return out, nil
}

func (s subscriber) NewBatch() sfu.Batch { return newBatch() }

func (s subscriber) QueueRTP(b sfu.Batch, h *rtp.Header, payload []byte) (int, error) {
	return s.Session.QueueRTP(b.(pooledBatch).Batch, h, payload)
}

// pooledBatch goes back to the pool once flushed.
type pooledBatch struct{ *Batch }

var batches = sync.Pool{New: func() any { return NewBatch() }}

func newBatch() sfu.Batch { return pooledBatch{batches.Get().(*Batch)} }

func (b pooledBatch) Flush() {
	b.Batch.Flush()
	batches.Put(b.Batch)
}

// publisherHandler hands a session's streams and channels to sfu's handler.
type publisherHandler struct{ sfu.PublisherHandler }

func (h publisherHandler) OnTrack(t *InTrack) {
	kind := sfu.KindOf(t.Kind)
	h.PublisherHandler.OnTrack(sfu.IncomingTrack{Source: t, ID: t.ID, Kind: kind,
		Codec:         sfu.Codec{MimeType: t.MimeType, ClockRate: t.ClockRate, Channels: t.Channels, SDPFmtpLine: t.Fmtp, PayloadType: t.PT},
		AudioLevelExt: t.AudioLevelExt, DependencyExt: t.DependencyExt})
}

func (h publisherHandler) OnDataChannel(dc *datachan.Channel) {
	h.PublisherHandler.OnDataChannel(dataChannel{dc})
}

// dataChannel is a datachan.Channel as sfu's DataChannel: messages are
// sent as binary, and read without waiting.
type dataChannel struct{ *datachan.Channel }

func (c dataChannel) Send(b []byte) error { return c.Channel.Send(b, false) }

func (c dataChannel) Read(b []byte) (int, error) {
	n, _, err := c.ReadNow(b)
	if errors.Is(err, datachan.ErrEmpty) {
		err = sfu.ErrNoMessage
	}
	return n, err
}
