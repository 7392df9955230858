// Package client is a Go client of the Petrel room protocol (docs/protocol.md),
// built on Pion. The integration tests, the benchmarks and the load generator use
// it; it is also a reference for writing clients in other languages.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/rtc"
	"github.com/petrel-sfu/petrel/sfu"
)

// Options tune a client.
type Options struct {
	Name          string
	Metadata      string
	AutoSubscribe *bool
	// API builds the peer connections; nil means LoopbackAPI().
	API *webrtc.API
	// Relay forces TURN (iceTransportPolicy relay).
	Relay bool
	// TURNTransport keeps only the TURN URLs of one transport ("udp" or "tcp").
	TURNTransport string
}

// LoopbackAPI is a Pion API that gathers on 127.0.0.1 only, for tests and
// benchmarks on one machine.
func LoopbackAPI(tune ...func(*webrtc.SettingEngine)) *webrtc.API {
	var se webrtc.SettingEngine
	rtc.OnlyAddress(&se, net.IPv4(127, 0, 0, 1))
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	// As browsers do: a track exists once negotiated, even if no packet has come
	// (a paused subscription, a muted publisher).
	se.SetFireOnTrackBeforeFirstRTP(true)
	for _, f := range tune {
		f(&se)
	}
	m := &webrtc.MediaEngine{}
	if err := rtc.RegisterCodecs(m); err != nil {
		panic(err)
	}
	ir := &interceptor.Registry{}
	if err := webrtc.RegisterDefaultInterceptors(m, ir); err != nil {
		panic(err)
	}
	return webrtc.NewAPI(webrtc.WithSettingEngine(se), webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(ir))
}

// Track is a remote track received on the subscriber connection.
type Track struct {
	Remote         *webrtc.TrackRemote
	Receiver       *webrtc.RTPReceiver
	ParticipantSid string
	TrackSid       string
}

// Data is a room data message received.
type Data struct {
	Header   sfu.DataHeader
	Payload  []byte
	Reliable bool
}

// Client is one participant.
type Client struct {
	ws     *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	Pub    *webrtc.PeerConnection
	Sub    *webrtc.PeerConnection

	// Joined is the server's joined message.
	Joined protocol.Msg
	// Events receives every server message other than SDP and replies.
	Events chan protocol.Msg
	// Tracks receives subscribed tracks as they arrive.
	Tracks chan Track
	// DataIn receives room data messages.
	DataIn chan Data

	// OnPublisherRTCP, when set before Publish, sees the RTCP the server sends
	// about each published track (receiver reports, NACKs, keyframe requests).
	OnPublisherRTCP func(trackID string, pkts []rtcp.Packet)

	reliable, lossy *webrtc.DataChannel
	dcOpen          chan struct{}
	// pcReady is closed once both connections exist: a subscriber offer can
	// arrive right after joined, before Join has made them.
	pcReady chan struct{}

	nextID  atomic.Int64
	mu      sync.Mutex
	waiters map[int64]chan protocol.Msg
	pubMu   sync.Mutex // one publisher negotiation at a time
	subMu   sync.Mutex // subscriber offers are answered in order
	wmu     sync.Mutex
	closed  chan struct{}
	err     error
}

// Join connects to url (ws://host:port/v1/rtc) with token and waits for joined and
// for the publisher connection (with its data channels) to be negotiated.
func Join(ctx context.Context, url, token string, o Options) (*Client, error) {
	api := o.API
	if api == nil {
		api = LoopbackAPI()
	}
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	ws.SetReadLimit(1 << 20)
	cctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		ws: ws, ctx: cctx, cancel: cancel,
		Events: make(chan protocol.Msg, 256), Tracks: make(chan Track, 64), DataIn: make(chan Data, 256),
		waiters: map[int64]chan protocol.Msg{}, closed: make(chan struct{}), dcOpen: make(chan struct{}),
		pcReady: make(chan struct{}),
	}
	join := protocol.Join{Token: token, Protocol: protocol.Version, AutoSubscribe: o.AutoSubscribe}
	if o.Name != "" {
		join.Name = &o.Name
	}
	if o.Metadata != "" {
		join.Metadata = &o.Metadata
	}
	joined, err := c.request(ctx, join, true)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.Joined = joined
	cfg := webrtc.Configuration{ICEServers: iceServers(joined, o.TURNTransport)}
	if o.Relay {
		cfg.ICETransportPolicy = webrtc.ICETransportPolicyRelay
	}
	if c.Pub, err = api.NewPeerConnection(cfg); err != nil {
		c.Close()
		return nil, err
	}
	if c.Sub, err = api.NewPeerConnection(cfg); err != nil {
		c.Close()
		return nil, err
	}
	close(c.pcReady)
	c.Sub.OnTrack(func(t *webrtc.TrackRemote, r *webrtc.RTPReceiver) {
		select {
		case c.Tracks <- Track{Remote: t, Receiver: r, ParticipantSid: t.StreamID(), TrackSid: t.ID()}:
		default:
		}
	})
	c.Sub.OnICECandidate(func(cand *webrtc.ICECandidate) { c.trickle("subscriber", cand) })
	c.Pub.OnICECandidate(func(cand *webrtc.ICECandidate) { c.trickle("publisher", cand) })
	ordered := false
	zero := uint16(0)
	if c.reliable, err = c.Pub.CreateDataChannel("_reliable", nil); err != nil {
		c.Close()
		return nil, err
	}
	if c.lossy, err = c.Pub.CreateDataChannel("_lossy", &webrtc.DataChannelInit{Ordered: &ordered, MaxRetransmits: &zero}); err != nil {
		c.Close()
		return nil, err
	}
	var once sync.Once
	c.reliable.OnOpen(func() { once.Do(func() { close(c.dcOpen) }) })
	c.reliable.OnMessage(func(m webrtc.DataChannelMessage) { c.onData(m.Data, true) })
	c.lossy.OnMessage(func(m webrtc.DataChannelMessage) { c.onData(m.Data, false) })
	if err := c.NegotiatePublisher(ctx, false); err != nil {
		c.Close()
		return nil, err
	}
	select {
	case <-c.dcOpen:
	case <-ctx.Done():
		c.Close()
		return nil, fmt.Errorf("data channel did not open: %w", ctx.Err())
	}
	return c, nil
}

