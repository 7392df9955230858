package webtransport

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	wt "github.com/quic-go/webtransport-go"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

// Limits that protect the server from a misbehaving session.
const (
	maxObjectBytes    = 4 << 20
	maxRequests       = 256 // concurrent request streams per session
	requestTimeout    = 10 * time.Second
	serverDatagramMax = 1100 // fragments the server sends fit every path's datagram size
	maxDataBytes      = 64 << 10
)

// session is one WebTransport client: a participant of its token's room.
type session struct {
	srv      *Server
	ws       *wt.Session
	log      *slog.Logger
	claims   *auth.Claims
	room     string
	identity string
	part     *sfu.Participant

	ctx    context.Context
	cancel context.CancelFunc

	ctrlMu    sync.Mutex
	ctrl      *wt.SendStream
	setupDone chan struct{}
	ctrlTaken atomic.Bool // a stream started with SETUP; any other is a violation
	ext       atomic.Bool // the peer speaks Petrel's extensions
	requests  atomic.Int32

	mu         sync.Mutex
	nextReq    uint64 // server request ids are odd
	nextAlias  uint64
	namespaces [][]string
	up         map[string]*upTrack // tracks this client publishes that the server subscribed
	upByAlias  map[uint64]*upTrack
	down       map[uint64]*downSub // this client's subscriptions, by the alias the server gave
	events     []*downSub
	backlog    [][]byte // events before the client subscribed to them
	closed     bool

	// pendingSubs counts our unanswered SUBSCRIBEs; aliasWake is closed (and
	// replaced) whenever an alias is registered.
	pendingSubs atomic.Int32
	aliasWake   chan struct{}

	nsWatch []chan struct{} // SUBSCRIBE_NAMESPACE requests to wake when namespaces change

	badDgrams   atomic.Int64
	badDgramLog atomic.Int64 // unix ns of the last log line about one

	asmMu     sync.Mutex // the datagram reader and the NACK ticker share asm
	asm       *moqt.Assembler
	closeOnce sync.Once
}

func newSession(srv *Server, ws *wt.Session, c *auth.Claims, remote string) *session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{srv: srv, ws: ws, claims: c, room: c.Room, identity: c.Identity(), ctx: ctx, cancel: cancel,
		setupDone: make(chan struct{}), nextReq: 1, nextAlias: 1, aliasWake: make(chan struct{}),
		up: map[string]*upTrack{}, upByAlias: map[uint64]*upTrack{}, down: map[uint64]*downSub{}, asm: moqt.NewAssembler()}
	s.log = srv.log.With("room", c.Room, "identity", c.Identity(), "remote", remote)
	return s
}

// run serves the session until it ends.
func (s *session) run() {
	s.log.Info("webtransport session opened", "protocol", s.ws.SessionState().ApplicationProtocol)
	defer s.cleanup()
	// A client like any other: the room checks its token's grants.
	p, err := s.srv.opt.Manager.JoinLocal(sfu.LocalOptions{Room: s.room, Identity: s.identity, Name: s.claims.Name,
		Metadata: s.claims.Metadata, Out: eventSender{s}, Grants: s.claims.Grants, Origin: sfu.Client})
	if err != nil {
		s.close(moqt.CloseInternal, "join: "+err.Error())
		return
	}
	s.mu.Lock()
	s.part = p
	s.mu.Unlock()
	p.OnData(s.onData)
	if err := s.sendSetup(); err != nil {
		s.close(moqt.CloseInternal, "setup: "+err.Error())
		return
	}
	go s.acceptUni()
	go s.acceptBidi()
	go s.readDatagrams()
	go s.tick()
	<-s.ws.Context().Done()
}

// close ends the session with a code and a reason the peer sees.
func (s *session) close(code uint64, reason string) {
	s.closeOnce.Do(func() {
		if code != moqt.CloseNoError {
			s.log.Warn("webtransport session closed", "code", code, "reason", reason)
		} else {
			s.log.Info("webtransport session closed", "reason", reason)
		}
		_ = s.ws.CloseWithError(wt.SessionErrorCode(code), reason)
	})
}

