package webtransport

import (
	"bufio"
	"cmp"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
	wt "github.com/quic-go/webtransport-go"

	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

// audioLevelExt is the RTP header extension id the bridge puts a publisher's
// audio level in; it only feeds the room's speaker detection (DownTracks strip
// extensions before forwarding).
const audioLevelExt = 1

// upTrack is the server's subscription to a track a WebTransport client
// publishes. Its objects go to WebTransport subscribers as they are (relay) and,
// for media tracks of the client's own namespace, into the room as RTP.
type upTrack struct {
	s     *session
	ns    []string
	name  string
	alias uint64
	ready chan struct{}
	err   error
	st    *wt.Stream

	bridge atomic.Bool

	mu    sync.Mutex
	subs  []*downSub
	ended bool

	// Bridge state: objects in order, into a LocalTrack.
	lt        *sfu.LocalTrack
	pk        *Packetizer
	kind      string
	codec     string
	group     int64
	obj       int64
	broken    bool
	pend      map[[2]uint64]pendObj
	pendSince time.Time
	lastKFReq time.Time
	Frames    int

	// The relay's cache of the last groups, for FETCH and for the largest
	// location a SUBSCRIBE_OK names (oldest first by arrival).
	cache      []outObj
	cacheBytes int
	largest    moqt.Location
	hasLargest bool
	published  bool // the client PUBLISHed it (no SUBSCRIBE of ours)
}

// Relay cache bounds per track: enough for a late joiner's current group (a
// 10 s GOP at a few Mbit/s) without letting one publisher hold much memory.
const (
	cacheGroups   = 4
	cacheMaxBytes = 8 << 20
)

type pendObj struct{ ext, payload []byte }

func newUpTrack(s *session, ns []string, name string) *upTrack {
	return &upTrack{s: s, ns: ns, name: name, ready: make(chan struct{}), group: -1, obj: -1, pend: map[[2]uint64]pendObj{}}
}

// subscribe asks the client for the track and then watches the request stream.
func (u *upTrack) subscribe() {
	s := u.s
	fail := func(err error) {
		u.err = err
		close(u.ready)
		s.mu.Lock()
		for k, x := range s.up {
			if x == u {
				delete(s.up, k)
			}
		}
		s.mu.Unlock()
	}
	ctx, cancel := ctxTimeout(requestTimeout)
	st, err := s.ws.OpenStreamSync(ctx)
	cancel()
	if err != nil {
		fail(err)
		return
	}
	u.st = st
	s.pendingSubs.Add(1)
	answered := sync.OnceFunc(func() { s.pendingSubs.Add(-1) })
	defer answered()
	id := s.allocRequest()
	b, _ := moqt.AppendMessage(nil, moqt.Subscribe{RequestID: id, Namespace: u.ns, Track: u.name,
		Params: moqt.Pairs{{Key: moqt.ParamForward, Int: 1}}})
	if _, err := st.Write(b); err != nil {
		fail(err)
		return
	}
	br := bufio.NewReader(st)
	_ = st.SetReadDeadline(time.Now().Add(requestTimeout))
	m, err := moqt.ReadMessage(br)
	_ = st.SetReadDeadline(time.Time{})
	if _, ok := m.(moqt.SubscribeOK); !ok {
		answered()
	}
	if err != nil {
		fail(err)
		st.CancelWrite(0)
		return
	}
	switch m := m.(type) {
	case moqt.SubscribeOK:
		s.mu.Lock()
		if _, dup := s.upByAlias[m.TrackAlias]; dup {
			s.mu.Unlock()
			s.close(moqt.CloseDuplicateTrackAlias, "publisher reused a track alias")
			fail(errors.New("duplicate track alias"))
			return
		}
		u.alias = m.TrackAlias
		s.upByAlias[m.TrackAlias] = u
		close(s.aliasWake)
		s.aliasWake = make(chan struct{})
		s.mu.Unlock()
		answered()
		close(u.ready)
		s.log.Info("subscribed to publisher's track", "namespace", strings.Join(u.ns, "/"), "track", u.name, "alias", u.alias)
	case moqt.RequestError:
		fail(errors.New("publisher refused: " + m.Reason))
		_ = st.Close()
		return
	default:
		s.close(moqt.CloseProtocolViolation, "unexpected answer to SUBSCRIBE")
		fail(errors.New("bad answer"))
		return
	}
	// PUBLISH_DONE or the end of the stream ends the track.
	for {
		m, err := moqt.ReadMessage(br)
		if err != nil {
			break
		}
		if _, ok := m.(moqt.PublishDone); ok {
			break
		}
	}
	u.end("publisher ended the track")
}

// end unpublishes the track and ends the relayed subscriptions.
func (u *upTrack) end(reason string) {
	u.mu.Lock()
	if u.ended {
		u.mu.Unlock()
		return
	}
	u.ended = true
	subs := u.subs
	u.subs = nil
	lt := u.lt
	u.mu.Unlock()
	s := u.s
	s.mu.Lock()
	if s.upByAlias[u.alias] == u {
		delete(s.upByAlias, u.alias)
	}
	for k, x := range s.up {
		if x == u {
			delete(s.up, k)
		}
	}
	s.mu.Unlock()
	if lt != nil {
		lt.Close()
	}
	for _, d := range subs {
		d.finish(reason)
	}
}

// addSub adds a relayed subscription. Without a filter (or NextGroupStart) a
// video subscriber starts at the next group; LargestObject starts right after
// the largest object cached, which SUBSCRIBE_OK names, so a joining FETCH can
// fill in what came before without a gap.
func (u *upTrack) addSub(d *downSub, f moqt.Filter) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ended {
		return errNoTrack
	}
	u.subs = append(u.subs, d)
	d.up = u
	d.joinAt, d.hasJoin = u.largest, u.hasLargest
	video := u.name == "video" || u.name == "screen" || u.kind == "vp8" || u.kind == "h264"
	if f.Type == moqt.FilterNextGroupStart || f.Type == 0 && video {
		// A decoder needs a group start: skip to the next one (asked for below).
		d.dropping = true
	}
	d.keyframe = u.requestKeyframe
	d.onStop = func() {
		u.mu.Lock()
		for i, x := range u.subs {
			if x == d {
				u.subs = append(u.subs[:i:i], u.subs[i+1:]...)
				break
			}
		}
		u.mu.Unlock()
	}
	go u.requestKeyframe() // a new subscriber needs a group start
	return nil
}

