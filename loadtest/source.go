// Package loadtest is Petrel's WebRTC load generator: many lean Pion peer
// connections in one process that send and receive real SRTP but never encode or
// decode. Media comes from shared sources (a looped pre-encoded file, RTP from a
// UDP port, or a synthetic stream that carries its send time); one source feeds
// every peer that publishes it. Receivers count packets, loss, jitter and delay
// from the RTP headers themselves instead of running Pion's interceptors.
package loadtest

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/rtc"
)

// Packet is one pre-packetized RTP payload of a frame.
type Packet struct {
	Payload []byte
	Marker  bool
}

// Frame is what a source sends at one instant: the packets of one video frame
// or one audio packet. Dur is the time to the next frame, TSInc the RTP
// timestamp step to the next frame.
type Frame struct {
	Packets []Packet
	Dur     time.Duration
	TSInc   uint32
	Key     bool
	// TS is the RTP timestamp of a live frame (ListenRTP keeps its input's).
	TS uint32
}

// Source is one media stream shared by every track that publishes it. It runs
// one goroutine that paces frames and writes each packet to every bound track
// (each with its own SSRC, payload type and sequence numbers).
type Source struct {
	Name  string
	Kind  webrtc.RTPCodecType
	Codec webrtc.RTPCodecCapability

	frames []Frame
	loop   bool
	// next, when set, yields frames from a live input (UDP) instead of frames.
	next func() (Frame, error)
	// stamp, when set, writes the send time into each packet before fan-out.
	stamp func(p []byte, seq uint32, now time.Time)

	sinks atomic.Pointer[[]*sink]
	mu    sync.Mutex // serializes sink list changes

	startOnce sync.Once
	stopOnce  sync.Once
	stop      chan struct{}
	done      chan struct{}

	sent     atomic.Uint64 // packets written, over all sinks
	srcPkts  atomic.Uint64 // packets produced by the source itself
	stampSeq uint32
	addr     string
	frameNo  uint32 // frames written (run goroutine only): the audio level pattern's clock

	wantKey atomic.Bool
	keys    atomic.Uint64
	lastKey time.Time // when a requested keyframe was last sent (run goroutine only)
}

// RequestKeyframe makes a file or synthetic source jump to its next keyframe
// (an encoder's answer to PLI/FIR), at most once a second however many peers
// ask: one source feeds them all.
func (s *Source) RequestKeyframe() {
	if s.Kind == webrtc.RTPCodecTypeVideo {
		s.wantKey.Store(true)
	}
}

// Keyframes is the number of keyframes sent so far.
func (s *Source) Keyframes() uint64 { return s.keys.Load() }

type sink struct {
	ssrc   uint32
	pt     uint8
	seq    uint16
	tsOff  uint32
	w      webrtc.TrackLocalWriter
	hdr    rtp.Header
	id     string
	failed atomic.Bool
	// level is the RFC 6464 audio level extension's byte, which hdr's
	// extension points at: rewritten per packet, so nothing is allocated.
	level []byte
}

// talkLevel is the audio level (-dBov, RFC 6464 with the voice bit clear) of
// a sink's frame n: a talker who speaks for a stretch and then listens, each
// sink with its own rhythm and voice, so that a server ranking speakers by
// level (audio Last-N) has something to rank. Integer arithmetic only.
func talkLevel(ssrc, n uint32) uint8 {
	h := ssrc * 2654435761
	period := 150 + h>>8%250 // 3 to 8 s at 50 frames a second
	if (n+h>>12)%period < period*2/5 {
		return uint8(25 + h>>20%20 + n*7%4) // speech, -25 to -47 dBov
	}
	return uint8(62 + n*13%10) // room noise in the pauses, -62 to -71 dBov
}

func newSource(name string, kind webrtc.RTPCodecType, codec webrtc.RTPCodecCapability, frames []Frame, loop bool) *Source {
	s := &Source{Name: name, Kind: kind, Codec: codec, frames: frames, loop: loop, stop: make(chan struct{}), done: make(chan struct{})}
	empty := []*sink{}
	s.sinks.Store(&empty)
	return s
}

// Frames is the number of frames of a file source (0 for live ones).
func (s *Source) Frames() int { return len(s.frames) }

// Sent is the number of packets written to tracks so far.
func (s *Source) Sent() uint64 { return s.sent.Load() }

// Produced is the number of packets the source itself produced (before fan-out).
func (s *Source) Produced() uint64 { return s.srcPkts.Load() }

