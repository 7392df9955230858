package camera

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Eyevinn/mp4ff/mp4"
	"github.com/bluenviron/gortsplib/v4/pkg/format/rtph264"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/record"
	"github.com/petrel-sfu/petrel/sfu"
)

// The HTTP live fallback: GET /v1/cameras/{id}/live.mp4 streams the camera's
// H.264 video as fragmented MP4 (one fragment per frame), for networks where
// neither UDP nor TURN gets through. It starts at the cached last keyframe, so
// the first frame comes at once; a <video> plays it through Media Source
// Extensions (web/app/camera.ts).
//
// Audio: when the camera's audio reaches the room as Opus (an Opus camera, or
// an AAC camera's audio transcoded to Opus by camera/aac.go, which this
// stream's sink starts like any listener), it is track 2, Opus in ISO-BMFF
// (the recorder's sample entry, record.OpusSampleEntry), 48 kHz, one fragment
// per packet. Its timeline is anchored on the video's: the first packet goes
// at the decode time of the last video frame written plus the wall-clock time
// since, then it follows its RTP clock. G.711 has no form that MSE plays (no
// browser's MSE takes 'ulaw'/'alaw' in MP4), so G.711 cameras' fallback is
// video only; the WebRTC path carries their audio.

// Verifier checks a token (the signal package's).
type Verifier func(token string) (*auth.Claims, error)

// Door admits a viewer whose token is verified (per address, then against
// the server's join budget) and logs refusals without flooding the log: the
// signal package's front door.
type Door interface {
	Admit(r *http.Request) error
	Refused(door string, r *http.Request, err error)
}

// Routes adds the camera routes for viewers (viewer tokens, not admin).
func (g *Gateway) Routes(mux *http.ServeMux, verify Verifier, door Door) {
	mux.HandleFunc("GET /v1/cameras/{id}/live.mp4", func(w http.ResponseWriter, r *http.Request) {
		g.serveLive(w, r, verify, door)
	})
	// A viewer's view of one camera's state (the app's badges and overlay); a
	// token for the camera's room or for the wall room will do.
	mux.HandleFunc("GET /v1/cameras/{id}/status", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		claims, err := verify(tokenOf(r))
		if err != nil {
			tokenError(w, err)
			return
		}
		if claims.Room != RoomOf(id) && claims.Room != WallRoom {
			liveError(w, http.StatusForbidden, protocol.CodeForbidden, "the token is for another room")
			return
		}
		c := g.Camera(id)
		if c == nil {
			liveError(w, http.StatusNotFound, protocol.CodeNotFound, "no camera "+id)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(c.Status())
	})
}

// tokenOf reads a bearer token, or ?token= (a <video src> cannot set headers).
func tokenOf(r *http.Request) string {
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return r.URL.Query().Get("token")
}

// tokenError answers a request whose token failed verification with the
// error's code (expired, reserved identity, ...).
func tokenError(w http.ResponseWriter, err error) {
	status, code := http.StatusUnauthorized, protocol.CodeOf(err)
	switch code {
	case protocol.CodeIdentityReserved:
		status = http.StatusForbidden
	case protocol.CodeUnauthorized, protocol.CodeTokenExpired:
	default:
		code = protocol.CodeUnauthorized
	}
	liveError(w, status, code, protocol.MessageOf(err))
}

func liveError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "{\"code\":%q,\"message\":%q}\n", code, msg)
}

