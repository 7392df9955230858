// Package emulator is a test IP camera: an RTSP server (gortsplib) that plays a
// generated clip (scripts/make-test-clip.sh) in a loop, H.264 with G.711 audio,
// to every client that connects. Like many real cameras it sends the parameter
// sets only in the SDP (sprop-parameter-sets), not before each keyframe, and
// starts every session at a keyframe. It can be closed and started again on the
// same address to test reconnection. Tests use it in-process; `petrel camera
// emulate` runs it standalone.
package emulator

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bluenviron/gortsplib/v4"
	"github.com/bluenviron/gortsplib/v4/pkg/base"
	"github.com/bluenviron/gortsplib/v4/pkg/description"
	"github.com/bluenviron/gortsplib/v4/pkg/format"
	"github.com/bluenviron/gortsplib/v4/pkg/format/rtph264"
	"github.com/bluenviron/gortsplib/v4/pkg/format/rtph265"
	"github.com/bluenviron/mediacommon/pkg/codecs/mpeg4audio"
	"github.com/pion/rtp"
)

// Options configure an emulator.
type Options struct {
	// Addr is the RTSP listen address (default 127.0.0.1:0).
	Addr string
	// Clip is the loaded test clip (LoadClip).
	Clip *Clip
	// NoAudio leaves the audio track out.
	NoAudio bool
	// Audio is the audio codec: "g711" (the default, mu-law), "aac" (AAC-LC,
	// RFC 3640 mpeg4-generic) or "aac-latm" (RFC 6416 MP4A-LATM), both from
	// clip.aac.
	Audio string
	// InBandParams sends SPS/PPS before each IDR as well (some cameras do).
	InBandParams bool
	// H265 sends the clip's H.265 video (clip.h265) instead of its H.264.
	H265 bool
	Log  *slog.Logger
}

// Emulator is a running test camera.
type Emulator struct {
	o    Options
	srv  *gortsplib.Server
	addr string

	mu       sync.Mutex
	streams  map[*gortsplib.ServerConn]*gortsplib.ServerStream
	sessions map[*gortsplib.ServerSession]*session

	Plays atomic.Int64 // PLAY requests served
}

type session struct {
	stream *gortsplib.ServerStream
	stop   chan struct{}
	once   sync.Once
}

