package signal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

const (
	joinTimeout   = 10 * time.Second
	outQueue      = 512
	pingInterval  = 15 * time.Second
	maxRateErrors = 10
	// wsBuffer is the size of a WebSocket's read and write buffers, which it
	// keeps for its lifetime: signaling is a few messages a minute, and a
	// larger message is read and written past the buffer.
	wsBuffer = 1 << 10
)

// wsConn is one client's signaling WebSocket. Reads happen on the handler
// goroutine; writes go through a queue, so that sending never blocks the room.
// The queue is drained by a goroutine that runs only while there is something
// to write (a ping is queued every pingInterval): an idle participant keeps no
// writer goroutine and no queue of its own.
type wsConn struct {
	c      *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex // guards what follows
	queue  []protocol.Message
	ping   bool // a ping is due
	// running: a drain goroutine is on its way; ended: the close frame is
	// written or a write failed, and no drain starts again.
	running, ended bool
	shut           bool // Close was called, or the queue overflowed
	closeC         websocket.StatusCode
	closeR         string
	pinger         *time.Timer
	done           chan struct{} // closed when the writing has finished
}

func newWSConn(c *websocket.Conn) *wsConn {
	// Not the request's context: the writer must outlive the handler long enough
	// to flush a final error and the close frame.
	ctx, cancel := context.WithCancel(context.Background())
	w := &wsConn{c: c, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	w.pinger = time.AfterFunc(pingInterval, w.pingDue)
	return w
}

// Send queues m; a client that lets its queue fill up is disconnected.
func (w *wsConn) Send(m protocol.Message) {
	if m == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shut {
		return
	}
	if len(w.queue) >= outQueue {
		w.closeLocked(websocket.StatusPolicyViolation, "slow_client")
		return
	}
	w.queue = append(w.queue, m)
	w.kickLocked()
}

// Close ends the connection after what is queued has been written.
func (w *wsConn) Close(code, message string) {
	status := websocket.StatusNormalClosure
	switch code {
	case protocol.CodeTooLarge:
		status = websocket.StatusMessageTooBig
	case protocol.CodeUnauthorized, protocol.CodeTokenExpired, protocol.CodeProtocolVersion, protocol.CodeNotJoined, protocol.CodeJoinTimeout, protocol.CodeRateLimited, "slow_client":
		status = websocket.StatusPolicyViolation
	case protocol.CodeServerBusy:
		status = websocket.StatusTryAgainLater
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closeLocked(status, code)
}

func (w *wsConn) closeLocked(status websocket.StatusCode, code string) {
	if !w.shut {
		w.closeC, w.closeR = status, code
		w.shut = true
		w.kickLocked()
	}
}

func (w *wsConn) pingDue() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.shut {
		w.ping = true
		w.kickLocked()
	}
}

// kickLocked starts a drain unless one runs or the writing has ended.
func (w *wsConn) kickLocked() {
	if !w.running && !w.ended {
		w.running = true
		go w.drain()
	}
}

// drain writes what is queued and returns when the queue is empty; after
// Close it writes the close frame, and after a failed write (the client is
// gone) it stops the reader too.
func (w *wsConn) drain() {
	for {
		w.mu.Lock()
		msgs, ping, shut := w.queue, w.ping, w.shut
		w.queue, w.ping = nil, false
		if len(msgs) == 0 && !ping && !shut {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		ok := true
		for _, m := range msgs {
			b, err := json.Marshal(m)
			if err != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
			err = w.c.Write(ctx, websocket.MessageText, b)
			cancel()
			if ok = err == nil; !ok {
				break
			}
		}
		if ok && ping {
			ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
			ok = w.c.Ping(ctx) == nil
			cancel()
			if ok {
				w.pinger.Reset(pingInterval)
			}
		}
		if ok && shut && len(msgs) == 0 && !ping {
			// Everything queued before Close has been written.
			_ = w.c.Close(w.closeC, w.closeR)
		} else if ok {
			continue
		}
		w.mu.Lock()
		w.ended, w.running, w.shut, w.queue = true, false, true, nil
		w.mu.Unlock()
		w.pinger.Stop()
		w.cancel()
		close(w.done)
		return
	}
}

// smallBuffers gives websocket.Accept the hijacked connection with wsBuffer
// buffers instead of net/http's 4 KiB ones.
type smallBuffers struct{ http.ResponseWriter }

func (s smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	// What the client sent after the request and net/http read ahead goes
	// into the new reader's buffer first.
	n := brw.Reader.Buffered()
	var in io.Reader = conn
	if n > 0 {
		b, _ := brw.Reader.Peek(n)
		in = io.MultiReader(bytes.NewReader(bytes.Clone(b)), conn)
	}
	br := bufio.NewReaderSize(in, max(wsBuffer, n))
	if n > 0 {
		if _, err := br.Peek(n); err != nil {
			_ = conn.Close()
			return nil, nil, err
		}
	}
	return conn, bufio.NewReadWriter(br, bufio.NewWriterSize(conn, wsBuffer)), nil
}

func (s *Server) serveWS(rw http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(smallBuffers{rw}, r, &websocket.AcceptOptions{
		// Authentication is by token in the join message, not by origin: any
		// page holding a valid token may connect.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return
	}
	// The connection is hijacked: it is read on a goroutine of its own and
	// this one ends, with the stack that reading the HTTP request grew.
	go s.readWS(c, r)
}

// readWS reads one client's signaling messages for as long as it is connected.
// It lives as long as the participant, so its stack stays small: requests
// are handled on goroutines of their own (onOwnStack).
func (s *Server) readWS(c *websocket.Conn, r *http.Request) {
	limit := s.cfg.Limits.MaxMessageBytes
	c.SetReadLimit(int64(4 * limit))
	w := newWSConn(c)
	ctx, cancel := w.ctx, w.cancel
	defer func() {
		w.Close("", "")
		select {
		case <-w.done:
		case <-time.After(5 * time.Second):
		}
		cancel()
		_ = c.CloseNow()
	}()
	log := s.log.With("remote", r.RemoteAddr)

	fail := func(id *int64, err error) {
		metrics.SignalErrors.WithLabelValues(protocol.CodeOf(err)).Inc()
		w.Send(protocol.ErrorMsg(id, err))
	}

	var p *sfu.Participant
	// A client closed for breaking the rules leaves at once; one that merely lost
	// its connection is kept for the resume window.
	var violation string
	defer func() {
		switch {
		case p == nil:
		case violation != "":
			p.Close(violation)
		default:
			p.Detach(w, s.cfg.RTC.ResumeWindow)
		}
	}()
	limiter := rate.NewLimiter(rate.Limit(s.cfg.Limits.MessagesPerSecond), 2*s.cfg.Limits.MessagesPerSecond)
	rateErrors := 0
	joinDeadline := time.AfterFunc(joinTimeout, func() {
		fail(nil, protocol.Errorf(protocol.CodeJoinTimeout, "no join within %s", joinTimeout))
		w.Close(protocol.CodeJoinTimeout, "join timeout")
	})
	defer joinDeadline.Stop()

	respond := func(p *sfu.Participant, req *protocol.Request) {
		onOwnStack(func() {
			if reply, err := s.handle(p, req); err != nil {
				if protocol.CodeOf(err) == protocol.CodeInternal {
					log.Error("request failed", "type", req.Type, "err", err)
				} else {
					log.Info("request refused", "type", req.Type, "err", err)
				}
				fail(req.ID, err)
			} else {
				w.Send(reply)
			}
		})
	}

	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusMessageTooBig || errors.Is(err, websocket.ErrMessageTooBig) {
				log.Warn("signaling message over the read limit")
			}
			return
		}
		if len(b) > limit {
			if p == nil {
				s.refused.Note("ws", r, protocol.Errorf(protocol.CodeTooLarge, "first message of %d bytes", len(b)))
			} else {
				log.Warn("signaling message too large", "bytes", len(b))
			}
			fail(nil, protocol.Errorf(protocol.CodeTooLarge, "message of %d bytes is over the %d-byte limit", len(b), limit))
			w.Close(protocol.CodeTooLarge, "message too large")
			violation = protocol.CodeTooLarge
			return
		}
		if !limiter.Allow() {
			rateErrors++
			fail(nil, protocol.Errorf(protocol.CodeRateLimited, "more than %d messages per second", s.cfg.Limits.MessagesPerSecond))
			if rateErrors >= maxRateErrors {
				log.Warn("signaling flood, closing")
				w.Close(protocol.CodeRateLimited, "message flood")
				violation = protocol.CodeRateLimited
				return
			}
			continue
		}
		rateErrors = 0
		if typ != websocket.MessageText {
			fail(nil, protocol.Errorf(protocol.CodeBadRequest, "binary frames are not part of the protocol"))
			continue
		}
		var req *protocol.Request
		onOwnStack(func() { req, err = protocol.Parse(b) })
		if err != nil {
			var id *int64
			if req != nil {
				id = req.ID
			}
			if p == nil {
				s.refused.Note("ws", r, err)
			} else {
				log.Info("bad signaling message", "err", err)
			}
			fail(id, err)
			if p == nil && protocol.CodeOf(err) == protocol.CodeUnauthorized {
				w.Close(protocol.CodeUnauthorized, "no token")
				return
			}
			continue
		}
		if p == nil {
			if req.Type != "join" {
				fail(req.ID, protocol.Errorf(protocol.CodeNotJoined, "the first message must be join"))
				w.Close(protocol.CodeNotJoined, "not joined")
				return
			}
			joinDeadline.Stop()
			onOwnStack(func() { p, err = s.join(r, w, req.ID, req.Msg.(protocol.Join)) })
			if err != nil {
				metrics.Joins.WithLabelValues(protocol.CodeOf(err)).Inc()
				if protocol.CodeOf(err) == protocol.CodeInternal {
					log.Error("join failed", "err", err)
				} else {
					s.refused.Note("ws", r, err)
				}
				fail(req.ID, err)
				w.Close(protocol.CodeOf(err), "join refused")
				return
			}
			metrics.Joins.WithLabelValues("ok").Inc()
			continue
		}
		if req.Type == "leave" {
			w.Close("", "leave")
			p.Close("left")
			p = nil
			return
		}
		if rel, ok := req.Msg.(protocol.Relay); ok {
			rel.Data = s.directICE(r, p, rel.To, rel.Data) // direct.go
			req.Msg = rel
		}
		respond(p, req)
	}
}

// onOwnStack runs f on a goroutine of its own and waits for it: handling a
// request (SDP, negotiation) runs deep, and on readWS's goroutine that depth
// would stay as a grown stack for the participant's lifetime.
func onOwnStack(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

func (s *Server) join(r *http.Request, w *wsConn, id *int64, req protocol.Join) (*sfu.Participant, error) {
	if req.Protocol != protocol.Version {
		return nil, protocol.Errorf(protocol.CodeProtocolVersion, "this server speaks protocol %d, not %d", protocol.Version, req.Protocol)
	}
	// The token first: it costs an HMAC, and a garbage one spends no budget.
	claims, err := s.verify(req.Token)
	if err != nil {
		return nil, err
	}
	if claims.Room == "" {
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "the token names no room")
	}
	if err := s.Admit(r); err != nil {
		return nil, err
	}
	var p *sfu.Participant
	resumed := false
	if req.Resume != nil {
		p, err = s.mgr.Resume(claims, req.Resume.ParticipantSid, req.Resume.ResumeToken)
		if err != nil {
			return nil, err
		}
		resumed = true
	} else {
		auto := req.AutoSubscribe == nil || *req.AutoSubscribe
		p, err = s.mgr.Join(claims, sfu.JoinOptions{Name: req.Name, Metadata: req.Metadata, AutoSubscribe: auto}, w)
		if err != nil {
			return nil, err
		}
	}
	others := []protocol.ParticipantInfo{}
	for _, q := range p.Room().Participants() {
		if q != p {
			others = append(others, q.Info())
		}
	}
	joined := protocol.Joined{
		ID: id, Protocol: protocol.Version,
		Room: p.Room().Info(), Participant: p.Info(), Participants: others,
		IceServers: s.iceServers(r, claims.Identity(), claims.Grants), ResumeToken: p.ResumeToken(), Resumed: resumed,
	}
	if s.wtInfo != nil {
		joined.WebTransport = s.wtInfo(r.Host)
	}
	w.Send(joined)
	if resumed {
		p.Attach(w)
	} else {
		p.Start()
	}
	return p, nil
}

// handle answers one request of a joined participant.
func (s *Server) handle(p *sfu.Participant, r *protocol.Request) (protocol.Message, error) {
	ok := protocol.Reply(r.ID, nil)
	switch m := r.Msg.(type) {
	case protocol.Join:
		return nil, protocol.Errorf(protocol.CodeBadRequest, "already joined")
	case protocol.Offer:
		if len(m.SDP) > s.cfg.Limits.MaxSDPBytes {
			return nil, protocol.Errorf(protocol.CodeTooLarge, "SDP over %d bytes", s.cfg.Limits.MaxSDPBytes)
		}
		sdp, err := p.HandleOffer(m.SDP)
		if err != nil {
			return nil, err
		}
		return protocol.Answer{ID: r.ID, SDP: sdp}, nil
	case protocol.Answer:
		if len(m.SDP) > s.cfg.Limits.MaxSDPBytes {
			return nil, protocol.Errorf(protocol.CodeTooLarge, "SDP over %d bytes", s.cfg.Limits.MaxSDPBytes)
		}
		return ok, p.HandleAnswer(m.SDP)
	case protocol.Trickle:
		return ok, p.AddCandidate(string(m.Target), m.Candidate)
	case protocol.PublishTrack:
		ti, err := p.PublishTrack(&m)
		if err != nil {
			return nil, err
		}
		return protocol.Reply(r.ID, &protocol.Response{Track: &ti}), nil
	case protocol.UnpublishTrack:
		return ok, p.UnpublishTrack(m.TrackSid)
	case protocol.MuteTrack:
		return ok, p.MuteTrack(m.TrackSid, *m.Muted)
	case protocol.Subscribe:
		return ok, p.SetSubscribed(m.TrackSids, *m.Subscribe)
	case protocol.Relay:
		return ok, p.Relay(m.To, m.Data)
	case protocol.SetLastN:
		p.SetLastN(*m.N)
		return ok, nil
	case protocol.Pin:
		p.Pin(m.ParticipantSids)
		return ok, nil
	case protocol.SetMaxBitrate:
		p.SetMaxBitrate(*m.Bitrate)
		return ok, nil
	case protocol.UpdateTrackSettings:
		return ok, p.UpdateTrackSettings(&m)
	case protocol.UpdateMetadata:
		p.UpdateMetadata(m.Name, m.Metadata)
		return ok, nil
	case protocol.StartRecording, protocol.StopRecording:
		rec, err := p.Record(r.Type == "startRecording")
		if err != nil {
			return nil, err
		}
		return protocol.Reply(r.ID, &protocol.Response{Recording: &rec}), nil
	case protocol.RestartICE:
		p.RestartICE()
		return ok, nil
	case protocol.Ping:
		return protocol.Pong{ID: r.ID, T: m.T, ServerTime: time.Now().UnixMilli()}, nil
	}
	return nil, protocol.Errorf(protocol.CodeUnknownType, "unknown message type %q", r.Type)
}
