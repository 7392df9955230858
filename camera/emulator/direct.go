package emulator

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/protocol"
)

// Direct sessions (docs/cameras.md#direct-sessions): a viewer in the camera's
// room sends, through the server's relay message, an offer (recvonly video,
// sendrecv audio for talk-back); the camera answers
// it on a peer connection of its own, so media goes viewer <-> camera without
// the SFU, or through the server's TURN when nothing else connects. The
// signaling rides on relay because the camera is already in the room: no
// second registration, and the server checks that both sides belong there.
//
//	viewer -> camera  {"direct":"offer","session":S,"sdp":...}
//	camera -> viewer  {"direct":"answer","session":S,"sdp":...}
//	               or {"direct":"bye","session":S,"reason":"..."}  (refused)
//	camera -> viewer  {"direct":"timing","session":S,"stepsMs":{...}}  (once streaming)
//	either side       {"direct":"bye","session":S}                  (ended)
//
// Trickle ICE: an offer with a=ice-options:trickle may come without
// candidates; each side then sends its candidates as it gathers them, after
// its offer or answer, and says when it has no more:
//
//	either side  {"direct":"candidate","session":S,"candidate":{"candidate":"candidate:...","sdpMid":"0","sdpMLineIndex":0}}
//	either side  {"direct":"candidate","session":S,"end":true}
//	either side  {"direct":"error","session":S,"reason":"..."}  (a candidate refused; the session goes on)
//
// The camera answers a trickle offer at once (its candidates follow) and one
// without trickle with every candidate in the answer, as before.

// DirectSignal is the data of a relay message of a direct session.
type DirectSignal struct {
	Direct  string             `json:"direct"`
	Session string             `json:"session"`
	SDP     string             `json:"sdp,omitempty"`
	Reason  string             `json:"reason,omitempty"`
	Steps   map[string]float64 `json:"stepsMs,omitempty"`
	// Candidate is a trickled ICE candidate; End says there are no more.
	Candidate *webrtc.ICECandidateInit `json:"candidate,omitempty"`
	End       bool                     `json:"end,omitempty"`
	// ICEServers, added by the server to an offer it relays to a camera, are
	// fresh TURN credentials (the camera's own, from joining, may have
	// expired).
	ICEServers []protocol.ICEServer `json:"iceServers,omitempty"`
}

// DefaultMaxDirect is how many direct sessions a camera serves at once when
// not told: a camera's encoder and uplink are small.
const DefaultMaxDirect = 4

const maxSessionLen = 64

type directSession struct {
	id, peer string
	pc       *webrtc.PeerConnection
	start    time.Time
	steps    map[string]float64
	mu       sync.Mutex
	wantRTP  atomic.Bool // connected, waiting for the first keyframe packet
	// Trickle: candidates that came before the offer was applied wait here.
	remoteSet bool
	pending   []webrtc.ICECandidateInit
}

// maxPendingCandidates bounds the candidates kept for a session whose offer
// is not applied yet (a real viewer has a handful).
const maxPendingCandidates = 32

func (s *directSession) mark(step string) {
	s.mu.Lock()
	if _, ok := s.steps[step]; !ok {
		s.steps[step] = float64(time.Since(s.start).Microseconds()) / 1000
	}
	s.mu.Unlock()
}

// DirectSessions counts the camera's open direct sessions.
func (w *WebRTCCamera) DirectSessions() int {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	return len(w.direct)
}

// DirectTimings are the steps (ms since the offer arrived) of the direct
// sessions that reached their first RTP packet, oldest first.
func (w *WebRTCCamera) DirectTimings() []map[string]float64 {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	return append([]map[string]float64(nil), w.timings...)
}

