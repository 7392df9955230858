package ingest

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bluenviron/gortmplib"
	"github.com/bluenviron/gortmplib/pkg/message"
	"github.com/bluenviron/mediacommon/v2/pkg/codecs/h264"
	"github.com/bluenviron/mediacommon/v2/pkg/codecs/mpeg4audio"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// Payload types of the tracks, as the camera gateway's.
const (
	videoPT = 102
	opusPT  = 111
)

// publisher is one RTMP connection that joined its room: its FLV video tags
// become an H.264 track (access units packetized as they are), its AAC an Opus
// track (the camera gateway's transcoder).
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

	warned map[string]bool

	mu         sync.Mutex
	firstVideo time.Time
}

func (p *publisher) info() PublisherInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PublisherInfo{Room: p.part.Room().Name(), Identity: p.part.Identity(), Connected: p.connected, FirstVideo: p.firstVideo}
}

// run reads messages until the connection ends or breaks a bound.
func (p *publisher) run(sc *gortmplib.ServerConn, bc *budgetConn) error {
	bc.read, bc.limit = 0, partialBudget
	for {
		_ = bc.SetDeadline(time.Now().Add(idleTimeout))
		msg, err := sc.Read()
		if err != nil {
			return err
		}
		bc.read = 0
		switch m := msg.(type) {
		case *message.Video:
			if err := p.onVideo(m); err != nil {
				return err
			}
		case *message.Audio:
			if err := p.onAudio(m); err != nil {
				return err
			}
		case *message.CommandAMF0:
			if m.Name == "deleteStream" || m.Name == "FCUnpublish" || m.Name == "closeStream" {
				return nil
			}
		case *message.VideoExSequenceStart, *message.VideoExCodedFrames, *message.VideoExFramesX,
			*message.VideoExMultitrack, *message.AudioExSequenceStart, *message.AudioExCodedFrames,
			*message.AudioExMultitrack:
			p.warnOnce("enhanced", "enhanced RTMP (HEVC, AV1, VP9, Opus, multitrack) is not taken: send H.264 and AAC")
		}
	}
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

func (p *publisher) onVideo(m *message.Video) error {
	if m.Codec != message.CodecH264 {
		p.warnOnce("hevc", "video is not H.264 (browsers take H.264 from RTMP): ignored")
		return nil
	}
	switch m.Type {
	case message.VideoTypeConfig:
		c := m.AVCConfig
		if c == nil || len(c.SequenceParameterSets) == 0 || len(c.PictureParameterSets) == 0 ||
			len(c.SequenceParameterSets[0].NALUnit) < 4 || len(c.PictureParameterSets[0].NALUnit) == 0 {
			return errors.New("H.264 configuration without SPS or PPS")
		}
		p.sps = append([]byte(nil), c.SequenceParameterSets[0].NALUnit...)
		p.pps = append([]byte(nil), c.PictureParameterSets[0].NALUnit...)
		if p.video == nil {
			if err := p.publishVideo(); err != nil {
				return err
			}
		}
		p.vw.SetParams(p.sps, p.pps)
	case message.VideoTypeAU:
		if p.vw == nil {
			return nil // frames before the configuration cannot be decoded
		}
		var au h264.AVCC
		if err := au.Unmarshal(m.AU); err != nil {
			if errors.Is(err, h264.ErrAVCCNoNALUs) {
				return nil
			}
			return fmt.Errorf("H.264 frame: %w", err)
		}
		if m.PTSDelta != 0 {
			p.warnOnce("bframes", "the encoder sends B-frames, which WebRTC receivers show out of order: set bframes=0")
		}
		pts := m.DTS + m.PTSDelta
		p.vw.WriteAU(au, uint32(int64(pts/time.Millisecond)*90))
		p.mu.Lock()
		first := p.firstVideo.IsZero() && hasIDR(au)
		if first {
			p.firstVideo = time.Now()
		}
		p.mu.Unlock()
		if first {
			p.log.Info("rtmp first video frame in the room", "since_connect_ms", time.Since(p.connected).Milliseconds())
		}
	}
	return nil
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

func (p *publisher) onAudio(m *message.Audio) error {
	if m.Codec != message.CodecMPEG4Audio {
		p.warnOnce("audio", "audio is not AAC: ignored")
		return nil
	}
	switch m.AACType {
	case message.AudioAACTypeConfig:
		if m.AACConfig == nil || m.AACConfig.SampleRate <= 0 {
			return errors.New("AAC configuration without a sample rate")
		}
		if p.audio != nil {
			return nil // the transcoder keeps the first configuration
		}
		return p.publishAudio(m.AACConfig)
	case message.AudioAACTypeAU:
		if p.aac == nil || len(m.AU) == 0 {
			return nil
		}
		p.aac.Push(p.aacTime(m.DTS), m.AU)
	}
	return nil
}

// aacTime stamps an access unit in samples. RTMP's millisecond timestamps are
// rounded, so consecutive access units are numbered on from the last unless
// the timestamp jumps by more than one access unit (a gap in the stream): the
// transcoder takes any other step as a discontinuity.
func (p *publisher) aacTime(dts time.Duration) uint32 {
	ts := int64(dts/time.Millisecond) * p.aacRate / 1000
	if !p.aacSeen || ts-p.aacNext > mpeg4audio.SamplesPerAccessUnit || p.aacNext-ts > mpeg4audio.SamplesPerAccessUnit {
		p.aacSeen, p.aacNext = true, ts
	}
	out := p.aacNext
	p.aacNext += mpeg4audio.SamplesPerAccessUnit
	return uint32(out)
}

func (p *publisher) publishAudio(conf *mpeg4audio.AudioSpecificConfig) error {
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
		p.warnOnce("aac", "AAC audio cannot become Opus ("+err.Error()+"): video only")
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
