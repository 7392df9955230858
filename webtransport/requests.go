package webtransport

import (
	"bufio"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	wt "github.com/quic-go/webtransport-go"

	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

// The requests of a relay beyond SUBSCRIBE and PUBLISH_NAMESPACE (session.go):
// SUBSCRIBE_NAMESPACE (which participants publish, as they come and go),
// PUBLISH (a client offers a track without being asked) and FETCH (past objects
// from the relay's cache: a range, or what came before a subscription).

// errDuplicate is the REQUEST_ERROR code for a track published twice.
const errCodeDuplicate = 0x19

// refuse answers a request with REQUEST_ERROR and ends it.
func (s *session) refuse(st *wt.Stream, code uint64, reason string) {
	s.log.Info("request refused", "code", code, "reason", reason)
	s.reply(st, moqt.RequestError{Code: code, Reason: reason})
	_ = st.Close()
}

// --- SUBSCRIBE_NAMESPACE ------------------------------------------------------

// roomNamespaces are the namespaces published in room: petrel/<room>/<identity>
// of every participant with a track (WebRTC, camera, WebTransport), and what
// WebTransport clients announced or PUBLISHed in.
func (srv *Server) roomNamespaces(room string) map[string][]string {
	out := map[string][]string{}
	add := func(ns []string) { out[strings.Join(ns, "\x00")] = ns }
	if r := srv.opt.Manager.Room(room); r != nil {
		for _, p := range r.Participants() {
			if len(p.Publications()) > 0 {
				add([]string{"petrel", room, p.Identity()})
			}
		}
	}
	for _, x := range srv.roomSessions(room) {
		x.mu.Lock()
		for _, ns := range x.namespaces {
			add(ns)
		}
		for _, u := range x.up {
			if u.published {
				add(u.ns)
			}
		}
		x.mu.Unlock()
	}
	return out
}

// namespacesChanged wakes the SUBSCRIBE_NAMESPACE requests of room.
func (srv *Server) namespacesChanged(room string) {
	for _, x := range srv.roomSessions(room) {
		x.pokeNamespaces()
	}
}

func (s *session) pokeNamespaces() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.nsWatch {
		select {
		case w <- struct{}{}:
		default: // already woken
		}
	}
}

