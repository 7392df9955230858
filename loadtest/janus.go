package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/webrtc/v4"
)

// Janus speaks the Janus WebSocket API (subprotocol janus-protocol). One
// connection carries every session of the generator; replies are matched by
// transaction, plugin events by their transaction too (Janus echoes it).
type Janus struct {
	ws     *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	wmu    sync.Mutex
	mu     sync.Mutex
	wait   map[string]chan map[string]any
	// handles receives unsolicited events per handle (webrtcup, media, hangup).
	handles map[float64]func(map[string]any)
	tx      atomic.Uint64
	done    chan struct{}
}

// DialJanus connects to ws://host:8188.
func DialJanus(ctx context.Context, url string) (*Janus, error) {
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"janus-protocol"}})
	if err != nil {
		return nil, fmt.Errorf("janus %s: %w", url, err)
	}
	ws.SetReadLimit(4 << 20)
	j := &Janus{ws: ws, wait: map[string]chan map[string]any{}, handles: map[float64]func(map[string]any){}, done: make(chan struct{})}
	j.ctx, j.cancel = context.WithCancel(context.Background())
	go j.read()
	return j, nil
}

// Close ends the connection (Janus destroys its sessions after the timeout).
func (j *Janus) Close() {
	j.cancel()
	_ = j.ws.CloseNow()
}

func (j *Janus) read() {
	defer close(j.done)
	for {
		_, b, err := j.ws.Read(j.ctx)
		if err != nil {
			return
		}
		var m map[string]any
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		kind, _ := m["janus"].(string)
		tx, _ := m["transaction"].(string)
		if kind == "ack" {
			continue // the real reply (event) follows with the same transaction
		}
		j.mu.Lock()
		ch := j.wait[tx]
		var h func(map[string]any)
		if ch == nil {
			sender, _ := m["sender"].(float64)
			h = j.handles[sender]
		}
		j.mu.Unlock()
		switch {
		case ch != nil:
			ch <- m
		case h != nil:
			h(m)
		}
	}
}

// call sends m and waits for the reply with its transaction: success, error,
// or the plugin event of an asynchronous message.
func (j *Janus) call(ctx context.Context, m map[string]any) (map[string]any, error) {
	tx := strconv.FormatUint(j.tx.Add(1), 36) + strconv.FormatUint(rand.Uint64()%1e6, 36)
	m["transaction"] = tx
	ch := make(chan map[string]any, 1)
	j.mu.Lock()
	j.wait[tx] = ch
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		delete(j.wait, tx)
		j.mu.Unlock()
	}()
	if err := j.send(ctx, m); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if r["janus"] == "error" {
			e, _ := r["error"].(map[string]any)
			return r, fmt.Errorf("janus %v: %v (%v)", m["janus"], e["reason"], e["code"])
		}
		if pd, ok := r["plugindata"].(map[string]any); ok {
			if d, ok := pd["data"].(map[string]any); ok {
				if e, ok := d["error"]; ok {
					return r, fmt.Errorf("janus plugin: %v (%v)", e, d["error_code"])
				}
			}
		}
		return r, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("janus %v: %w", m["janus"], ctx.Err())
	case <-j.done:
		return nil, errors.New("janus connection closed")
	}
}

func (j *Janus) send(ctx context.Context, m map[string]any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	j.wmu.Lock()
	defer j.wmu.Unlock()
	return j.ws.Write(ctx, websocket.MessageText, b)
}

// JanusHandle is one plugin handle in its own session.
type JanusHandle struct {
	j       *Janus
	session float64
	handle  float64
	stop    chan struct{}
	once    sync.Once
}

// Attach creates a session and attaches plugin; events for the handle go to
// onEvent. A keepalive runs until Detach.
func (j *Janus) Attach(ctx context.Context, plugin string, onEvent func(map[string]any)) (*JanusHandle, error) {
	r, err := j.call(ctx, map[string]any{"janus": "create"})
	if err != nil {
		return nil, err
	}
	sid, _ := r["data"].(map[string]any)["id"].(float64)
	r, err = j.call(ctx, map[string]any{"janus": "attach", "plugin": plugin, "session_id": sid})
	if err != nil {
		return nil, err
	}
	hid, _ := r["data"].(map[string]any)["id"].(float64)
	h := &JanusHandle{j: j, session: sid, handle: hid, stop: make(chan struct{})}
	j.mu.Lock()
	j.handles[hid] = onEvent
	j.mu.Unlock()
	go func() {
		t := time.NewTicker(25 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-j.done:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = j.send(ctx, map[string]any{"janus": "keepalive", "session_id": sid, "transaction": "ka"})
				cancel()
			}
		}
	}()
	return h, nil
}

