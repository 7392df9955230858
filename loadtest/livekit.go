package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/webrtc/v4"
	"google.golang.org/protobuf/encoding/protowire"
)

// LiveKit reaches a LiveKit server by its client signalling: protobuf
// SignalRequest/SignalResponse messages over a WebSocket at /rtc, a JWT with
// a video grant signed with the API secret, and two peer connections per
// participant (publisher: the client offers; subscriber: the server offers).
type LiveKit struct {
	Base      string // http://127.0.0.1:7880
	APIKey    string
	APISecret string
	Lean      *Lean
}

// LiveKit's development mode key pair (livekit-server --dev).
const (
	LiveKitDevKey    = "devkey"
	LiveKitDevSecret = "secret"
)

// lkProtocol is the signalling protocol version the client claims: the
// LiveKit JS SDK's at LiveKit 1.13.
const lkProtocol = "16"

// Token is a LiveKit access token for identity in room: it may subscribe,
// and publish if publish is set.
func (t *LiveKit) Token(room, identity string, publish bool) (string, error) {
	now := time.Now()
	c := jwt.MapClaims{
		"iss": t.APIKey, "sub": identity, "name": identity,
		"nbf": now.Add(-10 * time.Second).Unix(), "exp": now.Add(6 * time.Hour).Unix(),
		"video": map[string]any{"roomJoin": true, "room": room, "canPublish": publish, "canSubscribe": true, "canPublishData": true},
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(t.APISecret))
}

func (t *LiveKit) wsURL(token string) string {
	u := strings.Replace(t.Base, "http://", "ws://", 1)
	u = strings.Replace(u, "https://", "wss://", 1)
	q := url.Values{
		"access_token":    {token},
		"auto_subscribe":  {"0"}, // the scenario subscribes, as against Petrel
		"adaptive_stream": {"0"},
		"protocol":        {lkProtocol},
		"sdk":             {"go"},
		"version":         {"petrel-load"},
	}
	return strings.TrimSuffix(u, "/") + "/rtc?" + q.Encode()
}

// LKParticipant is one participant in a LiveKit room.
type LKParticipant struct {
	Peer *Peer

	lean        *Lean
	publishOnly bool
	ws          *websocket.Conn
	ctx         context.Context
	cancel      context.CancelFunc
	wmu         sync.Mutex
	done        chan struct{}
	closeOnce   sync.Once

	mu        sync.Mutex
	pub, sub  *webrtc.PeerConnection
	published map[string]chan string // cid → track sid
	answers   chan *lkResponse
	retries   map[string]int // per track sid

	// Used by the reader goroutine only.
	pending [2][]webrtc.ICECandidateInit // per target, until its remote description is set
}

// Join connects p to room. A publishOnly peer's setup times are its
// publisher connection's; other peers' are their subscriber connection's.
func (t *LiveKit) Join(ctx context.Context, room string, p *Peer, publishOnly bool) (*LKParticipant, error) {
	tok, err := t.Token(room, p.ID, p.Role != "subscriber")
	if err != nil {
		return nil, err
	}
	ws, _, err := websocket.Dial(ctx, t.wsURL(tok), nil)
	if err != nil {
		return nil, fmt.Errorf("livekit join %s as %s: %w", room, p.ID, err)
	}
	ws.SetReadLimit(4 << 20)
	lp := &LKParticipant{Peer: p, lean: t.Lean, publishOnly: publishOnly, ws: ws, done: make(chan struct{}),
		published: map[string]chan string{}, answers: make(chan *lkResponse, 1)}
	lp.ctx, lp.cancel = context.WithCancel(context.Background())
	p.OnClose(lp.Close)
	join, err := lp.read(ctx)
	if err != nil {
		close(lp.done)
		return nil, fmt.Errorf("livekit join %s as %s: %w", room, p.ID, err)
	}
	if join.kind != lkResJoin {
		close(lp.done)
		return nil, fmt.Errorf("livekit join %s as %s: first message is field %d, not join (leave reason %d)", room, p.ID, join.kind, join.reason)
	}
	go lp.readLoop()
	go lp.pinger(join.pingInterval)
	return lp, nil
}

