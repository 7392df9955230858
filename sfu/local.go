package sfu

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
)

// Tracks that do not arrive over a WebRTC connection — camera ingest (RTSP, plain
// RTP, recordings played back), the WebTransport bridge, media from another node —
// enter a room as LocalTracks of a local participant: a participant with no peer
// connections whose owner (a Go component) writes RTP into it. From the layer's
// reader on, their packets take the same path as any publisher's.
//
// The other direction is a Sink: a Go component that receives a publication's
// packets beside its DownTracks (recording, WebTransport subscribers, node links).

// LocalOptions describe a local participant.
type LocalOptions struct {
	Room     string
	Identity string
	Name     string
	Metadata string
	// Grants are what the participant may do, checked by the room as for any
	// client: the token's for a client that came over another transport
	// (WebTransport), what the component needs for the server's own.
	Grants auth.Grants
	// Origin is Client (the default) for a client's session, Server for the
	// server's own participants, Mirror for the cluster's mirrors.
	Origin Origin
	// Hidden participants are not announced to the room (a recorder, a probe).
	Hidden bool
	// Audience, when set, limits the participant to these identities: only they
	// see its tracks (announced and auto-subscribed) and its data; the rest of the
	// room does not know it exists (a recording played back to one viewer).
	// It implies Hidden.
	Audience []string
	// Out receives the room's messages for this participant (events, errors); nil
	// discards them.
	Out Sender
	// KeepIdentity lets a participant holding the identity stay (a mirror of
	// the same person's session on another node, while it moves there).
	KeepIdentity bool
}

// JoinLocal admits a participant that publishes and receives inside the server,
// with opt.Grants. It subscribes through sinks, not DownTracks.
func (m *Manager) JoinLocal(opt LocalOptions) (*Participant, error) {
	if opt.Room == "" || opt.Identity == "" {
		return nil, errors.New("local participant needs a room and an identity")
	}
	c := &auth.Claims{Room: opt.Room, Name: opt.Name, Metadata: opt.Metadata, Grants: opt.Grants}
	c.Subject = opt.Identity
	p, err := m.newParticipant(c, opt.Hidden || len(opt.Audience) > 0)
	if err != nil {
		return nil, err
	}
	p.local = true
	p.origin = opt.Origin
	p.audience = append([]string(nil), opt.Audience...)
	p.out = opt.Out
	if err := m.takeIdentity(p, opt.KeepIdentity); err != nil {
		return nil, err
	}
	if err := m.admit(p); err != nil {
		return nil, err
	}
	p.log.Info("local participant joined")
	return p, nil
}

// LocalTrackOptions describe a track published from inside the server.
type LocalTrackOptions struct {
	Info  protocol.TrackInfo // Kind, Source, Name, Width/Height; Sid is assigned
	Codec Codec
	// AudioLevelExt is the RTP header extension id carrying the RFC 6464 audio
	// level, 0 if none: it feeds dominant-speaker detection.
	AudioLevelExt uint8
	// Queue is how many packets may wait for the reader (default 512); beyond it
	// WriteRTP drops, as a congested network would.
	Queue int
	// Alternate marks a re-encoding of the participant's other video track
	// (a camera's H.265 transcoded to H.264): WHEP gives it only to an offer
	// that cannot receive the original's codec.
	Alternate bool
}

// LocalTrack is a track a Go component feeds with RTP packets.
type LocalTrack struct {
	pub   *Publication
	ssrc  uint32
	rid   string       // "" for the base layer; AddLayer (cascade.go) adds others
	q     chan *[]byte // pooled buffers, so that a packet costs no allocation
	pool  sync.Pool
	done  chan struct{}
	once  sync.Once
	onKey atomic.Pointer[func()]
	rtcpQ chan []byte
	// wake makes a pending ReadRTP return (0, nil): a subscriber's transport
	// came up and the reader starts it from the cached GOP (gop.go).
	wake chan struct{}

	dropped atomic.Uint64
}

// ErrLocalTrackClosed is returned by writes after Close.
var ErrLocalTrackClosed = errors.New("local track closed")

