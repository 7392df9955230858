package emulator

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/petrel-sfu/petrel/client"
)

// WebRTCCamera is a camera that is itself a WebRTC peer, as the cameras with a
// built-in WebRTC stack are: it joins room camera/<id> over Petrel's WebSocket
// protocol with its own token and offers H.264 (packetization-mode=1 with
// sprop-parameter-sets, nack, nack pli) and G.711 with the bundled data
// channels. A keyframe request makes it start the clip over (its first frame is
// an IDR), as an encoder forced to a keyframe would. It also answers direct
// sessions from viewers (direct.go), and plays what viewers say to it into
// nothing, counting it: TalkSFU for the audio the SFU sends it (a talker's
// microphone, on its subscriber connection), TalkDirect for the audio of direct
// sessions.
type WebRTCCamera struct {
	Client *client.Client
	// PLIs counts keyframe requests received.
	PLIs atomic.Int64
	// DirectRefused counts direct offers refused (too many sessions).
	DirectRefused atomic.Int64
	// DirectCandidates counts viewers' trickled candidates added, and
	// DirectCandidateErrors those refused (malformed, or pion said no).
	DirectCandidates      atomic.Int64
	DirectCandidateErrors atomic.Int64
	// DirectCandidatesSent counts candidates the camera trickled to viewers.
	DirectCandidatesSent atomic.Int64
	// TalkSFU and TalkDirect count the audio the camera received.
	TalkSFU, TalkDirect TalkStats
	cancel              context.CancelFunc
	done                chan struct{}
	stop                chan struct{}
	// Offer is the SDP the camera offered.
	Offer string

	video, audio *webrtc.TrackLocalStaticSample
	restart      chan struct{}
	directAPI    *webrtc.API
	maxDirect    int
	logf         func(msg string, args ...any)

	dmu    sync.Mutex
	direct map[string]*directSession // by viewer sid + "/" + session
	// early holds trickled candidates of sessions whose offer is still being answered.
	early   map[string]*directSession
	timings []map[string]float64
}

// WebRTCOptions configure a WebRTC camera.
type WebRTCOptions struct {
	URL   string // ws://host:port/v1/rtc
	Token string
	Clip  *Clip
	// Tune adjusts the Pion setting engine (tests: loopback only).
	Tune func(*webrtc.SettingEngine)
	// MaxDirect is how many direct sessions the camera serves at once
	// (0: DefaultMaxDirect; negative: none).
	MaxDirect int
	// Log receives a line per direct session event (nil: none).
	Log func(msg string, args ...any)
}

// H264Codec is the camera's H.264 format with its parameter sets.
func (c *Clip) H264Codec() webrtc.RTPCodecParameters {
	sprop := base64.StdEncoding.EncodeToString(c.SPS) + "," + base64.StdEncoding.EncodeToString(c.PPS)
	return webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
		SDPFmtpLine:  fmt.Sprintf("level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=%02x%02x%02x;sprop-parameter-sets=%s", c.SPS[1], c.SPS[2], c.SPS[3], sprop),
		RTCPFeedback: []webrtc.RTCPFeedback{{Type: webrtc.TypeRTCPFBNACK}, {Type: webrtc.TypeRTCPFBNACK, Parameter: "pli"}}}, PayloadType: 102}
}

var pcmu = webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1}

// cameraEngine is the camera's media engine: H.264 and G.711 to send, and
// Opus too, which it only receives (viewers talk in it).
func cameraEngine(c *Clip) (*webrtc.MediaEngine, *interceptor.Registry, error) {
	m := &webrtc.MediaEngine{}
	if err := m.RegisterCodec(c.H264Codec(), webrtc.RTPCodecTypeVideo); err != nil {
		return nil, nil, err
	}
	if err := m.RegisterCodec(webrtc.RTPCodecParameters{RTPCodecCapability: pcmu, PayloadType: 0}, webrtc.RTPCodecTypeAudio); err != nil {
		return nil, nil, err
	}
	if err := m.RegisterCodec(webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1"}, PayloadType: 111}, webrtc.RTPCodecTypeAudio); err != nil {
		return nil, nil, err
	}
	ir := &interceptor.Registry{}
	if err := webrtc.RegisterDefaultInterceptors(m, ir); err != nil {
		return nil, nil, err
	}
	return m, ir, nil
}