func (s *session) handleSubscribeNamespace(st *wt.Stream, br *bufio.Reader, m moqt.SubscribeNamespace) {
	if !s.claims.Grants.Subscribe {
		s.refuse(st, moqt.ErrCodeUnauthorized, "token does not grant subscribe")
		return
	}
	room := []string{"petrel", s.room}
	for i, f := range m.Prefix {
		if i < len(room) && f != room[i] {
			s.refuse(st, moqt.ErrCodeDoesNotExist, "prefix outside this session's room petrel/"+s.room)
			return
		}
	}
	wake := make(chan struct{}, 1)
	s.mu.Lock()
	s.nsWatch = append(s.nsWatch, wake)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.nsWatch = slices.DeleteFunc(s.nsWatch, func(w chan struct{}) bool { return w == wake })
		s.mu.Unlock()
	}()
	if !s.reply(st, moqt.RequestOK{}) {
		return
	}
	s.log.Info("namespaces subscribed", "prefix", strings.Join(m.Prefix, "/"))
	ended := make(chan struct{})
	go func() {
		s.waitEnd(st, br)
		close(ended)
	}()
	sent := map[string][]string{}
	for {
		for k, ns := range s.srv.roomNamespaces(s.room) {
			if _, ok := sent[k]; ok || len(ns) <= len(m.Prefix) || !slices.Equal(ns[:len(m.Prefix)], m.Prefix) {
				continue
			}
			if !s.reply(st, moqt.Namespace{Suffix: ns[len(m.Prefix):]}) {
				return
			}
			sent[k] = ns
		}
		now := s.srv.roomNamespaces(s.room)
		for k, ns := range sent {
			if _, ok := now[k]; ok {
				continue
			}
			if !s.reply(st, moqt.NamespaceDone{Suffix: ns[len(m.Prefix):]}) {
				return
			}
			delete(sent, k)
		}
		select {
		case <-wake:
		case <-ended:
			_ = st.Close()
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// --- PUBLISH -------------------------------------------------------------------

// handlePublish takes a track the client offers: its objects carry the alias
// the client chose. In the client's own petrel/<room>/<identity> namespace a
// media track joins the room like an announced one.
func (s *session) handlePublish(st *wt.Stream, br *bufio.Reader, m moqt.Publish) {
	own := []string{"petrel", s.room, s.identity}
	if !s.claims.Grants.Publish || len(m.Namespace) < 3 || !slices.Equal(m.Namespace[:3], own) {
		s.refuse(st, moqt.ErrCodeUnauthorized, "may only publish in "+strings.Join(own, "/"))
		return
	}
	if m.Track == "" {
		s.refuse(st, moqt.ErrCodeDoesNotExist, "empty track name")
		return
	}
	key := trackKey(m.Namespace, m.Track)
	u := newUpTrack(s, slices.Clone(m.Namespace), m.Track)
	u.alias, u.published, u.st = m.TrackAlias, true, st
	close(u.ready)
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return
	case s.upByAlias[m.TrackAlias] != nil:
		s.mu.Unlock()
		s.close(moqt.CloseDuplicateTrackAlias, "PUBLISH reuses a track alias")
		return
	case s.up[key] != nil:
		s.mu.Unlock()
		s.refuse(st, errCodeDuplicate, "track already published")
		return
	}
	s.up[key] = u
	s.upByAlias[m.TrackAlias] = u
	close(s.aliasWake)
	s.aliasWake = make(chan struct{})
	s.mu.Unlock()
	if len(m.Namespace) == 3 && slices.Contains([]string{"video", "audio", "screen", "screen_audio"}, m.Track) {
		u.bridge.Store(true)
	}
	if !s.reply(st, moqt.PublishOK{Params: moqt.Pairs{{Key: moqt.ParamForward, Int: 1}}}) {
		u.end("publisher gone")
		return
	}
	s.log.Info("track published", "namespace", strings.Join(m.Namespace, "/"), "track", m.Track, "alias", m.TrackAlias)
	s.srv.namespacesChanged(s.room)
	s.waitEnd(st, br) // PUBLISH_DONE, or the stream's end
	u.end("publisher ended the track")
	_ = st.Close()
	s.srv.namespacesChanged(s.room)
}

// --- FETCH -----------------------------------------------------------------------

// downByRequest finds this client's subscription by its SUBSCRIBE's Request ID.
func (s *session) downByRequest(id uint64) *downSub {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.down {
		if d.reqID == id {
			return d
		}
	}
	return nil
}

// handleFetch answers a FETCH from the relay's cache of a track a WebTransport
// or MoQT client publishes (the last groups; bridged WebRTC tracks keep none).
func (s *session) handleFetch(st *wt.Stream, br *bufio.Reader, m moqt.Fetch) {
	if !s.claims.Grants.Subscribe {
		s.refuse(st, moqt.ErrCodeUnauthorized, "token does not grant subscribe")
		return
	}
	if p, ok := m.Params.Get(moqt.ParamGroupOrder); ok && p.Int == 2 {
		s.refuse(st, moqt.ErrCodeNotSupported, "descending FETCH is not supported")
		return
	}
	var u *upTrack
	var start, end moqt.Location // inclusive
	switch m.Type {
	case moqt.FetchStandalone:
		ns := m.Namespace
		if len(ns) < 3 || ns[0] != "petrel" || ns[1] != s.room {
			s.refuse(st, moqt.ErrCodeDoesNotExist, "namespace outside this session's room petrel/"+s.room)
			return
		}
		pub := s.srv.publisherOf(s.room, ns, m.Track)
		if pub == nil {
			s.refuse(st, moqt.ErrCodeDoesNotExist, "no cached track "+m.Track+" (only tracks WebTransport clients publish are cached)")
			return
		}
		var err error
		if u, err = pub.upstream(ns, m.Track, false); err != nil {
			s.refuse(st, moqt.ErrCodeDoesNotExist, err.Error())
			return
		}
		start, end = m.Start, m.End
		if end.Object == 0 {
			end.Object = moqt.MaxVI // the whole end group
		} else {
			end.Object--
		}
	case moqt.FetchRelativeJoining, moqt.FetchAbsoluteJoining:
		d := s.downByRequest(m.JoiningRequestID)
		if d == nil {
			s.refuse(st, moqt.ErrCodeInvalidJoiningRequest, "no subscription with that request id")
			return
		}
		if d.up == nil || !d.hasJoin {
			s.refuse(st, moqt.ErrCodeDoesNotExist, "nothing cached before that subscription")
			return
		}
		u, end = d.up, d.joinAt
		if m.Type == moqt.FetchRelativeJoining {
			start = moqt.Location{Group: end.Group - min(m.JoiningStart, end.Group)}
		} else {
			start = moqt.Location{Group: m.JoiningStart}
		}
	}
	if end.Less(start) {
		s.refuse(st, moqt.ErrCodeInvalidRange, "the range ends before it starts")
		return
	}
	objs := u.cached(start, end)
	if len(objs) == 0 {
		s.refuse(st, moqt.ErrCodeDoesNotExist, "no cached objects in that range")
		return
	}
	last := objs[len(objs)-1]
	if !s.reply(st, moqt.FetchOK{End: moqt.Location{Group: last.group, Object: last.obj + 1}}) {
		return
	}
	// A reset of the request stream cancels the FETCH (its FIN does not: a
	// requester may finish its side right after the request).
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	go func() {
		for {
			if _, err := moqt.ReadMessage(br); err != nil {
				var se *wt.StreamError
				if errors.As(err, &se) {
					cancel()
				}
				return
			}
		}
	}()
	n, err := s.writeFetch(ctx, m.RequestID, objs)
	if err != nil {
		s.log.Info("fetch ended early", "objects", n, "of", len(objs), "err", err)
		st.CancelWrite(0)
		return
	}
	s.log.Info("fetch served", "track", u.name, "objects", n, "from", start, "to", last.group)
	_ = st.Close()
}

// writeFetch sends objs on a FETCH data stream.
func (s *session) writeFetch(ctx context.Context, reqID uint64, objs []outObj) (int, error) {
	octx, ocancel := context.WithTimeout(ctx, requestTimeout)
	ds, err := s.ws.OpenUniStreamSync(octx)
	ocancel()
	if err != nil {
		return 0, err
	}
	stop := context.AfterFunc(ctx, func() { ds.CancelWrite(0) })
	defer stop()
	var enc moqt.FetchEncoder
	buf := moqt.AppendFetchHeader(make([]byte, 0, 2048), reqID)
	for i, o := range objs {
		if buf, err = enc.Append(buf, moqt.Location{Group: o.group, Object: o.obj}, 0, 0, o.ext, o.payload); err != nil {
			ds.CancelWrite(0)
			return i, err
		}
		_ = ds.SetWriteDeadline(time.Now().Add(requestTimeout))
		if _, err := ds.Write(buf); err != nil {
			return i, err
		}
		buf = buf[:0]
	}
	return len(objs), ds.Close()
}
