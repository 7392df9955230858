package loadtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media/h264reader"
	"github.com/pion/webrtc/v4/pkg/media/ivfreader"
	"github.com/pion/webrtc/v4/pkg/media/oggreader"
)

// MTU is the RTP payload budget per packet, as Pion's own senders use.
const MTU = 1200

// Codec capabilities the sources announce (they match rtc.RegisterCodecs and
// what Janus and browsers offer).
var (
	CodecVP8  = webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}
	CodecH264 = webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
		SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"}
	CodecOpus = webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2,
		SDPFmtpLine: "minptime=10;useinbandfec=1"}
)

// OpenFile loads a media file by extension: .ivf (VP8), .h264/.264 (Annex-B,
// fps frames per second), .ogg/.opus (Ogg/Opus). The whole file is packetized
// once into memory; the source loops over it.
func OpenFile(path string, fps int) (*Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	name := filepath.Base(path)
	switch strings.ToLower(filepath.Ext(path)) {
	case ".ivf":
		return ReadIVF(name, f)
	case ".h264", ".264":
		return ReadH264(name, f, fps)
	case ".ogg", ".opus":
		return ReadOgg(name, f)
	}
	return nil, fmt.Errorf("%s: unknown media file type (want .ivf, .h264 or .ogg)", path)
}

// ReadIVF packetizes a VP8 IVF stream.
func ReadIVF(name string, r io.Reader) (*Source, error) {
	rd, hdr, err := ivfreader.NewWith(r)
	if err != nil {
		return nil, fmt.Errorf("ivf %s: %w", name, err)
	}
	if string(hdr.FourCC[:]) != "VP80" {
		return nil, fmt.Errorf("ivf %s: codec %q, want VP80", name, string(hdr.FourCC[:]))
	}
	if hdr.TimebaseDenominator == 0 || hdr.TimebaseNumerator == 0 {
		return nil, fmt.Errorf("ivf %s: zero timebase", name)
	}
	pay := &codecs.VP8Payloader{EnablePictureID: true}
	var frames []Frame
	var lastPTS uint64
	for {
		data, fh, err := rd.ParseNextFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("ivf %s frame %d: %w", name, len(frames), err)
		}
		if len(data) == 0 {
			continue
		}
		if n := len(frames); n > 0 {
			// ivfreader scales the frame PTS by denominator/numerator; undo it.
			step := (fh.Timestamp - lastPTS) * uint64(hdr.TimebaseNumerator) / uint64(hdr.TimebaseDenominator)
			setDur(&frames[n-1], step, hdr.TimebaseNumerator, hdr.TimebaseDenominator, 90000)
		}
		lastPTS = fh.Timestamp
		frames = append(frames, Frame{Packets: packets(pay.Payload(MTU, data)), Key: data[0]&1 == 0})
	}
	if len(frames) == 0 {
		return nil, fmt.Errorf("ivf %s: no frames", name)
	}
	setDur(&frames[len(frames)-1], 1, hdr.TimebaseNumerator, hdr.TimebaseDenominator, 90000)
	return newSource(name, webrtc.RTPCodecTypeVideo, CodecVP8, frames, true), nil
}

// setDur converts a PTS step in timebase num/den seconds to a duration and an
// RTP timestamp step.
func setDur(f *Frame, step uint64, num, den uint32, clock uint64) {
	if step == 0 {
		step = 1
	}
	f.Dur = time.Duration(step * uint64(num) * uint64(time.Second) / uint64(den))
	f.TSInc = uint32(step * uint64(num) * clock / uint64(den))
}

func packets(ps [][]byte) []Packet {
	out := make([]Packet, len(ps))
	for i, p := range ps {
		out[i] = Packet{Payload: p, Marker: i == len(ps)-1}
	}
	return out
}