func (u *upTrack) requestKeyframe() {
	u.mu.Lock()
	now := time.Now()
	if now.Sub(u.lastKFReq) < 200*time.Millisecond {
		u.mu.Unlock()
		return
	}
	u.lastKFReq = now
	g := uint64(max(u.group, 0))
	u.mu.Unlock()
	u.s.sendKeyframeRequest(u.alias, g)
}

// deliverDatagramObject splits a reassembled datagram object into its
// extension block and payload.
func (u *upTrack) deliverDatagramObject(group, obj uint64, b []byte) {
	n, l, err := moqt.ParseVI(b)
	if err != nil || uint64(len(b)-l) < n {
		u.s.log.Debug("bad datagram object", "track", u.name)
		return
	}
	u.deliver(group, obj, b[l:l+int(n)], b[l+int(n):], true)
}

// deliver takes one object of the track (ext and payload are only valid during
// the call). dgram says it came as an OBJECT_DATAGRAM: the publisher's choice
// of forwarding, which the relay keeps towards plain MoQT subscribers.
func (u *upTrack) deliver(group, obj uint64, ext, payload []byte, dgram bool) {
	if u.name == "data" && len(u.ns) == 3 {
		u.s.publishData(payload)
	}
	// One copy, shared read-only by the cache and every subscriber's queue.
	o := outObj{group: group, obj: obj, ext: append([]byte(nil), ext...), payload: append([]byte(nil), payload...), dgram: dgram}
	u.mu.Lock()
	subs := u.subs
	if u.bridge.Load() && len(u.ns) == 3 && u.name != "data" {
		u.order(group, obj, o.ext, o.payload)
	}
	u.remember(o)
	u.mu.Unlock()
	for _, d := range subs {
		d.enqueue(o)
	}
}

