// Package ingest brings publishers that speak RTMP (OBS, ffmpeg) into rooms as
// participants, with the grants of the token their stream key carries.
package ingest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/bluenviron/gortmplib"
	"github.com/bluenviron/gortmplib/pkg/message"
	"github.com/bluenviron/mediacommon/pkg/codecs/h264"
	srt "github.com/datarhei/gosrt"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/lograte"
	"github.com/petrel-sfu/petrel/sfu"
)

// Bounds on what one connection may cost before and while it publishes.
const (
	// setupTimeout covers the handshake, connect, createStream and publish:
	// an encoder does them in one round trip each.
	setupTimeout = 10 * time.Second
	// setupBudget is the bytes a connection may send before its publish is
	// accepted (the commands are a few hundred bytes).
	setupBudget = 64 << 10
	// idleTimeout drops a publisher that sends nothing for this long.
	idleTimeout = 10 * time.Second
	// partialBudget is the bytes read without a complete message: chunks of
	// messages left unfinished (on up to 64 chunk streams, each up to the
	// reader's 10 MiB message limit) would otherwise pile up.
	partialBudget = 32 << 20
	// refusalLogEvery rate-limits the log lines a client can provoke at will.
	refusalLogEvery = 10 * time.Second
)

// Options configure the ingest.
type Options struct {
	RTMP     string // TCP listen address of RTMP; "" for none
	SRT      string // UDP listen address of SRT; "" for none
	MaxConns int    // open connections, publishing or not, of both
	Manager  *sfu.Manager
	Keys     auth.Keys
	// Ingress holds the stream keys of the admin API's ingresses; nil: tokens only.
	Ingress *auth.IngressKeys
	// Cameras lends the camera gateway's AAC transcoder.
	Cameras *camera.Gateway
	// Admit spends a join from a client address once its token is verified
	// (the signal package's allowance per address and the server's budget);
	// nil admits all.
	Admit func(netip.Addr) error
	Log   *slog.Logger
}

// Server accepts RTMP and SRT publishers.
type Server struct {
	o     Options
	ln    net.Listener // RTMP
	srtLn srt.Listener
	log   *slog.Logger
	slots chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]*publisher // open connections (publisher nil until published)
	// states holds, by ingress id, the state of ingresses that published
	// since they were created (the others are inactive since their creation).
	states map[string]ingressState

	refused lograte.Limit
	dropped lograte.Limit
	full    lograte.Limit
}

