// Package opus wraps the system libopus (cgo) for the audio mixer: mono
// 48 kHz, decoding packets of any length with loss concealment, encoding
// 20 ms frames (EncodePacket: other lengths).
package opus

/*
#cgo pkg-config: opus
#include <opus.h>

static int enc_ctl_int(OpusEncoder *e, int req, int v) { return opus_encoder_ctl(e, req, v); }
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

const (
	// Rate is the sample rate of every PCM buffer; FrameSamples one 20 ms
	// frame at it (mono), the mixer's clock tick.
	Rate         = 48000
	FrameSamples = Rate / 50
	// MaxPacket bounds an encoded frame (RFC 6716 allows up to 1275 bytes).
	MaxPacket = 1275
	// MaxPacketSamples is the longest packet's audio: 120 ms (RFC 6716).
	MaxPacketSamples = 6 * FrameSamples
)

// ErrFrame is returned for a buffer shorter than one frame; ErrLength for a
// length no Opus packet has.
var (
	ErrFrame  = errors.New("opus: pcm buffer shorter than one 20 ms frame")
	ErrLength = errors.New("opus: pcm length is not a whole number of 2.5 ms up to the packet's limit")
)

func opusErr(op string, code C.int) error {
	return fmt.Errorf("opus %s: %s", op, C.GoString(C.opus_strerror(code)))
}

// Decoder decodes one stream to mono PCM. Not safe for concurrent use.
type Decoder struct {
	d *C.OpusDecoder
}

// NewDecoder makes a mono 48 kHz decoder; Close frees it.
func NewDecoder() (*Decoder, error) {
	var e C.int
	d := C.opus_decoder_create(Rate, 1, &e)
	if e != C.OPUS_OK || d == nil {
		return nil, opusErr("decoder", e)
	}
	return &Decoder{d: d}, nil
}

// Decode decodes packet into pcm (at least FrameSamples long) and returns the
// samples per channel written. A nil or empty packet conceals one lost frame
// (PLC) of len(pcm) capped to one frame.
func (d *Decoder) Decode(packet []byte, pcm []int16) (int, error) {
	if len(pcm) < FrameSamples {
		return 0, ErrFrame
	}
	var p *C.uchar
	if len(packet) > 0 {
		p = (*C.uchar)(unsafe.Pointer(&packet[0]))
	} else {
		pcm = pcm[:FrameSamples]
	}
	n := C.opus_decode(d.d, p, C.opus_int32(len(packet)), (*C.opus_int16)(unsafe.Pointer(&pcm[0])), C.int(len(pcm)), 0)
	if n < 0 {
		return 0, opusErr("decode", n)
	}
	return int(n), nil
}

// Conceal fills pcm with the concealment (PLC) of one lost packet of
// len(pcm) samples: a multiple of 2.5 ms up to MaxPacketSamples, the length
// of the packet that was lost.
func (d *Decoder) Conceal(pcm []int16) (int, error) {
	if !validLength(len(pcm), MaxPacketSamples) {
		return 0, ErrLength
	}
	n := C.opus_decode(d.d, nil, 0, (*C.opus_int16)(unsafe.Pointer(&pcm[0])), C.int(len(pcm)), 0)
	if n < 0 {
		return 0, opusErr("conceal", n)
	}
	return int(n), nil
}

// validLength: n samples are a whole number of 2.5 ms steps, at most max.
func validLength(n, max int) bool {
	return n > 0 && n <= max && n%(Rate/400) == 0
}

// Close frees the decoder.
func (d *Decoder) Close() {
	if d.d != nil {
		C.opus_decoder_destroy(d.d)
		d.d = nil
	}
}

// Encoder encodes mono PCM. Not safe for concurrent use.
type Encoder struct {
	e *C.OpusEncoder
}

// NewEncoder makes a mono 48 kHz VoIP encoder at bitrate bits/s (0: libopus's
// default); Close frees it.
func NewEncoder(bitrate int) (*Encoder, error) {
	var e C.int
	enc := C.opus_encoder_create(Rate, 1, C.OPUS_APPLICATION_VOIP, &e)
	if e != C.OPUS_OK || enc == nil {
		return nil, opusErr("encoder", e)
	}
	if bitrate > 0 {
		if r := C.enc_ctl_int(enc, C.OPUS_SET_BITRATE_REQUEST, C.int(bitrate)); r != C.OPUS_OK {
			C.opus_encoder_destroy(enc)
			return nil, opusErr("bitrate", r)
		}
	}
	return &Encoder{e: enc}, nil
}

// Encode encodes one frame (pcm[:FrameSamples]) into out and returns the
// packet's length.
func (e *Encoder) Encode(pcm []int16, out []byte) (int, error) {
	if len(pcm) < FrameSamples {
		return 0, ErrFrame
	}
	if len(out) == 0 {
		return 0, errors.New("opus: empty output buffer")
	}
	n := C.opus_encode(e.e, (*C.opus_int16)(unsafe.Pointer(&pcm[0])), FrameSamples,
		(*C.uchar)(unsafe.Pointer(&out[0])), C.opus_int32(len(out)))
	if n < 0 {
		return 0, opusErr("encode", n)
	}
	return int(n), nil
}

// EncodePacket encodes all of pcm as one packet: 2.5, 5, 10, 20, 40 or
// 60 ms of samples, the frame sizes libopus encodes.
func (e *Encoder) EncodePacket(pcm []int16, out []byte) (int, error) {
	switch len(pcm) {
	case Rate / 400, Rate / 200, Rate / 100, Rate / 50, Rate / 25, 3 * Rate / 50:
	default:
		return 0, ErrLength
	}
	if len(out) == 0 {
		return 0, errors.New("opus: empty output buffer")
	}
	n := C.opus_encode(e.e, (*C.opus_int16)(unsafe.Pointer(&pcm[0])), C.int(len(pcm)),
		(*C.uchar)(unsafe.Pointer(&out[0])), C.opus_int32(len(out)))
	if n < 0 {
		return 0, opusErr("encode", n)
	}
	return int(n), nil
}

// Close frees the encoder.
func (e *Encoder) Close() {
	if e.e != nil {
		C.opus_encoder_destroy(e.e)
		e.e = nil
	}
}
