package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/webrtc/v4"
)

// ControllerOptions configure controller mode.
type ControllerOptions struct {
	Bind string    // address peers gather on
	Log  io.Writer // one line per connection event; nil: none
	// MediaIdle is how long a stream may be silent before "media stopped".
	MediaIdle time.Duration
}

// ServeController serves the controller protocol (docs/load.md) on addr until
// ctx ends.
func ServeController(ctx context.Context, addr string, o ControllerOptions) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if o.Log != nil {
		fmt.Fprintf(o.Log, "petrel load: controller on ws://%s/v1/load\n", ln.Addr())
	}
	srv := &http.Server{Handler: NewController(o), ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Controller is the HTTP handler of controller mode: one WebSocket per
// controller, each with its own sources and sessions.
type Controller struct {
	o    ControllerOptions
	lean *Lean
	mu   sync.Mutex
	err  error
	ids  atomic.Int64
}

// NewController returns the handler.
func NewController(o ControllerOptions) *Controller {
	if o.MediaIdle <= 0 {
		o.MediaIdle = time.Second
	}
	return &Controller{o: o}
}

func (c *Controller) api() (*Lean, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lean == nil && c.err == nil {
		c.lean, c.err = NewLean(APIOptions{Bind: c.o.Bind})
	}
	return c.lean, c.err
}

// ServeHTTP upgrades /v1/load to the controller WebSocket.
func (c *Controller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/load" {
		http.Error(w, "the controller protocol is at /v1/load", http.StatusNotFound)
		return
	}
	lean, err := c.api()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	ws.SetReadLimit(1 << 20)
	cc := &ctlConn{ctl: c, ws: ws, lean: lean, sources: map[string]*Source{}, sessions: map[string]*session{}, tot: &Counters{}}
	cc.ctx, cc.cancel = context.WithCancel(r.Context())
	defer cc.close()
	cc.loop()
}

// ctlConn is one controller's connection and everything it created.
type ctlConn struct {
	ctl    *Controller
	ws     *websocket.Conn
	lean   *Lean
	ctx    context.Context
	cancel context.CancelFunc
	wmu    sync.Mutex
	tot    *Counters

	mu         sync.Mutex
	registered string
	sources    map[string]*Source
	sessions   map[string]*session
}

type session struct {
	id     string
	pc     *webrtc.PeerConnection
	peer   *Peer
	hungup atomic.Bool
	done   chan struct{}
}

// request is every field a request may carry.
type request struct {
	Request     string                   `json:"request"`
	Transaction string                   `json:"transaction"`
	Name        string                   `json:"name"`
	Source      *sourceSpec              `json:"source"`
	SourceID    string                   `json:"source_id"`
	Session     string                   `json:"session"`
	Sources     []string                 `json:"sources"`
	Receive     *receiveSpec             `json:"receive"`
	SDP         string                   `json:"sdp"`
	ICERestart  bool                     `json:"ice_restart"`
	Candidate   *webrtc.ICECandidateInit `json:"candidate"`
	ICEServers  []webrtc.ICEServer       `json:"ice_servers"`
}

type sourceSpec struct {
	Kind string `json:"kind"` // video, audio
	Spec string `json:"spec"` // synthetic, a file, rtp:ADDR
	Kbps int    `json:"kbps"`
}

type receiveSpec struct {
	Video int `json:"video"`
	Audio int `json:"audio"`
}

// Error codes of the controller protocol.
const (
	ErrInvalidJSON   = "invalid_json"
	ErrMissing       = "missing_field"
	ErrUnknown       = "unknown_request"
	ErrNotRegistered = "not_registered"
	ErrAlreadyReg    = "already_registered"
	ErrNoSuchSource  = "no_such_source"
	ErrNoSuchSession = "no_such_session"
	ErrBadSource     = "bad_source"
	ErrSDP           = "sdp_error"
	ErrState         = "invalid_state"
	ErrInternal      = "internal"
)

type ctlError struct{ code, reason string }

func (e *ctlError) Error() string { return e.code + ": " + e.reason }

func cerr(code, f string, a ...any) error { return &ctlError{code, fmt.Sprintf(f, a...)} }

func (cc *ctlConn) send(m map[string]any) {
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	cc.wmu.Lock()
	defer cc.wmu.Unlock()
	ctx, cancel := context.WithTimeout(cc.ctx, 5*time.Second)
	defer cancel()
	_ = cc.ws.Write(ctx, websocket.MessageText, b)
}