func (lp *LKParticipant) read(ctx context.Context) (*lkResponse, error) {
	for {
		typ, b, err := lp.ws.Read(ctx)
		if err != nil {
			return nil, err
		}
		if typ != websocket.MessageBinary {
			continue
		}
		r, err := parseLKResponse(b)
		if errors.Is(err, errLKEmpty) {
			continue
		}
		return r, err
	}
}

func (lp *LKParticipant) send(field protowire.Number, msg []byte) error {
	ctx, cancel := context.WithTimeout(lp.ctx, 5*time.Second)
	defer cancel()
	lp.wmu.Lock()
	defer lp.wmu.Unlock()
	return lp.ws.Write(ctx, websocket.MessageBinary, lkRequest(field, msg))
}

// Close leaves the room and closes both connections.
func (lp *LKParticipant) Close() {
	lp.closeOnce.Do(func() {
		_ = lp.send(lkReqLeave, lkLeave(lkClientInitiated))
		lp.cancel()
		_ = lp.ws.CloseNow()
		<-lp.done
		lp.mu.Lock()
		pcs := []*webrtc.PeerConnection{lp.pub, lp.sub}
		lp.mu.Unlock()
		for _, pc := range pcs {
			if pc != nil {
				_ = pc.Close()
			}
		}
	})
}

// pinger keeps the signalling session alive (the server drops a client that
// has not pinged within its ping timeout).
func (lp *LKParticipant) pinger(interval int) {
	if interval <= 0 {
		interval = 5
	}
	t := time.NewTicker(time.Duration(interval) * time.Second)
	defer t.Stop()
	for {
		select {
		case <-lp.ctx.Done():
			return
		case <-t.C:
			_ = lp.send(lkReqPing, lkPing(time.Now().UnixMilli(), 0))
		}
	}
}

func (lp *LKParticipant) readLoop() {
	defer close(lp.done)
	p := lp.Peer
	for {
		r, err := lp.read(lp.ctx)
		if err != nil {
			if lp.ctx.Err() == nil {
				p.Fail(fmt.Errorf("livekit signalling: %w", err))
			}
			return
		}
		switch r.kind {
		case lkResOffer:
			p.Fail(lp.answer(r))
		case lkResAnswer:
			lp.mu.Lock()
			pc := lp.pub
			lp.mu.Unlock()
			if pc == nil {
				p.Fail(errors.New("livekit: an answer before any offer"))
				continue
			}
			if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: r.sdp}); err != nil {
				p.Fail(fmt.Errorf("livekit answer: %w", err))
				continue
			}
			lp.flush(lkTargetPublisher, pc)
			select {
			case lp.answers <- r:
			default:
			}
		case lkResTrickle:
			lp.trickle(r)
		case lkResTrackPublished:
			lp.mu.Lock()
			ch := lp.published[r.cid]
			lp.mu.Unlock()
			if ch != nil {
				select {
				case ch <- r.trackSid:
				default:
				}
			}
		case lkResLeave:
			p.Fail(fmt.Errorf("livekit: the server sent leave (reason %d, action %d)", r.reason, r.action))
			p.emit("hangup", map[string]any{"reason": fmt.Sprintf("leave reason %d", r.reason)})
		case lkResSubscription:
			if r.subErr != 0 {
				lp.resubscribe(r)
			}
		case lkResRequest:
			if r.reason != 0 {
				p.Fail(fmt.Errorf("livekit: request refused (reason %d): %s", r.reason, r.message))
			}
		}
	}
}