// Sinks is the number of tracks currently bound.
func (s *Source) Sinks() int { return len(*s.sinks.Load()) }

// Start begins pacing; it is idempotent. Tracks can bind before or after.
func (s *Source) Start() {
	s.startOnce.Do(func() { go s.run() })
}

// Stop ends the source; bound tracks stop receiving packets.
func (s *Source) Stop() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.startOnce.Do(func() { close(s.done) })
	<-s.done
}

func (s *Source) run() {
	defer close(s.done)
	var ts uint32
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i := 0; ; i++ {
		var f Frame
		if s.next != nil {
			var err error
			if f, err = s.next(); err != nil {
				return
			}
			ts = f.TS
		} else {
			if len(s.frames) == 0 {
				return
			}
			if i == len(s.frames) {
				if !s.loop {
					return
				}
				i = 0
			}
			if s.wantKey.Load() && !s.frames[i].Key {
				if now := time.Now(); now.Sub(s.lastKey) >= time.Second {
					if k := s.nextKey(i); k >= 0 {
						i = k
						s.lastKey = now
					}
				}
			}
			if s.frames[i].Key {
				s.wantKey.Store(false)
			}
			f = s.frames[i]
			now := time.Now()
			if d := next.Sub(now); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-s.stop:
					return
				}
			} else if d < -time.Second {
				// Far behind (the process stalled): resynchronize rather than burst.
				next = now
			}
			next = next.Add(f.Dur)
		}
		select {
		case <-s.stop:
			return
		default:
		}
		if f.Key {
			s.keys.Add(1)
		}
		s.writeFrame(&f, ts)
		ts += f.TSInc
	}
}

func (s *Source) writeFrame(f *Frame, ts uint32) {
	sinks := *s.sinks.Load()
	now := time.Now()
	s.frameNo++
	for j := range f.Packets {
		p := &f.Packets[j]
		if s.stamp != nil {
			s.stampSeq++
			s.stamp(p.Payload, s.stampSeq, now)
		}
		s.srcPkts.Add(1)
		for _, k := range sinks {
			if k.failed.Load() {
				continue
			}
			k.hdr.Marker = p.Marker
			k.hdr.SequenceNumber = k.seq
			k.hdr.Timestamp = ts + k.tsOff
			k.seq++
			if k.level != nil {
				k.level[0] = talkLevel(k.ssrc, s.frameNo)
			}
			if _, err := k.w.WriteRTP(&k.hdr, p.Payload); err != nil && isClosed(err) {
				k.failed.Store(true)
			}
		}
		s.sent.Add(uint64(len(sinks)))
	}
}

// isClosed treats a write error that says closed as permanent; other errors (a
// full buffer) are transient.
func isClosed(err error) bool {
	return errors.Is(err, io.ErrClosedPipe) || strings.Contains(err.Error(), "closed")
}

func (s *Source) addSink(k *sink) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.sinks.Load()
	n := make([]*sink, 0, len(old)+1)
	for _, o := range old {
		if o.id != k.id { // a rebind replaces, never duplicates
			n = append(n, o)
		}
	}
	n = append(n, k)
	s.sinks.Store(&n)
}

func (s *Source) removeSink(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.sinks.Load()
	n := make([]*sink, 0, len(old))
	for _, k := range old {
		if k.id != id {
			n = append(n, k)
		}
	}
	s.sinks.Store(&n)
}

// Track returns a new webrtc.TrackLocal fed by s; add it to one peer connection.
// Each Track has its own id so a peer can carry several tracks of one source.
func (s *Source) Track(id, streamID string) *Track {
	return &Track{src: s, id: id, stream: streamID}
}

// Track is a TrackLocal fed by a shared Source: binding it registers the peer
// connection's writer with the source, so a frame is read once and written to
// every peer.
type Track struct {
	src    *Source
	id     string
	stream string
	bound  atomic.Int32
}

var _ webrtc.TrackLocal = (*Track)(nil)

func (t *Track) ID() string                { return t.id }
func (t *Track) RID() string               { return "" }
func (t *Track) StreamID() string          { return t.stream }
func (t *Track) Kind() webrtc.RTPCodecType { return t.src.Kind }
func (t *Track) Source() *Source           { return t.src }