// ReadH264 packetizes an Annex-B stream at fps frames per second: an access unit
// ends with each VCL NAL (slices), parameter sets go with the next one.
func ReadH264(name string, r io.Reader, fps int) (*Source, error) {
	if fps <= 0 {
		fps = 30
	}
	rd, err := h264reader.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("h264 %s: %w", name, err)
	}
	pay := &codecs.H264Payloader{}
	dur := time.Second / time.Duration(fps)
	var frames []Frame
	var au []byte
	key := false
	for {
		nal, err := rd.NextNAL()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("h264 %s: %w", name, err)
		}
		au = append(au, 0, 0, 0, 1)
		au = append(au, nal.Data...)
		switch nal.UnitType {
		case h264reader.NalUnitTypeCodedSliceIdr:
			key = true
			fallthrough
		case h264reader.NalUnitTypeCodedSliceNonIdr:
			frames = append(frames, Frame{Packets: packets(pay.Payload(MTU, au)), Dur: dur, TSInc: uint32(90000 / fps), Key: key})
			au, key = nil, false
		}
	}
	if len(frames) == 0 {
		return nil, fmt.Errorf("h264 %s: no slices", name)
	}
	return newSource(name, webrtc.RTPCodecTypeVideo, CodecH264, frames, true), nil
}

// ReadOgg reads Ogg/Opus with one Opus packet per page (ffmpeg -page_duration
// 20000 writes that); the granule position gives each packet's duration.
func ReadOgg(name string, r io.Reader) (*Source, error) {
	rd, _, err := oggreader.NewWith(r)
	if err != nil {
		return nil, fmt.Errorf("ogg %s: %w", name, err)
	}
	var frames []Frame
	var lastGranule uint64
	for {
		data, ph, err := rd.ParseNextPage()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("ogg %s page %d: %w", name, len(frames), err)
		}
		if bytes.HasPrefix(data, []byte("OpusTags")) || bytes.HasPrefix(data, []byte("OpusHead")) || len(data) == 0 {
			continue
		}
		samples := ph.GranulePosition - lastGranule
		lastGranule = ph.GranulePosition
		if samples == 0 || samples > 48000 {
			samples = 960 // first page after headers carries the pre-skip; assume 20 ms
		}
		frames = append(frames, Frame{Packets: []Packet{{Payload: data, Marker: true}},
			Dur: time.Duration(samples) * time.Second / 48000, TSInc: uint32(samples)})
	}
	if len(frames) == 0 {
		return nil, fmt.Errorf("ogg %s: no audio pages", name)
	}
	return newSource(name, webrtc.RTPCodecTypeAudio, CodecOpus, frames, true), nil
}

// ListenRTP is a live source: RTP arriving on a UDP address (ffmpeg -f rtp,
// GStreamer udpsink) is forwarded to every bound track with each track's SSRC,
// payload type and sequence numbers; the source's timestamps are kept. The
// returned source owns the socket and closes it on Stop.
func ListenRTP(addr string, kind webrtc.RTPCodecType, codec webrtc.RTPCodecCapability) (*Source, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	if !ua.IP.IsLoopback() {
		return nil, fmt.Errorf("rtp input %s: only loopback addresses are accepted", addr)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, err
	}
	s := newSource("rtp:"+conn.LocalAddr().String(), kind, codec, nil, false)
	buf := make([]byte, 1500)
	var hdr rtp.Header
	pkt := []Packet{{}}
	s.next = func() (Frame, error) {
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return Frame{}, err
			}
			hl, err := hdr.Unmarshal(buf[:n])
			if err != nil || hdr.Version != 2 {
				continue // not RTP: ignored, as a receiver would
			}
			end := n
			if hdr.Padding && n > hl {
				end -= int(buf[n-1])
			}
			if end <= hl {
				continue
			}
			pkt[0] = Packet{Payload: buf[hl:end], Marker: hdr.Marker}
			return Frame{Packets: pkt, TS: hdr.Timestamp}, nil
		}
	}
	s.addr = conn.LocalAddr().String()
	go func() { <-s.stop; conn.Close() }()
	return s, nil
}

// Addr is the local address of a live RTP source ("" otherwise).
func (s *Source) Addr() string { return s.addr }