// Message sends a plugin request (with an optional jsep) and returns the
// plugin data and the jsep of the event that answers it.
func (h *JanusHandle) Message(ctx context.Context, body map[string]any, jsep *webrtc.SessionDescription) (map[string]any, *webrtc.SessionDescription, error) {
	m := map[string]any{"janus": "message", "session_id": h.session, "handle_id": h.handle, "body": body}
	if jsep != nil {
		m["jsep"] = map[string]any{"type": jsep.Type.String(), "sdp": jsep.SDP}
	}
	r, err := h.j.call(ctx, m)
	if err != nil {
		return nil, nil, err
	}
	var data map[string]any
	if pd, ok := r["plugindata"].(map[string]any); ok {
		data, _ = pd["data"].(map[string]any)
	}
	var out *webrtc.SessionDescription
	if js, ok := r["jsep"].(map[string]any); ok {
		sdp, _ := js["sdp"].(string)
		typ := webrtc.SDPTypeAnswer
		if js["type"] == "offer" {
			typ = webrtc.SDPTypeOffer
		}
		out = &webrtc.SessionDescription{Type: typ, SDP: sdp}
	}
	return data, out, nil
}

// Detach destroys the handle's session.
func (h *JanusHandle) Detach() {
	h.once.Do(func() {
		close(h.stop)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, _ = h.j.call(ctx, map[string]any{"janus": "destroy", "session_id": h.session})
		h.j.mu.Lock()
		delete(h.j.handles, h.handle)
		h.j.mu.Unlock()
	})
}

// janusEvents turns Janus's unsolicited events into peer events.
func janusEvents(p *Peer) func(map[string]any) {
	return func(m map[string]any) {
		switch m["janus"] {
		case "hangup":
			p.Fail(fmt.Errorf("janus hangup: %v", m["reason"]))
		case "slowlink":
			p.emit("slowlink", map[string]any{"lost": m["lost"], "uplink": m["uplink"]})
		}
	}
}

// offerGathered creates and applies an offer and waits for every candidate,
// since the generator does not trickle to Janus.
func offerGathered(ctx context.Context, pc *webrtc.PeerConnection) (*webrtc.SessionDescription, error) {
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return nil, err
	}
	g := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		return nil, err
	}
	select {
	case <-g:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return pc.LocalDescription(), nil
}

