// Package probe is a headless WHEP viewer that measures time-to-stream from the
// client side: every WebRTC step from creating the peer connection to the first
// complete H.264 frame (an IDR access unit with its SPS and PPS, every packet
// present). `petrel probe` and the camera tests use it; the tests also use it to
// count complete frames over time.
package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/client"
)

// Options configure a viewing session.
type Options struct {
	// Endpoint is the WHEP URL, e.g. http://host:7880/whep/camera%2Fdoor.
	Endpoint string
	Token    string
	// Relay forces the TURN relay transport (iceTransportPolicy relay); the TURN
	// servers come from the Link headers of an OPTIONS request.
	Relay bool
	// API builds the peer connection; nil means a default Pion API.
	API *webrtc.API
	// HTTP is the client for WHEP requests (default: 10 s timeout).
	HTTP *http.Client
	// TURNTCP keeps the TURN-over-TCP servers for Relay (default: UDP only).
	TURNTCP bool
	// Videos is how many video tracks to receive (a wall: one per camera; default 1).
	Videos int
	// KeepAudio keeps up to this many of the camera's audio packets (tests
	// check and decode them: Audio).
	KeepAudio int
}

// Result is one session's milestones, each since the start of the session.
type Result struct {
	PCCreated     time.Duration `json:"pcCreated"`
	OfferCreated  time.Duration `json:"offerCreated"` // including candidate gathering
	AnswerArrived time.Duration `json:"answerArrived"`
	AnswerApplied time.Duration `json:"answerApplied"`
	ICEConnected  time.Duration `json:"iceConnected"`
	DTLSConnected time.Duration `json:"dtlsConnected"`
	FirstRTP      time.Duration `json:"firstRtp"`
	FirstFrame    time.Duration `json:"firstFrame"` // time-to-stream
	Codec         string        `json:"codec"`
	Candidate     string        `json:"candidate"` // local candidate type of the selected pair
	// Remote is the selected pair's remote candidate (address:port type): for
	// a direct session, the camera's address, not the server's.
	Remote string `json:"remote,omitempty"`
	// Path is "whep", "http" or "direct".
	Path string `json:"path,omitempty"`
	// CameraSteps are a direct session's steps as the camera measured them
	// (ms since the offer reached it).
	CameraSteps map[string]float64 `json:"cameraSteps,omitempty"`

	frames int // HTTP live: fragments read
}

// Viewer is an open session.
type Viewer struct {
	o        Options
	pc       *webrtc.PeerConnection
	start    time.Time
	location string

	// A direct session (direct.go): the room client, the camera's sid, the session id.
	cl      *client.Client
	camSid  string
	session string

	mu  sync.Mutex
	res Result

	firstFrame chan struct{}
	ffOnce     sync.Once
	failed     chan error

	frames    atomic.Int64 // complete, decodable frames
	perTrack  sync.Map     // track id -> *atomic.Int64 complete frames
	keyframes atomic.Int64
	gaps      atomic.Int64 // sequence gaps seen

	// Direct sessions: the camera's candidates that came before its answer,
	// and signaling errors (direct.go).
	earlyCands []directSignal
	signalErrs []string

	audioMime string
	audio     []*rtp.Packet // the first KeepAudio packets
}

// Audio returns the audio codec and the packets kept (Options.KeepAudio).
func (v *Viewer) Audio() (mime string, pkts []*rtp.Packet) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.audioMime, append([]*rtp.Packet(nil), v.audio...)
}

// keepAudio reads an audio track, keeping its first packets.
func (v *Viewer) keepAudio(tr *webrtc.TrackRemote) {
	for {
		p, _, err := tr.ReadRTP()
		if err != nil {
			return
		}
		v.mu.Lock()
		v.audioMime = tr.Codec().MimeType // known once a packet arrived
		if len(v.audio) < v.o.KeepAudio {
			v.audio = append(v.audio, p)
		}
		v.mu.Unlock()
	}
}

func (v *Viewer) mark(f *time.Duration) {
	d := time.Since(v.start)
	v.mu.Lock()
	if *f == 0 {
		*f = d
	}
	v.mu.Unlock()
}