// events handles the room messages the camera cares about: direct-session
// signaling and viewers leaving.
func (w *WebRTCCamera) events() {
	for {
		select {
		case <-w.stop:
			return
		case m := <-w.Client.Events:
			switch m["type"] {
			case "relay":
				from, _ := m["from"].(string)
				raw, _ := json.Marshal(m["data"])
				var sig DirectSignal
				if json.Unmarshal(raw, &sig) != nil || sig.Direct == "" || sig.Session == "" || len(sig.Session) > maxSessionLen {
					continue // another use of relay (1:1 calls), or junk
				}
				w.onDirect(from, sig)
			case "participantLeft":
				sid, _ := m["participantSid"].(string)
				w.dmu.Lock()
				for k, e := range w.early {
					if e.peer == sid {
						delete(w.early, k)
					}
				}
				w.dmu.Unlock()
				w.closeDirect(func(s *directSession) bool { return s.peer == sid }, "viewer left")
			}
		}
	}
}

func (w *WebRTCCamera) relay(to string, sig DirectSignal) {
	_ = w.Client.Send(protocol.NewRelay(to, sig))
}

func (w *WebRTCCamera) onDirect(from string, sig DirectSignal) {
	switch sig.Direct {
	case "offer":
		w.dmu.Lock()
		n := len(w.direct)
		_, dup := w.direct[from+"/"+sig.Session]
		w.dmu.Unlock()
		if dup {
			return
		}
		if n >= w.maxDirect {
			w.DirectRefused.Add(1)
			w.relay(from, DirectSignal{Direct: "bye", Session: sig.Session, Reason: fmt.Sprintf("max direct sessions (%d) reached", w.maxDirect)})
			return
		}
		go func() {
			if err := w.answerDirect(from, sig); err != nil {
				w.relay(from, DirectSignal{Direct: "bye", Session: sig.Session, Reason: "camera: " + err.Error()})
			}
		}()
	case "candidate":
		w.remoteCandidate(from, sig)
	case "bye":
		w.closeDirect(func(s *directSession) bool { return s.peer == from && s.id == sig.Session }, "viewer ended")
	}
}

// remoteCandidate adds a viewer's trickled candidate, or keeps it until the
// offer is applied; a malformed one is refused with an error to the viewer.
func (w *WebRTCCamera) remoteCandidate(from string, sig DirectSignal) {
	if sig.End {
		return // pion needs no end-of-candidates: checks run on what it has
	}
	if err := protocol.CheckCandidate((*protocol.Candidate)(sig.Candidate)); err != nil {
		w.DirectCandidateErrors.Add(1)
		w.log("direct: candidate refused", "viewer", from, "session", sig.Session, "err", err)
		w.relay(from, DirectSignal{Direct: "error", Session: sig.Session, Reason: "candidate refused: " + err.Error()})
		return
	}
	if sig.Candidate.Candidate == "" {
		return
	}
	w.dmu.Lock()
	s := w.direct[from+"/"+sig.Session]
	if s == nil {
		// The offer's answer is being made: the session appears in a moment.
		s = w.early[from+"/"+sig.Session]
		if s == nil {
			if len(w.early) >= 4*max(w.maxDirect, 1) {
				w.dmu.Unlock()
				w.relay(from, DirectSignal{Direct: "error", Session: sig.Session, Reason: "candidate for an unknown session"})
				return
			}
			s = &directSession{id: sig.Session, peer: from}
			w.early[from+"/"+sig.Session] = s
		}
	}
	w.dmu.Unlock()
	s.mu.Lock()
	if !s.remoteSet {
		if len(s.pending) < maxPendingCandidates {
			s.pending = append(s.pending, *sig.Candidate)
		}
		s.mu.Unlock()
		return
	}
	pc := s.pc
	s.mu.Unlock()
	w.addCandidate(s, pc, from, *sig.Candidate)
}

func (w *WebRTCCamera) addCandidate(s *directSession, pc *webrtc.PeerConnection, from string, c webrtc.ICECandidateInit) {
	if err := pc.AddICECandidate(c); err != nil {
		w.DirectCandidateErrors.Add(1)
		w.log("direct: candidate refused", "viewer", from, "session", s.id, "err", err)
		w.relay(from, DirectSignal{Direct: "error", Session: s.id, Reason: "candidate refused: " + err.Error()})
		return
	}
	w.DirectCandidates.Add(1)
	s.mark("first_remote_candidate")
}

