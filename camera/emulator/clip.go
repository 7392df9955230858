package emulator

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/bluenviron/mediacommon/pkg/codecs/mpeg4audio"
)

// Clip is the test clip in memory: H.264 access units (NAL units without start
// codes, parameter sets removed) and G.711 samples.
type Clip struct {
	AUs      [][][]byte
	IDR      []bool // whether AUs[i] is an IDR picture
	SPS, PPS []byte
	FPS      int
	ULaw     []byte // 8 kHz mono mu-law; nil if absent
	// Opus is the tone as Opus packets of 20 ms (48 kHz); nil if clip.opus is
	// absent. Test viewers talk to cameras with it.
	Opus [][]byte
	// AAC is the tone as AAC-LC access units (1024 samples each, ADTS headers
	// removed) and AACConfig their AudioSpecificConfig; nil if clip.aac is absent.
	AAC       [][]byte
	AACConfig *mpeg4audio.AudioSpecificConfig
	// H265 is the same picture as H.265 (clip.h265; nil if absent): access
	// units without delimiters or parameter sets, and those sets.
	H265 *H265Clip
}

// H265Clip is the clip's H.265 video.
type H265Clip struct {
	AUs           [][][]byte
	IDR           []bool
	VPS, SPS, PPS []byte
}

// loadH265 reads an Annex-B H.265 stream with access unit delimiters.
func loadH265(b []byte) (*H265Clip, error) {
	c := &H265Clip{}
	var au [][]byte
	idr := false
	flush := func() {
		if len(au) > 0 {
			c.AUs = append(c.AUs, au)
			c.IDR = append(c.IDR, idr)
		}
		au, idr = nil, false
	}
	for _, n := range splitAnnexB(b) {
		if len(n) < 2 {
			continue
		}
		switch t := (n[0] >> 1) & 0x3f; {
		case t == 35: // access unit delimiter
			flush()
		case t == 32:
			if c.VPS == nil {
				c.VPS = n
			}
		case t == 33:
			if c.SPS == nil {
				c.SPS = n
			}
		case t == 34:
			if c.PPS == nil {
				c.PPS = n
			}
		case t == 39 || t == 40: // SEI
		default:
			if t >= 16 && t <= 21 {
				idr = true
			}
			au = append(au, n)
		}
	}
	flush()
	if len(c.AUs) == 0 || c.VPS == nil || c.SPS == nil || c.PPS == nil || !c.IDR[0] {
		return nil, errors.New("test clip: clip.h265 has no access units with VPS/SPS/PPS starting at an IDR")
	}
	return c, nil
}

// LoadClip reads clip.h264 (and clip.ulaw if present) from dir, as written by
// scripts/make-test-clip.sh.
func LoadClip(dir string) (*Clip, error) {
	b, err := os.ReadFile(filepath.Join(dir, "clip.h264"))
	if err != nil {
		return nil, fmt.Errorf("test clip: %w (run scripts/make-test-clip.sh %s)", err, dir)
	}
	c := &Clip{FPS: 25}
	var au [][]byte
	idr := false
	flush := func() {
		if len(au) > 0 {
			c.AUs = append(c.AUs, au)
			c.IDR = append(c.IDR, idr)
		}
		au, idr = nil, false
	}
	for _, n := range splitAnnexB(b) {
		if len(n) == 0 {
			continue
		}
		switch n[0] & 0x1f {
		case 9: // access unit delimiter: a new frame
			flush()
		case 7:
			if c.SPS == nil {
				c.SPS = n
			}
		case 8:
			if c.PPS == nil {
				c.PPS = n
			}
		case 5:
			idr = true
			au = append(au, n)
		default:
			au = append(au, n)
		}
	}
	flush()
	if len(c.AUs) == 0 || c.SPS == nil || c.PPS == nil || !c.IDR[0] {
		return nil, errors.New("test clip: no H.264 access units with SPS/PPS starting at an IDR")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "clip.h265")); err == nil {
		if c.H265, err = loadH265(b); err != nil {
			return nil, err
		}
	}
	if u, err := os.ReadFile(filepath.Join(dir, "clip.ulaw")); err == nil {
		c.ULaw = u
	}
	if f, err := os.Open(filepath.Join(dir, "clip.opus")); err == nil {
		c.Opus, err = ReadOggOpus(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("test clip: clip.opus: %w", err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "clip.aac")); err == nil {
		var pkts mpeg4audio.ADTSPackets
		if err := pkts.Unmarshal(b); err != nil {
			return nil, fmt.Errorf("test clip: clip.aac: %w", err)
		}
		for _, p := range pkts {
			c.AAC = append(c.AAC, p.AU)
		}
		if len(pkts) > 0 {
			c.AACConfig = &mpeg4audio.AudioSpecificConfig{Type: pkts[0].Type, SampleRate: pkts[0].SampleRate, ChannelCount: pkts[0].ChannelCount}
		}
	}
	return c, nil
}

// splitAnnexB cuts a byte stream at 3- and 4-byte start codes.
func splitAnnexB(b []byte) [][]byte {
	var out [][]byte
	start := -1
	for i := 0; i+2 < len(b); {
		if b[i] == 0 && b[i+1] == 0 && b[i+2] == 1 {
			if start >= 0 {
				end := i
				if end > start && b[end-1] == 0 {
					end--
				}
				out = append(out, b[start:end])
			}
			i += 3
			start = i
			continue
		}
		i++
	}
	if start >= 0 && start < len(b) {
		out = append(out, bytes.TrimRight(b[start:], "\x00"))
	}
	return out
}

// ReadOggOpus returns the Opus packets of an Ogg stream (RFC 3533 pages; a
// packet ends at a lacing value under 255), without the two header packets.
func ReadOggOpus(r io.Reader) ([][]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, 16<<20))
	if err != nil {
		return nil, err
	}
	var out [][]byte
	var cur []byte
	for len(b) > 0 {
		if len(b) < 27 || string(b[:4]) != "OggS" {
			return nil, errors.New("not an Ogg page")
		}
		nseg := int(b[26])
		if len(b) < 27+nseg {
			return nil, errors.New("truncated Ogg page")
		}
		lacing := b[27 : 27+nseg]
		body := b[27+nseg:]
		off := 0
		for _, l := range lacing {
			n := int(l)
			if off+n > len(body) {
				return nil, errors.New("Ogg page shorter than its lacing values")
			}
			cur = append(cur, body[off:off+n]...)
			off += n
			if n < 255 {
				out = append(out, cur)
				cur = nil
			}
		}
		b = body[off:]
	}
	if len(out) < 2 || !bytes.HasPrefix(out[0], []byte("OpusHead")) {
		return nil, errors.New("no OpusHead")
	}
	return out[2:], nil
}