// remember caches o and moves the largest location. Called with u.mu held.
func (u *upTrack) remember(o outObj) {
	l := moqt.Location{Group: o.group, Object: o.obj}
	if !u.hasLargest || u.largest.Less(l) {
		u.largest, u.hasLargest = l, true
	}
	u.cache = append(u.cache, o)
	u.cacheBytes += len(o.ext) + len(o.payload)
	drop := 0
	for drop < len(u.cache)-1 && (u.cacheBytes > cacheMaxBytes || u.cache[drop].group+cacheGroups <= u.largest.Group) {
		u.cacheBytes -= len(u.cache[drop].ext) + len(u.cache[drop].payload)
		drop++
	}
	if drop > 0 {
		u.cache = append(u.cache[:0], u.cache[drop:]...)
	}
}

// cached returns the cached objects from start to end (inclusive) in
// ascending order, each once.
func (u *upTrack) cached(start, end moqt.Location) []outObj {
	u.mu.Lock()
	var out []outObj
	for _, o := range u.cache {
		l := moqt.Location{Group: o.group, Object: o.obj}
		if !l.Less(start) && !end.Less(l) {
			out = append(out, o)
		}
	}
	u.mu.Unlock()
	slices.SortFunc(out, func(a, b outObj) int {
		if a.group != b.group {
			return cmp.Compare(a.group, b.group)
		}
		return cmp.Compare(a.obj, b.obj)
	})
	return slices.CompactFunc(out, func(a, b outObj) bool { return a.group == b.group && a.obj == b.obj })
}

// order feeds the room in object order: datagram objects complete out of order
// and a decoder needs them in order; a gap that does not fill in time breaks the
// group and asks for a keyframe. Called with u.mu held.
func (u *upTrack) order(group, obj uint64, ext, payload []byte) {
	if u.group >= 0 && (int64(group) < u.group || int64(group) == u.group && int64(obj) <= u.obj) {
		return // late or duplicate
	}
	next := u.group >= 0 && int64(group) == u.group && int64(obj) == u.obj+1 && !u.broken
	newGroup := obj == 0 && (u.group < 0 || int64(group) > u.group)
	if !next && !newGroup {
		if len(u.pend) >= 64 {
			u.skip()
			return
		}
		if len(u.pend) == 0 {
			u.pendSince = time.Now()
		}
		u.pend[[2]uint64{group, obj}] = pendObj{ext, payload}
		return
	}
	u.emit(group, obj, ext, payload)
	u.drainPending()
}

func (u *upTrack) drainPending() {
	for len(u.pend) > 0 {
		k := [2]uint64{uint64(u.group), uint64(u.obj + 1)}
		p, ok := u.pend[k]
		if !ok {
			// A newer group start supersedes what is missing of this one.
			var best [2]uint64
			found := false
			for pk := range u.pend {
				if pk[1] == 0 && int64(pk[0]) > u.group && (!found || pk[0] < best[0]) {
					best, found = pk, true
				}
			}
			if !found {
				break
			}
			k, p = best, u.pend[best]
		}
		delete(u.pend, k)
		u.emit(k[0], k[1], p.ext, p.payload)
		for pk := range u.pend {
			if int64(pk[0]) < u.group || int64(pk[0]) == u.group && int64(pk[1]) <= u.obj {
				delete(u.pend, pk)
			}
		}
	}
	if len(u.pend) == 0 {
		u.pendSince = time.Time{}
	}
}

// skip gives up on a gap: drop what waits and wait for the next group.
func (u *upTrack) skip() {
	clear(u.pend)
	u.pendSince = time.Time{}
	if u.kind != "opus" {
		u.broken = true
		go u.requestKeyframe()
	}
}

// flush moves past a gap that stayed open beyond the playout deadline.
func (u *upTrack) flush(now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.pend) > 0 && now.Sub(u.pendSince) > 300*time.Millisecond {
		u.skip()
	}
}

// lost is told that the datagram layer gave up on an object.
func (u *upTrack) lost(group, obj uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if int64(group) == u.group && int64(obj) > u.obj && u.kind != "opus" {
		u.skip()
	}
}