// Open starts a session and returns once the answer is applied; media then
// flows in the background.
func Open(ctx context.Context, o Options) (*Viewer, error) {
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	api := o.API
	if api == nil {
		api = webrtc.NewAPI()
	}
	v := &Viewer{o: o, start: time.Now(), firstFrame: make(chan struct{}), failed: make(chan error, 1)}
	cfg := webrtc.Configuration{}
	if o.Relay {
		servers, err := iceServers(ctx, o)
		if err != nil {
			return nil, err
		}
		if len(servers) == 0 {
			return nil, errors.New("relay asked for, but OPTIONS listed no TURN server (TURN off, or a token the server does not accept)")
		}
		cfg.ICEServers = servers
		cfg.ICETransportPolicy = webrtc.ICETransportPolicyRelay
		v.start = time.Now() // learning the TURN servers is not part of the session
	}
	pc, err := api.NewPeerConnection(cfg)
	if err != nil {
		return nil, fmt.Errorf("peer connection: %w", err)
	}
	v.pc = pc
	v.mark(&v.res.PCCreated)
	ok := false
	defer func() {
		if !ok {
			_ = pc.Close()
		}
	}()
	kinds := []webrtc.RTPCodecType{webrtc.RTPCodecTypeAudio}
	for i := 0; i < max(1, o.Videos); i++ {
		kinds = append([]webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo}, kinds...)
	}
	for _, k := range kinds {
		if _, err := pc.AddTransceiverFromKind(k, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
			return nil, err
		}
	}
	v.watch(pc)
	if err := v.offer(ctx, pc); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.Endpoint, strings.NewReader(pc.LocalDescription().SDP))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/sdp")
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	resp, err := o.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("whep: %w", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("whep: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	v.mark(&v.res.AnswerArrived)
	v.location = resp.Header.Get("Location")
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(body)}); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	v.mark(&v.res.AnswerApplied)
	ok = true
	return v, nil
}

// offer sets a local offer with every candidate gathered (no trickle: one
// round trip) and marks it.
func (v *Viewer) offer(ctx context.Context, pc *webrtc.PeerConnection) error {
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
		return ctx.Err()
	}
	v.mark(&v.res.OfferCreated)
	return nil
}

// watch records pc's milestones and reads its video.
func (v *Viewer) watch(pc *webrtc.PeerConnection) {
	pc.OnICEConnectionStateChange(func(s webrtc.ICEConnectionState) {
		if s == webrtc.ICEConnectionStateConnected {
			v.mark(&v.res.ICEConnected)
		}
		if s == webrtc.ICEConnectionStateFailed {
			select {
			case v.failed <- errors.New("ICE failed"):
			default:
			}
		}
	})
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateConnected {
			v.mark(&v.res.DTLSConnected)
			if pair, err := pc.SCTP().Transport().ICETransport().GetSelectedCandidatePair(); err == nil && pair != nil {
				v.mu.Lock()
				v.res.Candidate = pair.Local.Typ.String()
				v.res.Remote = fmt.Sprintf("%s:%d %s", pair.Remote.Address, pair.Remote.Port, pair.Remote.Typ)
				v.mu.Unlock()
			}
		}
		if s == webrtc.PeerConnectionStateFailed {
			select {
			case v.failed <- errors.New("connection failed"):
			default:
			}
		}
	})
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		if tr.Kind() != webrtc.RTPCodecTypeVideo {
			if v.o.KeepAudio > 0 {
				go v.keepAudio(tr)
			} else {
				go drain(tr)
			}
			return
		}
		go v.readVideo(tr)
	})
}

// WaitFirstFrame waits for the first complete frame and returns the result.
func (v *Viewer) WaitFirstFrame(ctx context.Context) (Result, error) {
	select {
	case <-v.firstFrame:
		return v.Result(), nil
	case err := <-v.failed:
		return v.Result(), err
	case <-ctx.Done():
		return v.Result(), fmt.Errorf("no complete frame: %w", ctx.Err())
	}
}

// Result is what was measured so far.
func (v *Viewer) Result() Result {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.res
}

