package camera

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bluenviron/gortsplib/v4/pkg/format/rtph264"
	"github.com/bluenviron/gortsplib/v4/pkg/format/rtph265"
	"github.com/bluenviron/mediacommon/pkg/codecs/h264"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/sfu"
)

// payloadMax keeps repacketized video inside a browser-safe MTU whatever the
// camera sent (RTSP over TCP carries packets of up to 64 KiB).
const payloadMax = 1160

func randU32() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}

// videoRepack turns a camera's H.264/H.265 RTP into browser-friendly RTP for a
// LocalTrack: access units are reassembled and packetized again (MTU-sized,
// packetization-mode 1), the parameter sets go before every IDR so that a
// viewer starting there decodes at once, and sequence numbers and timestamps
// continue across upstream sessions so that a reconnect looks like a pause.
type videoRepack struct {
	h265 bool
	dec  interface {
		Decode(*rtp.Packet) ([][]byte, error)
	}
	enc interface {
		Encode([][]byte) ([]*rtp.Packet, error)
	}
	ssrc  uint32
	pt    uint8
	track *sfu.LocalTrack
	log   *slog.Logger

	vps, sps, pps []byte

	// tap, when set, sees each access unit sent (an H.265 camera's
	// transcoder: hevc.go), in the output clock.
	tap func(au [][]byte, ts uint32, idr bool)

	// keep is set by ingests that read every packet into one reused buffer
	// (RTP push): the decoder holds on to payloads (STAP-A units, single NAL
	// units, FU-A fragments) until the access unit's last packet, so they are
	// copied into arena, which is reused from one access unit to the next.
	keep  bool
	arena []byte

	// Per upstream session.
	synced  bool // the first IDR of this session has gone out
	tsOff   uint32
	lastTS  uint32 // last timestamp written (output clock)
	lastAt  time.Time
	badLogs int
}

func newVideoRepack(mime string, pt uint8, ssrc uint32, lt *sfu.LocalTrack, log *slog.Logger) (*videoRepack, error) {
	r := &videoRepack{ssrc: ssrc, pt: pt, track: lt, log: log}
	seq := uint16(randU32())
	switch mime {
	case webrtc.MimeTypeH264:
		d := &rtph264.Decoder{}
		e := &rtph264.Encoder{PayloadType: pt, SSRC: &r.ssrc, InitialSequenceNumber: &seq, PayloadMaxSize: payloadMax, PacketizationMode: 1}
		if err := d.Init(); err != nil {
			return nil, err
		}
		if err := e.Init(); err != nil {
			return nil, err
		}
		r.dec, r.enc = d, e
	case webrtc.MimeTypeH265:
		d := &rtph265.Decoder{}
		e := &rtph265.Encoder{PayloadType: pt, SSRC: &r.ssrc, InitialSequenceNumber: &seq, PayloadMaxSize: payloadMax}
		if err := d.Init(); err != nil {
			return nil, err
		}
		if err := e.Init(); err != nil {
			return nil, err
		}
		r.dec, r.enc, r.h265 = d, e, true
	default:
		return nil, fmt.Errorf("video codec %s is not supported", mime)
	}
	return r, nil
}

// newSession starts a new upstream session: the decoder forgets fragments, the
// output waits for an IDR and rebases timestamps to follow the last frame.
func (r *videoRepack) newSession(vps, sps, pps []byte) {
	if sps != nil {
		r.vps, r.sps, r.pps = vps, sps, pps
	}
	r.synced = false
	r.resetDecoder()
}

// resetDecoder drops what the decoder holds (Init alone keeps it).
func (r *videoRepack) resetDecoder() {
	switch d := r.dec.(type) {
	case *rtph264.Decoder:
		*d = rtph264.Decoder{PacketizationMode: d.PacketizationMode}
		_ = d.Init()
	case *rtph265.Decoder:
		*d = rtph265.Decoder{MaxDONDiff: d.MaxDONDiff}
		_ = d.Init()
	}
	r.arena = r.arena[:0]
}