func (cc *ctlConn) event(ev, sess string, f map[string]any) {
	m := map[string]any{"event": ev}
	if sess != "" {
		m["session"] = sess
	}
	for k, v := range f {
		m[k] = v
	}
	cc.send(m)
}

func (cc *ctlConn) loop() {
	for {
		typ, b, err := cc.ws.Read(cc.ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			cc.send(map[string]any{"response": "error", "error": map[string]any{"code": ErrInvalidJSON, "reason": "binary frames are not accepted"}})
			continue
		}
		var r request
		if err := json.Unmarshal(b, &r); err != nil {
			cc.send(map[string]any{"response": "error", "error": map[string]any{"code": ErrInvalidJSON, "reason": err.Error()}})
			continue
		}
		// Requests run one after another: a controller that wants parallel
		// sessions opens several connections or pipelines per session.
		res, err := cc.handle(&r)
		out := map[string]any{"transaction": r.Transaction}
		if r.Request != "" {
			out["request"] = r.Request
		}
		if err != nil {
			var ce *ctlError
			if !errors.As(err, &ce) {
				ce = &ctlError{ErrInternal, err.Error()}
			}
			out["response"] = "error"
			out["error"] = map[string]any{"code": ce.code, "reason": ce.reason}
		} else {
			out["response"] = "success"
			for k, v := range res {
				out[k] = v
			}
		}
		cc.send(out)
	}
}

func (cc *ctlConn) handle(r *request) (map[string]any, error) {
	if r.Transaction == "" {
		return nil, cerr(ErrMissing, "transaction is required")
	}
	if r.Request == "" {
		return nil, cerr(ErrMissing, "request is required")
	}
	cc.mu.Lock()
	reg := cc.registered
	cc.mu.Unlock()
	if r.Request == "register" {
		if reg != "" {
			return nil, cerr(ErrAlreadyReg, "already registered as %s", reg)
		}
		name := r.Name
		if name == "" {
			name = "controller"
		}
		id := fmt.Sprintf("gen-%d", cc.ctl.ids.Add(1))
		cc.mu.Lock()
		cc.registered = name
		cc.mu.Unlock()
		return map[string]any{"id": id, "version": 1}, nil
	}
	switch r.Request {
	case "add_source", "remove_source", "create_session", "destroy_session", "generate_offer", "handle_offer",
		"generate_answer", "handle_answer", "trickle", "hangup", "get_state":
	default:
		return nil, cerr(ErrUnknown, "unknown request %q", r.Request)
	}
	if reg == "" {
		return nil, cerr(ErrNotRegistered, "register first")
	}
	switch r.Request {
	case "add_source":
		return cc.addSource(r)
	case "remove_source":
		cc.mu.Lock()
		s, ok := cc.sources[r.SourceID]
		delete(cc.sources, r.SourceID)
		cc.mu.Unlock()
		if !ok {
			return nil, cerr(ErrNoSuchSource, "no source %q", r.SourceID)
		}
		s.Stop()
		return nil, nil
	case "create_session":
		return cc.createSession(r)
	case "get_state":
		return cc.state(r)
	}
	s, err := cc.session(r.Session)
	if err != nil {
		return nil, err
	}
	switch r.Request {
	case "destroy_session":
		cc.mu.Lock()
		delete(cc.sessions, s.id)
		cc.mu.Unlock()
		cc.hangup(s, "destroyed")
		cc.event("destroyed", s.id, nil)
		return nil, nil
	case "hangup":
		if s.hungup.Load() {
			return nil, cerr(ErrState, "session %s already hung up", s.id)
		}
		cc.hangup(s, "hangup request")
		return nil, nil
	}
	if s.hungup.Load() {
		return nil, cerr(ErrState, "session %s is hung up", s.id)
	}
	switch r.Request {
	case "generate_offer":
		offer, err := s.pc.CreateOffer(&webrtc.OfferOptions{ICERestart: r.ICERestart})
		if err != nil {
			return nil, cerr(ErrState, "create offer: %v", err)
		}
		if err := s.pc.SetLocalDescription(offer); err != nil {
			return nil, cerr(ErrSDP, "set local offer: %v", err)
		}
		return map[string]any{"sdp": offer.SDP, "type": "offer"}, nil
	case "handle_offer":
		if r.SDP == "" {
			return nil, cerr(ErrMissing, "sdp is required")
		}
		if err := s.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: r.SDP}); err != nil {
			return nil, cerr(ErrSDP, "remote offer: %v", err)
		}
		return nil, nil
	case "generate_answer":
		ans, err := s.pc.CreateAnswer(nil)
		if err != nil {
			return nil, cerr(ErrState, "create answer: %v", err)
		}
		if err := s.pc.SetLocalDescription(ans); err != nil {
			return nil, cerr(ErrSDP, "set local answer: %v", err)
		}
		return map[string]any{"sdp": ans.SDP, "type": "answer"}, nil
	case "handle_answer":
		if r.SDP == "" {
			return nil, cerr(ErrMissing, "sdp is required")
		}
		if err := s.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: r.SDP}); err != nil {
			return nil, cerr(ErrSDP, "remote answer: %v", err)
		}
		return nil, nil
	case "trickle":
		if r.Candidate == nil {
			return nil, nil // end of candidates
		}
		if err := s.pc.AddICECandidate(*r.Candidate); err != nil {
			return nil, cerr(ErrSDP, "candidate: %v", err)
		}
		return nil, nil
	}
	return nil, cerr(ErrUnknown, "unknown request %q", r.Request)
}

