package emulator

import (
	"context"
	"encoding/base64"
	"fmt"
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
// an IDR), as an encoder forced to a keyframe would.
type WebRTCCamera struct {
	Client *client.Client
	// PLIs counts keyframe requests received.
	PLIs   atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
	// Offer is the SDP the camera offered.
	Offer string
}

// WebRTCOptions configure a WebRTC camera.
type WebRTCOptions struct {
	URL   string // ws://host:port/v1/rtc
	Token string
	Clip  *Clip
	// Tune adjusts the Pion setting engine (tests: loopback only).
	Tune func(*webrtc.SettingEngine)
}

// H264Codec is the camera's H.264 format with its parameter sets.
func (c *Clip) H264Codec() webrtc.RTPCodecParameters {
	sprop := base64.StdEncoding.EncodeToString(c.SPS) + "," + base64.StdEncoding.EncodeToString(c.PPS)
	return webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
		SDPFmtpLine:  fmt.Sprintf("level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=%02x%02x%02x;sprop-parameter-sets=%s", c.SPS[1], c.SPS[2], c.SPS[3], sprop),
		RTCPFeedback: []webrtc.RTCPFeedback{{Type: webrtc.TypeRTCPFBNACK}, {Type: webrtc.TypeRTCPFBNACK, Parameter: "pli"}}}, PayloadType: 102}
}

// StartWebRTC joins and starts sending.
func StartWebRTC(ctx context.Context, o WebRTCOptions) (*WebRTCCamera, error) {
	m := &webrtc.MediaEngine{}
	if err := m.RegisterCodec(o.Clip.H264Codec(), webrtc.RTPCodecTypeVideo); err != nil {
		return nil, err
	}
	if err := m.RegisterCodec(webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1}, PayloadType: 0}, webrtc.RTPCodecTypeAudio); err != nil {
		return nil, err
	}
	ir := &interceptor.Registry{}
	if err := webrtc.RegisterDefaultInterceptors(m, ir); err != nil {
		return nil, err
	}
	var se webrtc.SettingEngine
	if o.Tune != nil {
		o.Tune(&se)
	}
	api := webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(ir), webrtc.WithSettingEngine(se))
	cl, err := client.Join(ctx, o.URL, o.Token, client.Options{Name: "WebRTC camera", API: api})
	if err != nil {
		return nil, fmt.Errorf("webrtc camera: join: %w", err)
	}
	w := &WebRTCCamera{Client: cl, done: make(chan struct{})}
	restart := make(chan struct{}, 1)
	cl.OnPublisherRTCP = func(_ string, pkts []rtcp.Packet) {
		for _, p := range pkts {
			switch p.(type) {
			case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
				w.PLIs.Add(1)
				select {
				case restart <- struct{}{}:
				default:
				}
			}
		}
	}
	video, err := webrtc.NewTrackLocalStaticSample(o.Clip.H264Codec().RTPCodecCapability, "video", "camera")
	if err != nil {
		cl.Close()
		return nil, err
	}
	audio, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1}, "audio", "camera")
	if err != nil {
		cl.Close()
		return nil, err
	}
	if _, _, err := cl.Publish(ctx, video, "camera"); err != nil {
		cl.Close()
		return nil, fmt.Errorf("webrtc camera: publish video: %w", err)
	}
	w.Offer = cl.Pub.LocalDescription().SDP
	if o.Clip.ULaw != nil {
		if _, _, err := cl.Publish(ctx, audio, "microphone"); err != nil {
			cl.Close()
			return nil, fmt.Errorf("webrtc camera: publish audio: %w", err)
		}
	}
	fctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() {
		defer close(w.done)
		feedSamples(fctx, o.Clip, video, audio, restart)
	}()
	return w, nil
}

// Close leaves the room.
func (w *WebRTCCamera) Close() {
	w.cancel()
	<-w.done
	w.Client.Close()
}

// feedSamples plays the clip in real time: one access unit every frame (the
// parameter sets before each IDR, as a camera's encoder emits them) and 20 ms
// of G.711 every 20 ms.
func feedSamples(ctx context.Context, c *Clip, video, audio *webrtc.TrackLocalStaticSample, restart <-chan struct{}) {
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
		i++
		for c.ULaw != nil && !time.Now().Before(nextAudio) {
			const n = 160
			off := (a * n) % (len(c.ULaw) - n + 1)
			_ = audio.WriteSample(media.Sample{Data: c.ULaw[off : off+n], Duration: 20 * time.Millisecond})
			a++
			nextAudio = nextAudio.Add(20 * time.Millisecond)
		}
	}
}
