package camera

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/bluenviron/gortsplib/v4"
	"github.com/bluenviron/gortsplib/v4/pkg/base"
	"github.com/bluenviron/gortsplib/v4/pkg/description"
	"github.com/bluenviron/gortsplib/v4/pkg/format"
	"github.com/bluenviron/mediacommon/pkg/codecs/mpeg4audio"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

// Backoff bounds for reconnecting to a camera that dropped or never answered.
const (
	backoffMin = 500 * time.Millisecond
	backoffMax = 30 * time.Second
	// A session that streamed this long resets the backoff.
	backoffReset = 10 * time.Second
)

// runRTSP keeps the camera's upstream RTSP session open while it is wanted
// (always when warm, while someone watches when cold), reconnecting with
// exponential backoff. A cold camera still connects once at start, only to
// DESCRIBE it: its tracks are then published, so that a WHEP viewer can
// subscribe before any media flows, and its first viewer only waits for PLAY.
func (c *Camera) runRTSP() {
	defer c.done.Done()
	backoff := backoffMin
	var v *videoRepack
	var a *audioRelay
	for c.ctx.Err() == nil {
		if !c.cfg.Warm && c.hasTracks() && !c.wanted() {
			c.setState(StateIdle, nil)
			select {
			case <-c.ctx.Done():
				return
			case <-c.demand:
			}
		}
		c.setState(StateConnecting, nil)
		began := time.Now()
		streamed, err := c.rtspSession(&v, &a)
		if c.ctx.Err() != nil {
			return
		}
		if streamed && time.Since(began) > backoffReset {
			backoff = backoffMin
		}
		if err == nil {
			backoff = backoffMin
			continue // idle: no viewer any more, or described only
		}
		c.setState(StateBackoff, err)
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, backoffMax)
	}
}

func (c *Camera) hasTracks() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.video != nil || c.audio != nil
}