// videoPublication is the camera's video track, whatever its ingest.
func (c *Camera) videoPublication() *sfu.Publication {
	if p := c.webrtcParticipant(); c.cfg.WebRTC && p != nil {
		for _, pub := range p.Publications() {
			if pub.Kind() == sfu.Video {
				return pub
			}
		}
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.video == nil {
		return nil
	}
	return c.video.Publication()
}

// h264Alternate is an H.265 camera's transcoded H.264 track, nil if none.
func (c *Camera) h264Alternate() *sfu.Publication {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hevc == nil {
		return nil
	}
	return c.hevc.track.Publication()
}

type livePacket struct {
	h       rtp.Header
	payload []byte
	audio   bool
	at      time.Time // arrival (audio: anchors its timeline on the video's)
}

// liveSink copies packets to the HTTP writer; a full queue drops, and the
// writer then waits for the next keyframe.
type liveSink struct {
	ch      chan livePacket
	dropped atomic.Bool
}

func (s *liveSink) WriteRTP(p *sfu.Packet) {
	lp := livePacket{h: p.Header, payload: append([]byte(nil), p.Payload...)}
	lp.h.Extensions = nil
	lp.h.CSRC = nil
	select {
	case s.ch <- lp:
	default:
		s.dropped.Store(true)
	}
}

// liveAudioSink queues the audio to the same writer; a full queue drops the
// packet (the video's restart re-anchors the audio).
type liveAudioSink struct{ s *liveSink }

func (a liveAudioSink) WriteRTP(p *sfu.Packet) {
	if len(p.Payload) == 0 {
		return
	}
	lp := livePacket{h: p.Header, payload: append([]byte(nil), p.Payload...), audio: true, at: time.Now()}
	lp.h.Extensions = nil
	lp.h.CSRC = nil
	select {
	case a.s.ch <- lp:
	default:
	}
}

// audioPublication is the camera's audio track if it reaches the room as
// Opus (what live.mp4 can carry), else nil.
func (c *Camera) audioPublication() *sfu.Publication {
	var pub *sfu.Publication
	if p := c.webrtcParticipant(); c.cfg.WebRTC && p != nil {
		for _, x := range p.Publications() {
			if x.Kind() == sfu.Audio {
				pub = x
				break
			}
		}
	} else {
		c.mu.Lock()
		if c.audio != nil {
			pub = c.audio.Publication()
		}
		c.mu.Unlock()
	}
	if pub == nil || !strings.EqualFold(pub.Codec().MimeType, webrtc.MimeTypeOpus) {
		return nil
	}
	return pub
}

func (g *Gateway) serveLive(w http.ResponseWriter, r *http.Request, verify Verifier, door Door) {
	id := r.PathValue("id")
	claims, err := verify(tokenOf(r))
	if err != nil {
		door.Refused("live.mp4", r, err)
		tokenError(w, err)
		return
	}
	// A wall token sees every camera in the wall room; its HTTP tiles (browsers
	// without H.264 for WebRTC) come from here.
	if !claims.MayWatchCamera(id) {
		liveError(w, http.StatusForbidden, protocol.CodeForbidden, "the token does not allow watching "+RoomOf(id))
		return
	}
	if err := door.Admit(r); err != nil {
		door.Refused("live.mp4", r, err)
		status := http.StatusServiceUnavailable
		if protocol.CodeOf(err) == protocol.CodeRateLimited {
			status = http.StatusTooManyRequests
		}
		liveError(w, status, protocol.CodeOf(err), protocol.MessageOf(err))
		return
	}
	c := g.Camera(id)
	if c == nil {
		liveError(w, http.StatusNotFound, protocol.CodeNotFound, "no camera "+id)
		return
	}
	pub := c.videoPublication()
	if pub == nil {
		liveError(w, http.StatusServiceUnavailable, protocol.CodeServerBusy, "the camera has no video yet")
		return
	}
	if alt := c.h264Alternate(); alt != nil && strings.EqualFold(pub.Codec().MimeType, webrtc.MimeTypeH265) {
		pub = alt // an H.265 camera: its H.264 transcode (hevc.go), which this sink starts
	}
	if !strings.EqualFold(pub.Codec().MimeType, webrtc.MimeTypeH264) {
		msg := "live.mp4 carries H.264 only; the camera sends " + pub.Codec().MimeType
		if note := c.Status().VideoNote; note != "" {
			msg += " (" + note + ")"
		}
		liveError(w, http.StatusUnsupportedMediaType, protocol.CodeBadRequest, msg)
		return
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "video/mp4")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}

	c.liveViewers.Add(1)
	defer c.liveViewers.Add(-1)
	sink := &liveSink{ch: make(chan livePacket, 2048)}
	remove := pub.AddSink(sink)
	defer remove()
	apub := c.audioPublication()
	if apub != nil {
		removeAudio := apub.AddSink(liveAudioSink{sink})
		defer removeAudio()
	}
	c.wake() // a cold RTSP camera opens its session for this viewer
	bw := bufio.NewWriterSize(w, 64<<10)
	mw := &mp4Writer{w: bw, audio: apub != nil}
	var dec rtph264.Decoder
	_ = dec.Init()
	push := func(h *rtp.Header, payload []byte) error {
		au, err := dec.Decode(&rtp.Packet{Header: *h, Payload: payload})
		if err != nil {
			return nil // more packets needed, or a broken frame: skip
		}
		if err := mw.writeAU(au, h.Timestamp); err != nil {
			return err
		}
		return nil
	}
	next, primed := pub.CachedGOP(func(p *sfu.Packet) {
		payload := append([]byte(nil), p.Payload...)
		_ = push(&p.Header, payload)
	})
	if err := bw.Flush(); err != nil {
		return
	}
	if fl != nil {
		fl.Flush()
	}
	g.log.Info("live.mp4 started", "camera", id, "remote", r.RemoteAddr, "from_cache", primed, "audio", apub != nil)
	flushTick := time.NewTicker(20 * time.Millisecond)
	defer flushTick.Stop()
	dirty := false
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.ctx.Done():
			return
		case <-flushTick.C:
			if dirty {
				if bw.Flush() != nil {
					return
				}
				if fl != nil {
					fl.Flush()
				}
				dirty = false
			}
		case p := <-sink.ch:
			if p.audio {
				if err := mw.writeOpus(p.payload, p.h.Timestamp, p.at); err != nil {
					return
				}
				dirty = true
				continue
			}
			if primed && int16(p.h.SequenceNumber-next) < 0 {
				continue // already sent from the cache
			}
			primed = false
			if sink.dropped.Swap(false) {
				mw.started = false  // lost packets: restart at the next keyframe
				mw.aStarted = false // and the audio with it
				_ = dec.Init()
			}
			if err := push(&p.h, p.payload); err != nil {
				return
			}
			dirty = true
			if len(sink.ch) == 0 {
				if bw.Flush() != nil {
					return
				}
				if fl != nil {
					fl.Flush()
				}
				dirty = false
			}
		}
	}
}

