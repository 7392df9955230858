package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/protocol"
)

// A direct session (docs/cameras.md#direct-sessions): the viewer joins the
// camera's room over the WebSocket protocol (without subscribing), offers to
// the WebRTC camera through relay messages, trickling its candidates after the
// offer as they are gathered (NoTrickle: every candidate in the SDP), and receives the camera's media over its own peer connection, peer to peer
// or through the server's TURN. The clock starts after joining: the room
// connection is the viewer's standing signaling channel (the app holds it
// anyway), as the WHEP probe does not count learning its TURN servers.

// DirectOptions configure a direct session.
type DirectOptions struct {
	// URL is the WebSocket endpoint, ws://host:port/v1/rtc.
	URL string
	// Token is a viewer token for room camera/<id>.
	Token string
	// Relay forces the direct connection through the server's TURN (UDP).
	Relay bool
	// API builds the peer connections (nil: client.LoopbackAPI()).
	API *webrtc.API
	// Talk, when set, is sent to the camera in a loop as 20 ms Opus packets
	// (talk-back on the direct connection).
	Talk [][]byte
	// NoTrickle gathers every candidate before sending the offer (as before
	// trickle ICE; for comparison).
	NoTrickle bool
}

// ErrRefused wraps the camera's reason for refusing a direct session.
var ErrRefused = errors.New("camera refused the direct session")

// directSignal mirrors camera/emulator.DirectSignal (the wire format in
// docs/protocol.md), kept here so that the probe needs no emulator.
type directSignal struct {
	Direct  string             `json:"direct"`
	Session string             `json:"session"`
	SDP     string             `json:"sdp,omitempty"`
	Reason  string             `json:"reason,omitempty"`
	Steps   map[string]float64 `json:"stepsMs,omitempty"`
	// Trickle ICE: one candidate, or End (no more).
	Candidate *webrtc.ICECandidateInit `json:"candidate,omitempty"`
	End       bool                     `json:"end,omitempty"`
}

// OpenDirect starts a direct session and returns once the camera's answer is
// applied; media then flows in the background.
func OpenDirect(ctx context.Context, o DirectOptions) (*Viewer, error) {
	api := o.API
	if api == nil {
		api = client.LoopbackAPI()
	}
	no := false
	cl, err := client.Join(ctx, o.URL, o.Token, client.Options{Name: "probe (direct)", API: api, AutoSubscribe: &no})
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			cl.Close()
		}
	}()
	cam, err := cameraSid(cl.Joined)
	if err != nil {
		return nil, err
	}
	v := &Viewer{start: time.Now(), firstFrame: make(chan struct{}), failed: make(chan error, 1), cl: cl, camSid: cam,
		session: strconv.FormatUint(rand.Uint64(), 36)}
	v.res.Path = "direct"
	cfg := webrtc.Configuration{}
	if o.Relay {
		cfg.ICEServers = client.ICEServers(cl.Joined, "udp")
		if len(cfg.ICEServers) == 0 {
			return nil, errors.New("relay asked for, but the server sent no TURN server")
		}
		cfg.ICETransportPolicy = webrtc.ICETransportPolicyRelay
	}
	pc, err := api.NewPeerConnection(cfg)
	if err != nil {
		return nil, fmt.Errorf("peer connection: %w", err)
	}
	v.pc = pc
	v.mark(&v.res.PCCreated)
	defer func() {
		if !ok {
			_ = pc.Close()
		}
	}()
	if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeVideo, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
		return nil, err
	}
	// Audio both ways: the camera's microphone, and the viewer's voice for the
	// camera's loudspeaker (silent unless Talk is set).
	talk, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "talk", "viewer")
	if err != nil {
		return nil, err
	}
	if _, err := pc.AddTransceiverFromTrack(talk, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendrecv}); err != nil {
		return nil, err
	}
	v.watch(pc)
	// Trickle: candidates gathered before the offer has gone wait for it.
	var cmu sync.Mutex
	offered := false
	var queued []*webrtc.ICECandidate
	sendCandidate := func(c *webrtc.ICECandidate) {
		sig := directSignal{Direct: "candidate", Session: v.session, End: c == nil}
		if c != nil {
			ci := c.ToJSON()
			sig.Candidate = &ci
		}
		_ = cl.Send(protocol.NewRelay(cam, sig))
	}
	if o.NoTrickle {
		if err := v.offer(ctx, pc); err != nil {
			return nil, err
		}
	} else {
		pc.OnICECandidate(func(c *webrtc.ICECandidate) {
			cmu.Lock()
			defer cmu.Unlock()
			if !offered {
				queued = append(queued, c)
				return
			}
			sendCandidate(c)
		})
		// a=ice-options:trickle tells the camera it may answer at once.
		offer, err := pc.CreateOffer(&webrtc.OfferOptions{OfferAnswerOptions: webrtc.OfferAnswerOptions{ICETricklingSupported: true}})
		if err != nil {
			return nil, err
		}
		if err := pc.SetLocalDescription(offer); err != nil {
			return nil, err
		}
		v.mark(&v.res.OfferCreated)
	}
	if _, err := cl.Request(ctx, protocol.NewRelay(cam, directSignal{Direct: "offer", Session: v.session, SDP: pc.LocalDescription().SDP})); err != nil {
		return nil, fmt.Errorf("relay offer: %w", err)
	}
	cmu.Lock()
	offered = true
	for _, c := range queued {
		sendCandidate(c)
	}
	queued = nil
	cmu.Unlock()
	ans, err := v.waitSignal(ctx, "answer")
	if err != nil {
		return nil, err
	}
	v.mark(&v.res.AnswerArrived)
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: ans.SDP}); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	v.mark(&v.res.AnswerApplied)
	v.mu.Lock()
	early := v.earlyCands
	v.earlyCands = nil
	v.mu.Unlock()
	for _, c := range early {
		v.remoteCandidate(c)
	}
	go v.directEvents()
	if len(o.Talk) > 0 {
		go v.talk(talk, o.Talk)
	}
	ok = true
	return v, nil
}