// Start listens and serves.
func Start(o Options) (*Emulator, error) {
	if o.Clip == nil {
		return nil, errors.New("emulator: no clip")
	}
	if o.H265 && o.Clip.H265 == nil {
		return nil, errors.New("emulator: the clip has no H.265 video (clip.h265: scripts/make-test-clip.sh writes it with ffmpeg's libx265)")
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	e := &Emulator{o: o, streams: map[*gortsplib.ServerConn]*gortsplib.ServerStream{}, sessions: map[*gortsplib.ServerSession]*session{}}
	var bound atomic.Value
	e.srv = &gortsplib.Server{
		Handler:     e,
		RTSPAddress: o.Addr,
		Listen: func(network, address string) (net.Listener, error) {
			ln, err := net.Listen(network, address)
			if err == nil {
				bound.Store(ln.Addr().String())
			}
			return ln, err
		},
	}
	if err := e.srv.Start(); err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	e.addr, _ = bound.Load().(string)
	return e, nil
}

// Addr is the listening address.
func (e *Emulator) Addr() string { return e.addr }

// URL is the stream's RTSP URL.
func (e *Emulator) URL() string {
	return "rtsp://" + e.addr + "/stream"
}

// Close disconnects every client and stops listening, as a camera that loses
// power.
func (e *Emulator) Close() {
	e.srv.Close()
	e.mu.Lock()
	for ss, s := range e.sessions {
		s.once.Do(func() { close(s.stop) })
		delete(e.sessions, ss)
	}
	for c, st := range e.streams {
		st.Close()
		delete(e.streams, c)
	}
	e.mu.Unlock()
}

func (e *Emulator) description() *description.Session {
	c := e.o.Clip
	var vf format.Format = &format.H264{PayloadTyp: 96, SPS: c.SPS, PPS: c.PPS, PacketizationMode: 1}
	if e.o.H265 {
		vf = &format.H265{PayloadTyp: 96, VPS: c.H265.VPS, SPS: c.H265.SPS, PPS: c.H265.PPS}
	}
	medias := []*description.Media{{Type: description.MediaTypeVideo, Formats: []format.Format{vf}}}
	if e.o.NoAudio {
		return &description.Session{Title: "Petrel test camera", Medias: medias}
	}
	if (e.o.Audio == "aac" || e.o.Audio == "aac-latm") && c.AACConfig != nil {
		f := &format.MPEG4Audio{PayloadTyp: 97, Config: c.AACConfig, SizeLength: 13, IndexLength: 3, IndexDeltaLength: 3, ProfileLevelID: 1}
		if e.o.Audio == "aac-latm" {
			f = &format.MPEG4Audio{PayloadTyp: 97, LATM: true, ProfileLevelID: 30, StreamMuxConfig: &mpeg4audio.StreamMuxConfig{
				Programs: []*mpeg4audio.StreamMuxConfigProgram{{Layers: []*mpeg4audio.StreamMuxConfigLayer{{AudioSpecificConfig: c.AACConfig, LatmBufferFullness: 255}}}}}}
		}
		medias = append(medias, &description.Media{Type: description.MediaTypeAudio, Formats: []format.Format{f}})
	} else if c.ULaw != nil {
		medias = append(medias, &description.Media{
			Type:    description.MediaTypeAudio,
			Formats: []format.Format{&format.G711{PayloadTyp: 0, MULaw: true, SampleRate: 8000, ChannelCount: 1}},
		})
	}
	return &description.Session{Title: "Petrel test camera", Medias: medias}
}

// OnDescribe gives each connection its own stream, so that each session starts
// at the clip's first keyframe as cameras that start sessions with an IDR do.
func (e *Emulator) OnDescribe(ctx *gortsplib.ServerHandlerOnDescribeCtx) (*base.Response, *gortsplib.ServerStream, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.streams[ctx.Conn]
	if st == nil {
		st = gortsplib.NewServerStream(e.srv, e.description())
		e.streams[ctx.Conn] = st
	}
	return &base.Response{StatusCode: base.StatusOK}, st, nil
}

func (e *Emulator) OnSetup(ctx *gortsplib.ServerHandlerOnSetupCtx) (*base.Response, *gortsplib.ServerStream, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.streams[ctx.Conn]
	if st == nil {
		st = gortsplib.NewServerStream(e.srv, e.description())
		e.streams[ctx.Conn] = st
	}
	if _, ok := e.sessions[ctx.Session]; !ok {
		e.sessions[ctx.Session] = &session{stream: st, stop: make(chan struct{})}
	}
	return &base.Response{StatusCode: base.StatusOK}, st, nil
}

func (e *Emulator) OnPlay(ctx *gortsplib.ServerHandlerOnPlayCtx) (*base.Response, error) {
	e.mu.Lock()
	s := e.sessions[ctx.Session]
	e.mu.Unlock()
	if s == nil {
		return &base.Response{StatusCode: base.StatusSessionNotFound}, nil
	}
	e.Plays.Add(1)
	go e.feed(s)
	return &base.Response{StatusCode: base.StatusOK}, nil
}

func (e *Emulator) OnSessionClose(ctx *gortsplib.ServerHandlerOnSessionCloseCtx) {
	e.mu.Lock()
	s := e.sessions[ctx.Session]
	delete(e.sessions, ctx.Session)
	e.mu.Unlock()
	if s != nil {
		s.once.Do(func() { close(s.stop) })
	}
}

func (e *Emulator) OnConnClose(ctx *gortsplib.ServerHandlerOnConnCloseCtx) {
	e.mu.Lock()
	st := e.streams[ctx.Conn]
	delete(e.streams, ctx.Conn)
	var stops []*session
	for ss, s := range e.sessions {
		if s.stream == st {
			stops = append(stops, s)
			delete(e.sessions, ss)
		}
	}
	e.mu.Unlock()
	for _, s := range stops {
		s.once.Do(func() { close(s.stop) })
	}
	if st != nil {
		st.Close()
	}
}

// feed plays the clip in real time on s's stream until the session ends.
func (e *Emulator) feed(s *session) {
	c := e.o.Clip
	desc := s.stream.Description()
	video := desc.Medias[0]
	var audio *description.Media
	if len(desc.Medias) > 1 {
		audio = desc.Medias[1]
	}
	var enc interface {
		Encode([][]byte) ([]*rtp.Packet, error)
	}
	aus, idrs, params := c.AUs, c.IDR, [][]byte{c.SPS, c.PPS}
	if e.o.H265 {
		e265 := &rtph265.Encoder{PayloadType: 96, PayloadMaxSize: 1400}
		if err := e265.Init(); err != nil {
			return
		}
		enc = e265
		aus, idrs, params = c.H265.AUs, c.H265.IDR, [][]byte{c.H265.VPS, c.H265.SPS, c.H265.PPS}
	} else {
		e264 := &rtph264.Encoder{PayloadType: 96, PacketizationMode: 1, PayloadMaxSize: 1400}
		if err := e264.Init(); err != nil {
			return
		}
		enc = e264
	}
	var aac interface {
		Encode([][]byte) ([]*rtp.Packet, error)
	}
	if audio != nil {
		if f, ok := audio.Formats[0].(*format.MPEG4Audio); ok {
			enc, err := f.CreateEncoder()
			if err != nil {
				return
			}
			aac = enc
		}
	}
	frame := time.Second / time.Duration(c.FPS)
	const audioStep = 20 * time.Millisecond
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var vn, an int
	tsBase := uint32(start.UnixNano())
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		elapsed := time.Since(start)
		for time.Duration(vn)*frame <= elapsed {
			i := vn % len(aus)
			au := aus[i]
			if idrs[i] && e.o.InBandParams {
				au = append(append([][]byte(nil), params...), au...)
			}
			pkts, err := enc.Encode(au)
			if err == nil {
				ts := tsBase + uint32(vn*90000/c.FPS)
				for _, p := range pkts {
					p.Timestamp = ts
					if s.stream.WritePacketRTPWithNTP(video, p, start.Add(time.Duration(vn)*frame)) != nil {
						return
					}
				}
			}
			vn++
		}
		if aac != nil {
			// One access unit (1024 samples) a packet, timestamps at the AAC rate.
			rate := c.AACConfig.SampleRate
			for time.Duration(an)*time.Second*1024/time.Duration(rate) <= elapsed {
				pkts, err := aac.Encode([][]byte{c.AAC[an%len(c.AAC)]})
				if err != nil {
					return
				}
				for _, p := range pkts {
					p.Timestamp = tsBase + uint32(an*1024)
					if s.stream.WritePacketRTPWithNTP(audio, p, start.Add(time.Duration(an)*time.Second*1024/time.Duration(rate))) != nil {
						return
					}
				}
				an++
			}
			continue
		}
		for audio != nil && time.Duration(an)*audioStep <= elapsed {
			const n = 160 // 20 ms at 8 kHz
			off := (an * n) % (len(c.ULaw) - n + 1)
			p := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 0, SequenceNumber: uint16(an), Timestamp: tsBase + uint32(an*n), Marker: an == 0},
				Payload: c.ULaw[off : off+n]}
			if s.stream.WritePacketRTPWithNTP(audio, p, start.Add(time.Duration(an)*audioStep)) != nil {
				return
			}
			an++
		}
	}
}
