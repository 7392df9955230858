package emulator

import (
	"bufio"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bluenviron/gortsplib/v4/pkg/base"
	"github.com/pion/rtp"
)

// Backchannel is the emulator's ONVIF audio backchannel: an RTSP server whose
// DESCRIBE (with "Require: www.onvif.org/ver20/backchannel") announces one
// sendonly audio media, the direction of a camera's loudspeaker, and which
// receives RTP over TCP interleaved frames after PLAY, as ONVIF Streaming
// 5.3 describes.
//
// It is a small server of its own because gortsplib's server (v4.12.3), which
// serves the emulator's video, drops RTP that a playing client sends: it has
// no server-side backchannel. Requests are parsed with gortsplib's base
// package; only TCP transport is offered (461 for UDP), which every ONVIF
// client supports.
//
// It records what arrives so tests can assert that audio reached the camera:
// packets, payload types, and for G.711 the signal level of the decoded samples.
type Backchannel struct {
	// Codec announced: "PCMU" (G.711 µ-law, payload type 0, the common camera
	// case) or "opus" (payload type 111).
	Codec string
	Log   *slog.Logger

	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	stats BackchannelStats
	wake  chan struct{}
}

// BackchannelStats is what the loudspeaker received.
type BackchannelStats struct {
	Sessions    int    // PLAY requests with the backchannel set up
	Refused     int    // DESCRIBE without the Require header
	Packets     int    // RTP packets on the backchannel
	Bytes       int    // their payload bytes
	PayloadType uint8  // of the last packet
	SSRC        uint32 // of the last packet
	// RMS of the decoded G.711 samples over all packets, in 16-bit units
	// (silence is below 10; a tone at -20 dBFS is about 3300).
	RMS float64
	// LoudPackets counts packets whose own RMS is above 300: audio, not silence.
	LoudPackets int

	sumSq   float64
	samples int
}

// NewBackchannel returns a backchannel announcing codec ("PCMU" or "opus").
func NewBackchannel(codec string) *Backchannel {
	return &Backchannel{Codec: codec, Log: slog.Default(), conns: map[net.Conn]struct{}{}, wake: make(chan struct{}, 1)}
}

// Start listens on addr (127.0.0.1:0) and returns the rtsp:// URL.
func (b *Backchannel) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	b.ln = ln
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns[c] = struct{}{}
			b.mu.Unlock()
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				b.serve(c)
				b.mu.Lock()
				delete(b.conns, c)
				b.mu.Unlock()
			}()
		}
	}()
	return "rtsp://" + ln.Addr().String() + "/backchannel", nil
}

// Close stops the server and its sessions.
func (b *Backchannel) Close() {
	if b.ln == nil {
		return
	}
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// Stats returns what arrived so far.
func (b *Backchannel) Stats() BackchannelStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	if s.samples > 0 {
		s.RMS = math.Sqrt(s.sumSq / float64(s.samples))
	}
	return s
}

// WaitPackets waits until n packets arrived or timeout passed.
func (b *Backchannel) WaitPackets(n int, timeout time.Duration) BackchannelStats {
	deadline := time.Now().Add(timeout)
	for {
		s := b.Stats()
		left := time.Until(deadline)
		if s.Packets >= n || left <= 0 {
			return s
		}
		select {
		case <-b.wake:
		case <-time.After(left):
		}
	}
}

func (b *Backchannel) sdp(host string) string {
	pt, rtpmap := 0, "PCMU/8000"
	if b.Codec == "opus" {
		pt, rtpmap = 111, "opus/48000/2"
	}
	return fmt.Sprintf("v=0\r\no=- 0 0 IN IP4 %s\r\ns=Petrel emulator backchannel\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n"+
		"m=audio 0 RTP/AVP %d\r\na=control:trackID=0\r\na=rtpmap:%d %s\r\na=sendonly\r\n", host, pt, pt, rtpmap)
}