func (s *session) cleanup() {
	s.close(moqt.CloseNoError, "ended")
	s.cancel()
	s.mu.Lock()
	s.closed = true
	ups := make([]*upTrack, 0, len(s.up))
	for _, u := range s.up {
		ups = append(ups, u)
	}
	downs := make([]*downSub, 0, len(s.down))
	for _, d := range s.down {
		downs = append(downs, d)
	}
	p := s.part
	s.mu.Unlock()
	for _, u := range ups {
		u.end("publisher left")
	}
	for _, d := range downs {
		d.stop()
	}
	if p != nil {
		p.Close("webtransport session ended")
	}
}

// serves reports whether the client announced ns or PUBLISHed track in it.
func (s *session) serves(ns []string, track string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.namespaces {
		if slices.Equal(a, ns) {
			return true
		}
	}
	u := s.up[trackKey(ns, track)]
	return u != nil && u.published
}

func trackKey(ns []string, name string) string { return strings.Join(ns, "/") + "\x00" + name }

// --- control stream ---------------------------------------------------------

func (s *session) sendSetup() error {
	st, err := s.ws.OpenUniStream()
	if err != nil {
		return err
	}
	ext, _ := json.Marshal(map[string]any{"ext": []string{"dgram"}, "room": s.room, "identity": s.identity,
		"participantSid": s.part.Sid(), "maxDatagramSize": serverDatagramMax})
	b, err := moqt.AppendMessage(nil, moqt.Setup{Params: moqt.Pairs{
		{Key: moqt.ParamImplementation, Bytes: []byte("petrel")},
		{Key: moqt.ParamPetrel, Bytes: ext},
	}})
	if err != nil {
		return err
	}
	s.ctrlMu.Lock()
	s.ctrl = st
	_, err = st.Write(b)
	s.ctrlMu.Unlock()
	return err
}

// readControl reads the client's control stream: SETUP, then GOAWAY only.
func (s *session) readControl(br *bufio.Reader) {
	m, err := moqt.ReadMessageAfterType(br, moqt.TypeSetup)
	if err != nil {
		s.close(moqt.CloseProtocolViolation, "bad SETUP: "+err.Error())
		return
	}
	setup := m.(moqt.Setup)
	if p, ok := setup.Params.Get(moqt.ParamPetrel); ok && strings.Contains(string(p.Bytes), "dgram") {
		s.ext.Store(true)
	}
	impl := ""
	if p, ok := setup.Params.Get(moqt.ParamImplementation); ok {
		impl = string(p.Bytes)
	}
	s.log.Info("moqt setup", "implementation", impl, "petrel_ext", s.ext.Load())
	close(s.setupDone)
	for {
		m, err := moqt.ReadMessage(br)
		if err != nil {
			switch {
			case s.ctx.Err() != nil:
			case strings.HasPrefix(err.Error(), "moqt:"): // a malformed message, not a closed stream
				s.close(moqt.CloseProtocolViolation, "control stream: "+err.Error())
			default:
				s.close(moqt.CloseNoError, "control stream ended: "+err.Error())
			}
			return
		}
		switch m := m.(type) {
		case moqt.GoAway:
			s.close(moqt.CloseNoError, "client sent GOAWAY")
			return
		default:
			s.close(moqt.CloseProtocolViolation, fmt.Sprintf("unexpected control message 0x%x", moqt.Type(m)))
			return
		}
	}
}

// acceptUni takes the client's control stream and its data streams.
func (s *session) acceptUni() {
	for {
		st, err := s.ws.AcceptUniStream(s.ctx)
		if err != nil {
			return
		}
		go s.readUni(st)
	}
}