// mp4Writer writes an init segment at the first IDR with its SPS/PPS, then one
// fragment per access unit (and per Opus packet, track 2, when audio is set).
type mp4Writer struct {
	w        *bufio.Writer
	inited   bool
	started  bool
	seq      uint32 // fragment sequence number, both tracks
	vn       uint64 // video access units written
	vAt      time.Time
	audio    bool // the init declares the Opus track
	aStarted bool
	aDecode  uint64 // 48 kHz
	aLastTS  uint32
	aLastDur uint32
	baseTS   uint32
	lastTS   uint32
	decode   uint64
	lastDur  uint32
	sps, pps []byte
	avcc     []byte
}

var errNoParams = errors.New("no SPS/PPS before the first IDR")

func (m *mp4Writer) writeAU(au [][]byte, ts uint32) error {
	idr := false
	for _, n := range au {
		if len(n) == 0 {
			continue
		}
		switch n[0] & 0x1f {
		case 5:
			idr = true
		case 7:
			m.sps = append(m.sps[:0], n...)
		case 8:
			m.pps = append(m.pps[:0], n...)
		}
	}
	if !m.started {
		if !idr || m.sps == nil || m.pps == nil {
			return nil
		}
		if !m.inited {
			init := mp4.CreateEmptyInit()
			init.AddEmptyTrack(90000, "video", "und")
			if err := init.Moov.Trak.SetAVCDescriptor("avc1", [][]byte{m.sps}, [][]byte{m.pps}, true); err != nil {
				return fmt.Errorf("live.mp4 init: %w", err)
			}
			if m.audio {
				entry, err := record.OpusSampleEntry()
				if err != nil {
					return fmt.Errorf("live.mp4 init: %w", err)
				}
				init.AddEmptyTrack(opusClock, "audio", "und")
				init.Moov.Traks[1].Mdia.Minf.Stbl.Stsd.AddChild(entry)
			}
			if err := init.Encode(m.w); err != nil {
				return err
			}
			m.inited = true
			m.baseTS = ts
		} else {
			// Resuming after loss: keep the timeline going.
			m.decode += uint64(m.lastDur)
			m.baseTS = ts - uint32(m.decode)
		}
		m.started = true
		m.lastTS = ts
	}
	dur := ts - m.lastTS
	if dur == 0 || dur > 90000 {
		dur = 3600
	}
	if m.vn > 0 {
		m.decode += uint64(dur)
	}
	m.vn++
	m.vAt = time.Now()
	m.lastTS = ts
	m.lastDur = dur
	m.seq++
	m.avcc = m.avcc[:0]
	for _, n := range au {
		if len(n) == 0 || n[0]&0x1f == 9 {
			continue
		}
		m.avcc = binary.BigEndian.AppendUint32(m.avcc, uint32(len(n)))
		m.avcc = append(m.avcc, n...)
	}
	f, err := mp4.CreateFragment(m.seq, 1)
	if err != nil {
		return err
	}
	flags := mp4.NonSyncSampleFlags
	if idr {
		flags = mp4.SyncSampleFlags
	}
	f.AddFullSample(mp4.FullSample{Sample: mp4.Sample{Flags: flags, Dur: dur, Size: uint32(len(m.avcc))}, DecodeTime: m.decode, Data: m.avcc})
	return f.Encode(m.w)
}