// Start listens on o.RTMP and o.SRT (those set) and serves until Close.
func Start(o Options) (*Server, error) {
	if o.MaxConns < 1 {
		o.MaxConns = 1
	}
	if o.Ingress == nil {
		o.Ingress = auth.NewIngressKeys()
	}
	s := &Server{o: o, log: o.Log, slots: make(chan struct{}, o.MaxConns),
		conns: map[net.Conn]*publisher{}, states: map[string]ingressState{}}
	if o.RTMP != "" {
		ln, err := net.Listen("tcp", o.RTMP)
		if err != nil {
			return nil, fmt.Errorf("rtmp ingest: %w", err)
		}
		s.ln = ln
		s.wg.Add(1)
		go s.accept()
		s.log.Info("rtmp ingest listening", "addr", ln.Addr().String())
	}
	if o.SRT != "" {
		if err := s.startSRT(o.SRT); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Addr is the address the RTMP listener is bound to ("" without one).
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops listening, ends every connection and waits for them.
func (s *Server) Close() {
	if s.ln != nil {
		_ = s.ln.Close()
	}
	if s.srtLn != nil {
		s.srtLn.Close()
	}
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("rtmp accept", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		select {
		case s.slots <- struct{}{}:
		default:
			if held, ok := s.full.Allow(refusalLogEvery); ok {
				s.log.Warn("rtmp connection refused: ingest.max_conns reached", "remote", c.RemoteAddr().String(), "held_back", held)
			}
			_ = c.Close()
			continue
		}
		s.mu.Lock()
		s.conns[c] = nil
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			s.serve(c)
		}()
	}
}

// budgetConn fails reads once limit bytes have been read since the last reset.
type budgetConn struct {
	net.Conn
	read, limit int
}

var errBudget = errors.New("read budget exceeded")

func (b *budgetConn) Read(p []byte) (int, error) {
	if b.read >= b.limit {
		return 0, errBudget
	}
	if len(p) > b.limit-b.read {
		p = p[:b.limit-b.read]
	}
	n, err := b.Conn.Read(p)
	b.read += n
	return n, err
}

// serve runs one connection to its end.
func (s *Server) serve(c net.Conn) {
	remote := c.RemoteAddr().String()
	defer func() {
		// The RTMP parsers are a library's: a panic on hostile input ends
		// this connection, not the server.
		if r := recover(); r != nil {
			s.drop("rtmp", remote, fmt.Errorf("panic: %v", r))
		}
		_ = c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	connected := time.Now()
	bc := &budgetConn{Conn: c, limit: setupBudget}
	_ = c.SetDeadline(connected.Add(setupTimeout))
	sc := &gortmplib.ServerConn{RW: bc}
	if err := sc.Initialize(); err != nil {
		s.drop("rtmp", remote, fmt.Errorf("handshake: %w", err))
		return
	}
	if err := sc.AcceptConn(); err != nil {
		s.drop("rtmp", remote, fmt.Errorf("connect: %w", err))
		return
	}
	if !sc.Publish {
		_ = sc.RejectAction()
		s.refuse("rtmp", remote, "", errors.New("play is not served: the RTMP port takes publishers only"))
		return
	}
	claims, in, err := s.authorize(sc.URL)
	if err == nil {
		err = s.admit(c.RemoteAddr())
	}
	if err != nil {
		_ = sc.RejectAction()
		s.refuse("rtmp", remote, "", err)
		return
	}
	if err := sc.AcceptAction(); err != nil {
		s.drop("rtmp", remote, fmt.Errorf("publish: %w", err))
		return
	}
	pub, err := s.join("rtmp", remote, claims, in, c, connected)
	if err != nil {
		return
	}
	pub.leave("rtmp", pub.readRTMP(sc, bc))
}

// join admits a verified publisher to its room, a client like any other (the
// room checks its token's grants); removed from the room, it is cut off.
func (s *Server) join(via, remote string, claims *auth.Claims, in *auth.Ingress, c net.Conn, connected time.Time) (*publisher, error) {
	log := s.log.With("room", claims.Room, "identity", claims.Identity(), "remote", remote, "via", via)
	if in != nil {
		log = log.With("ingress", in.ID)
		// Deleted while this connection was setting up.
		if !s.o.Ingress.Exists(in.ID) {
			err := fmt.Errorf("%w: the ingress was deleted", auth.ErrUnauthorized)
			s.refuse(via, remote, claims.Room, err)
			return nil, err
		}
	}
	p, err := s.o.Manager.JoinLocal(sfu.LocalOptions{Room: claims.Room, Identity: claims.Identity(), Name: claims.Name,
		Metadata: claims.Metadata, Grants: claims.Grants, Origin: sfu.Client})
	if err != nil {
		s.refuse(via, remote, claims.Room, fmt.Errorf("join: %w", err))
		return nil, err
	}
	pub := &publisher{srv: s, part: p, log: log, connected: connected, ingress: in}
	s.mu.Lock()
	s.conns[c] = pub
	s.mu.Unlock()
	p.OnClose(func() { _ = c.Close() })
	log.Info(via+" publisher joined", "setup_ms", time.Since(connected).Milliseconds())
	return pub, nil
}

// leave ends a publisher whose stream ended with err.
func (pub *publisher) leave(via string, err error) {
	pub.close()
	pub.ended()
	pub.part.Close("ingest_ended")
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		pub.log.Info(via+" publisher left", "err", err)
	} else {
		pub.log.Info(via + " publisher left")
	}
}

// authorize takes the stream key (the URL's last path element, or a token
// query parameter) and checks that it may publish. The room's own checks
// follow at the join and at each track.
func (s *Server) authorize(u *url.URL) (*auth.Claims, *auth.Ingress, error) {
	if u == nil {
		return nil, nil, fmt.Errorf("%w: no stream key", auth.ErrUnauthorized)
	}
	tok := u.Query().Get("token")
	if tok == "" {
		tok = path.Base(strings.TrimRight(u.Path, "/"))
	}
	if tok == "." || tok == "/" {
		tok = ""
	}
	return s.authorizeKey(tok, auth.IngressRTMP)
}

// authorizeKey verifies key, an ingress's stream key used over kind or a
// token, and checks that it may publish in a room. in is the ingress of a
// stream key, nil for a token.
func (s *Server) authorizeKey(key, kind string) (c *auth.Claims, in *auth.Ingress, err error) {
	c, ing, isKey, err := s.o.Ingress.Verify(key, kind)
	if isKey {
		in = &ing
	} else {
		c, err = s.o.Keys.Verify(key)
	}
	if err != nil {
		return nil, nil, err
	}
	if c.Room == "" {
		return nil, nil, fmt.Errorf("%w: the token names no room", auth.ErrUnauthorized)
	}
	if !c.Grants.Publish {
		return nil, nil, fmt.Errorf("%w: the token does not allow publishing", auth.ErrUnauthorized)
	}
	return c, in, nil
}

// admit spends a join from addr's allowance.
func (s *Server) admit(addr net.Addr) error {
	if s.o.Admit == nil {
		return nil
	}
	var a netip.Addr
	switch v := addr.(type) {
	case *net.TCPAddr:
		a, _ = netip.AddrFromSlice(v.IP)
	case *net.UDPAddr:
		a, _ = netip.AddrFromSlice(v.IP)
	}
	return s.o.Admit(a.Unmap())
}

// refuse logs a publisher turned away (rate-limited: anyone can try).
func (s *Server) refuse(via, remote, room string, err error) {
	if held, ok := s.refused.Allow(refusalLogEvery); ok {
		s.log.Warn("ingest publisher refused", "via", via, "remote", remote, "room", room, "err", err, "held_back", held)
	}
}

// drop logs a connection that broke the protocol or its bounds (rate-limited).
func (s *Server) drop(via, remote string, err error) {
	if held, ok := s.dropped.Allow(refusalLogEvery); ok {
		s.log.Info("ingest connection dropped", "via", via, "remote", remote, "err", err, "held_back", held)
	}
}

// PublisherInfo describes a connected publisher.
type PublisherInfo struct {
	Room, Identity string
	Connected      time.Time // TCP connection accepted
	FirstVideo     time.Time // first video RTP written into the room (zero before)
}

// Publishers lists the connected publishers.
func (s *Server) Publishers() []PublisherInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []PublisherInfo
	for _, p := range s.conns {
		if p != nil {
			out = append(out, p.info())
		}
	}
	return out
}

