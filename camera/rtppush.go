package camera

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

// Plain RTP pushed to a UDP port (ffmpeg -f rtp, GStreamer udpsink, cameras
// with an RTP push mode). Video and audio share one port (told apart by payload
// type) or use two; RTCP sender reports arrive on port+1 as RFC 3550 says.
//
// The first sender owns the stream: packets from another address are dropped
// until the owner has been silent for pushTakeover, so a stray or hostile
// sender cannot splice itself into a running stream.
const (
	pushSilence  = 2 * time.Second // no packet for this long: waiting
	pushTakeover = 5 * time.Second
)

type pushIngest struct {
	c       *Camera
	conns   []*net.UDPConn
	video   *videoRepack
	audio   *audioRelay
	videoPT uint8
	audioPT uint8

	mu       sync.Mutex
	owner    *net.UDPAddr
	lastAt   time.Time
	vSSRC    uint32 // the sender's SSRCs: a change is a new session
	aSSRC    uint32
	badLogs  int
	streamin bool

	// media serializes the repacketizers between the RTP and RTCP readers.
	media sync.Mutex
}

func (c *Camera) startRTPPush() error {
	r := c.cfg.RTP
	bind := r.Bind
	if bind == "" {
		bind = "0.0.0.0"
		if c.g.o.Loopback {
			bind = "127.0.0.1"
		}
	}
	in := &pushIngest{c: c, videoPT: r.VideoPT, audioPT: r.AudioPT}
	if in.videoPT == 0 {
		in.videoPT = 96
	}
	var audioCodec webrtc.RTPCodecParameters
	switch strings.ToLower(r.Audio) {
	case "opus":
		audioCodec = webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1"}, PayloadType: 111}
		if r.AudioPT == 0 {
			in.audioPT = 111
		}
	case "pcmu":
		audioCodec = webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1}, PayloadType: 0}
	case "pcma":
		audioCodec = webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMA, ClockRate: 8000, Channels: 1}, PayloadType: 8}
		if r.AudioPT == 0 {
			in.audioPT = 8
		}
	}
	if audioCodec.MimeType != "" && r.AudioPort == 0 && in.audioPT == in.videoPT {
		return fmt.Errorf("camera %s: audio and video share port %d with the same payload type %d", c.cfg.ID, r.Port, in.videoPT)
	}
	ports := []int{r.Port, r.Port + 1}
	if r.AudioPort != 0 && audioCodec.MimeType != "" {
		ports = append(ports, r.AudioPort, r.AudioPort+1)
	}
	for _, p := range ports {
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(bind), Port: p})
		if err != nil {
			for _, x := range in.conns {
				_ = x.Close()
			}
			return fmt.Errorf("camera %s: rtp port %s: %w", c.cfg.ID, net.JoinHostPort(bind, strconv.Itoa(p)), err)
		}
		_ = conn.SetReadBuffer(1 << 20)
		in.conns = append(in.conns, conn)
	}
	ssrc := randU32()
	sps, pps, _ := r.ParameterSets()
	fmtp, w, h := h264Info(sps)
	lt, err := c.publish("video", webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000, SDPFmtpLine: fmtp}, PayloadType: 102}, ssrc, w, h)
	if err != nil {
		in.close()
		return err
	}
	if in.video, err = newVideoRepack(webrtc.MimeTypeH264, 102, ssrc, lt, c.log); err != nil {
		in.close()
		return err
	}
	in.video.keep = true // read() reuses one buffer for every datagram
	in.video.newSession(nil, sps, pps)
	if audioCodec.MimeType != "" {
		assrc := randU32()
		alt, err := c.publish("audio", audioCodec, assrc, 0, 0)
		if err != nil {
			in.close()
			return err
		}
		in.audio = &audioRelay{ssrc: assrc, pt: uint8(audioCodec.PayloadType), clock: audioCodec.ClockRate, track: alt}
	}
	c.setState(StateIdle, nil)
	for i, conn := range in.conns {
		rtcpPort := i%2 == 1
		c.done.Add(1)
		go in.read(conn, rtcpPort)
	}
	c.done.Add(1)
	go in.watch()
	c.log.Info("rtp push listening", "addr", in.conns[0].LocalAddr().String(), "audio", r.Audio)
	return nil
}

