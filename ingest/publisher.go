package ingest

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bluenviron/mediacommon/v2/pkg/codecs/h264"
	"github.com/bluenviron/mediacommon/v2/pkg/codecs/mpeg4audio"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// Payload types of the tracks, as the camera gateway's.
const (
	videoPT = 102
	opusPT  = 111
)

// publisher is one connection (RTMP or SRT) that joined its room: its H.264
// becomes a video track (access units packetized as they are), its AAC an
// Opus track (the camera gateway's transcoder).
type publisher struct {
	srv       *Server
	part      *sfu.Participant
	log       *slog.Logger
	connected time.Time

	video    *sfu.LocalTrack
	vw       *camera.H264Writer
	sps, pps []byte

	audio   *sfu.LocalTrack
	aac     *camera.AACPlayer
	aacRate int64
	aacNext int64 // next access unit's timestamp, in samples
	aacSeen bool
	noAudio bool // the transcoder could not start

	warned map[string]bool

	// ingress is the admin API's ingress whose stream key this publisher
	// used (nil for a token); started is set at its first media.
	ingress *auth.Ingress
	started atomic.Bool

	mu         sync.Mutex
	firstVideo time.Time
}

func (p *publisher) info() PublisherInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PublisherInfo{Room: p.part.Room().Name(), Identity: p.part.Identity(), Connected: p.connected, FirstVideo: p.firstVideo}
}

func (p *publisher) warnOnce(key, msg string) {
	if p.warned == nil {
		p.warned = map[string]bool{}
	}
	if !p.warned[key] {
		p.warned[key] = true
		p.log.Warn(msg)
	}
}

// videoParams takes the stream's SPS and PPS: the first publish the video track,
// later ones replace them (the output then waits for an IDR).
func (p *publisher) videoParams(sps, pps []byte) error {
	if len(sps) < 4 || len(pps) == 0 {
		return errors.New("H.264 configuration without SPS or PPS")
	}
	if p.video != nil && bytes.Equal(sps, p.sps) && bytes.Equal(pps, p.pps) {
		return nil
	}
	p.sps = append([]byte(nil), sps...)
	p.pps = append([]byte(nil), pps...)
	if p.video == nil {
		if err := p.publishVideo(); err != nil {
			return err
		}
	}
	p.vw.SetParams(p.sps, p.pps)
	return nil
}

// videoFrame sends one access unit stamped pts (90 kHz).
func (p *publisher) videoFrame(au [][]byte, pts uint32) {
	if p.vw == nil {
		return // frames before the configuration cannot be decoded
	}
	p.vw.WriteAU(au, pts)
	p.mediaStarted()
	p.mu.Lock()
	first := p.firstVideo.IsZero() && hasIDR(au)
	if first {
		p.firstVideo = time.Now()
	}
	p.mu.Unlock()
	if first {
		p.log.Info("ingest first video frame in the room", "since_connect_ms", time.Since(p.connected).Milliseconds())
	}
}

func (p *publisher) publishVideo() error {
	if prof := p.sps[1]; prof != 66 && prof != 77 {
		// Browsers receive only the profiles they offer: Firefox (OpenH264)
		// Constrained Baseline, some Chromium builds Baseline and Main.
		p.log.Warn("H.264 profile above Main: browsers without it cannot receive the video; set the encoder's profile to baseline or main",
			"profile_idc", prof)
	}
	fmtp, w, h := camera.H264Params(p.sps)
	ssrc := randSSRC()
	lt, err := p.part.PublishLocal(sfu.LocalTrackOptions{
		Info:  protocol.TrackInfo{Kind: "video", Source: "camera", Name: "rtmp video", SSRC: ssrc, Width: w, Height: h},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeH264, ClockRate: 90000, SDPFmtpLine: fmtp, PayloadType: videoPT},
	})
	if err != nil {
		return fmt.Errorf("publish video: %w", err)
	}
	// An RTMP encoder cannot be asked for a keyframe: new subscribers start
	// from the last GOP in the packet cache instead.
	lt.Publication().SetGOPStart(true)
	vw, err := camera.NewH264Writer(videoPT, ssrc, lt, p.log)
	if err != nil {
		lt.Close()
		return err
	}
	p.video, p.vw = lt, vw
	return nil
}

// audioFrame queues one AAC access unit whose time is ts samples.
func (p *publisher) audioFrame(ts int64, au []byte) {
	if p.aac == nil || len(au) == 0 {
		return
	}
	p.aac.Push(p.aacTime(ts), au)
	p.mediaStarted()
}

// aacTime stamps an access unit. Container timestamps are rounded (RTMP's to
// the millisecond), so consecutive access units are numbered on from the last
// unless the time jumps by more than one access unit (a gap in the stream):
// the transcoder takes any other step as a discontinuity.
func (p *publisher) aacTime(ts int64) uint32 {
	if !p.aacSeen || ts-p.aacNext > mpeg4audio.SamplesPerAccessUnit || p.aacNext-ts > mpeg4audio.SamplesPerAccessUnit {
		p.aacSeen, p.aacNext = true, ts
	}
	out := p.aacNext
	p.aacNext += mpeg4audio.SamplesPerAccessUnit
	return uint32(out)
}

// audioConfig publishes the Opus track for AAC of configuration conf (the
// first one stays: the transcoder keeps it).
func (p *publisher) audioConfig(conf *mpeg4audio.AudioSpecificConfig) error {
	if conf == nil || conf.SampleRate <= 0 {
		return errors.New("AAC configuration without a sample rate")
	}
	if p.audio != nil || p.noAudio {
		return nil
	}
	asc, err := conf.Marshal()
	if err != nil {
		return fmt.Errorf("AAC configuration: %w", err)
	}
	ssrc := randSSRC()
	lt, err := p.part.PublishLocal(sfu.LocalTrackOptions{
		Info: protocol.TrackInfo{Kind: "audio", Source: "microphone", Name: "rtmp audio", SSRC: ssrc},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2,
			SDPFmtpLine: "minptime=10;useinbandfec=1", PayloadType: opusPT},
	})
	if err != nil {
		return fmt.Errorf("publish audio: %w", err)
	}
	aac, err := p.srv.o.Cameras.NewAACLive(asc, lt, ssrc, p.log)
	if err != nil {
		lt.Close()
		p.noAudio = true
		p.log.Warn("AAC audio cannot become Opus: video only", "err", err)
		return nil
	}
	p.audio, p.aac, p.aacRate = lt, aac, int64(conf.SampleRate)
	return nil
}

// hasIDR reports whether an access unit holds an IDR slice (the writer's first output).
func hasIDR(au [][]byte) bool {
	for _, n := range au {
		if len(n) > 0 && h264.NALUType(n[0]&0x1f) == h264.NALUTypeIDR {
			return true
		}
	}
	return false
}

func randSSRC() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}

// close stops the transcoder and ends the tracks.
func (p *publisher) close() {
	if p.aac != nil {
		p.aac.Close()
	}
	if p.audio != nil {
		p.audio.Close()
	}
	if p.video != nil {
		p.video.Close()
	}
}