// ICEServers are the ICE servers of a joined message, only those of one TURN
// transport ("udp" or "tcp") when transport is set: the configuration for a
// client's other peer connections (a direct session to a camera).
func ICEServers(joined protocol.Msg, transport string) []webrtc.ICEServer {
	return iceServers(joined, transport)
}

func iceServers(joined protocol.Msg, transport string) []webrtc.ICEServer {
	var out []webrtc.ICEServer
	raw, _ := json.Marshal(joined["iceServers"])
	var list []protocol.ICEServer
	_ = json.Unmarshal(raw, &list)
	for _, s := range list {
		urls := s.URLs
		if transport != "" {
			urls = nil
			for _, u := range s.URLs {
				if strings.HasSuffix(u, "?transport="+transport) {
					urls = append(urls, u)
				}
			}
		}
		if len(urls) > 0 {
			out = append(out, webrtc.ICEServer{URLs: urls, Username: s.Username, Credential: s.Credential})
		}
	}
	return out
}

func (c *Client) trickle(target string, cand *webrtc.ICECandidate) {
	if cand == nil {
		return
	}
	init := cand.ToJSON()
	_ = c.Send(protocol.Trickle{Target: protocol.PcTarget(target), Candidate: &protocol.Candidate{
		Candidate: init.Candidate, SDPMid: init.SDPMid, SDPMLineIndex: init.SDPMLineIndex, UsernameFragment: init.UsernameFragment}})
}

// Send writes a message without waiting for a reply: a protocol message, or a
// protocol.Msg for one the protocol does not define.
func (c *Client) Send(m any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return c.SendRaw(b)
}

// SendRaw writes a raw text frame (tests use it for malformed input).
func (c *Client) SendRaw(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, b)
}

// Request sends m with a fresh id and waits for the reply with that id. An error
// reply becomes a *protocol.Error.
func (c *Client) Request(ctx context.Context, m any) (protocol.Msg, error) {
	return c.request(ctx, m, false)
}

func (c *Client) request(ctx context.Context, m any, first bool) (protocol.Msg, error) {
	id := c.nextID.Add(1)
	if mm, ok := m.(protocol.Msg); ok {
		delete(mm, "id")
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != '{' {
		return nil, fmt.Errorf("request: %T is not a JSON object", m)
	}
	// The id goes first; the message's own fields follow.
	withID := fmt.Appendf(nil, `{"id":%d`, id)
	if len(b) > 2 {
		withID = append(withID, ',')
	}
	withID = append(withID, b[1:]...)
	ch := make(chan protocol.Msg, 1)
	c.mu.Lock()
	c.waiters[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, id)
		c.mu.Unlock()
	}()
	if err := c.SendRaw(withID); err != nil {
		return nil, err
	}
	if first {
		go c.readLoop()
	}
	select {
	case r := <-ch:
		if r["type"] == "error" {
			code, _ := r["code"].(string)
			msg, _ := r["message"].(string)
			return r, &protocol.Error{Code: code, Message: msg}
		}
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, c.closeErr()
	}
}

func (c *Client) closeErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return errors.New("connection closed")
}

