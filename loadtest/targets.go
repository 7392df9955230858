package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
)

// Petrel reaches a Petrel server by its room protocol and its WHIP/WHEP
// endpoints. Tokens are signed with APIKey/APISecret, or fetched from the
// development endpoint when no key is given.
type Petrel struct {
	Base      string // http://127.0.0.1:7880
	APIKey    string
	APISecret string
	Lean      *Lean
	HTTP      *http.Client
}

// Token returns a token for identity in room that may subscribe and send
// data, and publish media if publish is set (a subscriber's does not: as a
// Janus subscriber handle, it gets no publisher-side media state).
func (t *Petrel) Token(ctx context.Context, room, identity string, publish bool) (string, error) {
	if t.APIKey != "" {
		c := auth.Claims{Room: room, Grants: auth.Grants{Publish: publish, Subscribe: true, PublishData: true}}
		c.RegisteredClaims = jwt.RegisteredClaims{Subject: identity}
		return auth.Keys{t.APIKey: t.APISecret}.Sign(t.APIKey, c, 6*time.Hour)
	}
	body, _ := json.Marshal(map[string]string{"room": room, "identity": identity})
	req, err := http.NewRequestWithContext(ctx, "POST", t.Base+"/v1/dev/token", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&v); err != nil || v.Token == "" {
		return "", fmt.Errorf("dev token: %s (give -api-key and -api-secret for a server with keys)", resp.Status)
	}
	return v.Token, nil
}

// MixRoom creates room with its audio mixed by the server, through the admin
// API with an admin token signed by APIKey (the dev endpoint gives none).
func (t *Petrel) MixRoom(ctx context.Context, room string) error {
	if t.APIKey == "" {
		return errors.New("mix: the admin API needs -api-key and -api-secret")
	}
	c := auth.Claims{Grants: auth.Grants{Admin: true}}
	c.RegisteredClaims = jwt.RegisteredClaims{Subject: "petrel-load"}
	tok, err := auth.Keys{t.APIKey: t.APISecret}.Sign(t.APIKey, c, time.Hour)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"name": room, "audioMix": true})
	req, err := http.NewRequestWithContext(ctx, "POST", t.Base+"/v1/admin/rooms", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := t.client().Do(req)
	if err != nil {
		return fmt.Errorf("mix room: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("mix room: %s %s", resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

func (t *Petrel) client() *http.Client {
	if t.HTTP != nil {
		return t.HTTP
	}
	return http.DefaultClient
}

func (t *Petrel) wsURL() string {
	u := strings.Replace(t.Base, "http://", "ws://", 1)
	u = strings.Replace(u, "https://", "wss://", 1)
	return strings.TrimSuffix(u, "/") + "/v1/rtc"
}

// Participant is a peer joined over the room protocol.
type Participant struct {
	*client.Client
	Peer *Peer
}

// Join joins room as identity with lean peer connections; the subscriber
// connection is watched for setup times and its tracks are received.
// Subscriptions are explicit (autoSubscribe off) so a scenario controls them.
// A publishOnly peer's setup times are its publisher connection's: client.Join
// returns once that connection's data channel is open.
func (t *Petrel) Join(ctx context.Context, room string, p *Peer, publishOnly bool) (*Participant, error) {
	return t.join(ctx, room, p, publishOnly, false)
}

// join is Join with the server's automatic subscription on or off.
func (t *Petrel) join(ctx context.Context, room string, p *Peer, publishOnly, autoSubscribe bool) (*Participant, error) {
	tok, err := t.Token(ctx, room, p.ID, p.Role != "subscriber")
	if err != nil {
		return nil, err
	}
	c, err := client.Join(ctx, t.wsURL(), tok, client.Options{Name: p.ID, API: t.Lean.For(p), AutoSubscribe: &autoSubscribe})
	if err != nil {
		return nil, fmt.Errorf("join %s as %s: %w", room, p.ID, err)
	}
	p.OnClose(c.Close)
	if publishOnly {
		p.mark(&p.iceAt)
		p.mark(&p.dtlsAt)
		p.up.Store(true)
	}
	p.Watch(c.Sub, !publishOnly)
	// client.Join already set OnTrack into c.Tracks; drain it into receivers.
	c.Sub.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { p.Receive(tr, c.Sub) })
	// With automatic subscription the first tracks and the subscriber
	// connection may have come during client.Join, before these handlers.
	for drained := false; !drained; {
		select {
		case tr := <-c.Tracks:
			p.Receive(tr.Remote, c.Sub)
		default:
			drained = true
		}
	}
	if !publishOnly && c.Sub.ConnectionState() == webrtc.PeerConnectionStateConnected {
		p.mark(&p.iceAt)
		p.mark(&p.dtlsAt)
		p.up.Store(true)
	}
	return &Participant{Client: c, Peer: p}, nil
}

// Publish sends srcs on the participant's publisher connection and returns the
// server's track sids.
func (pp *Participant) Publish(ctx context.Context, srcs ...*Source) ([]string, error) {
	var sids []string
	for i, s := range srcs {
		kind := "camera"
		if s.Kind == webrtc.RTPCodecTypeAudio {
			kind = "microphone"
		}
		sid, sender, err := pp.Client.Publish(ctx, s.Track(fmt.Sprintf("%s-%d", pp.Peer.ID, i), pp.Peer.ID), kind)
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w", s.Name, err)
		}
		_ = sender
		sids = append(sids, sid)
	}
	return sids, nil
}

// CountPublisherRTCP counts NACKs and keyframe requests from the server. It must
// be set before Publish (client.Publish reads the sender's RTCP itself).
// Keyframe requests reach the source of the track (by its id).
func (pp *Participant) CountPublisherRTCP(srcs ...*Source) {
	p := pp.Peer
	byID := map[string]*Source{}
	for i, s := range srcs {
		byID[fmt.Sprintf("%s-%d", pp.Peer.ID, i)] = s
	}
	pp.Client.OnPublisherRTCP = func(id string, pkts []rtcp.Packet) { p.countParsed(pkts, byID[id]) }
}

// Subscribe asks for sids.
func (pp *Participant) Subscribe(ctx context.Context, sids []string) error {
	// A sid is known from publishTrack's response before the server has the
	// track's media (its publication exists once the RTP stream arrives), so a
	// subscriber that comes very early retries not_found for a while.
	yes := true
	for i := 0; ; i++ {
		_, err := pp.Client.Request(ctx, protocol.Subscribe{TrackSids: sids, Subscribe: &yes})
		var pe *protocol.Error
		if err == nil || !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound || i == 25 {
			return err
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return err
		}
	}
}

// WHIP publishes srcs to a WHIP endpoint (non-trickle: the offer carries the
// candidates) and returns when the answer is applied.
func WHIP(ctx context.Context, l *Lean, endpoint, token string, p *Peer, srcs ...*Source) error {
	pc, err := l.NewPCFor(p)
	if err != nil {
		return err
	}
	p.OnClose(func() { _ = pc.Close() })
	p.Watch(pc, true)
	for i, s := range srcs {
		snd, err := pc.AddTransceiverFromTrack(s.Track(fmt.Sprintf("%s-%d", p.ID, i), p.ID), webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly})
		if err != nil {
			return err
		}
		p.ReadSenderRTCP(snd.Sender(), s)
	}
	return exchange(ctx, pc, endpoint, token, p)
}