// StartWebRTC joins and starts sending.
func StartWebRTC(ctx context.Context, o WebRTCOptions) (*WebRTCCamera, error) {
	m, ir, err := cameraEngine(o.Clip)
	if err != nil {
		return nil, err
	}
	var se webrtc.SettingEngine
	if o.Tune != nil {
		o.Tune(&se)
	}
	api := webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(ir), webrtc.WithSettingEngine(se))
	dapi, err := directAPI(o.Clip, o.Tune)
	if err != nil {
		return nil, err
	}
	// No auto-subscription: the camera hears a viewer only while the gateway
	// gives it the floor (topic talk subscribes it to the talker's microphone).
	no := false
	cl, err := client.Join(ctx, o.URL, o.Token, client.Options{Name: "WebRTC camera", API: api, AutoSubscribe: &no})
	if err != nil {
		return nil, fmt.Errorf("webrtc camera: join: %w", err)
	}
	w := &WebRTCCamera{Client: cl, done: make(chan struct{}), stop: make(chan struct{}), restart: make(chan struct{}, 1),
		directAPI: dapi, maxDirect: o.MaxDirect, logf: o.Log, direct: map[string]*directSession{}, early: map[string]*directSession{}}
	if w.maxDirect == 0 {
		w.maxDirect = DefaultMaxDirect
	}
	cl.OnPublisherRTCP = func(_ string, pkts []rtcp.Packet) {
		for _, p := range pkts {
			switch p.(type) {
			case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
				w.PLIs.Add(1)
				w.keyframe()
			}
		}
	}
	w.video, err = webrtc.NewTrackLocalStaticSample(o.Clip.H264Codec().RTPCodecCapability, "video", "camera")
	if err != nil {
		cl.Close()
		return nil, err
	}
	if o.Clip.ULaw != nil {
		if w.audio, err = webrtc.NewTrackLocalStaticSample(pcmu, "audio", "camera"); err != nil {
			cl.Close()
			return nil, err
		}
	}
	if _, _, err := cl.Publish(ctx, w.video, "camera"); err != nil {
		cl.Close()
		return nil, fmt.Errorf("webrtc camera: publish video: %w", err)
	}
	w.Offer = cl.Pub.LocalDescription().SDP
	if w.audio != nil {
		if _, _, err := cl.Publish(ctx, w.audio, "microphone"); err != nil {
			cl.Close()
			return nil, fmt.Errorf("webrtc camera: publish audio: %w", err)
		}
	}
	fctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.events()
	go w.subscribed()
	go func() {
		defer close(w.done)
		w.feedSamples(fctx, o.Clip)
	}()
	return w, nil
}

// subscribed counts the audio the SFU sends the camera (talk-back through the
// server arrives on its subscriber connection, like any subscription).
func (w *WebRTCCamera) subscribed() {
	for {
		select {
		case <-w.stop:
			return
		case t := <-w.Client.Tracks:
			if t.Remote.Kind() != webrtc.RTPCodecTypeAudio {
				go drainTrack(t.Remote)
				continue
			}
			go w.TalkSFU.count(func(b []byte) (int, error) { n, _, err := t.Remote.Read(b); return n, err },
				strings.EqualFold(t.Remote.Codec().MimeType, webrtc.MimeTypeOpus))
		}
	}
}

func drainTrack(tr *webrtc.TrackRemote) {
	buf := make([]byte, 1500)
	for {
		if _, _, err := tr.Read(buf); err != nil {
			return
		}
	}
}

func (w *WebRTCCamera) log(msg string, args ...any) {
	if w.logf != nil {
		w.logf(msg, args...)
	}
}

// Close leaves the room and ends the direct sessions.
func (w *WebRTCCamera) Close() {
	w.cancel()
	<-w.done
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.closeDirect(func(*directSession) bool { return true }, "camera closed")
	w.Client.Close()
}

// feedSamples plays the clip in real time: one access unit every frame (the
// parameter sets before each IDR, as a camera's encoder emits them) and 20 ms
// of G.711 every 20 ms.
func (w *WebRTCCamera) feedSamples(ctx context.Context, c *Clip) {
	video, audio, restart := w.video, w.audio, w.restart
	frame := time.Second / time.Duration(c.FPS)
	tick := time.NewTicker(frame)
	defer tick.Stop()
	start := [][]byte{{0, 0, 0, 1}}
	i, a := 0, 0
	nextAudio := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-restart:
			i = 0
		case <-tick.C:
		}
		au := c.AUs[i%len(c.AUs)]
		var buf []byte
		if c.IDR[i%len(c.AUs)] {
			buf = append(buf, start[0]...)
			buf = append(buf, c.SPS...)
			buf = append(buf, start[0]...)
			buf = append(buf, c.PPS...)
		}
		for _, n := range au {
			buf = append(buf, start[0]...)
			buf = append(buf, n...)
		}
		_ = video.WriteSample(media.Sample{Data: buf, Duration: frame})
		if c.IDR[i%len(c.AUs)] {
			w.sentKeyframe()
		}
		i++
		for audio != nil && !time.Now().Before(nextAudio) {
			const n = 160
			off := (a * n) % (len(c.ULaw) - n + 1)
			_ = audio.WriteSample(media.Sample{Data: c.ULaw[off : off+n], Duration: 20 * time.Millisecond})
			a++
			nextAudio = nextAudio.Add(20 * time.Millisecond)
		}
	}
}