func (w *WebRTCCamera) answerDirect(from string, sig DirectSignal) error {
	s := &directSession{id: sig.Session, peer: from, start: time.Now(), steps: map[string]float64{}}
	trickle := strings.Contains(sig.SDP, "a=ice-options:trickle")
	cfg := webrtc.Configuration{ICEServers: w.iceServers(sig.ICEServers)}
	pc, err := w.directAPI.NewPeerConnection(cfg)
	if err != nil {
		return err
	}
	s.pc = pc
	s.mark("pc_created")
	key := from + "/" + sig.Session
	w.dmu.Lock()
	if len(w.direct) >= w.maxDirect {
		w.dmu.Unlock()
		_ = pc.Close()
		w.DirectRefused.Add(1)
		return fmt.Errorf("max direct sessions (%d) reached", w.maxDirect)
	}
	if e := w.early[key]; e != nil {
		delete(w.early, key)
		e.mu.Lock()
		s.pending = e.pending
		e.mu.Unlock()
	}
	w.direct[key] = s
	w.dmu.Unlock()
	ok := false
	defer func() {
		if !ok {
			w.dropDirect(key, s)
		}
	}()
	pc.OnICEConnectionStateChange(func(st webrtc.ICEConnectionState) {
		if st == webrtc.ICEConnectionStateConnected {
			s.mark("ice_connected")
		}
	})
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		switch st {
		case webrtc.PeerConnectionStateConnected:
			s.mark("dtls_connected")
			// The viewer starts at a keyframe: the encoder makes one now,
			// as a real camera does for a new session.
			s.wantRTP.Store(true)
			w.keyframe()
		case webrtc.PeerConnectionStateFailed, webrtc.PeerConnectionStateClosed:
			w.dropDirect(key, s)
		}
	})
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		if tr.Kind() != webrtc.RTPCodecTypeAudio {
			return
		}
		go w.TalkDirect.count(func(b []byte) (int, error) { n, _, err := tr.Read(b); return n, err },
			strings.EqualFold(tr.Codec().MimeType, webrtc.MimeTypeOpus))
	})
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: sig.SDP}); err != nil {
		return fmt.Errorf("offer: %w", err)
	}
	s.mark("offer_applied")
	if strings.Contains(sig.SDP, "a=candidate:") {
		s.mark("first_remote_candidate")
	}
	s.mu.Lock()
	s.remoteSet = true
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	for _, c := range pending {
		w.addCandidate(s, pc, from, c)
	}
	vs, err := pc.AddTrack(w.video)
	if err != nil {
		return fmt.Errorf("video: %w", err)
	}
	go w.readDirectRTCP(vs)
	if w.audio != nil {
		if _, err := pc.AddTrack(w.audio); err != nil {
			return fmt.Errorf("audio: %w", err)
		}
	}
	var aopts *webrtc.AnswerOptions
	if trickle {
		aopts = &webrtc.AnswerOptions{OfferAnswerOptions: webrtc.OfferAnswerOptions{ICETricklingSupported: true}}
	}
	ans, err := pc.CreateAnswer(aopts)
	if err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	if trickle {
		// Answer at once; candidates follow as gathered, after the answer.
		var cmu sync.Mutex
		answered := false
		send := func(c *webrtc.ICECandidate) {
			if c == nil {
				w.relay(from, DirectSignal{Direct: "candidate", Session: sig.Session, End: true})
				return
			}
			ci := c.ToJSON()
			w.DirectCandidatesSent.Add(1)
			w.relay(from, DirectSignal{Direct: "candidate", Session: sig.Session, Candidate: &ci})
		}
		var queued []*webrtc.ICECandidate
		pc.OnICECandidate(func(c *webrtc.ICECandidate) {
			cmu.Lock()
			defer cmu.Unlock()
			if !answered {
				queued = append(queued, c)
				return
			}
			send(c)
		})
		if err := pc.SetLocalDescription(ans); err != nil {
			return fmt.Errorf("answer: %w", err)
		}
		s.mark("answer_created")
		w.relay(from, DirectSignal{Direct: "answer", Session: sig.Session, SDP: pc.LocalDescription().SDP})
		cmu.Lock()
		answered = true
		for _, c := range queued {
			send(c)
		}
		cmu.Unlock()
		ok = true
		return nil
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(ans); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	select {
	case <-gathered:
	case <-time.After(5 * time.Second):
	case <-w.stop:
		return fmt.Errorf("camera stopped")
	}
	s.mark("answer_created")
	w.relay(from, DirectSignal{Direct: "answer", Session: sig.Session, SDP: pc.LocalDescription().SDP})
	ok = true
	return nil
}