// WHEP plays from a WHEP endpoint: one recvonly video and one audio transceiver.
func WHEP(ctx context.Context, l *Lean, endpoint, token string, p *Peer) error {
	pc, err := l.NewPCFor(p)
	if err != nil {
		return err
	}
	p.OnClose(func() { _ = pc.Close() })
	p.Watch(pc, true)
	for _, k := range []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo, webrtc.RTPCodecTypeAudio} {
		if _, err := pc.AddTransceiverFromKind(k, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
			return err
		}
	}
	return exchange(ctx, pc, endpoint, token, p)
}

func exchange(ctx context.Context, pc *webrtc.PeerConnection, endpoint, token string, p *Peer) error {
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		return err
	}
	select {
	case <-gathered:
	case <-ctx.Done():
		return fmt.Errorf("gathering: %w", ctx.Err())
	}
	answer, err := postOffer(ctx, endpoint, token, pc.LocalDescription().SDP, p)
	if err != nil {
		return err
	}
	return pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer})
}

// postOffer POSTs a WHIP/WHEP offer and returns the answer; the session's
// DELETE is added to p's close steps.
func postOffer(ctx context.Context, endpoint, token, offer string, p *Peer) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", endpoint, strings.NewReader(offer))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/sdp")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("POST %s: %s: %s", endpoint, resp.Status, strings.TrimSpace(string(body)))
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		u, err := url.Parse(endpoint)
		if err == nil {
			if r, err := u.Parse(loc); err == nil {
				session := r.String()
				p.OnClose(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, "DELETE", session, nil)
					if token != "" {
						req.Header.Set("Authorization", "Bearer "+token)
					}
					if resp, err := http.DefaultClient.Do(req); err == nil {
						resp.Body.Close()
					}
				})
			}
		}
	}
	return string(body), nil
}