func (s *session) readUni(st *wt.ReceiveStream) {
	br := bufio.NewReaderSize(st, 16<<10)
	t, err := moqt.ReadVI(br)
	if err != nil {
		return
	}
	if t == moqt.TypeSetup {
		// Two streams may start with SETUP at once; the first to claim is the
		// control stream, whether or not its SETUP has been read yet.
		if !s.ctrlTaken.CompareAndSwap(false, true) {
			s.close(moqt.CloseProtocolViolation, "second control stream")
			return
		}
		s.readControl(br)
		return
	}
	h, err := moqt.ReadSubgroupHeaderAfterType(br, t)
	if err != nil {
		s.log.Warn("bad data stream", "err", err)
		st.CancelRead(wt.StreamErrorCode(moqt.CloseProtocolViolation))
		return
	}
	u := s.waitAlias(h.TrackAlias)
	if u == nil {
		s.log.Warn("data stream for an unknown track alias", "alias", h.TrackAlias)
		st.CancelRead(wt.StreamErrorCode(moqt.CloseProtocolViolation))
		return
	}
	or := moqt.NewObjectReader(br, h, maxObjectBytes)
	var o moqt.StreamObject
	for {
		if err := or.Next(&o); err != nil {
			if !errors.Is(err, io.EOF) && s.ctx.Err() == nil {
				if errors.Is(err, moqt.ErrObjectTooLarge) {
					s.log.Warn("object too large: stream reset", "track", u.name, "err", err)
				}
				st.CancelRead(wt.StreamErrorCode(moqt.CloseProtocolViolation))
			}
			return
		}
		if o.Status != 0 || len(o.Payload) == 0 {
			continue // end-of-group and similar markers
		}
		u.deliver(h.Group, o.ID, o.Extensions, o.Payload, false)
	}
}

// waitAlias finds the track of a data stream. A publisher may open the stream
// right after SUBSCRIBE_OK, so it can arrive before the answer is read: while a
// SUBSCRIBE of ours is unanswered, wait a little for the alias to appear.
func (s *session) waitAlias(alias uint64) *upTrack {
	deadline := time.Now().Add(2 * time.Second)
	for {
		s.mu.Lock()
		u := s.upByAlias[alias]
		wake := s.aliasWake
		s.mu.Unlock()
		if u != nil || s.pendingSubs.Load() == 0 || time.Now().After(deadline) {
			return u
		}
		select {
		case <-wake:
		case <-time.After(50 * time.Millisecond):
		case <-s.ctx.Done():
			return nil
		}
	}
}

// --- requests ---------------------------------------------------------------

func (s *session) acceptBidi() {
	for {
		st, err := s.ws.AcceptStream(s.ctx)
		if err != nil {
			return
		}
		if s.requests.Add(1) > maxRequests {
			s.requests.Add(-1)
			s.close(moqt.CloseProtocolViolation, "too many concurrent requests")
			return
		}
		go func() {
			defer s.requests.Add(-1)
			s.serveRequest(st)
		}()
	}
}