// emit hands one in-order object to the room. Called with u.mu held.
func (u *upTrack) emit(group, obj uint64, ext, payload []byte) {
	var m moqt.Meta
	if err := moqt.ParseExtensions(ext, &m); err != nil {
		u.s.log.Debug("bad object metadata", "track", u.name, "err", err)
		return
	}
	if obj == 0 {
		u.broken = false
	}
	u.group, u.obj = int64(group), int64(obj)
	if u.broken {
		return
	}
	if m.Codec != "" {
		u.codec = m.Codec
	}
	if u.lt == nil {
		if u.codec == "" {
			return // cannot publish before the codec is known
		}
		if err := u.publish(&m); err != nil {
			u.s.log.Warn("cannot bridge track into the room", "track", u.name, "codec", u.codec, "err", err)
			u.bridge.Store(false)
			return
		}
	}
	u.Frames++
	lt := u.lt
	level := m.AudioLevel
	u.pk.Packetize(m.TimestampUs, payload, func(p *rtp.Packet) {
		if level >= 0 && u.kind == "opus" {
			_ = p.Header.SetExtension(audioLevelExt, []byte{byte(level)})
		}
		_ = lt.WritePacket(p)
	})
}

// publish makes the track a LocalTrack of the client's participant.
func (u *upTrack) publish(m *moqt.Meta) error {
	kind := codecKind(u.codec)
	var c sfu.Codec
	info := protocol.TrackInfo{Kind: "video", Name: u.name, Width: m.Width, Height: m.Height, SSRC: rand.Uint32()}
	levelExt := uint8(0)
	switch kind {
	case "vp8":
		c = sfu.Codec{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000, PayloadType: 96}
	case "h264":
		c = sfu.Codec{MimeType: webrtc.MimeTypeH264, ClockRate: 90000, SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f", PayloadType: 102}
	case "opus":
		c = sfu.Codec{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1", PayloadType: 111}
		info.Kind = "audio"
		levelExt = audioLevelExt
	default:
		return errors.New("unsupported codec")
	}
	info.MimeType = c.MimeType
	switch u.name {
	case "video":
		info.Source = "camera"
	case "audio":
		info.Source = "microphone"
	case "screen":
		info.Source = "screen"
	case "screen_audio":
		info.Source = "screen_audio"
	default:
		info.Source = "unknown"
	}
	pk, err := NewPacketizer(kind, c.ClockRate, uint8(c.PayloadType), info.SSRC, uint16(rand.Uint32()))
	if err != nil {
		return err
	}
	lt, err := u.s.part.PublishLocal(sfu.LocalTrackOptions{Info: info, Codec: c, AudioLevelExt: levelExt})
	if err != nil {
		return err
	}
	lt.OnKeyframeRequest(func() { go u.requestKeyframe() })
	u.lt, u.pk, u.kind = lt, pk, kind
	u.s.log.Info("webtransport track bridged into the room", "track", u.name, "sid", lt.Sid(), "codec", u.codec)
	return nil
}

// outObj is one object queued for a subscriber; ext and payload are shared
// read-only between subscribers.
type outObj struct {
	group, obj uint64
	ext        []byte // extension block body
	payload    []byte
	dgram      bool // arrived as an OBJECT_DATAGRAM
}

// downSub is one subscription of a client to a track the server provides.
type downSub struct {
	s     *session
	alias uint64
	st    *wt.Stream
	track string
	// pubSid/ownerSid name the bridged publication, to end the subscription
	// with PUBLISH_DONE when it is unpublished or its owner leaves.
	pubSid, ownerSid string
	datagram         bool
	perFrame         bool // a stream per object (audio, events)
	priority         byte
	reqID            uint64 // the SUBSCRIBE's Request ID (a joining FETCH names it)

	// Relayed subscriptions: the track, and the largest location cached when
	// the subscription began (its Joining Location).
	up      *upTrack
	joinAt  moqt.Location
	hasJoin bool

	q         chan outObj
	enqMu     sync.Mutex
	dropping  bool
	askedAt   time.Time     // the last keyframe request while dropping
	latestKey atomic.Uint64 // groups below it are stale: skip and reset their stream

	keyframe func()
	onStop   func()
	stopOnce sync.Once
	done     chan struct{}

	cacheMu sync.Mutex
	cache   [256]cachedObj
	Sent    atomic.Int64
	Dropped atomic.Int64
}

type cachedObj struct {
	group, obj uint64
	data       []byte
}

func (s *session) newDown(st *wt.Stream, m moqt.Subscribe) *downSub {
	s.mu.Lock()
	alias := s.nextAlias
	s.nextAlias++
	s.mu.Unlock()
	d := &downSub{s: s, alias: alias, st: st, track: m.Track, q: make(chan outObj, 256), done: make(chan struct{}), priority: 1, reqID: m.RequestID}
	if p, ok := m.Params.Get(moqt.ParamDelivery); ok && p.Int == 1 && s.ext.Load() {
		d.datagram = true
	}
	if m.Track == "audio" || m.Track == "events" || m.Track == "data" || m.Track == "screen_audio" {
		d.perFrame, d.priority = true, 0
	}
	return d
}

func (d *downSub) start() { go d.write() }

// stop ends the subscription (the subscriber left or unsubscribed).
func (d *downSub) stop() {
	d.stopOnce.Do(func() {
		close(d.done)
		if d.onStop != nil {
			d.onStop()
		}
	})
}

// finish tells the subscriber the track ended, then stops.
func (d *downSub) finish(reason string) {
	b, _ := moqt.AppendMessage(nil, moqt.PublishDone{Status: 0x2, Reason: reason})
	_ = d.st.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = d.st.Write(b)
	_ = d.st.Close()
	d.stop()
}

// enqueue never blocks (it runs on forwarding goroutines): when the subscriber
// falls behind, objects are dropped until the next group start.
func (d *downSub) enqueue(o outObj) {
	d.enqMu.Lock()
	defer d.enqMu.Unlock()
	if d.dropping {
		if o.obj != 0 {
			d.Dropped.Add(1)
			// Ask again while waiting: a request can be lost (rate limits
			// upstream, a keyframe that was itself dropped), and a WebRTC
			// publisher sends no keyframe unless asked.
			if now := time.Now(); now.Sub(d.askedAt) >= keyframeRetry {
				d.askKeyframe(now)
			}
			return
		}
		d.dropping = false
	}
	if o.obj == 0 && !d.perFrame && len(d.q) > 0 {
		// A new group while older objects still wait: they are stale now.
		d.latestKey.Store(o.group)
	}
	select {
	case d.q <- o:
	default:
		d.Dropped.Add(1)
		d.dropping = !d.perFrame
		d.askKeyframe(time.Now())
	}
}

// askKeyframe asks the publisher for a keyframe, off the forwarding goroutine.
// Under enqMu.
func (d *downSub) askKeyframe(now time.Time) {
	if d.keyframe != nil {
		d.askedAt = now
		go d.keyframe()
	}
}

var eventGroup atomic.Uint64

// enqueueEvent never blocks: the room calls it with its own locks held. A
// client that lets 256 room events pile up is gone or broken, and losing events
// would leave it with a wrong picture of the room: end its session.
func (d *downSub) enqueueEvent(b []byte) {
	select {
	case d.q <- outObj{group: eventGroup.Add(1), payload: b}:
	case <-d.done:
	default:
		go d.s.close(moqt.CloseInternal, "too slow to read the room's events")
	}
}

func (d *downSub) write() {
	if d.datagram {
		d.writeDatagrams()
		return
	}
	d.writeStreams()
}

// writeStreams sends a unidirectional stream per group (per object for audio and
// events). A group that became stale (a newer group start was queued behind it)
// is skipped and its stream reset, so old frames never delay new ones.
func (d *downSub) writeStreams() {
	var cur *wt.SendStream
	var curGroup uint64
	var prev int64 = -1
	var failed int64 = -1
	skipped := false
	buf := make([]byte, 0, 2048)
	finish := func(reset bool) {
		if cur == nil {
			return
		}
		if reset {
			cur.CancelWrite(1)
		} else {
			_ = cur.Close()
		}
		cur = nil
	}
	for {
		var o outObj
		select {
		case <-d.done:
			finish(true)
			return
		case o = <-d.q:
		}
		if o.group < d.latestKey.Load() || int64(o.group) == failed {
			skipped = true
			d.Dropped.Add(1)
			continue
		}
		if o.dgram && d.sendObjectDatagram(o, buf) {
			continue
		}
		if cur != nil && (o.group != curGroup || d.perFrame) {
			finish(skipped && o.group != curGroup)
			skipped = false
		}
		if cur == nil {
			ctx, cancel := ctxTimeout(2 * time.Second)
			st, err := d.s.ws.OpenUniStreamSync(ctx)
			cancel()
			if err != nil {
				if d.s.ctx.Err() != nil {
					return
				}
				failed = int64(o.group)
				continue
			}
			cur, curGroup, prev = st, o.group, -1
			sub := uint64(0)
			if d.perFrame {
				sub = o.obj
			}
			buf = moqt.AppendSubgroupHeader(buf[:0], moqt.SubgroupHeader{TrackAlias: d.alias, Group: o.group, Subgroup: sub, Priority: d.priority})
		} else {
			buf = buf[:0]
		}
		if prev < 0 {
			buf = moqt.AppendVI(buf, o.obj)
		} else {
			buf = moqt.AppendVI(buf, o.obj-uint64(prev)-1)
		}
		prev = int64(o.obj)
		buf = moqt.AppendBytes(buf, o.ext)
		buf = moqt.AppendVI(buf, uint64(len(o.payload)))
		_ = cur.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := cur.Write(buf)
		if err == nil {
			_, err = cur.Write(o.payload)
		}
		if err != nil {
			finish(true)
			failed = int64(o.group)
			d.Dropped.Add(1)
			continue
		}
		d.Sent.Add(1)
	}
}

// sendObjectDatagram forwards an object that arrived as an OBJECT_DATAGRAM the
// same way when it fits one datagram (else the caller sends it on a stream).
func (d *downSub) sendObjectDatagram(o outObj, buf []byte) bool {
	if len(o.ext)+len(o.payload)+40 > serverDatagramMax {
		return false
	}
	b := moqt.AppendObjectDatagram(buf[:0], &moqt.ObjectDatagram{TrackAlias: d.alias, Group: o.group, Object: o.obj,
		Priority: d.priority, Extensions: o.ext, Payload: o.payload})
	if d.s.ws.SendDatagram(b) != nil {
		d.Dropped.Add(1)
	} else {
		d.Sent.Add(1)
	}
	return true
}

// writeDatagrams fragments each object into datagrams, keeps it for NACKs and
// adds XOR parity to keyframes.
func (d *downSub) writeDatagrams() {
	buf := make([]byte, 0, serverDatagramMax)
	for {
		var o outObj
		select {
		case <-d.done:
			return
		case o = <-d.q:
		}
		data := moqt.AppendBytes(make([]byte, 0, len(o.ext)+len(o.payload)+4), o.ext)
		data = append(data, o.payload...)
		d.cacheMu.Lock()
		d.cache[(o.group*64+o.obj)%uint64(len(d.cache))] = cachedObj{o.group, o.obj, data}
		d.cacheMu.Unlock()
		count := 0
		err := moqt.Split(d.alias, o.group, o.obj, data, serverDatagramMax, buf, func(dg []byte) {
			count++
			_ = d.s.ws.SendDatagram(dg)
		})
		if err != nil {
			d.Dropped.Add(1)
			continue
		}
		if o.obj == 0 && count >= 4 && !d.perFrame {
			d.sendFEC(o, data, count)
		}
		d.Sent.Add(1)
	}
}

// sendFEC sends one XOR parity datagram per run of 8 fragments of a keyframe:
// a single loss in a run is repaired without a round trip.
func (d *downSub) sendFEC(o outObj, data []byte, count int) {
	per := (len(data) + count - 1) / count
	for first := 0; first < count; first += 8 {
		n := min(8, count-first)
		par := make([]byte, per)
		for i := first; i < first+n; i++ {
			lo, hi := i*per, min((i+1)*per, len(data))
			for j := lo; j < hi; j++ {
				par[j-lo] ^= data[j]
			}
		}
		_ = d.s.ws.SendDatagram(moqt.AppendFEC(nil, &moqt.FEC{TrackAlias: d.alias, Group: o.group, Object: o.obj, First: first, Count: n, Parity: par}))
	}
}

// resend answers a NACK from the cache.
func (d *downSub) resend(n *moqt.Nack) {
	d.cacheMu.Lock()
	c := d.cache[(n.Group*64+n.Object)%uint64(len(d.cache))]
	d.cacheMu.Unlock()
	if c.data == nil || c.group != n.Group || c.obj != n.Object {
		return // too old
	}
	want := map[int]bool{}
	for _, i := range n.Missing {
		want[i] = true
	}
	i := 0
	_ = moqt.Split(d.alias, c.group, c.obj, c.data, serverDatagramMax, nil, func(dg []byte) {
		if want[i] {
			_ = d.s.ws.SendDatagram(dg)
		}
		i++
	})
}