// rtspSession runs one upstream session. It returns nil when it ended because
// nobody wants the stream; streamed tells whether media flowed.
func (c *Camera) rtspSession(vp **videoRepack, ap **audioRelay) (streamed bool, err error) {
	u, err := base.ParseURL(c.cfg.RTSP)
	if err != nil {
		return false, fmt.Errorf("rtsp url: %w", err)
	}
	transport := gortsplib.TransportTCP
	if c.cfg.RTSPTransport == "udp" {
		transport = gortsplib.TransportUDP
	}
	client := &gortsplib.Client{Transport: &transport, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		UserAgent: "Petrel camera gateway"}
	if err := client.Start(u.Scheme, u.Host); err != nil {
		return false, fmt.Errorf("connect %s: %w", u.Host, err)
	}
	defer client.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-c.ctx.Done():
			client.Close()
		case <-stop:
		}
	}()
	desc, _, err := client.Describe(u)
	if err != nil {
		return false, fmt.Errorf("describe: %w", err)
	}

	// Video: H.264 or H.265.
	var videoMedia *description.Media
	var videoFormat format.Format
	var vps, sps, pps []byte
	mime := ""
	var f264 *format.H264
	var f265 *format.H265
	if m := desc.FindFormat(&f264); m != nil {
		videoMedia, videoFormat, mime = m, f264, webrtc.MimeTypeH264
		sps, pps = f264.SafeParams()
	} else if m := desc.FindFormat(&f265); m != nil {
		videoMedia, videoFormat, mime = m, f265, webrtc.MimeTypeH265
		vps, sps, pps = f265.SafeParams()
	}
	// Audio: Opus or G.711 forwarded as they are.
	var audioMedia *description.Media
	var audioFormat format.Format
	var audioCodec webrtc.RTPCodecParameters
	var fOpus *format.Opus
	var fG711 *format.G711
	var fAAC *format.MPEG4Audio
	var aacConf *mpeg4audio.AudioSpecificConfig
	transcode := false // AAC with ffmpeg: an Opus track
	if m := desc.FindFormat(&fOpus); m != nil {
		audioMedia, audioFormat = m, fOpus
		audioCodec = webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1"}, PayloadType: 111}
	} else if m := desc.FindFormat(&fG711); m != nil && fG711.SampleRate == 8000 && fG711.ChannelCount <= 1 {
		audioMedia, audioFormat = m, fG711
		audioCodec = webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1}, PayloadType: 0}
		if !fG711.MULaw {
			audioCodec.MimeType, audioCodec.PayloadType = webrtc.MimeTypePCMA, 8
		}
	} else if m := desc.FindFormat(&fAAC); m != nil {
		if conf := fAAC.GetConfig(); conf == nil || conf.SampleRate <= 0 {
			c.warnOnce("aac-config", "camera audio is AAC without a usable config: video only")
		} else {
			// AAC is read even without a transcoder: the recorder takes it as it is.
			audioMedia, audioFormat, aacConf = m, fAAC, conf
			c.mu.Lock()
			c.aacConf = conf
			c.mu.Unlock()
			if c.transcoder() == "" {
				why := "AAC audio needs ffmpeg to reach WebRTC viewers as Opus, and ffmpeg is not installed: video only"
				if c.cfg.Transcode == "off" {
					why = "AAC audio is not transcoded (transcode: off): video only"
				}
				c.warnOnce("aac", "camera audio: "+why)
				c.mu.Lock()
				c.audioNote = why
				c.mu.Unlock()
			} else {
				// Said before the Opus track is published, so a status never
				// shows Opus without saying where it comes from.
				c.mu.Lock()
				c.audioNote = idleNote
				c.mu.Unlock()
				transcode = true
				audioCodec = webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1"}, PayloadType: 111}
			}
		}
	}
	if videoMedia == nil && audioMedia == nil {
		return false, fmt.Errorf("camera offers no supported codec (H.264/H.265 video, Opus/G.711 audio): %s", mediaList(desc))
	}

	if videoMedia != nil {
		fmtp, w, h := "", 0, 0
		if mime == webrtc.MimeTypeH264 {
			fmtp, w, h = h264Info(sps)
		}
		ssrc := randU32()
		if *vp != nil {
			ssrc = (*vp).ssrc
		}
		lt, err := c.publish("video", webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: mime, ClockRate: 90000, SDPFmtpLine: fmtp}, PayloadType: 102}, ssrc, w, h)
		if err != nil {
			return false, fmt.Errorf("publish video: %w", err)
		}
		if *vp == nil || (*vp).track != lt {
			if *vp, err = newVideoRepack(mime, 102, ssrc, lt, c.log); err != nil {
				return false, err
			}
		}
		(*vp).newSession(vps, sps, pps)
		if mime == webrtc.MimeTypeH265 {
			if tc := c.publishHEVCAlternate(w, h); tc != nil {
				(*vp).tap = tc.tap
			}
		}
	}
	if audioMedia != nil && (aacConf == nil || transcode) {
		ssrc := randU32()
		if *ap != nil {
			ssrc = (*ap).ssrc
		}
		lt, err := c.publish("audio", audioCodec, ssrc, 0, 0)
		if err != nil {
			return false, fmt.Errorf("publish audio: %w", err)
		}
		if aacConf != nil {
			c.mu.Lock()
			if c.aac == nil || c.aac.track != lt {
				c.aac = newAACTranscoder(c, lt, ssrc)
			}
			tc := c.aac
			c.mu.Unlock()
			tc.newSession(*aacConf)
		} else if *ap == nil || (*ap).track != lt {
			*ap = &audioRelay{ssrc: ssrc, pt: uint8(audioCodec.PayloadType), clock: audioCodec.ClockRate, track: lt}
		}
		if *ap != nil {
			(*ap).newSession()
		}
	}
	if !c.cfg.Warm && !c.wanted() && !c.drainDemand() {
		return false, nil // described only: tracks are published, nobody watches yet
	}

	v, a := *vp, *ap
	if videoMedia != nil {
		if _, err := client.Setup(desc.BaseURL, videoMedia, 0, 0); err != nil {
			return false, fmt.Errorf("setup video: %w", err)
		}
		client.OnPacketRTP(videoMedia, videoFormat, func(pkt *rtp.Packet) {
			c.bytesIn.Add(uint64(pkt.MarshalSize()))
			v.push(pkt)
		})
		client.OnPacketRTCP(videoMedia, func(p rtcp.Packet) {
			if sr, ok := p.(*rtcp.SenderReport); ok && v.synced {
				forwardSR(sr, v.ssrc, v.tsOff, v.track)
			}
		})
	}
	if audioMedia != nil && aacConf != nil {
		if _, err := client.Setup(desc.BaseURL, audioMedia, 0, 0); err != nil {
			return false, fmt.Errorf("setup audio: %w", err)
		}
		dec, err := fAAC.CreateDecoder()
		if err != nil {
			return false, fmt.Errorf("aac decoder: %w", err)
		}
		var tc *aacTranscoder
		if transcode {
			c.mu.Lock()
			tc = c.aac
			c.mu.Unlock()
		}
		client.OnPacketRTP(audioMedia, audioFormat, func(pkt *rtp.Packet) {
			c.bytesIn.Add(uint64(pkt.MarshalSize()))
			aus, err := dec.Decode(pkt)
			if err != nil {
				return // fragments still missing, or a malformed packet
			}
			c.tapAAC(pkt.Timestamp, aus)
			if tc == nil {
				return
			}
			for i := range aus {
				aus[i] = append([]byte(nil), aus[i]...)
			}
			tc.push(pkt.Timestamp, aus)
		})
		client.OnPacketRTCP(audioMedia, func(p rtcp.Packet) {
			if sr, ok := p.(*rtcp.SenderReport); ok && tc != nil {
				tc.forwardSR(sr)
			}
		})
	} else if audioMedia != nil {
		if _, err := client.Setup(desc.BaseURL, audioMedia, 0, 0); err != nil {
			return false, fmt.Errorf("setup audio: %w", err)
		}
		client.OnPacketRTP(audioMedia, audioFormat, func(pkt *rtp.Packet) {
			c.bytesIn.Add(uint64(pkt.MarshalSize()))
			a.push(pkt)
		})
		client.OnPacketRTCP(audioMedia, func(p rtcp.Packet) {
			if sr, ok := p.(*rtcp.SenderReport); ok && a.synced {
				forwardSR(sr, a.ssrc, a.tsOff, a.track)
			}
		})
	}
	if _, err := client.Play(nil); err != nil {
		return false, fmt.Errorf("play: %w", err)
	}
	c.sessionStarted()
	c.setState(StateStreaming, nil)
	waitErr := make(chan error, 1)
	go func() { waitErr <- client.Wait() }()
	tick := time.NewTicker(min(time.Second, c.idleAfter()/2))
	defer tick.Stop()
	lastWanted := time.Now()
	for {
		select {
		case err := <-waitErr:
			if c.ctx.Err() != nil {
				return true, errStopped
			}
			if err == nil {
				err = errors.New("camera closed the session")
			}
			return true, fmt.Errorf("camera session ended: %w", err)
		case <-c.demand:
			lastWanted = time.Now()
		case <-tick.C:
			if c.cfg.Warm || c.wanted() {
				lastWanted = time.Now()
			} else if time.Since(lastWanted) > c.idleAfter() {
				c.log.Info("no viewer: closing the camera session")
				return true, nil
			}
		}
	}
}