// Frames counts the complete frames received (decodable: they follow an IDR
// with parameter sets without a missing packet); Keyframes the IDRs among them;
// Gaps the sequence gaps seen.
func (v *Viewer) Frames() int64    { return v.frames.Load() }
func (v *Viewer) Keyframes() int64 { return v.keyframes.Load() }
func (v *Viewer) Gaps() int64      { return v.gaps.Load() }

// Close ends the session (DELETE on the WHEP resource) and the connection.
func (v *Viewer) Close() {
	if v.location != "" {
		u := v.location
		if strings.HasPrefix(u, "/") {
			if i := strings.Index(v.o.Endpoint, "/whep/"); i >= 0 {
				u = v.o.Endpoint[:i] + u
			}
		}
		if req, err := http.NewRequest(http.MethodDelete, u, nil); err == nil {
			req.Header.Set("Authorization", "Bearer "+v.o.Token)
			if resp, err := v.o.HTTP.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	if v.cl != nil {
		v.closeDirect()
	}
	_ = v.pc.Close()
}

func drain(tr *webrtc.TrackRemote) {
	buf := make([]byte, 1500)
	for {
		if _, _, err := tr.Read(buf); err != nil {
			return
		}
	}
}

// TrackFrames counts complete frames per received video track (by track id).
func (v *Viewer) TrackFrames() map[string]int64 {
	out := map[string]int64{}
	v.perTrack.Range(func(k, n any) bool {
		out[k.(string)] = n.(*atomic.Int64).Load()
		return true
	})
	return out
}

func (v *Viewer) readVideo(tr *webrtc.TrackRemote) {
	var asm Assembler
	count := &atomic.Int64{}
	v.perTrack.Store(tr.ID(), count)
	asm.OnFrame = func(key bool) {
		v.frames.Add(1)
		count.Add(1)
		if key {
			v.keyframes.Add(1)
		}
		v.ffOnce.Do(func() {
			v.mark(&v.res.FirstFrame)
			close(v.firstFrame)
		})
	}
	buf := make([]byte, 1500)
	var pkt rtp.Packet
	seen := false
	for {
		n, _, err := tr.Read(buf)
		if err != nil {
			return
		}
		if pkt.Unmarshal(buf[:n]) != nil {
			continue
		}
		if !seen { // several video tracks (a wall) each report, the first one counts
			seen = true
			v.mark(&v.res.FirstRTP)
			v.mu.Lock()
			if v.res.Codec == "" {
				v.res.Codec = tr.Codec().MimeType
			}
			v.mu.Unlock()
		}
		if asm.Push(&pkt) {
			v.gaps.Add(1)
		}
	}
}

// iceServers reads the TURN servers from the Link headers of an OPTIONS
// request to the endpoint.
func iceServers(ctx context.Context, o Options) ([]webrtc.ICEServer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodOptions, o.Endpoint, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+o.Token)
	resp, err := o.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("whep options: %w", err)
	}
	resp.Body.Close()
	all := ParseLinks(resp.Header.Values("Link"))
	if o.TURNTCP {
		return all, nil
	}
	// TURN over UDP only, unless asked: gathering waits for every server, and
	// TURN over TCP is a different (slower) path worth measuring on its own.
	var udp []webrtc.ICEServer
	for _, s := range all {
		if strings.Contains(s.URLs[0], "transport=udp") {
			udp = append(udp, s)
		}
	}
	if len(udp) == 0 {
		return all, nil
	}
	return udp, nil
}

// ParseLinks turns RFC 9725 Link headers into ICE servers.
func ParseLinks(links []string) []webrtc.ICEServer {
	var out []webrtc.ICEServer
	for _, h := range links {
		for _, l := range strings.Split(h, ",") {
			l = strings.TrimSpace(l)
			if !strings.HasPrefix(l, "<") || !strings.Contains(l, `rel="ice-server"`) {
				continue
			}
			end := strings.Index(l, ">")
			if end < 0 {
				continue
			}
			s := webrtc.ICEServer{URLs: []string{l[1:end]}}
			for _, p := range strings.Split(l[end+1:], ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if !ok {
					continue
				}
				val = strings.Trim(val, `"`)
				switch k {
				case "username":
					s.Username = val
				case "credential":
					s.Credential = val
				}
			}
			out = append(out, s)
		}
	}
	return out
}