// arenaMax bounds the copies of one access unit's packets; past it (an access
// unit without an end, or larger than the decoders take) they are dropped.
const arenaMax = 8 << 20

const (
	naluOther = iota
	naluParam
	naluIDR
)

func (r *videoRepack) classify(n []byte) (kind int, typ byte) {
	if len(n) == 0 {
		return naluOther, 0
	}
	if r.h265 {
		t := (n[0] >> 1) & 0x3f
		switch {
		case t == 32 || t == 33 || t == 34:
			return naluParam, t
		case t >= 16 && t <= 21:
			return naluIDR, t
		}
		return naluOther, t
	}
	t := n[0] & 0x1f
	switch t {
	case 7, 8:
		return naluParam, t
	case 5:
		return naluIDR, t
	}
	return naluOther, t
}

// push takes one packet from the camera.
func (r *videoRepack) push(pkt *rtp.Packet) {
	if r.keep {
		if len(r.arena)+len(pkt.Payload) > arenaMax {
			r.resetDecoder()
		}
		n := len(r.arena)
		r.arena = append(r.arena, pkt.Payload...)
		// Earlier payloads stay valid when append moves the arena: only
		// the new array is written.
		pkt.Payload = r.arena[n:len(r.arena):len(r.arena)]
	}
	au, err := r.dec.Decode(pkt)
	if err == nil {
		// The access unit is out of the decoder, which now holds nothing:
		// the arena is free again once au has been sent below.
		defer func() { r.arena = r.arena[:0] }()
	}
	if err != nil {
		if !errors.Is(err, rtph264.ErrMorePacketsNeeded) && !errors.Is(err, rtph265.ErrMorePacketsNeeded) &&
			!errors.Is(err, rtph264.ErrNonStartingPacketAndNoPrevious) && !errors.Is(err, rtph265.ErrNonStartingPacketAndNoPrevious) {
			if r.badLogs < 5 {
				r.badLogs++
				r.log.Info("camera video packet dropped", "err", err)
			}
		}
		return
	}
	r.writeAU(au, pkt.Timestamp)
}

// writeAU sends one access unit stamped ts (source clock, 90 kHz).
func (r *videoRepack) writeAU(au [][]byte, ts uint32) {
	idr, hasParams := false, 0
	for _, n := range au {
		kind, t := r.classify(n)
		switch kind {
		case naluIDR:
			idr = true
		case naluParam:
			hasParams++
			c := append([]byte(nil), n...)
			switch {
			case r.h265 && t == 32:
				r.vps = c
			case (r.h265 && t == 33) || (!r.h265 && t == 7):
				r.sps = c
			default:
				r.pps = c
			}
		}
	}
	if !r.synced {
		if !idr {
			return // P-frames of a session joined mid-GOP reference frames nobody has
		}
		r.synced = true
		now := time.Now()
		if r.lastAt.IsZero() {
			r.tsOff = 0
		} else {
			gap := uint32(max(now.Sub(r.lastAt), 40*time.Millisecond) * 90 / time.Millisecond)
			r.tsOff = r.lastTS + gap - ts
		}
	}
	if idr && hasParams < 2 && r.sps != nil && r.pps != nil {
		params := [][]byte{r.sps, r.pps}
		if r.h265 && r.vps != nil {
			params = [][]byte{r.vps, r.sps, r.pps}
		}
		au = append(params, au...)
	}
	ts += r.tsOff
	if r.tap != nil {
		r.tap(au, ts, idr)
	}
	pkts, err := r.enc.Encode(au)
	if err != nil {
		r.log.Info("camera video frame dropped", "err", err)
		return
	}
	for _, p := range pkts {
		p.Timestamp = ts
		_ = r.track.WritePacket(p)
	}
	r.lastTS, r.lastAt = ts, time.Now()
}