// serve handles one RTSP connection: requests and interleaved frames.
func (b *Backchannel) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4096)
	session := ""
	channel := -1
	playing := false
	for {
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		first, err := br.Peek(1)
		if err != nil {
			return
		}
		if first[0] == '$' {
			var f base.InterleavedFrame
			if err := f.Unmarshal(br); err != nil {
				b.Log.Warn("emulator backchannel: bad interleaved frame", "err", err)
				return
			}
			if playing && f.Channel == channel {
				b.record(f.Payload)
			}
			continue
		}
		var req base.Request
		if err := req.Unmarshal(br); err != nil {
			b.Log.Warn("emulator backchannel: bad request", "err", err)
			return
		}
		res := base.Response{StatusCode: base.StatusOK, Header: base.Header{}}
		if cseq, ok := req.Header["CSeq"]; ok {
			res.Header["CSeq"] = cseq
		}
		require := strings.Join(req.Header["Require"], ",")
		switch req.Method {
		case base.Options:
			res.Header["Public"] = base.HeaderValue{"OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER"}
		case base.Describe:
			if !strings.Contains(require, "www.onvif.org/ver20/backchannel") {
				// ONVIF Streaming: a server that only has a backchannel on this URL
				// answers 551 to a client that did not ask for one.
				b.mu.Lock()
				b.stats.Refused++
				b.mu.Unlock()
				res.StatusCode = base.StatusOptionNotSupported
				res.Header["Unsupported"] = base.HeaderValue{"www.onvif.org/ver20/backchannel"}
				break
			}
			host, _, _ := net.SplitHostPort(c.LocalAddr().String())
			res.Header["Content-Type"] = base.HeaderValue{"application/sdp"}
			res.Header["Content-Base"] = base.HeaderValue{req.URL.String() + "/"}
			res.Body = []byte(b.sdp(host))
		case base.Setup:
			tr := strings.Join(req.Header["Transport"], ",")
			i := strings.Index(tr, "interleaved=")
			if !strings.Contains(tr, "RTP/AVP/TCP") || i < 0 {
				res.StatusCode = base.StatusUnsupportedTransport
				break
			}
			lo, _, _ := strings.Cut(tr[i+len("interleaved="):], "-")
			lo, _, _ = strings.Cut(lo, ";")
			ch, err := strconv.Atoi(lo)
			if err != nil || ch < 0 || ch > 254 {
				res.StatusCode = base.StatusBadRequest
				break
			}
			channel = ch
			session = fmt.Sprintf("%08x", time.Now().UnixNano()&0xffffffff)
			res.Header["Transport"] = base.HeaderValue{fmt.Sprintf("RTP/AVP/TCP;unicast;interleaved=%d-%d", ch, ch+1)}
			res.Header["Session"] = base.HeaderValue{session + ";timeout=60"}
		case base.Play:
			if session == "" || channel < 0 {
				res.StatusCode = base.StatusMethodNotValidInThisState
				break
			}
			playing = true
			res.Header["Session"] = base.HeaderValue{session}
			b.mu.Lock()
			b.stats.Sessions++
			b.mu.Unlock()
		case base.GetParameter:
			if session != "" {
				res.Header["Session"] = base.HeaderValue{session}
			}
		case base.Teardown:
			b.write(c, res)
			return
		default:
			res.StatusCode = base.StatusNotImplemented
		}
		if !b.write(c, res) {
			return
		}
	}
}

func (b *Backchannel) write(c net.Conn, res base.Response) bool {
	buf, err := res.Marshal()
	if err != nil {
		return false
	}
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Write(buf)
	return err == nil
}

func (b *Backchannel) record(raw []byte) {
	var p rtp.Packet
	if err := p.Unmarshal(raw); err != nil {
		b.Log.Warn("emulator backchannel: bad RTP", "err", err)
		return
	}
	b.mu.Lock()
	s := &b.stats
	s.Packets++
	s.Bytes += len(p.Payload)
	s.PayloadType = p.PayloadType
	s.SSRC = p.SSRC
	if p.PayloadType == 0 && len(p.Payload) > 0 {
		var sq float64
		for _, u := range p.Payload {
			v := float64(ULawDecode(u))
			sq += v * v
		}
		s.sumSq += sq
		s.samples += len(p.Payload)
		if math.Sqrt(sq/float64(len(p.Payload))) > 300 {
			s.LoudPackets++
		}
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// ULawDecode expands a G.711 µ-law byte to a 16-bit linear sample.
func ULawDecode(u byte) int16 {
	u = ^u
	t := (int(u&0x0f) << 3) + 0x84
	t <<= (u & 0x70) >> 4
	if u&0x80 != 0 {
		return int16(0x84 - t)
	}
	return int16(t - 0x84)
}

// ULawEncode compresses a 16-bit linear sample to G.711 µ-law (the test
// talker uses it to make a tone).
func ULawEncode(s int16) byte {
	const bias, clip = 0x84, 32635
	sign := byte(0)
	v := int(s)
	if v < 0 {
		v, sign = -v, 0x80
	}
	if v > clip {
		v = clip
	}
	v += bias
	exp := byte(7)
	for mask := 0x4000; v&mask == 0 && exp > 0; mask >>= 1 {
		exp--
	}
	mant := byte(v>>(exp+3)) & 0x0f
	return ^(sign | exp<<4 | mant)
}