func (s *session) serveRequest(st *wt.Stream) {
	select {
	case <-s.setupDone:
	case <-time.After(requestTimeout):
		s.close(moqt.CloseProtocolViolation, "request before SETUP")
		return
	case <-s.ctx.Done():
		return
	}
	br := bufio.NewReader(st)
	_ = st.SetReadDeadline(time.Now().Add(requestTimeout))
	m, err := moqt.ReadMessage(br)
	if err != nil {
		if streamEnded(err) {
			// The requester reset or closed the stream (or let it idle) before
			// its request was whole: that ends this request, not the session.
			s.log.Info("request stream ended before its request", "err", err)
			st.CancelWrite(0)
			return
		}
		s.close(moqt.CloseProtocolViolation, "bad request: "+err.Error())
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	switch m := m.(type) {
	case moqt.Subscribe:
		s.handleSubscribe(st, br, m)
	case moqt.PublishNamespace:
		s.handleAnnounce(st, br, m)
	case moqt.SubscribeNamespace:
		s.handleSubscribeNamespace(st, br, m)
	case moqt.Publish:
		s.handlePublish(st, br, m)
	case moqt.Fetch:
		s.handleFetch(st, br, m)
	case moqt.Unknown:
		switch m.Type {
		case moqt.TypeTrackStatus, moqt.TypeSubscribeTracks, moqt.TypeRequestUpdate:
			s.log.Warn("unsupported request", "type", fmt.Sprintf("0x%x", m.Type))
			s.reply(st, moqt.RequestError{Code: moqt.ErrCodeNotSupported, Reason: "not supported by petrel"})
			st.CancelRead(0)
			_ = st.Close()
		default:
			// Draft-18: an unknown message type is a protocol violation.
			s.close(moqt.CloseProtocolViolation, fmt.Sprintf("unknown request type 0x%x", m.Type))
		}
	default:
		s.close(moqt.CloseProtocolViolation, fmt.Sprintf("message 0x%x cannot start a request", moqt.Type(m)))
	}
}

// streamEnded tells a stream that was reset, closed or timed out from one that
// carried malformed bytes.
func streamEnded(err error) bool {
	var se *wt.StreamError
	var ne interface{ Timeout() bool }
	return errors.As(err, &se) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.Canceled) || (errors.As(err, &ne) && ne.Timeout())
}

func (s *session) reply(st *wt.Stream, m moqt.Message) bool {
	b, err := moqt.AppendMessage(nil, m)
	if err != nil {
		return false
	}
	_ = st.SetWriteDeadline(time.Now().Add(requestTimeout))
	_, err = st.Write(b)
	_ = st.SetWriteDeadline(time.Time{})
	return err == nil
}

// waitEnd blocks until the requester ends the request (UNSUBSCRIBE, FIN or
// reset) or the session ends.
func (s *session) waitEnd(st *wt.Stream, br *bufio.Reader) {
	for {
		m, err := moqt.ReadMessage(br)
		if err != nil {
			return
		}
		switch m.(type) {
		case moqt.Unsubscribe, moqt.PublishNamespaceDone, moqt.PublishDone:
			return
		}
	}
}

func (s *session) handleAnnounce(st *wt.Stream, br *bufio.Reader, m moqt.PublishNamespace) {
	own := []string{"petrel", s.room, s.identity}
	if !s.claims.Grants.Publish || len(m.Namespace) < 3 || !slices.Equal(m.Namespace[:3], own) {
		s.log.Warn("namespace refused", "namespace", strings.Join(m.Namespace, "/"))
		s.reply(st, moqt.RequestError{Code: moqt.ErrCodeUnauthorized,
			Reason: "may only publish in " + strings.Join(own, "/")})
		_ = st.Close()
		return
	}
	s.mu.Lock()
	s.namespaces = append(s.namespaces, slices.Clone(m.Namespace))
	s.mu.Unlock()
	if !s.reply(st, moqt.RequestOK{}) {
		return
	}
	s.log.Info("namespace published", "namespace", strings.Join(m.Namespace, "/"))
	s.srv.namespacesChanged(s.room)
	if len(m.Namespace) == 3 {
		// The participant's own namespace: bring its media into the room.
		for _, name := range []string{"video", "audio", "data"} {
			go func() {
				if _, err := s.upstream(m.Namespace, name, true); err != nil {
					s.log.Debug("publisher has no such track", "track", name, "err", err)
				}
			}()
		}
	}
	s.waitEnd(st, br)
	s.mu.Lock()
	s.namespaces = slices.DeleteFunc(s.namespaces, func(a []string) bool { return slices.Equal(a, m.Namespace) })
	s.mu.Unlock()
	s.srv.namespacesChanged(s.room)
}