// iceServers are the TURN servers for a direct session: those the server sent
// with the offer, else those of the camera's joined message.
func (w *WebRTCCamera) iceServers(fresh []protocol.ICEServer) []webrtc.ICEServer {
	var out []webrtc.ICEServer
	if len(fresh) == 0 {
		raw, _ := json.Marshal(w.Client.Joined["iceServers"])
		_ = json.Unmarshal(raw, &fresh)
	}
	for _, s := range fresh {
		out = append(out, webrtc.ICEServer{URLs: s.URLs, Username: s.Username, Credential: s.Credential})
	}
	return out
}

// readDirectRTCP turns a direct viewer's keyframe requests into a keyframe.
func (w *WebRTCCamera) readDirectRTCP(s *webrtc.RTPSender) {
	for {
		pkts, _, err := s.ReadRTCP()
		if err != nil {
			return
		}
		for _, p := range pkts {
			switch p.(type) {
			case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
				w.PLIs.Add(1)
				w.keyframe()
			}
		}
	}
}

func (w *WebRTCCamera) keyframe() {
	select {
	case w.restart <- struct{}{}:
	default:
	}
}

// sentKeyframe runs on the feeder after it wrote an IDR: sessions waiting for
// their first packet have it now, and tell their viewer their steps.
func (w *WebRTCCamera) sentKeyframe() {
	w.dmu.Lock()
	var done []*directSession
	for _, s := range w.direct {
		if s.wantRTP.CompareAndSwap(true, false) {
			s.mark("first_rtp")
			done = append(done, s)
		}
	}
	w.dmu.Unlock()
	for _, s := range done {
		s.mu.Lock()
		steps := make(map[string]float64, len(s.steps))
		for k, v := range s.steps {
			steps[k] = v
		}
		s.mu.Unlock()
		w.dmu.Lock()
		w.timings = append(w.timings, steps)
		if len(w.timings) > 200 {
			w.timings = w.timings[1:]
		}
		w.dmu.Unlock()
		w.relay(s.peer, DirectSignal{Direct: "timing", Session: s.id, Steps: steps})
	}
}

func (w *WebRTCCamera) dropDirect(key string, s *directSession) {
	w.dmu.Lock()
	if w.direct[key] == s {
		delete(w.direct, key)
	}
	w.dmu.Unlock()
	_ = s.pc.Close()
}

func (w *WebRTCCamera) closeDirect(match func(*directSession) bool, why string) {
	w.dmu.Lock()
	var out []*directSession
	for k, s := range w.direct {
		if match(s) {
			out = append(out, s)
			delete(w.direct, k)
		}
	}
	w.dmu.Unlock()
	for _, s := range out {
		w.log("direct session closed", "session", s.id, "viewer", s.peer, "why", why)
		_ = s.pc.Close()
	}
}

// directAPI builds the peer connections of direct sessions: the camera's
// formats plus Opus, which viewers talk in.
func directAPI(c *Clip, tune func(*webrtc.SettingEngine)) (*webrtc.API, error) {
	m, ir, err := cameraEngine(c)
	if err != nil {
		return nil, err
	}
	var se webrtc.SettingEngine
	if tune != nil {
		tune(&se)
	}
	return webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(ir), webrtc.WithSettingEngine(se)), nil
}

// DirectAddrs lists the local address (ip:port) of the selected candidate
// pair of each connected direct session: where its media leaves the camera.
func (w *WebRTCCamera) DirectAddrs() []string {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	var out []string
	for _, s := range w.direct {
		if pair, err := s.pc.SCTP().Transport().ICETransport().GetSelectedCandidatePair(); err == nil && pair != nil {
			out = append(out, fmt.Sprintf("%s:%d", pair.Local.Address, pair.Local.Port))
		}
	}
	return out
}