// Bind picks the negotiated payload type of the source's codec.
func (t *Track) Bind(ctx webrtc.TrackLocalContext) (webrtc.RTPCodecParameters, error) {
	for _, c := range ctx.CodecParameters() {
		if !strings.EqualFold(c.MimeType, t.src.Codec.MimeType) {
			continue
		}
		if t.src.Codec.SDPFmtpLine != "" && !fmtpCompatible(c.SDPFmtpLine, t.src.Codec.SDPFmtpLine) {
			continue
		}
		ssrc := uint32(ctx.SSRC())
		k := &sink{ssrc: ssrc, pt: uint8(c.PayloadType), w: ctx.WriteStream(), id: ctx.ID(),
			seq: uint16(ssrc * 2654435761 >> 16), tsOff: ssrc * 2246822519}
		k.hdr = rtp.Header{Version: 2, SSRC: ssrc, PayloadType: k.pt}
		if t.src.Kind == webrtc.RTPCodecTypeAudio {
			// As a browser's microphone: the level of each packet, if negotiated.
			for _, x := range ctx.HeaderExtensions() {
				if x.URI == rtc.ExtAudioLevel && x.ID > 0 && x.ID < 15 {
					k.level = make([]byte, 1)
					if err := k.hdr.SetExtension(uint8(x.ID), k.level); err != nil {
						k.level = nil
					}
				}
			}
		}
		t.src.addSink(k)
		t.bound.Add(1)
		return c, nil
	}
	return webrtc.RTPCodecParameters{}, fmt.Errorf("source %s: codec %s not negotiated", t.src.Name, t.src.Codec.MimeType)
}

// Unbind removes the peer connection's writer from the source.
func (t *Track) Unbind(ctx webrtc.TrackLocalContext) error {
	t.src.removeSink(ctx.ID())
	t.bound.Add(-1)
	return nil
}

// fmtpCompatible matches H.264 by packetization-mode and profile only.
func fmtpCompatible(got, want string) bool {
	get := func(s, k string) string {
		for _, kv := range strings.Split(s, ";") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(kv), k+"="); ok {
				return strings.ToLower(v)
			}
		}
		return ""
	}
	if get(got, "packetization-mode") != get(want, "packetization-mode") {
		return false
	}
	g, w := get(got, "profile-level-id"), get(want, "profile-level-id")
	return len(g) < 4 || len(w) < 4 || g[:4] == w[:4]
}

// nextKey is the index of the first keyframe at or after i (wrapping), -1 if
// the source has none (audio).
func (s *Source) nextKey(i int) int {
	for k := 0; k < len(s.frames); k++ {
		j := (i + k) % len(s.frames)
		if s.frames[j].Key {
			return j
		}
	}
	return -1
}

// FeedRTP sends the source as plain RTP (no SRTP) to addr with payload type
// pt, e.g. into a Janus Streaming mountpoint or a GStreamer udpsrc. Only
// loopback and private (namespace) addresses are accepted.
func (s *Source) FeedRTP(addr string, pt uint8) (stop func(), err error) {
	ua, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return nil, err
	}
	if !ua.IP.IsLoopback() && !ua.IP.IsPrivate() {
		return nil, fmt.Errorf("rtp feed %s: only loopback or private addresses", addr)
	}
	conn, err := net.DialUDP("udp4", nil, ua)
	if err != nil {
		return nil, err
	}
	ssrc := rand.Uint32()
	k := &sink{ssrc: ssrc, pt: pt, w: &udpWriter{conn: conn, buf: make([]byte, 1500)}, id: "rtp-feed-" + addr,
		seq: uint16(ssrc), tsOff: ssrc}
	k.hdr = rtp.Header{Version: 2, SSRC: ssrc, PayloadType: pt}
	s.addSink(k)
	return func() { s.removeSink(k.id); conn.Close() }, nil
}

// udpWriter writes RTP in the clear to a connected UDP socket, reusing one
// buffer (the source's goroutine is its only caller).
type udpWriter struct {
	conn *net.UDPConn
	buf  []byte
}

func (u *udpWriter) WriteRTP(h *rtp.Header, payload []byte) (int, error) {
	n, err := h.MarshalTo(u.buf)
	if err != nil {
		return 0, err
	}
	if n+len(payload) > len(u.buf) {
		return 0, io.ErrShortBuffer
	}
	n += copy(u.buf[n:], payload)
	return u.conn.Write(u.buf[:n])
}

func (u *udpWriter) Write(b []byte) (int, error) { return u.conn.Write(b) }