// cameraSid finds participant "camera" among those already in the room.
func cameraSid(joined protocol.Msg) (string, error) {
	parts, _ := joined["participants"].([]any)
	for _, p := range parts {
		m, _ := p.(map[string]any)
		if m["identity"] == "camera" {
			sid, _ := m["sid"].(string)
			return sid, nil
		}
	}
	room, _ := joined["room"].(map[string]any)
	return "", fmt.Errorf("no camera in room %v: a direct session needs a WebRTC camera that has joined", room["name"])
}

// waitSignal reads room events until this session's answer (or the camera's
// refusal) arrives.
func (v *Viewer) waitSignal(ctx context.Context, want string) (directSignal, error) {
	for {
		select {
		case <-ctx.Done():
			return directSignal{}, fmt.Errorf("no %s from the camera: %w", want, ctx.Err())
		case <-v.cl.Done():
			return directSignal{}, errors.New("room connection closed")
		case m := <-v.cl.Events:
			sig, ok := v.signalOf(m)
			if !ok {
				if m["type"] == "participantLeft" && m["participantSid"] == v.camSid {
					return directSignal{}, errors.New("the camera left the room")
				}
				continue
			}
			switch sig.Direct {
			case want:
				return sig, nil
			case "candidate":
				// The camera's candidates may pass its answer: they wait.
				v.mu.Lock()
				if len(v.earlyCands) < 32 {
					v.earlyCands = append(v.earlyCands, sig)
				}
				v.mu.Unlock()
			case "bye":
				return directSignal{}, fmt.Errorf("%w: %s", ErrRefused, sig.Reason)
			}
		}
	}
}

func (v *Viewer) signalOf(m protocol.Msg) (directSignal, bool) {
	if m["type"] != "relay" || m["from"] != v.camSid {
		return directSignal{}, false
	}
	raw, _ := json.Marshal(m["data"])
	var sig directSignal
	if json.Unmarshal(raw, &sig) != nil || sig.Session != v.session {
		return directSignal{}, false
	}
	return sig, true
}

// directEvents keeps the camera's own measurements and notices its end.
func (v *Viewer) directEvents() {
	for {
		select {
		case <-v.cl.Done():
			return
		case m := <-v.cl.Events:
			sig, ok := v.signalOf(m)
			switch {
			case ok && sig.Direct == "timing":
				v.mu.Lock()
				v.res.CameraSteps = sig.Steps
				v.mu.Unlock()
			case ok && sig.Direct == "candidate":
				v.remoteCandidate(sig)
			case ok && sig.Direct == "error":
				v.mu.Lock()
				v.signalErrs = append(v.signalErrs, sig.Reason)
				v.mu.Unlock()
			case ok && sig.Direct == "bye":
				select {
				case v.failed <- fmt.Errorf("camera ended the session: %s", sig.Reason):
				default:
				}
			}
		}
	}
}

// remoteCandidate adds one of the camera's trickled candidates; a malformed
// one is refused with an error to the camera.
func (v *Viewer) remoteCandidate(sig directSignal) {
	if sig.End || (sig.Candidate != nil && sig.Candidate.Candidate == "") {
		return
	}
	err := protocol.CheckCandidate((*protocol.Candidate)(sig.Candidate))
	if err == nil {
		err = v.pc.AddICECandidate(*sig.Candidate)
	}
	if err != nil {
		v.mu.Lock()
		v.signalErrs = append(v.signalErrs, "refused the camera's candidate: "+err.Error())
		v.mu.Unlock()
		_ = v.cl.Send(protocol.NewRelay(v.camSid, directSignal{Direct: "error", Session: v.session, Reason: "candidate refused: " + err.Error()}))
	}
}

// SignalErrors are the direct session's signaling errors: the camera's
// refusals of this viewer's messages, and the camera's candidates refused here.
func (v *Viewer) SignalErrors() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.signalErrs...)
}

// SendSignal relays a raw direct-session message to the camera (tests send
// malformed ones).
func (v *Viewer) SendSignal(data map[string]any) error {
	data["session"] = v.session
	return v.cl.Send(protocol.NewRelay(v.camSid, data))
}

// talk sends the Opus packets in a loop, one every 20 ms.
func (v *Viewer) talk(t *webrtc.TrackLocalStaticSample, pkts [][]byte) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-v.cl.Done():
			return
		case <-tick.C:
		}
		if err := t.WriteSample(media.Sample{Data: pkts[i%len(pkts)], Duration: 20 * time.Millisecond}); err != nil {
			return
		}
	}
}

// closeDirect tells the camera and leaves the room.
func (v *Viewer) closeDirect() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = v.cl.Request(ctx, protocol.NewRelay(v.camSid, directSignal{Direct: "bye", Session: v.session}))
	v.cl.Close()
}