// PublishLocal publishes a track fed by WriteRTP. The room sees it as any other
// published track of p.
func (p *Participant) PublishLocal(opt LocalTrackOptions) (*LocalTrack, error) {
	if !p.local {
		return nil, errors.New("PublishLocal on a participant with a peer connection")
	}
	if !p.Grants().Publish {
		return nil, protocol.Errorf(protocol.CodeForbidden, "the token does not allow publishing")
	}
	kind := KindOf(opt.Info.Kind)
	if kind == 0 {
		return nil, fmt.Errorf("local track: kind %q", opt.Info.Kind)
	}
	if opt.Queue <= 0 {
		opt.Queue = 512
	}
	lt := &LocalTrack{
		q:     make(chan *[]byte, opt.Queue),
		done:  make(chan struct{}),
		rtcpQ: make(chan []byte, 8),
		wake:  make(chan struct{}, 1),
	}
	lt.pool.New = func() any { b := make([]byte, maxPacket); return &b }
	ti := opt.Info
	ti.Sid = newSid("TR_")
	if ti.Cid == "" {
		ti.Cid = ti.Sid
	}
	lt.ssrc = ti.SSRC

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("participant left")
	}
	if len(p.published) >= p.room.mgr.cfg.Limits.MaxTracksPerParticipant {
		p.mu.Unlock()
		return nil, protocol.Errorf(protocol.CodeTooManyTracks, "too many tracks")
	}
	t := newPublication(p, ti, kind, opt.Codec, lt, p.room.mgr.cfg.RTC.PacketCache)
	lt.pub = t
	t.alternate = opt.Alternate
	if kind == Audio && opt.AudioLevelExt != 0 {
		l := t.layer(0)
		l.levelExt = opt.AudioLevelExt
		l.speaker = p.room.speakers.Track(p.sid)
	}
	p.published[t.sid] = t
	p.mu.Unlock()

	metrics.Tracks.Inc()
	p.log.Info("local track published", "track", t.sid, "kind", ti.Kind, "codec", opt.Codec.MimeType, "source", ti.Source)
	t.layer(0).start(func() { p.unpublish(t, "ended") })
	p.room.trackPublished(p, t)
	return lt, nil
}

// Sid is the published track's id; Publication gives access to its sinks.
func (lt *LocalTrack) Sid() string               { return lt.pub.sid }
func (lt *LocalTrack) Publication() *Publication { return lt.pub }

// Dropped counts packets refused because the reader fell behind.
func (lt *LocalTrack) Dropped() uint64 { return lt.dropped.Load() }

// WriteRTP queues one marshalled RTP packet; raw is copied. It never blocks: a
// full queue drops the packet.
func (lt *LocalTrack) WriteRTP(raw []byte) error {
	if len(raw) > maxPacket {
		return fmt.Errorf("rtp packet of %d bytes", len(raw))
	}
	select {
	case <-lt.done:
		return ErrLocalTrackClosed
	default:
	}
	bp := lt.pool.Get().(*[]byte)
	*bp = append((*bp)[:0], raw...)
	select {
	case lt.q <- bp:
	default:
		lt.put(bp)
		lt.dropped.Add(1)
	}
	return nil
}

// put returns a buffer to the pool whole: WritePacket marshals into one.
func (lt *LocalTrack) put(bp *[]byte) {
	*bp = (*bp)[:cap(*bp)]
	lt.pool.Put(bp)
}

// WritePacket marshals pkt and queues it (see WriteRTP).
func (lt *LocalTrack) WritePacket(pkt *rtp.Packet) error {
	bp := lt.pool.Get().(*[]byte)
	n, err := pkt.MarshalTo(*bp)
	if err != nil {
		lt.pool.Put(bp)
		return err
	}
	err = lt.WriteRTP((*bp)[:n])
	lt.pool.Put(bp)
	return err
}

// WriteRTCP hands the server an RTCP compound packet from the source, as a
// publisher's connection would: sender reports give subscribers lip sync.
func (lt *LocalTrack) WriteRTCP(raw []byte) {
	b := append([]byte(nil), raw...)
	select {
	case lt.rtcpQ <- b:
	default:
	}
}

// OnKeyframeRequest sets what runs when subscribers need a keyframe (already
// aggregated over a window, as PLIs to a WebRTC publisher are). It runs on a
// subscriber's goroutine and must not block.
func (lt *LocalTrack) OnKeyframeRequest(fn func()) { lt.onKey.Store(&fn) }

// Close ends the track: the room sees it unpublished.
func (lt *LocalTrack) Close() {
	lt.once.Do(func() { close(lt.done) })
}

// source implementation: the layer's reader pulls from the queue.