// readRTMP reads messages until the connection ends or breaks a bound.
func (p *publisher) readRTMP(sc *gortmplib.ServerConn, bc *budgetConn) error {
	bc.read, bc.limit = 0, partialBudget
	for {
		_ = bc.SetDeadline(time.Now().Add(idleTimeout))
		msg, err := sc.Read()
		if err != nil {
			return err
		}
		bc.read = 0
		switch m := msg.(type) {
		case *message.Video:
			if err := p.onRTMPVideo(m); err != nil {
				return err
			}
		case *message.Audio:
			if err := p.onRTMPAudio(m); err != nil {
				return err
			}
		case *message.CommandAMF0:
			if m.Name == "deleteStream" || m.Name == "FCUnpublish" || m.Name == "closeStream" {
				return nil
			}
		case *message.VideoExSequenceStart, *message.VideoExCodedFrames, *message.VideoExFramesX,
			*message.VideoExMultitrack, *message.AudioExSequenceStart, *message.AudioExCodedFrames,
			*message.AudioExMultitrack:
			p.warnOnce("enhanced", "enhanced RTMP (HEVC, AV1, VP9, Opus, multitrack) is not taken: send H.264 and AAC")
		}
	}
}

func (p *publisher) onRTMPVideo(m *message.Video) error {
	if m.Codec != message.CodecH264 {
		p.warnOnce("hevc", "video is not H.264 (browsers take H.264 from RTMP): ignored")
		return nil
	}
	switch m.Type {
	case message.VideoTypeConfig:
		c := m.AVCConfig
		if c == nil || len(c.SequenceParameterSets) == 0 || len(c.PictureParameterSets) == 0 {
			return errors.New("H.264 configuration without SPS or PPS")
		}
		return p.videoParams(c.SequenceParameterSets[0].NALUnit, c.PictureParameterSets[0].NALUnit)
	case message.VideoTypeAU:
		var au h264.AVCC
		if err := au.Unmarshal(m.AU); err != nil {
			if errors.Is(err, h264.ErrAVCCNoNALUs) {
				return nil
			}
			return fmt.Errorf("H.264 frame: %w", err)
		}
		if m.PTSDelta != 0 {
			p.warnOnce("bframes", "the encoder sends B-frames, which WebRTC receivers show out of order: set bframes=0")
		}
		p.videoFrame(au, uint32(int64((m.DTS+m.PTSDelta)/time.Millisecond)*90))
	}
	return nil
}

func (p *publisher) onRTMPAudio(m *message.Audio) error {
	if m.Codec != message.CodecMPEG4Audio {
		p.warnOnce("audio", "audio is not AAC: ignored")
		return nil
	}
	switch m.AACType {
	case message.AudioAACTypeConfig:
		return p.audioConfig(m.AACConfig)
	case message.AudioAACTypeAU:
		p.audioFrame(int64(m.DTS/time.Millisecond)*p.aacRate/1000, m.AU)
	}
	return nil
}