// answer answers a subscriber offer with every candidate in the SDP (the
// generator's peers have one host candidate; the server trickles its own).
func (lp *LKParticipant) answer(r *lkResponse) error {
	lp.mu.Lock()
	pc := lp.sub
	lp.mu.Unlock()
	if pc == nil {
		var err error
		if pc, err = lp.lean.NewPCFor(lp.Peer); err != nil {
			return err
		}
		lp.Peer.Watch(pc, !lp.publishOnly)
		lp.mu.Lock()
		lp.sub = pc
		lp.mu.Unlock()
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: r.sdp}); err != nil {
		return fmt.Errorf("livekit subscriber offer: %w", err)
	}
	lp.flush(lkTargetSubscriber, pc)
	ans, err := pc.CreateAnswer(nil)
	if err != nil {
		return fmt.Errorf("livekit subscriber answer: %w", err)
	}
	g := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(ans); err != nil {
		return fmt.Errorf("livekit subscriber answer: %w", err)
	}
	select {
	case <-g:
	case <-time.After(10 * time.Second):
		return errors.New("livekit subscriber answer: gathering did not complete")
	case <-lp.ctx.Done():
		return nil
	}
	return lp.send(lkReqAnswer, lkSessionDescription("answer", pc.LocalDescription().SDP, r.sdpID))
}

// flush adds the candidates that came before pc's remote description.
func (lp *LKParticipant) flush(target int, pc *webrtc.PeerConnection) {
	for _, c := range lp.pending[target] {
		if err := pc.AddICECandidate(c); err != nil {
			lp.Peer.Fail(fmt.Errorf("livekit candidate: %w", err))
		}
	}
	lp.pending[target] = nil
}

func (lp *LKParticipant) trickle(r *lkResponse) {
	if r.target != lkTargetPublisher && r.target != lkTargetSubscriber {
		return
	}
	var c webrtc.ICECandidateInit
	if err := json.Unmarshal([]byte(r.candidate), &c); err != nil || c.Candidate == "" {
		return // end of candidates
	}
	lp.mu.Lock()
	pc := lp.pub
	if r.target == lkTargetSubscriber {
		pc = lp.sub
	}
	lp.mu.Unlock()
	if pc == nil || pc.RemoteDescription() == nil {
		lp.pending[r.target] = append(lp.pending[r.target], c)
		return
	}
	if err := pc.AddICECandidate(c); err != nil {
		lp.Peer.Fail(fmt.Errorf("livekit candidate: %w", err))
	}
}

// Publish announces srcs (AddTrackRequest, as a client does before it
// negotiates), sends them on the publisher connection and returns their
// track sids.
func (lp *LKParticipant) Publish(ctx context.Context, srcs ...*Source) ([]string, error) {
	p := lp.Peer
	pc, err := lp.lean.NewPCFor(p)
	if err != nil {
		return nil, err
	}
	p.Watch(pc, lp.publishOnly)
	lp.mu.Lock()
	lp.pub = pc
	lp.mu.Unlock()
	var sids []string
	for i, s := range srcs {
		cid := fmt.Sprintf("%s-%d", p.ID, i)
		typ, src, w, h := lkTrackVideo, lkSourceCamera, 640, 360 // the synthetic source's size
		if s.Kind == webrtc.RTPCodecTypeAudio {
			typ, src, w, h = lkTrackAudio, lkSourceMicrophone, 0, 0
		}
		ch := make(chan string, 1)
		lp.mu.Lock()
		lp.published[cid] = ch
		lp.mu.Unlock()
		if err := lp.send(lkReqAddTrack, lkAddTrack(cid, s.Name, typ, w, h, src)); err != nil {
			return nil, err
		}
		select {
		case sid := <-ch:
			sids = append(sids, sid)
		case <-ctx.Done():
			return nil, fmt.Errorf("livekit add track %s: %w", cid, ctx.Err())
		case <-lp.done:
			return nil, fmt.Errorf("livekit add track %s: signalling closed (%s)", cid, p.Failed())
		}
		t, err := pc.AddTransceiverFromTrack(s.Track(cid, p.ID), webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly})
		if err != nil {
			return nil, err
		}
		p.ReadSenderRTCP(t.Sender(), s)
	}
	offer, err := offerGathered(ctx, pc)
	if err != nil {
		return nil, err
	}
	if err := lp.send(lkReqOffer, lkSessionDescription("offer", offer.SDP, 1)); err != nil {
		return nil, err
	}
	select {
	case <-lp.answers:
		return sids, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("livekit publisher offer: no answer: %w", ctx.Err())
	case <-lp.done:
		return nil, fmt.Errorf("livekit publisher offer: signalling closed (%s)", p.Failed())
	}
}