func (s *session) handleSubscribe(st *wt.Stream, br *bufio.Reader, m moqt.Subscribe) {
	fail := func(code uint64, reason string) {
		s.reply(st, moqt.RequestError{Code: code, Reason: reason})
		_ = st.Close()
	}
	if !s.claims.Grants.Subscribe {
		fail(moqt.ErrCodeUnauthorized, "token does not grant subscribe")
		return
	}
	ns := m.Namespace
	if len(ns) < 2 || ns[0] != "petrel" || ns[1] != s.room {
		fail(moqt.ErrCodeDoesNotExist, "namespace outside this session's room petrel/"+s.room)
		return
	}
	filter, _, ferr := m.Params.Filter()
	if ferr != nil {
		s.close(moqt.CloseProtocolViolation, "SUBSCRIBE: "+ferr.Error())
		return
	}
	if filter.Type == moqt.FilterAbsoluteStart || filter.Type == moqt.FilterAbsoluteRange {
		fail(moqt.ErrCodeNotSupported, "absolute subscription filters are not supported: FETCH the past, SUBSCRIBE from the largest object")
		return
	}
	d := s.newDown(st, m)
	var err error
	switch {
	case len(ns) == 2 && m.Track == "events":
		err = s.attachEvents(d)
	case len(ns) >= 3:
		if pub := s.srv.publisherOf(s.room, ns, m.Track); pub != nil {
			var u *upTrack
			if u, err = pub.upstream(ns, m.Track, false); err == nil {
				err = u.addSub(d, filter)
			}
		} else if len(ns) == 3 {
			err = s.attachRTP(d, ns[2], m.Track)
		} else {
			err = errNoTrack
		}
	default:
		err = errNoTrack
	}
	if err != nil {
		code := uint64(moqt.ErrCodeDoesNotExist)
		if !errors.Is(err, errNoTrack) {
			code = moqt.ErrCodeInternal
		}
		fail(code, err.Error())
		return
	}
	s.mu.Lock()
	s.down[d.alias] = d
	s.mu.Unlock()
	var okParams moqt.Pairs
	if d.hasJoin {
		okParams = moqt.Pairs{moqt.LargestObjectParam(d.joinAt)}
	}
	if !s.reply(st, moqt.SubscribeOK{TrackAlias: d.alias, Params: okParams}) {
		d.stop()
		return
	}
	d.start()
	s.log.Info("subscribed", "namespace", strings.Join(ns, "/"), "track", m.Track, "alias", d.alias, "datagrams", d.datagram)
	s.waitEnd(st, br)
	d.stop()
	s.mu.Lock()
	delete(s.down, d.alias)
	s.mu.Unlock()
	_ = st.Close()
}

var errNoTrack = errors.New("no such track")

// upstream returns the server's subscription to one of this client's tracks,
// subscribing on first use. bridge makes a media track a room track.
func (s *session) upstream(ns []string, name string, bridge bool) (*upTrack, error) {
	key := trackKey(ns, name)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	u := s.up[key]
	if u == nil {
		u = newUpTrack(s, ns, name)
		s.up[key] = u
		s.mu.Unlock()
		go u.subscribe()
	} else {
		s.mu.Unlock()
	}
	if bridge {
		u.bridge.Store(true)
	}
	select {
	case <-u.ready:
	case <-time.After(requestTimeout):
		return nil, errors.New("publisher did not answer SUBSCRIBE")
	}
	if u.err != nil {
		return nil, u.err
	}
	return u, nil
}

func (s *session) allocRequest() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextReq
	s.nextReq += 2
	return id
}

// --- datagrams --------------------------------------------------------------