// Stamp layout at the end of a synthetic payload: magic, sequence, send time.
const (
	stampLen   = 16
	stampMagic = 0x50545231 // "PTR1"
)

func putStamp(p []byte, seq uint32, now time.Time) {
	if len(p) < stampLen+8 { // never over the payload descriptor
		return
	}
	t := p[len(p)-stampLen:]
	binary.BigEndian.PutUint32(t[0:], stampMagic)
	binary.BigEndian.PutUint32(t[4:], seq)
	binary.BigEndian.PutUint64(t[8:], uint64(now.UnixNano()))
}

// ReadStamp returns the sequence and send time of a synthetic payload.
func ReadStamp(p []byte) (seq uint32, sent int64, ok bool) {
	if len(p) < stampLen {
		return 0, 0, false
	}
	t := p[len(p)-stampLen:]
	if binary.BigEndian.Uint32(t[0:]) != stampMagic {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(t[4:]), int64(binary.BigEndian.Uint64(t[8:])), true
}

// Synthetic makes a VP8-shaped video source (fps frames per second at about
// kbps kbit/s, a keyframe every keyEvery frames) or, with audio, an Opus-shaped
// 20 ms stream of 80-byte packets. Each payload is a valid VP8 (or Opus TOC)
// start followed by filler and, in its last 16 bytes, a sequence number and the
// send time, so receivers on the same host can measure one-way delay.
// opusSilence is a 20 ms CELT frame that decodes to digital silence: what a
// microphone that is open but quiet sends when DTX is off (browsers' default).
var opusSilence = []byte{0xf8, 0xff, 0xfe}

// SilentAudio is an Opus source of silence frames, 20 ms each: the listeners
// of the mix scenario, who send audio but say nothing.
func SilentAudio() *Source {
	frames := []Frame{{Packets: []Packet{{Payload: opusSilence, Marker: true}}, Dur: 20 * time.Millisecond, TSInc: 960}}
	return newSource("silent-audio", webrtc.RTPCodecTypeAudio, CodecOpus, frames, true)
}

func Synthetic(audio bool, kbps, fps, keyEvery int) *Source {
	if audio {
		frames := make([]Frame, 50)
		for i := range frames {
			p := make([]byte, 80)
			p[0] = 0xfc // TOC: CELT FB 20 ms, one frame
			frames[i] = Frame{Packets: []Packet{{Payload: p, Marker: true}}, Dur: 20 * time.Millisecond, TSInc: 960}
		}
		s := newSource("synthetic-audio", webrtc.RTPCodecTypeAudio, CodecOpus, frames, true)
		s.stamp = putStamp
		return s
	}
	if fps <= 0 {
		fps = 30
	}
	if keyEvery <= 0 {
		keyEvery = fps
	}
	if kbps <= 0 {
		kbps = 500
	}
	// A keyframe is 5 inter frames' worth; the average meets kbps.
	perFrame := kbps * 1000 / 8 / fps
	inter := perFrame * keyEvery / (keyEvery + 4)
	frames := make([]Frame, keyEvery)
	pay := &codecs.VP8Payloader{EnablePictureID: true}
	for i := range frames {
		size := inter
		if i == 0 {
			size = inter * 5
		}
		size = max(size, 40)
		// Every packet must hold the stamp after its descriptor: no short tail.
		if r := size % (MTU - 4); r != 0 && r < 32 {
			size += 32 - r
		}
		data := make([]byte, size)
		if i == 0 {
			// Keyframe tag (bit 0 clear, show_frame), start code, 640x360.
			copy(data, []byte{0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0x68, 0x01})
		} else {
			data[0] = 0x11
		}
		frames[i] = Frame{Packets: packets(pay.Payload(MTU, data)), Dur: time.Second / time.Duration(fps), TSInc: uint32(90000 / fps), Key: i == 0}
	}
	s := newSource("synthetic-video", webrtc.RTPCodecTypeVideo, CodecVP8, frames, true)
	s.stamp = putStamp
	return s
}