func (lt *LocalTrack) ReadRTP(buf []byte) (int, error) {
	select {
	case bp := <-lt.q:
		n := copy(buf, *bp)
		lt.put(bp)
		return n, nil
	case <-lt.wake:
		return 0, nil
	case <-lt.done:
		return 0, io.EOF
	}
}

// Wake makes the reader's pending (or next) ReadRTP return no packet.
func (lt *LocalTrack) Wake() {
	select {
	case lt.wake <- struct{}{}:
	default:
	}
}

func (lt *LocalTrack) ReadRTCP(buf []byte) (int, error) {
	select {
	case b := <-lt.rtcpQ:
		return copy(buf, b), nil
	case <-lt.done:
		return 0, io.EOF
	}
}

func (lt *LocalTrack) SSRC() uint32 { return lt.ssrc }
func (lt *LocalTrack) RID() string  { return lt.rid }
func (lt *LocalTrack) Stop()        { lt.Close() }

func (lt *LocalTrack) RequestKeyframe() {
	if fn := lt.onKey.Load(); fn != nil {
		(*fn)()
	}
}

// Sink receives a publication's packets inside the server, on the forwarding
// goroutine, after the DownTracks. It must not block or keep pkt (its payload is
// the packet cache's and is reused): copy what outlives the call. Packets of
// every simulcast layer arrive; pkt.Layer tells which.
type Sink interface {
	WriteRTP(pkt *Packet)
}

// AddSink attaches s and returns the function that detaches it. A sink counts as
// wanting every layer, so none is paused at the publisher while it is attached.
func (t *Publication) AddSink(s Sink) (remove func()) {
	remove = t.AddSinkQuiet(s)
	t.RequestKeyframe()
	return remove
}

// AddSinkQuiet is AddSink without the keyframe request, for a sink that asks
// when its own consumers need one (the camera wall's mirror: a keyframe
// request of its own would wake a cold camera nobody watches).
func (t *Publication) AddSinkQuiet(s Sink) (remove func()) {
	t.downMu.Lock()
	old := t.sinks.Load()
	var next []Sink
	if old != nil {
		next = append(next, *old...)
	}
	next = append(next, s)
	t.sinks.Store(&next)
	t.downMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.downMu.Lock()
			defer t.downMu.Unlock()
			cur := *t.sinks.Load()
			next := make([]Sink, 0, len(cur))
			for _, x := range cur {
				if x != s {
					next = append(next, x)
				}
			}
			t.sinks.Store(&next)
		})
	}
}

// hasSinks reports whether a sink is attached (they keep every layer on).
func (t *Publication) hasSinks() bool {
	s := t.sinks.Load()
	return s != nil && len(*s) > 0
}

func (t *Publication) sendSinks(pkt *Packet) {
	if s := t.sinks.Load(); s != nil {
		for _, x := range *s {
			x.WriteRTP(pkt)
		}
	}
}

// Codec is the track's negotiated codec; Owner the participant publishing it.
func (t *Publication) Codec() Codec        { return t.codec }
func (t *Publication) Owner() *Participant { return t.owner }

// RequestLayerKeyframe asks for a keyframe on one simulcast layer (a sink
// switching layers).
func (t *Publication) RequestLayerKeyframe(layer int8) {
	if l := t.layer(layer); l != nil {
		l.requestKeyframe()
	}
}

// seenBy reports whether q may see p's tracks: everyone sees a visible
// participant's, only the audience a hidden one's.
func (p *Participant) seenBy(q *Participant) bool {
	if !p.hidden {
		return true
	}
	for _, id := range p.audience {
		if id == q.identity {
			return true
		}
	}
	return false
}

// OnData sets the handler for data messages addressed to a local participant
// (or broadcast in its room). from is the sender's identity.
func (p *Participant) OnData(fn func(reliable bool, h DataHeader, payload []byte)) {
	p.mu.Lock()
	p.dataFn = fn
	p.mu.Unlock()
}

// PublishData sends a data message from a local participant to the given
// identities (all of the room when to is empty), subject to the room's limits.
func (p *Participant) PublishData(reliable bool, topic string, to []string, payload []byte) {
	label := labelLossy
	if reliable {
		label = labelReliable
	}
	p.onData(label, EncodeData(DataHeader{Topic: topic, To: to}, payload))
}

// Publications lists the tracks p publishes.
func (p *Participant) Publications() []*Publication { return p.publications() }