// senderReport forwards a camera's sender report in the output clock, so that
// viewers keep audio and video in sync.
func forwardSR(sr *rtcp.SenderReport, ssrc, tsOff uint32, lt *sfu.LocalTrack) {
	out := rtcp.SenderReport{SSRC: ssrc, NTPTime: sr.NTPTime, RTPTime: sr.RTPTime + tsOff, PacketCount: sr.PacketCount, OctetCount: sr.OctetCount}
	if b, err := out.Marshal(); err == nil {
		lt.WriteRTCP(b)
	}
}

// audioRelay forwards audio packets as they come (Opus and G.711 need no
// change), with its own SSRC and payload type and numbering that continues
// across upstream sessions.
type audioRelay struct {
	ssrc   uint32
	pt     uint8
	clock  uint32
	track  *sfu.LocalTrack
	synced bool
	seqOff uint16
	tsOff  uint32
	last   rtp.Header
	lastAt time.Time
}

func (a *audioRelay) newSession() { a.synced = false }

func (a *audioRelay) push(pkt *rtp.Packet) {
	if !a.synced {
		a.synced = true
		if !a.lastAt.IsZero() {
			gap := uint32(max(time.Since(a.lastAt), 20*time.Millisecond) * time.Duration(a.clock) / time.Second)
			a.tsOff = a.last.Timestamp + gap - pkt.Timestamp
			a.seqOff = a.last.SequenceNumber + 1 - pkt.SequenceNumber
		} else {
			a.seqOff = uint16(randU32()) - pkt.SequenceNumber
		}
	}
	h := pkt.Header
	h.SSRC = a.ssrc
	h.PayloadType = a.pt
	h.SequenceNumber += a.seqOff
	h.Timestamp += a.tsOff
	h.Extension = false
	h.Extensions = nil
	h.CSRC = nil
	out := rtp.Packet{Header: h, Payload: pkt.Payload}
	_ = a.track.WritePacket(&out)
	a.last, a.lastAt = h, time.Now()
}

// h264Info derives the fmtp and picture size from an SPS.
func h264Info(sps []byte) (fmtp string, w, h int) {
	fmtp = "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"
	if len(sps) >= 4 {
		fmtp = fmt.Sprintf("level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=%02x%02x%02x", sps[1], sps[2], sps[3])
		var s h264.SPS
		if s.Unmarshal(sps) == nil {
			w, h = s.Width(), s.Height()
		}
	}
	return fmtp, w, h
}

// H264Writer packetizes H.264 access units into RTP for a LocalTrack: the
// camera's repacketizer (RFC 6184 packetization-mode 1, MTU-sized, SPS/PPS
// before every IDR, nothing before the first IDR) fed access units instead of
// RTP, for ingests that carry frames (RTMP).
type H264Writer struct{ r *videoRepack }

// NewH264Writer writes to lt with payload type pt and SSRC ssrc.
func NewH264Writer(pt uint8, ssrc uint32, lt *sfu.LocalTrack, log *slog.Logger) (*H264Writer, error) {
	r, err := newVideoRepack(webrtc.MimeTypeH264, pt, ssrc, lt, log)
	if err != nil {
		return nil, err
	}
	return &H264Writer{r: r}, nil
}

// SetParams sets the SPS and PPS sent before IDRs that lack them; the output
// then waits for the next IDR, as after a camera reconnect.
func (w *H264Writer) SetParams(sps, pps []byte) {
	w.r.newSession(nil, append([]byte(nil), sps...), append([]byte(nil), pps...))
}

// WriteAU sends one access unit (NAL units without start codes) stamped ts on
// the 90 kHz clock.
func (w *H264Writer) WriteAU(au [][]byte, ts uint32) { w.r.writeAU(au, ts) }

// H264Params is the fmtp line and picture size an SPS describes.
func H264Params(sps []byte) (fmtp string, width, height int) { return h264Info(sps) }