// Subscribe asks for sids at full quality, as a LiveKit client with adaptive
// stream off does: UpdateSubscription, then UpdateTrackSettings for the
// highest layer at the publisher's size.
func (lp *LKParticipant) Subscribe(sids []string) error {
	if len(sids) == 0 {
		return nil
	}
	if err := lp.send(lkReqSubscription, lkUpdateSubscription(sids, true)); err != nil {
		return err
	}
	return lp.send(lkReqTrackSetting, lkUpdateTrackSettings(sids, lkQualityHigh, 640, 360))
}

// lkMaxResubscribe bounds the retries of a track's subscription that the
// server could not resolve yet (a track is found once its media has arrived).
const lkMaxResubscribe = 25

func (lp *LKParticipant) resubscribe(r *lkResponse) {
	lp.mu.Lock()
	if lp.retries == nil {
		lp.retries = map[string]int{}
	}
	lp.retries[r.trackSid]++
	n := lp.retries[r.trackSid]
	lp.mu.Unlock()
	if r.subErr != 2 || n > lkMaxResubscribe { // SE_TRACK_NOTFOUND
		lp.Peer.Fail(fmt.Errorf("livekit: subscription to %s failed (error %d)", r.trackSid, r.subErr))
		return
	}
	go func() {
		if sleepCtx(lp.ctx, 200*time.Millisecond) {
			_ = lp.Subscribe([]string{r.trackSid})
		}
	}()
}

// runLiveKit drives the stream and room scenarios against a LiveKit server.
func (r *Runner) runLiveKit(ctx context.Context) error {
	c := r.cfg
	t := &LiveKit{Base: strings.TrimSuffix(c.URL, "/"), APIKey: c.APIKey, APISecret: c.Secret, Lean: r.lean}
	switch c.Scenario {
	case "stream":
		p := r.newPeer("publisher", "publisher")
		pp, err := t.Join(ctx, c.Room, p, true)
		if err != nil {
			return err
		}
		sids, err := pp.Publish(ctx, r.srcs...)
		if err != nil {
			return fmt.Errorf("publisher: %w", err)
		}
		if err := waitMedia(ctx, p); err != nil {
			return err
		}
		r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("viewer%04d", i), "subscriber")
			sp, err := t.Join(ctx, c.Room, p, false)
			if err != nil {
				return p, err
			}
			return p, sp.Subscribe(sids)
		})
		return nil
	case "room":
		pubs := make([]*LKParticipant, c.Publishers)
		own := make([][]string, c.Publishers)
		r.ramp(ctx, c.Publishers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("pub%03d", i), "publisher")
			pp, err := t.Join(ctx, c.Room, p, false)
			if err != nil {
				return p, err
			}
			sids, err := pp.Publish(ctx, r.srcs...)
			if err != nil {
				return p, err
			}
			pubs[i], own[i] = pp, sids
			return p, nil
		})
		var all []string
		for _, s := range own {
			all = append(all, s...)
		}
		// Every publisher receives every other publisher.
		for i, pp := range pubs {
			if pp == nil {
				continue
			}
			var others []string
			for j, s := range own {
				if j != i {
					others = append(others, s...)
				}
			}
			pp.Peer.Fail(pp.Subscribe(others))
		}
		r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("sub%04d", i), "subscriber")
			sp, err := t.Join(ctx, c.Room, p, false)
			if err != nil {
				return p, err
			}
			return p, sp.Subscribe(all)
		})
		return nil
	}
	return fmt.Errorf("target livekit supports the room and stream scenarios, not %q", c.Scenario)
}

// LiveKitBinary is the livekit-server to run: $PETREL_LIVEKIT_BIN when set,
// else shared/peers/livekit/livekit-server in the folder that holds the
// checkout (found by walking up from the working directory to go.mod). ""
// if that file is absent.
func LiveKitBinary() string {
	if b := os.Getenv("PETREL_LIVEKIT_BIN"); b != "" {
		if _, err := os.Stat(b); err != nil {
			return ""
		}
		return b
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			b := filepath.Join(filepath.Dir(dir), "shared", "peers", "livekit", "livekit-server")
			if _, err := os.Stat(b); err == nil {
				return b
			}
			return ""
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}