func (s *session) readDatagrams() {
	for {
		b, err := s.ws.ReceiveDatagram(s.ctx)
		if err != nil {
			return
		}
		if len(b) > 0 && moqt.IsObjectDatagram(b[0]) {
			s.objectDatagram(b)
			continue
		}
		v, err := moqt.ParseDatagram(b)
		if err != nil {
			s.badDatagram(err)
			continue
		}
		now := time.Now()
		switch v := v.(type) {
		case *moqt.Fragment:
			s.mu.Lock()
			u := s.upByAlias[v.TrackAlias]
			s.mu.Unlock()
			if u == nil {
				continue // unknown alias: late after unsubscribe, or garbage
			}
			s.asmMu.Lock()
			obj, ok, err := s.asm.Add(v, now)
			s.asmMu.Unlock()
			if err != nil {
				s.log.Debug("bad fragment", "err", err)
				continue
			}
			if ok {
				u.deliverDatagramObject(v.Group, v.Object, obj)
			}
		case *moqt.FEC:
			s.mu.Lock()
			u := s.upByAlias[v.TrackAlias]
			s.mu.Unlock()
			if u == nil {
				continue
			}
			s.asmMu.Lock()
			obj, ok := s.asm.AddFEC(v, now)
			s.asmMu.Unlock()
			if ok {
				u.deliverDatagramObject(v.Group, v.Object, obj)
			}
		case *moqt.Nack:
			s.mu.Lock()
			d := s.down[v.TrackAlias]
			s.mu.Unlock()
			if d != nil {
				d.resend(v)
			}
		case *moqt.KeyframeRequest:
			s.mu.Lock()
			d := s.down[v.TrackAlias]
			s.mu.Unlock()
			if d != nil && d.keyframe != nil {
				d.keyframe()
			}
		}
	}
}

// objectDatagram takes a MoQT OBJECT_DATAGRAM: one whole object of a track
// the client publishes.
func (s *session) objectDatagram(b []byte) {
	var od moqt.ObjectDatagram
	if err := moqt.ParseObjectDatagram(b, &od); err != nil {
		s.badDatagram(err)
		return
	}
	s.mu.Lock()
	u := s.upByAlias[od.TrackAlias]
	s.mu.Unlock()
	if u == nil || od.HasStatus {
		return // unknown alias (late after the end, or garbage); status objects carry nothing to relay
	}
	u.deliver(od.Group, od.Object, od.Extensions, od.Payload, true)
}

// badDatagram logs a malformed datagram, at most once a second per session
// (datagrams are per packet: a flood must not become a flood of log lines).
func (s *session) badDatagram(err error) {
	s.badDgrams.Add(1)
	now := time.Now().UnixNano()
	if last := s.badDgramLog.Load(); now-last > int64(time.Second) && s.badDgramLog.CompareAndSwap(last, now) {
		s.log.Warn("malformed datagram dropped", "err", err, "total", s.badDgrams.Load())
	}
}

// tick sends NACKs for incomplete datagram objects and moves past objects whose
// playout deadline passed.
func (s *session) tick() {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var buf []byte
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			s.asmMu.Lock()
			nacks, dropped := s.asm.Nacks(now, 10*time.Millisecond, 40*time.Millisecond, 400*time.Millisecond)
			s.asmMu.Unlock()
			s.mu.Lock()
			ups := make([]*upTrack, 0, len(s.upByAlias))
			for _, u := range s.upByAlias {
				ups = append(ups, u)
			}
			s.mu.Unlock()
			for i := range nacks {
				buf = moqt.AppendNack(buf[:0], &nacks[i])
				_ = s.ws.SendDatagram(buf)
			}
			for _, k := range dropped {
				s.mu.Lock()
				u := s.upByAlias[k.TrackAlias]
				s.mu.Unlock()
				if u != nil {
					u.lost(k.Group, k.Object)
				}
			}
			for _, u := range ups {
				u.flush(now)
			}
		}
	}
}

// sendKeyframeRequest asks this client (a publisher) for a new group on alias.
func (s *session) sendKeyframeRequest(alias, groupSeen uint64) {
	if !s.ext.Load() {
		return // a plain MoQT publisher does not know the extension
	}
	_ = s.ws.SendDatagram(moqt.AppendKeyframeRequest(nil, &moqt.KeyframeRequest{TrackAlias: alias, GroupSeen: groupSeen}))
}