func answerGathered(ctx context.Context, pc *webrtc.PeerConnection, offer *webrtc.SessionDescription) (*webrtc.SessionDescription, error) {
	if err := pc.SetRemoteDescription(*offer); err != nil {
		return nil, fmt.Errorf("janus offer: %w", err)
	}
	ans, err := pc.CreateAnswer(nil)
	if err != nil {
		return nil, err
	}
	g := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(ans); err != nil {
		return nil, err
	}
	select {
	case <-g:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return pc.LocalDescription(), nil
}

// janusPublish sends srcs on a new peer connection with an offer to handle,
// wrapped in body (EchoTest: {audio,video}; VideoRoom: {request: publish}).
func (r *Runner) janusSendOffer(ctx context.Context, h *JanusHandle, p *Peer, body map[string]any, recv bool) (map[string]any, error) {
	return r.janusOffer(ctx, h, p, body, recv, r.srcs)
}

func (r *Runner) janusOffer(ctx context.Context, h *JanusHandle, p *Peer, body map[string]any, recv bool, srcs []*Source) (map[string]any, error) {
	pc, err := r.lean.NewPCFor(p)
	if err != nil {
		return nil, err
	}
	p.OnClose(func() { _ = pc.Close() })
	p.Watch(pc, true)
	dir := webrtc.RTPTransceiverDirectionSendonly
	if recv {
		dir = webrtc.RTPTransceiverDirectionSendrecv
	}
	for i, s := range srcs {
		t, err := pc.AddTransceiverFromTrack(s.Track(fmt.Sprintf("%s-%d", p.ID, i), p.ID), webrtc.RTPTransceiverInit{Direction: dir})
		if err != nil {
			return nil, err
		}
		p.ReadSenderRTCP(t.Sender(), s)
	}
	offer, err := offerGathered(ctx, pc)
	if err != nil {
		return nil, err
	}
	data, ans, err := h.Message(ctx, body, offer)
	if err != nil {
		return nil, err
	}
	if ans == nil {
		return nil, fmt.Errorf("janus: no answer to the offer (%v)", data)
	}
	return data, pc.SetRemoteDescription(*ans)
}

// janusReceive answers a Janus offer on a new receive-only connection and sends
// start with the answer.
func (r *Runner) janusReceive(ctx context.Context, h *JanusHandle, p *Peer, offer *webrtc.SessionDescription) error {
	pc, err := r.lean.NewPCFor(p)
	if err != nil {
		return err
	}
	p.OnClose(func() { _ = pc.Close() })
	p.Watch(pc, true)
	ans, err := answerGathered(ctx, pc, offer)
	if err != nil {
		return err
	}
	_, _, err = h.Message(ctx, map[string]any{"request": "start"}, ans)
	return err
}

// runJanus drives Janus's EchoTest (echo), VideoRoom (room, stream) plugins.
func (r *Runner) runJanus(ctx context.Context) error {
	c := r.cfg
	j, err := DialJanus(ctx, c.URL)
	if err != nil {
		return err
	}
	r.onClose(j.Close)
	attach := func(ctx context.Context, plugin string, p *Peer) (*JanusHandle, error) {
		h, err := j.Attach(ctx, plugin, janusEvents(p))
		if err != nil {
			return nil, err
		}
		p.OnClose(h.Detach)
		return h, nil
	}
	switch c.Scenario {
	case "echo":
		r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("echo%04d", i), "echo")
			h, err := attach(ctx, "janus.plugin.echotest", p)
			if err != nil {
				return p, err
			}
			_, err = r.janusSendOffer(ctx, h, p, map[string]any{"audio": true, "video": true}, true)
			return p, err
		})
		return nil
	case "mix":
		return r.janusAudioBridge(ctx, attach)
	case "stream":
		if c.JanusStreaming {
			return r.janusStreaming(ctx, j, attach)
		}
		fallthrough
	case "room":
		room := 1000 + rand.IntN(1_000_000)
		admin := r.newPeer("janus-admin", "admin")
		h, err := attach(ctx, "janus.plugin.videoroom", admin)
		if err != nil {
			return err
		}
		if _, _, err := h.Message(ctx, map[string]any{"request": "create", "room": room, "publishers": max(c.Publishers, 1) + 1,
			"videocodec": "vp8", "audiocodec": "opus", "bitrate": 0, "fir_freq": 0, "notify_joining": false}, nil); err != nil {
			return fmt.Errorf("videoroom create: %w", err)
		}
		r.mu.Lock()
		r.peers = r.peers[:len(r.peers)-1] // the admin handle is no peer
		r.mu.Unlock()
		r.onClose(admin.Close)
		pubs := max(c.Publishers, 1)
		if c.Scenario == "stream" {
			pubs = 1
		}
		feeds := make([]float64, pubs)
		r.ramp(ctx, pubs, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("pub%03d", i), "publisher")
			h, err := attach(ctx, "janus.plugin.videoroom", p)
			if err != nil {
				return p, err
			}
			data, _, err := h.Message(ctx, map[string]any{"request": "join", "ptype": "publisher", "room": room, "display": p.ID}, nil)
			if err != nil {
				return p, err
			}
			feeds[i], _ = data["id"].(float64)
			_, err = r.janusSendOffer(ctx, h, p, map[string]any{"request": "publish", "audio": true, "video": true}, false)
			if err == nil {
				err = waitMedia(ctx, p)
			}
			return p, err
		})
		subscribe := func(ctx context.Context, p *Peer, skip float64) error {
			var streams []map[string]any
			for _, f := range feeds {
				if f != 0 && f != skip {
					streams = append(streams, map[string]any{"feed": f})
				}
			}
			if len(streams) == 0 {
				return nil
			}
			h, err := attach(ctx, "janus.plugin.videoroom", p)
			if err != nil {
				return err
			}
			_, offer, err := h.Message(ctx, map[string]any{"request": "join", "ptype": "subscriber", "room": room, "streams": streams}, nil)
			if err != nil {
				return err
			}
			if offer == nil {
				return errors.New("videoroom subscriber: no offer")
			}
			return r.janusReceive(ctx, h, p, offer)
		}
		if c.Scenario == "room" {
			for i, p := range r.allPeers() {
				if i < len(feeds) && p.Role == "publisher" {
					sub := NewPeer(p.ID+"-rx", "publisher-rx", &r.tot)
					r.addPeer(sub)
					sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					sub.Fail(subscribe(sctx, sub, feeds[i]))
					cancel()
				}
			}
		}
		r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
			p := r.newPeer(fmt.Sprintf("sub%04d", i), "subscriber")
			return p, subscribe(ctx, p, 0)
		})
		return nil
	}
	return fmt.Errorf("target janus supports echo, room, stream and mix, not %q", c.Scenario)
}