// transcoder is the ffmpeg binary for AAC audio, "" if none (or "off").
func (c *Camera) transcoder() string {
	switch c.cfg.Transcode {
	case "off":
		return ""
	case "", "ffmpeg":
		return ffmpegPath
	}
	if p, err := exec.LookPath(c.cfg.Transcode); err == nil {
		return p
	}
	return ""
}

func (c *Camera) idleAfter() time.Duration {
	if c.cfg.IdleAfter > 0 {
		return c.cfg.IdleAfter
	}
	return c.g.o.IdleAfter
}

// drainDemand consumes a pending viewer signal.
func (c *Camera) drainDemand() bool {
	select {
	case <-c.demand:
		return true
	default:
		return false
	}
}

func (c *Camera) sessionStarted() {
	c.mu.Lock()
	if c.hadSession {
		c.reconnects++
	}
	c.hadSession = true
	c.mu.Unlock()
}

func (c *Camera) warnOnce(key, msg string) {
	c.mu.Lock()
	if c.warned == nil {
		c.warned = map[string]bool{}
	}
	seen := c.warned[key]
	c.warned[key] = true
	c.mu.Unlock()
	if !seen {
		c.log.Warn(msg)
	}
}

func mediaList(d *description.Session) string {
	var s []string
	for _, m := range d.Medias {
		for _, f := range m.Formats {
			s = append(s, string(m.Type)+"/"+f.Codec())
		}
	}
	return strings.Join(s, ", ")
}