// writeOpus writes one Opus packet as a fragment of track 2, once the video
// has started (audio before it has no timeline to go on). A packet whose TOC
// does not parse is skipped.
func (m *mp4Writer) writeOpus(p []byte, ts uint32, at time.Time) error {
	if !m.audio || !m.started {
		return nil
	}
	n := opusSamples(p)
	if n == 0 {
		return nil
	}
	if !m.aStarted {
		// Anchor: the last video frame's decode time plus the time since it
		// was written (at most a second: a stalled video does not push the
		// audio ahead).
		el := min(max(at.Sub(m.vAt), 0), time.Second)
		m.aDecode = m.decode*opusClock/90000 + uint64(el)*opusClock/uint64(time.Second)
		m.aStarted = true
	} else {
		step := uint64(m.aLastDur)
		// Follow the RTP clock over a pause (DTX, loss) of more than 100
		// ms; a step back or a jump of more than 5 s keeps going contiguously.
		if d := int64(int32(ts - m.aLastTS)); d > int64(step)+opusClock/10 && d < 5*opusClock {
			step = uint64(d)
		}
		m.aDecode += step
	}
	m.aLastTS, m.aLastDur = ts, uint32(n)
	m.seq++
	f, err := mp4.CreateFragment(m.seq, 2)
	if err != nil {
		return err
	}
	f.AddFullSample(mp4.FullSample{Sample: mp4.Sample{Flags: mp4.SyncSampleFlags, Dur: uint32(n), Size: uint32(len(p))}, DecodeTime: m.aDecode, Data: p})
	return f.Encode(m.w)
}

// opusSamples is an Opus packet's duration in 48 kHz samples from its TOC
// (RFC 6716 section 3.1), 0 if it does not parse.
func opusSamples(p []byte) int {
	if len(p) == 0 {
		return 0
	}
	config := int(p[0] >> 3)
	var frame int
	switch {
	case config < 12: // SILK: 10, 20, 40, 60 ms
		frame = 480 << (config % 4)
		if config%4 == 3 {
			frame = 2880
		}
	case config < 16: // hybrid: 10, 20 ms
		frame = 480 << (config % 2)
	default: // CELT: 2.5, 5, 10, 20 ms
		frame = 120 << (config % 4)
	}
	switch p[0] & 3 {
	case 0:
		return frame
	case 1, 2:
		return 2 * frame
	}
	if len(p) < 2 || p[1]&0x3f == 0 || int(p[1]&0x3f)*frame > 5760 {
		return 0
	}
	return int(p[1]&0x3f) * frame
}

// LiveTracks are the publications a live viewer outside WebRTC (live.mp4, HLS
// egress) attaches its sinks to: the video (an H.265 camera's H.264 transcode
// when it has one, which the sink starts) and the audio if it reaches the room
// as Opus. It wakes a cold camera. video is nil until the camera has sent any.
func (c *Camera) LiveTracks() (video, audio *sfu.Publication) {
	c.wake()
	video = c.videoPublication()
	if video == nil {
		return nil, nil
	}
	if alt := c.h264Alternate(); alt != nil && strings.EqualFold(video.Codec().MimeType, webrtc.MimeTypeH265) {
		video = alt
	}
	return video, c.audioPublication()
}