// janusAudioBridge is mix through the AudioBridge plugin: a room at 48 kHz
// without recording; each peer joins with a sendrecv offer and receives its
// mix (everyone but itself) on the same connection.
func (r *Runner) janusAudioBridge(ctx context.Context, attach func(context.Context, string, *Peer) (*JanusHandle, error)) error {
	c := r.cfg
	admin := NewPeer("janus-admin", "admin", &r.tot)
	r.onClose(admin.Close)
	h, err := attach(ctx, "janus.plugin.audiobridge", admin)
	if err != nil {
		return err
	}
	room := 1000 + rand.IntN(1_000_000)
	if _, _, err := h.Message(ctx, map[string]any{"request": "create", "room": room, "sampling_rate": 48000, "record": false,
		"audiolevel_event": false}, nil); err != nil {
		return fmt.Errorf("audiobridge create: %w", err)
	}
	r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
		p := r.newPeer(fmt.Sprintf("mix%04d", i), "participant")
		src, err := r.mixSource(i)
		if err != nil {
			return p, err
		}
		h, err := attach(ctx, "janus.plugin.audiobridge", p)
		if err != nil {
			return p, err
		}
		_, err = r.janusOffer(ctx, h, p, map[string]any{"request": "join", "room": room, "display": p.ID}, true, []*Source{src})
		return p, err
	})
	return nil
}

// janusStreaming is stream 1→N through the Streaming plugin: the sources are
// sent as plain RTP to a mountpoint the generator creates, and every viewer
// watches it.
func (r *Runner) janusStreaming(ctx context.Context, j *Janus, attach func(context.Context, string, *Peer) (*JanusHandle, error)) error {
	c := r.cfg
	host, _, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(c.URL, "ws://"), "wss://"))
	if err != nil {
		return fmt.Errorf("janus url %q: %w", c.URL, err)
	}
	admin := NewPeer("janus-admin", "admin", &r.tot)
	r.onClose(admin.Close)
	h, err := attach(ctx, "janus.plugin.streaming", admin)
	if err != nil {
		return err
	}
	id := 1 + rand.IntN(1_000_000)
	base := 30000 + 2*rand.IntN(10000)
	var media []map[string]any
	type feed struct {
		src  *Source
		port int
		pt   uint8
	}
	var feeds []feed
	for i, s := range r.srcs {
		m := map[string]any{"mid": strconv.Itoa(i), "port": base + 2*i}
		pt := uint8(96)
		if s.Kind == webrtc.RTPCodecTypeAudio {
			m["type"], m["codec"], m["pt"] = "audio", "opus", 111
			pt = 111
		} else {
			m["type"], m["codec"], m["pt"] = "video", "vp8", 96
		}
		media = append(media, m)
		feeds = append(feeds, feed{s, base + 2*i, pt})
	}
	if _, _, err := h.Message(ctx, map[string]any{"request": "create", "type": "rtp", "id": id, "name": "petrel-load", "media": media}, nil); err != nil {
		return fmt.Errorf("streaming create: %w", err)
	}
	for _, f := range feeds {
		stop, err := f.src.FeedRTP(net.JoinHostPort(host, strconv.Itoa(f.port)), f.pt)
		if err != nil {
			return err
		}
		r.onClose(stop)
	}
	r.ramp(ctx, c.Peers, func(ctx context.Context, i int) (*Peer, error) {
		p := r.newPeer(fmt.Sprintf("viewer%04d", i), "subscriber")
		h, err := attach(ctx, "janus.plugin.streaming", p)
		if err != nil {
			return p, err
		}
		_, offer, err := h.Message(ctx, map[string]any{"request": "watch", "id": id}, nil)
		if err != nil {
			return p, err
		}
		if offer == nil {
			return p, errors.New("streaming watch: no offer")
		}
		return p, r.janusReceive(ctx, h, p, offer)
	})
	return nil
}