func (cc *ctlConn) session(id string) (*session, error) {
	if id == "" {
		return nil, cerr(ErrMissing, "session is required")
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	s, ok := cc.sessions[id]
	if !ok {
		return nil, cerr(ErrNoSuchSession, "no session %q", id)
	}
	return s, nil
}

func (cc *ctlConn) addSource(r *request) (map[string]any, error) {
	if r.Source == nil {
		return nil, cerr(ErrMissing, "source is required")
	}
	if r.Source.Kind != "video" && r.Source.Kind != "audio" {
		return nil, cerr(ErrBadSource, "kind %q: want video or audio", r.Source.Kind)
	}
	if r.Source.Spec == "" || r.Source.Spec == "none" {
		return nil, cerr(ErrBadSource, "spec is required (synthetic, a file, rtp:ADDR)")
	}
	s, err := OpenSource(r.Source.Spec, r.Source.Kind == "audio", r.Source.Kbps)
	if err != nil {
		return nil, cerr(ErrBadSource, "%v", err)
	}
	if (s.Kind == webrtc.RTPCodecTypeAudio) != (r.Source.Kind == "audio") {
		s.Stop()
		return nil, cerr(ErrBadSource, "%s is %s, not %s", r.Source.Spec, s.Kind, r.Source.Kind)
	}
	s.Start()
	id := "src-" + strconv.FormatInt(cc.ctl.ids.Add(1), 10)
	cc.mu.Lock()
	cc.sources[id] = s
	cc.mu.Unlock()
	out := map[string]any{"source_id": id, "codec": s.Codec.MimeType}
	if s.Addr() != "" {
		out["addr"] = s.Addr()
	}
	return out, nil
}

func (cc *ctlConn) createSession(r *request) (map[string]any, error) {
	var srcs []*Source
	cc.mu.Lock()
	for _, id := range r.Sources {
		s, ok := cc.sources[id]
		if !ok {
			cc.mu.Unlock()
			return nil, cerr(ErrNoSuchSource, "no source %q", id)
		}
		srcs = append(srcs, s)
	}
	cc.mu.Unlock()
	id := "s" + strconv.FormatInt(cc.ctl.ids.Add(1), 10)
	peer := NewPeer(id, "session", cc.tot)
	pc, err := cc.lean.NewPCFor(peer, r.ICEServers...)
	if err != nil {
		return nil, cerr(ErrInternal, "peer connection: %v", err)
	}
	s := &session{id: id, pc: pc, peer: peer, done: make(chan struct{})}
	s.peer.Events = func(ev string, f map[string]any) {
		if ev == "hangup" {
			if s.hungup.CompareAndSwap(false, true) {
				cc.event("hangup", id, f)
			}
			return
		}
		cc.event(ev, id, f)
	}
	s.peer.Watch(pc, true)
	pc.OnICECandidate(func(c *webrtc.ICECandidate) {
		if c == nil {
			cc.event("trickle", id, map[string]any{"candidate": map[string]any{"completed": true}})
			return
		}
		cc.event("trickle", id, map[string]any{"candidate": c.ToJSON()})
	})
	for i, src := range srcs {
		snd, err := pc.AddTransceiverFromTrack(src.Track(fmt.Sprintf("%s-%d", id, i), id), webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendrecv})
		if err != nil {
			_ = pc.Close()
			return nil, cerr(ErrInternal, "add track: %v", err)
		}
		s.peer.ReadSenderRTCP(snd.Sender(), src)
	}
	if r.Receive != nil {
		for _, k := range []struct {
			n    int
			kind webrtc.RTPCodecType
		}{{r.Receive.Video, webrtc.RTPCodecTypeVideo}, {r.Receive.Audio, webrtc.RTPCodecTypeAudio}} {
			for j := 0; j < k.n && j < 16; j++ {
				if _, err := pc.AddTransceiverFromKind(k.kind, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
					_ = pc.Close()
					return nil, cerr(ErrInternal, "add transceiver: %v", err)
				}
			}
		}
	}
	cc.mu.Lock()
	cc.sessions[id] = s
	cc.mu.Unlock()
	go cc.watchMedia(s)
	return map[string]any{"session": id}, nil
}

