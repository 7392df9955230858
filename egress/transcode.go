package egress

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/sfu"
)

// A room's VP8 or VP9 video reaches HLS through an ffmpeg subprocess that the
// first viewer's request starts and the stream's end stops: the track goes to
// it as RTP over loopback, as to an RTMP egress, and comes back as H.264 RTP
// into the muxer's video path.
type transcoder struct {
	cmd    *exec.Cmd
	out    *rtpOut      // the source track, to ffmpeg
	in     *net.UDPConn // ffmpeg's H.264
	rtcp   *net.UDPConn // ffmpeg's sender reports, read and dropped
	stderr *tailWriter
	rm     func()
	done   chan struct{}
}

// transcodable reports whether HLS can carry a video track of this codec
// through the transcoder.
func transcodable(mime string) bool {
	enc := videoEncoding(mime)
	return enc == "VP8" || enc == "VP9"
}

// startTranscoder starts ffmpeg on pub's video, with a keyframe every gop (a
// segment starts at one); deliver gets each H.264 RTP
// packet it sends back (on the transcoder's reader goroutine), failed the
// error of an ffmpeg that ended by itself.
func startTranscoder(bin string, gop time.Duration, pub *sfu.Publication, deliver func(h *rtp.Header, payload []byte), failed func(error)) (*transcoder, error) {
	inPort, err := freePortPair()
	if err != nil {
		return nil, err
	}
	back, err := freePortPair()
	if err != nil {
		return nil, err
	}
	lo := net.IPv4(127, 0, 0, 1)
	t := &transcoder{done: make(chan struct{}), stderr: &tailWriter{max: 4 << 10}}
	if t.in, err = net.ListenUDP("udp4", &net.UDPAddr{IP: lo, Port: back}); err != nil {
		return nil, err
	}
	if t.rtcp, err = net.ListenUDP("udp4", &net.UDPAddr{IP: lo, Port: back + 1}); err != nil {
		t.in.Close()
		return nil, err
	}
	if t.out, err = newRTPOut(pub, true, 96, 0x5e1000, inPort); err != nil {
		t.in.Close()
		t.rtcp.Close()
		return nil, err
	}
	sdp := fmt.Sprintf("v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=petrel hls\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=video %d RTP/AVP 96\r\na=rtpmap:96 %s/90000\r\n",
		inPort, videoEncoding(pub.Codec().MimeType))
	t.cmd = exec.Command(bin, "-hide_banner", "-nostdin", "-loglevel", "error", "-protocol_whitelist", "pipe,udp,rtp",
		"-f", "sdp", "-fflags", "nobuffer", "-flags", "low_delay", "-analyzeduration", "500000", "-i", "pipe:0",
		"-map", "0:v", "-c:v", "libx264", "-preset", "veryfast", "-tune", "zerolatency", "-pix_fmt", "yuv420p",
		"-profile:v", "baseline", "-force_key_frames", fmt.Sprintf("expr:gte(t,n_forced*%g)", gop.Seconds()), "-bsf:v", "dump_extra",
		"-f", "rtp", "-payload_type", "96", fmt.Sprintf("rtp://127.0.0.1:%d?pkt_size=1200", back))
	t.cmd.Stdin = strings.NewReader(sdp)
	t.cmd.Stderr = t.stderr
	dieWithServer(t.cmd)
	if err := t.cmd.Start(); err != nil {
		t.close()
		return nil, fmt.Errorf("ffmpeg: %w", err)
	}
	go func() {
		err := t.cmd.Wait()
		select {
		case <-t.done:
		default:
			failed(fmt.Errorf("the transcoder (ffmpeg) ended: %v: %s", err, t.stderr.String()))
		}
	}()
	go t.read(deliver)
	go drain(t.rtcp)
	// ffmpeg binds its input while it reads the SDP: packets before are lost,
	// and the keyframe requests repeat until one gets through.
	go t.out.run(t.done, transcodeKeyEvery)
	t.rm = pub.AddSink(t.out)
	return t, nil
}

func (t *transcoder) read(deliver func(h *rtp.Header, payload []byte)) {
	buf := make([]byte, 1500)
	var h rtp.Header
	for {
		n, err := t.in.Read(buf)
		if err != nil {
			return
		}
		off, err := h.Unmarshal(buf[:n])
		if err != nil || off > n {
			continue
		}
		deliver(&h, buf[off:n])
	}
}

func drain(c *net.UDPConn) {
	buf := make([]byte, 1500)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

func (t *transcoder) close() {
	if t.rm != nil {
		t.rm()
	}
	select {
	case <-t.done:
	default:
		close(t.done)
	}
	_ = t.cmd.Process.Kill() // the waiter reaps it
	t.out.close()
	t.in.Close()
	t.rtcp.Close()
}
