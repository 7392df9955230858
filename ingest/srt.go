package ingest

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bluenviron/mediacommon/v2/pkg/codecs/h264"
	"github.com/bluenviron/mediacommon/v2/pkg/codecs/mpeg4audio"
	"github.com/bluenviron/mediacommon/v2/pkg/formats/mpegts"
	tscodecs "github.com/bluenviron/mediacommon/v2/pkg/formats/mpegts/codecs"
	srt "github.com/datarhei/gosrt"

	"github.com/petrel-sfu/petrel/auth"
)

// SRT publishers send MPEG-TS (H.264 and AAC, as ffmpeg and OBS do) over an
// SRT connection (datarhei/gosrt). The token is the stream id.

// srtSetupBudget bounds the bytes read before the transport stream's tracks
// are known (its PMT and the first frame of each).
const srtSetupBudget = 8 << 20

func (s *Server) startSRT(addr string) error {
	cfg := srt.DefaultConfig()
	ln, err := srt.Listen("srt", addr, cfg)
	if err != nil {
		return fmt.Errorf("srt ingest: %w", err)
	}
	s.srtLn = ln
	s.wg.Add(1)
	go s.acceptSRT()
	s.log.Info("srt ingest listening", "addr", ln.Addr().String())
	return nil
}

// SRTAddr is the address the SRT listener is bound to ("" without one).
func (s *Server) SRTAddr() string {
	if s.srtLn == nil {
		return ""
	}
	return s.srtLn.Addr().String()
}

func (s *Server) acceptSRT() {
	defer s.wg.Done()
	for {
		req, err := s.srtLn.Accept2()
		if err != nil {
			// gosrt returns errors only once the listener is done.
			if !errors.Is(err, srt.ErrListenerClosed) {
				s.log.Error("srt ingest stopped", "err", err)
			}
			return
		}
		remote := req.RemoteAddr().String()
		select {
		case s.slots <- struct{}{}:
		default:
			req.Reject(srt.REJX_OVERLOAD)
			if held, ok := s.full.Allow(refusalLogEvery); ok {
				s.log.Warn("srt connection refused: ingest.max_conns reached", "remote", remote, "held_back", held)
			}
			continue
		}
		claims, in, err := s.authorizeSRT(req)
		if err == nil {
			if err = s.admit(req.RemoteAddr()); err != nil {
				req.Reject(srt.REJX_OVERLOAD)
				<-s.slots
				s.refuse("srt", remote, claims.Room, err)
				continue
			}
		}
		if err != nil {
			req.Reject(srt.REJX_UNAUTHORIZED)
			<-s.slots
			s.refuse("srt", remote, "", err)
			continue
		}
		conn, err := req.Accept()
		if err != nil {
			<-s.slots
			s.drop("srt", remote, fmt.Errorf("srt accept: %w", err))
			continue
		}
		s.mu.Lock()
		s.conns[conn] = nil
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			s.serveSRT(conn, claims, in, remote)
		}()
	}
}

// authorizeSRT takes the token from the stream id: the token itself, or the
// SRT access-control form "#!::r=<token>,m=publish".
func (s *Server) authorizeSRT(req srt.ConnRequest) (*auth.Claims, *auth.Ingress, error) {
	if req.IsEncrypted() {
		return nil, nil, errors.New("encrypted SRT is not served (the token authorizes; use TLS-free SRT on a trusted path)")
	}
	tok, err := streamToken(req.StreamId())
	if err != nil {
		return nil, nil, err
	}
	return s.authorizeKey(tok, auth.IngressSRT)
}

// streamToken is the token a stream id carries.
func streamToken(id string) (string, error) {
	rest, ok := strings.CutPrefix(id, "#!::")
	if !ok {
		return id, nil
	}
	tok := ""
	for _, kv := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "r":
			tok = v
		case "m":
			if v != "publish" {
				return "", fmt.Errorf("%w: mode %q: the SRT port takes publishers only", auth.ErrUnauthorized, v)
			}
		}
	}
	return tok, nil
}

// progressReader counts the bytes read since the last reset against a limit
// and notes when data last came.
type progressReader struct {
	r           io.Reader
	read, limit int
	last        atomic.Int64 // unix ns
}

func (p *progressReader) Read(b []byte) (int, error) {
	if p.read >= p.limit {
		return 0, errBudget
	}
	n, err := p.r.Read(b)
	p.read += n
	if n > 0 {
		p.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// serveSRT runs one accepted SRT publisher to its end.
func (s *Server) serveSRT(c srt.Conn, claims *auth.Claims, in *auth.Ingress, remote string) {
	connected := time.Now()
	defer func() {
		if r := recover(); r != nil {
			s.drop("srt", remote, fmt.Errorf("panic: %v", r))
		}
		_ = c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	// gosrt has no read deadlines: a watchdog closes a connection that
	// sends no media (keepalives alone hold it open) or finds no tracks.
	pr := &progressReader{r: c, limit: srtSetupBudget}
	pr.last.Store(connected.UnixNano())
	var ready atomic.Bool
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				if (!ready.Load() && now.Sub(connected) > setupTimeout) || now.Sub(time.Unix(0, pr.last.Load())) > idleTimeout {
					_ = c.Close()
					return
				}
			}
		}
	}()
	r := &mpegts.Reader{R: pr}
	if err := r.Initialize(); err != nil {
		s.drop("srt", remote, fmt.Errorf("mpeg-ts: %w", err))
		return
	}
	ready.Store(true)
	pr.read, pr.limit = 0, partialBudget
	pub, err := s.join("srt", remote, claims, in, c, connected)
	if err != nil {
		return
	}
	pub.leave("srt", pub.readTS(r, pr))
}

// readTS hands the transport stream's H.264 and AAC to the publisher until
// the connection ends.
func (p *publisher) readTS(r *mpegts.Reader, pr *progressReader) error {
	var failed error
	r.OnDecodeError(func(err error) { p.warnOnce("ts", "MPEG-TS: "+err.Error()) })
	for _, t := range r.Tracks() {
		switch c := t.Codec.(type) {
		case *tscodecs.H264:
			var td mpegts.TimeDecoder
			r.OnDataH264(t, func(pts, dts int64, au [][]byte) error {
				pr.read = 0
				var sps, pps []byte
				for _, n := range au {
					if len(n) == 0 {
						continue
					}
					switch h264.NALUType(n[0] & 0x1f) {
					case h264.NALUTypeSPS:
						sps = n
					case h264.NALUTypePPS:
						pps = n
					}
				}
				if sps != nil && pps != nil {
					if err := p.videoParams(sps, pps); err != nil {
						return err
					}
				}
				if pts != dts {
					p.warnOnce("bframes", "the encoder sends B-frames, which WebRTC receivers show out of order: set bframes=0")
				}
				p.videoFrame(au, uint32(td.Decode(pts)))
				return nil
			})
		case *tscodecs.MPEG4Audio:
			conf := c.Config
			if err := p.audioConfig(&conf); err != nil {
				return err
			}
			var td mpegts.TimeDecoder
			r.OnDataMPEG4Audio(t, func(pts int64, aus [][]byte) error {
				pr.read = 0
				base := td.Decode(pts) * p.aacRate / 90000
				for i, au := range aus {
					p.audioFrame(base+int64(i*mpeg4audio.SamplesPerAccessUnit), au)
				}
				return nil
			})
		default:
			p.warnOnce("ts-codec", fmt.Sprintf("MPEG-TS track of codec %T ignored: send H.264 and AAC", c))
		}
	}
	for failed == nil {
		failed = r.Read()
	}
	return failed
}