// --- events and data --------------------------------------------------------

// eventSender receives the room's messages for the local participant.
type eventSender struct{ s *session }

func (e eventSender) Send(m protocol.Message) {
	if m == nil {
		return
	}
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	e.s.pushEvent(b)
	switch m := m.(type) {
	case protocol.ParticipantJoined, protocol.TrackPublished:
		e.s.pokeNamespaces()
	case protocol.TrackUnpublished:
		sid := m.TrackSid
		go e.s.endBridged(func(d *downSub) bool { return d.pubSid == sid }, "track unpublished")
		e.s.pokeNamespaces()
	case protocol.ParticipantLeft:
		sid := m.ParticipantSid
		go e.s.endBridged(func(d *downSub) bool { return d.ownerSid == sid }, "publisher left")
		e.s.pokeNamespaces()
	}
}

// endBridged ends the bridged subscriptions that match with PUBLISH_DONE.
func (s *session) endBridged(match func(*downSub) bool, reason string) {
	s.mu.Lock()
	var ds []*downSub
	for _, d := range s.down {
		if d.pubSid != "" && match(d) {
			ds = append(ds, d)
		}
	}
	s.mu.Unlock()
	for _, d := range ds {
		d.finish(reason)
	}
}

func (e eventSender) Close(code, message string) {
	go e.s.close(moqt.CloseNoError, code+": "+message)
}

func (s *session) pushEvent(b []byte) {
	s.mu.Lock()
	evs := slices.Clone(s.events)
	if len(evs) == 0 && len(s.backlog) < 256 {
		s.backlog = append(s.backlog, b)
	}
	s.mu.Unlock()
	for _, d := range evs {
		d.enqueueEvent(b)
	}
}

func (s *session) attachEvents(d *downSub) error {
	room := s.srv.opt.Manager.Room(s.room)
	var parts []protocol.ParticipantInfo
	if room != nil {
		for _, p := range room.Participants() {
			if p.Identity() != s.identity {
				parts = append(parts, p.Info())
			}
		}
	}
	joined, _ := json.Marshal(map[string]any{"type": "joined", "room": s.room, "identity": s.identity,
		"participantSid": s.part.Sid(), "participants": parts})
	d.enqueueEvent(joined)
	s.mu.Lock()
	for _, b := range s.backlog {
		d.enqueueEvent(b)
	}
	s.backlog = nil
	s.events = append(s.events, d)
	s.mu.Unlock()
	d.onStop = func() {
		s.mu.Lock()
		s.events = slices.DeleteFunc(s.events, func(x *downSub) bool { return x == d })
		s.mu.Unlock()
	}
	return nil
}

// onData forwards a data message addressed to this participant.
func (s *session) onData(reliable bool, h sfu.DataHeader, payload []byte) {
	b, err := json.Marshal(map[string]any{"type": "data", "from": h.From, "fromSid": h.FromSid, "topic": h.Topic,
		"text": h.Text, "reliable": reliable, "payload": payload})
	if err == nil {
		s.pushEvent(b)
	}
}

// dataMessage is one object of a client's data track.
type dataMessage struct {
	Topic   string   `json:"topic"`
	To      []string `json:"to"`
	Text    bool     `json:"text"`
	Payload []byte   `json:"payload"`
}

func (s *session) publishData(obj []byte) {
	if !s.claims.Grants.PublishData {
		return
	}
	var m dataMessage
	if len(obj) > 2*maxDataBytes || json.Unmarshal(obj, &m) != nil || len(m.Payload) > maxDataBytes {
		s.log.Warn("bad data message from webtransport client", "bytes", len(obj))
		return
	}
	s.part.PublishData(true, m.Topic, m.To, m.Payload)
}