func (in *pushIngest) close() {
	for _, x := range in.conns {
		_ = x.Close()
	}
}

// watch closes the sockets when the camera stops and shows when the sender
// went quiet.
func (in *pushIngest) watch() {
	defer in.c.done.Done()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-in.c.ctx.Done():
			in.close()
			return
		case <-t.C:
			in.mu.Lock()
			quiet := in.streamin && time.Since(in.lastAt) > pushSilence
			if quiet {
				in.streamin = false
			}
			in.mu.Unlock()
			if quiet {
				in.c.setState(StateIdle, errors.New("no RTP from the sender for 2 s"))
			}
		}
	}
}

func (in *pushIngest) bad(what string, from *net.UDPAddr, err error) {
	in.mu.Lock()
	n := in.badLogs
	in.badLogs++
	in.mu.Unlock()
	// A flood of junk gets a few lines, then one every 1000.
	if n < 5 || n%1000 == 0 {
		in.c.log.Info("rtp push: packet dropped", "why", what, "from", from.String(), "err", err, "dropped", n+1)
	}
}

func (in *pushIngest) read(conn *net.UDPConn, isRTCP bool) {
	defer in.c.done.Done()
	buf := make([]byte, 2048)
	var pkt rtp.Packet
	for {
		n, from, err := conn.ReadFromUDP(buf)
		if err != nil {
			if in.c.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				in.c.log.Warn("rtp push: read", "err", err)
			}
			return
		}
		if n > 1500 {
			in.bad("too large", from, fmt.Errorf("%d bytes", n))
			continue
		}
		if !in.accept(from) {
			in.bad("not the stream's sender", from, nil)
			continue
		}
		if isRTCP {
			in.rtcp(buf[:n], from)
			continue
		}
		if err := pkt.Unmarshal(buf[:n]); err != nil || pkt.Version != 2 {
			if err == nil {
				err = fmt.Errorf("version %d", pkt.Version)
			}
			in.bad("malformed RTP", from, err)
			continue
		}
		in.c.bytesIn.Add(uint64(n))
		in.packet(&pkt, from)
	}
}

// accept admits packets from the stream's owner, or makes from the owner when
// the last one has gone quiet.
func (in *pushIngest) accept(from *net.UDPAddr) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.owner == nil || time.Since(in.lastAt) > pushTakeover {
		in.owner = from
	}
	return in.owner.IP.Equal(from.IP)
}

func (in *pushIngest) packet(p *rtp.Packet, from *net.UDPAddr) {
	in.mu.Lock()
	in.lastAt = time.Now()
	start := !in.streamin
	in.streamin = true
	in.mu.Unlock()
	if start {
		in.c.setState(StateStreaming, nil)
		in.c.log.Info("rtp push: stream started", "from", from.String())
	}
	in.media.Lock()
	defer in.media.Unlock()
	switch {
	case p.PayloadType == in.videoPT:
		if p.SSRC != in.vSSRC {
			in.vSSRC = p.SSRC
			in.video.newSession(nil, nil, nil)
		}
		in.video.push(p)
	case in.audio != nil && p.PayloadType == in.audioPT:
		if p.SSRC != in.aSSRC {
			in.aSSRC = p.SSRC
			in.audio.newSession()
		}
		in.audio.push(p)
	default:
		in.bad("unexpected payload type", from, fmt.Errorf("payload type %d", p.PayloadType))
	}
}

func (in *pushIngest) rtcp(b []byte, from *net.UDPAddr) {
	pkts, err := rtcp.Unmarshal(b)
	if err != nil {
		in.bad("malformed RTCP", from, err)
		return
	}
	in.media.Lock()
	defer in.media.Unlock()
	for _, p := range pkts {
		sr, ok := p.(*rtcp.SenderReport)
		if !ok {
			continue
		}
		switch {
		case sr.SSRC == in.vSSRC && in.video.synced:
			forwardSR(sr, in.video.ssrc, in.video.tsOff, in.video.track)
		case in.audio != nil && sr.SSRC == in.aSSRC && in.audio.synced:
			forwardSR(sr, in.audio.ssrc, in.audio.tsOff, in.audio.track)
		}
	}
}