// watchMedia sends "media" events when a received stream starts, and when it
// stops (silent for MediaIdle) or starts again.
func (cc *ctlConn) watchMedia(s *session) {
	tick := time.NewTicker(cc.ctl.o.MediaIdle / 4)
	defer tick.Stop()
	type state struct {
		packets uint64
		at      time.Time
		flowing bool
	}
	seen := map[*streamRx]*state{}
	for {
		select {
		case <-s.done:
			return
		case <-cc.ctx.Done():
			return
		case <-tick.C:
		}
		s.peer.mu.Lock()
		sts := append([]*streamRx(nil), s.peer.streams...)
		s.peer.mu.Unlock()
		now := time.Now()
		for _, st := range sts {
			st.mu.Lock()
			n, kind := st.packets, st.kind
			st.mu.Unlock()
			v := seen[st]
			if v == nil {
				v = &state{at: now}
				seen[st] = v
			}
			if n != v.packets {
				v.packets, v.at = n, now
				if !v.flowing {
					v.flowing = true
					cc.event("media", s.id, map[string]any{"kind": kind, "receiving": true})
				}
			} else if v.flowing && now.Sub(v.at) >= cc.ctl.o.MediaIdle {
				v.flowing = false
				cc.event("media", s.id, map[string]any{"kind": kind, "receiving": false})
			}
		}
	}
}

func (cc *ctlConn) hangup(s *session, reason string) {
	first := s.hungup.CompareAndSwap(false, true)
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	_ = s.pc.Close()
	if first {
		cc.event("hangup", s.id, map[string]any{"reason": reason})
	}
}

func (cc *ctlConn) state(r *request) (map[string]any, error) {
	cc.mu.Lock()
	var list []*session
	if r.Session != "" {
		s, ok := cc.sessions[r.Session]
		if !ok {
			cc.mu.Unlock()
			return nil, cerr(ErrNoSuchSession, "no session %q", r.Session)
		}
		list = append(list, s)
	} else {
		for _, s := range cc.sessions {
			list = append(list, s)
		}
	}
	srcs := make([]string, 0, len(cc.sources))
	for id := range cc.sources {
		srcs = append(srcs, id)
	}
	cc.mu.Unlock()
	sess := make([]map[string]any, 0, len(list))
	for _, s := range list {
		local := ""
		if d := s.pc.LocalDescription(); d != nil {
			local = d.SDP
		}
		sess = append(sess, map[string]any{
			"local_sdp":        local,
			"session":          s.id,
			"ice_state":        s.pc.ICEConnectionState().String(),
			"connection_state": s.pc.ConnectionState().String(),
			"signaling_state":  s.pc.SignalingState().String(),
			"hungup":           s.hungup.Load(),
			"stats":            s.peer.Stats(),
		})
	}
	return map[string]any{"sessions": sess, "sources": srcs}, nil
}

func (cc *ctlConn) close() {
	cc.mu.Lock()
	sess := cc.sessions
	srcs := cc.sources
	cc.sessions, cc.sources = map[string]*session{}, map[string]*Source{}
	cc.mu.Unlock()
	cc.cancel()
	for _, s := range sess {
		select {
		case <-s.done:
		default:
			close(s.done)
		}
		_ = s.pc.Close()
	}
	for _, s := range srcs {
		s.Stop()
	}
	_ = cc.ws.CloseNow()
}