func (c *Client) readLoop() {
	defer close(c.closed)
	for {
		_, b, err := c.ws.Read(c.ctx)
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		var m protocol.Msg
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		if id, ok := m["id"].(float64); ok {
			c.mu.Lock()
			ch := c.waiters[int64(id)]
			c.mu.Unlock()
			if ch != nil {
				ch <- m
				continue
			}
		}
		switch m["type"] {
		case "offer":
			sdp, _ := m["sdp"].(string)
			go c.answerSubscriber(sdp)
			continue
		case "trickle":
			raw, _ := json.Marshal(m["candidate"])
			var ci webrtc.ICECandidateInit
			ready := false
			select {
			case <-c.pcReady:
				ready = true
			default:
			}
			if ready && json.Unmarshal(raw, &ci) == nil && ci.Candidate != "" {
				if m["target"] == "publisher" {
					_ = c.Pub.AddICECandidate(ci)
				} else {
					_ = c.Sub.AddICECandidate(ci)
				}
			}
			continue
		}
		select {
		case c.Events <- m:
		default:
		}
	}
}

func (c *Client) answerSubscriber(sdp string) {
	select {
	case <-c.pcReady:
	case <-c.ctx.Done():
		return
	}
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if err := c.Sub.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: sdp}); err != nil {
		return
	}
	ans, err := c.Sub.CreateAnswer(nil)
	if err != nil {
		return
	}
	if err := c.Sub.SetLocalDescription(ans); err != nil {
		return
	}
	_ = c.Send(protocol.Answer{SDP: c.Sub.LocalDescription().SDP})
}

// NegotiatePublisher sends a publisher offer and applies the answer.
func (c *Client) NegotiatePublisher(ctx context.Context, iceRestart bool) error {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	offer, err := c.Pub.CreateOffer(&webrtc.OfferOptions{ICERestart: iceRestart})
	if err != nil {
		return err
	}
	if err := c.Pub.SetLocalDescription(offer); err != nil {
		return err
	}
	ans, err := c.Request(ctx, protocol.Offer{SDP: c.Pub.LocalDescription().SDP})
	if err != nil {
		return err
	}
	sdp, _ := ans["sdp"].(string)
	return c.Pub.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: sdp})
}

// Publish announces and sends track, returning the server's track sid.
func (c *Client) Publish(ctx context.Context, track webrtc.TrackLocal, source string) (string, *webrtc.RTPSender, error) {
	r, err := c.Request(ctx, protocol.PublishTrack{Cid: track.ID(), Kind: protocol.TrackKind(track.Kind().String()), Source: protocol.TrackSource(source)})
	if err != nil {
		return "", nil, err
	}
	ti, _ := r["track"].(map[string]any)
	sid, _ := ti["sid"].(string)
	sender, err := c.Pub.AddTrack(track)
	if err != nil {
		return "", nil, err
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, _, err := sender.Read(buf)
			if err != nil {
				return
			}
			if f := c.OnPublisherRTCP; f != nil {
				if pkts, err := rtcp.Unmarshal(buf[:n]); err == nil {
					f(track.ID(), pkts)
				}
			}
		}
	}()
	return sid, sender, c.NegotiatePublisher(ctx, false)
}

// SendData sends a room data message to identities (none: everyone).
func (c *Client) SendData(payload []byte, text, reliable bool, to ...string) error {
	dc := c.lossy
	if reliable {
		dc = c.reliable
	}
	return dc.Send(sfu.EncodeData(sfu.DataHeader{To: to, Text: text}, payload))
}

// SendDataRaw sends bytes as they are on the reliable channel (for bad-input tests).
func (c *Client) SendDataRaw(b []byte) error { return c.reliable.Send(b) }

func (c *Client) onData(b []byte, reliable bool) {
	h, p, err := sfu.ParseData(b)
	if err != nil {
		return
	}
	select {
	case c.DataIn <- Data{Header: h, Payload: append([]byte(nil), p...), Reliable: reliable}:
	default:
	}
}

// WaitEvent returns the next event of type typ (others are discarded).
func (c *Client) WaitEvent(ctx context.Context, typ string) (protocol.Msg, error) {
	for {
		select {
		case m := <-c.Events:
			if m["type"] == typ {
				return m, nil
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s: %w", typ, ctx.Err())
		case <-c.closed:
			// Messages that arrived before the close come first.
			for {
				select {
				case m := <-c.Events:
					if m["type"] == typ {
						return m, nil
					}
					continue
				default:
				}
				return nil, fmt.Errorf("waiting for %s: %w", typ, c.closeErr())
			}
		}
	}
}

// Done is closed when the signaling connection ends.
func (c *Client) Done() <-chan struct{} { return c.closed }

// CloseWS drops the signaling connection only, as a network change would.
func (c *Client) CloseWS() { _ = c.ws.CloseNow() }

// Close leaves: tells the server, then closes the signaling and both connections.
func (c *Client) Close() {
	select {
	case <-c.closed:
	default:
		_ = c.Send(protocol.Leave{})
	}
	c.cancel()
	_ = c.ws.CloseNow()
	if c.Pub != nil {
		_ = c.Pub.Close()
	}
	if c.Sub != nil {
		_ = c.Sub.Close()
	}
}
