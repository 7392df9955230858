package egress

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
	"github.com/petrel-sfu/petrel/webhook"
)

// RTMP push egress: a room's tracks go to a streaming service through an
// ffmpeg subprocess fed with the tracks' RTP over loopback UDP and an SDP.
// One design for every codec: H.264 is copied (no transcoding), VP8/VP9
// become H.264 and Opus/G.711 AAC in the same process, and ffmpeg speaks
// RTMP and RTMPS; the forwarding goroutine only copies into a bounded queue.

// Bounds of one egress.
const (
	// startTimeout is how long ffmpeg may take to send its first bytes to
	// the target (it waits for a keyframe, probes the tracks, connects).
	startTimeout = 20 * time.Second
	// stopGrace is how long ffmpeg may take to end the stream cleanly after
	// SIGINT before it is killed.
	stopGrace = 5 * time.Second
	// compositeW, compositeH and compositeFPS are the composite's picture
	// (720p: what streaming services take at a modest bitrate).
	compositeW, compositeH, compositeFPS = 1280, 720, 30
	// keptEnded is how many ended egresses the list keeps.
	keptEnded = 64
	// maxURL bounds the target URL.
	maxURL = 1024
	// passKeyEvery is the GOP asked of a publisher whose H.264 passes
	// through: RTMP services want a keyframe every 2 to 4 s.
	passKeyEvery = 2 * time.Second
	// transcodeKeyEvery asks a publisher whose video ffmpeg decodes for a
	// keyframe now and then, so a decoder hit by loss recovers.
	transcodeKeyEvery = 10 * time.Second
)

// PushOptions configure RTMP push egress.
type PushOptions struct {
	Manager *sfu.Manager
	Max     int    // egresses running at once
	FFmpeg  string // the binary ("" is ffmpeg from PATH)
	// CAFile holds the authorities an rtmps target's certificate must chain
	// to ("" is the system's).
	CAFile string
	Log    *slog.Logger
}

// Pushes runs the RTMP egresses.
type Pushes struct {
	o PushOptions

	mu     sync.Mutex
	all    []*push // oldest first: the running ones and the last ended
	closed bool
	wg     sync.WaitGroup
}

// NewPushes makes the RTMP egress; Close stops every egress.
func NewPushes(o PushOptions) *Pushes {
	if o.Max < 1 {
		o.Max = 1
	}
	if o.FFmpeg == "" {
		o.FFmpeg = "ffmpeg"
	}
	return &Pushes{o: o}
}

type push struct {
	ps        *Pushes
	info      protocol.EgressInfo // under ps.mu
	bin       string
	composite bool
	owner     *sfu.Participant // nil for a composite
	// videos and audios are sent; owned by the egress's goroutine once it runs.
	videos, audios []*sfu.Publication
	// Of the ffmpeg running: its senders, their sinks' removers, and the
	// channel that stops the senders.
	outs     []*rtpOut
	rm       []func()
	outsDone chan struct{}
	cmd      *exec.Cmd
	log      *slog.Logger
	quit     chan struct{} // closed by Stop
	once     sync.Once
	// activeC is closed when ffmpeg has sent its first bytes to the target.
	activeC chan struct{}
	// why is the reason of the stop (under ps.mu).
	why string
}

// CodeUnavailable: egress needs ffmpeg, which is not installed.
const CodeUnavailable = "unavailable"

// Start validates req, attaches to the tracks and starts ffmpeg.
func (ps *Pushes) Start(req protocol.CreateEgress) (protocol.EgressInfo, error) {
	if req.Kind != "rtmp" {
		return protocol.EgressInfo{}, protocol.Errorf(protocol.CodeBadRequest, "kind must be rtmp, not %q", truncate(req.Kind, 32))
	}
	if err := checkTarget(req.URL); err != nil {
		return protocol.EgressInfo{}, err
	}
	room := ps.o.Manager.Room(req.Room)
	if room == nil || req.Room == "" {
		return protocol.EgressInfo{}, protocol.Errorf(protocol.CodeNotFound, "no room %q", truncate(req.Room, 128))
	}
	var owner *sfu.Participant
	var videos, audios []*sfu.Publication
	if req.Composite {
		if req.Identity != "" || len(req.Tracks) > 0 {
			return protocol.EgressInfo{}, protocol.Errorf(protocol.CodeBadRequest, "a composite takes the whole room: no identity or tracks")
		}
		if videos, audios = pickComposite(room); len(videos)+len(audios) == 0 {
			return protocol.EgressInfo{}, protocol.Errorf(protocol.CodeNotFound, "room %q has no track to composite", room.Name())
		}
	} else {
		o, video, audio, err := pickTracks(room, req)
		if err != nil {
			return protocol.EgressInfo{}, err
		}
		owner = o
		if video != nil {
			videos = []*sfu.Publication{video}
		}
		if audio != nil {
			audios = []*sfu.Publication{audio}
		}
	}
	bin, err := exec.LookPath(ps.o.FFmpeg)
	if err != nil {
		return protocol.EgressInfo{}, protocol.Errorf(CodeUnavailable, "RTMP egress needs ffmpeg, which is not installed here (%s: %v)", ps.o.FFmpeg, err)
	}
	ps.mu.Lock()
	running := 0
	for _, p := range ps.all {
		if !ended(p.info.State) {
			running++
		}
	}
	if ps.closed || running >= ps.o.Max {
		ps.mu.Unlock()
		return protocol.EgressInfo{}, protocol.Errorf(protocol.CodeServerBusy, "%d egresses are running, the most this server allows (egress.max_rtmp)", running)
	}
	now := time.Now().UnixMilli()
	p := &push{ps: ps, bin: bin, composite: req.Composite, owner: owner, quit: make(chan struct{}),
		info: protocol.EgressInfo{ID: newEgressID(), Kind: "rtmp", Room: req.Room, Composite: req.Composite,
			URL: req.URL, State: protocol.EgressStarting, Since: now, StartedAt: now}}
	p.videos, p.audios, p.info.Tracks = videos, audios, sids(videos, audios)
	if owner != nil {
		p.info.Identity = owner.Identity()
	}
	p.log = ps.o.Log.With("egress", p.info.ID, "room", req.Room, "identity", p.info.Identity, "target", redact(req.URL))
	ps.all = append(ps.all, p)
	ps.wg.Add(1)
	ps.mu.Unlock()

	if err := p.start(); err != nil {
		p.log.Warn("rtmp egress did not start", "err", err)
		ps.finish(p, protocol.EgressFailed, err.Error())
		ps.wg.Done()
		return p.snapshot(), nil
	}
	p.log.Info("rtmp egress started", "tracks", p.info.Tracks)
	ps.emit(p, webhook.EgressStarted)
	go func() {
		defer ps.wg.Done()
		p.run()
	}()
	return p.snapshot(), nil
}

// pickTracks finds the tracks req names: a participant's camera (else its
// first video) and microphone (else its first audio), or tracks by sid.
func pickTracks(room *sfu.Room, req protocol.CreateEgress) (owner *sfu.Participant, video, audio *sfu.Publication, err error) {
	switch {
	case req.Identity != "" && len(req.Tracks) > 0:
		return nil, nil, nil, protocol.Errorf(protocol.CodeBadRequest, "give identity or tracks, not both")
	case req.Identity != "":
		owner = room.ByIdentity(req.Identity)
		if owner == nil {
			return nil, nil, nil, protocol.Errorf(protocol.CodeNotFound, "no participant %q in room %q", truncate(req.Identity, 128), room.Name())
		}
		pubs := owner.Publications()
		sort.Slice(pubs, func(i, j int) bool { return pubs[i].Sid() < pubs[j].Sid() })
		for _, pub := range pubs {
			src := pub.Info().Source
			switch {
			case pub.Kind() == sfu.Video && (video == nil || src == string(protocol.SourceCamera) && video.Info().Source != src):
				video = pub
			case pub.Kind() == sfu.Audio && (audio == nil || src == string(protocol.SourceMicrophone) && audio.Info().Source != src):
				audio = pub
			}
		}
		if video == nil && audio == nil {
			return nil, nil, nil, protocol.Errorf(protocol.CodeNotFound, "participant %q publishes no track", req.Identity)
		}
	case len(req.Tracks) > 0 && len(req.Tracks) <= 2:
		for _, sid := range req.Tracks {
			var pub *sfu.Publication
			for _, p := range room.Participants() {
				for _, x := range p.Publications() {
					if x.Sid() == sid {
						pub = x
					}
				}
			}
			switch {
			case pub == nil:
				return nil, nil, nil, protocol.Errorf(protocol.CodeNotFound, "no track %q in room %q", truncate(sid, 64), room.Name())
			case owner != nil && pub.Owner() != owner:
				return nil, nil, nil, protocol.Errorf(protocol.CodeBadRequest, "the tracks must be one participant's")
			case pub.Kind() == sfu.Video && video == nil:
				video = pub
			case pub.Kind() == sfu.Audio && audio == nil:
				audio = pub
			default:
				return nil, nil, nil, protocol.Errorf(protocol.CodeBadRequest, "at most one video and one audio track")
			}
			owner = pub.Owner()
		}
	default:
		return nil, nil, nil, protocol.Errorf(protocol.CodeBadRequest, "name the participant (identity), up to two tracks (tracks: one video, one audio), or ask for the composite (composite: true)")
	}
	if video != nil && videoEncoding(video.Codec().MimeType) == "" {
		return nil, nil, nil, protocol.Errorf(protocol.CodeBadRequest, "RTMP egress takes H.264, VP8 or VP9 video; track %s is %s", video.Sid(), video.Codec().MimeType)
	}
	if audio != nil && audioEncoding(audio.Codec()) == "" {
		return nil, nil, nil, protocol.Errorf(protocol.CodeBadRequest, "RTMP egress takes Opus or G.711 audio; track %s is %s", audio.Sid(), audio.Codec().MimeType)
	}
	return owner, video, audio, nil
}

// maxCells and maxMixed bound a composite: the grid's cells (3x3) and the
// audio tracks mixed.
const (
	maxCells = 9
	maxMixed = 16
)

// pickComposite takes, of each visible participant in identity order, its
// camera (else first video) and microphone (else first audio) of a codec
// the egress takes, up to maxCells videos and maxMixed audios.
func pickComposite(room *sfu.Room) (videos, audios []*sfu.Publication) {
	ps := room.Participants()
	sort.Slice(ps, func(i, j int) bool { return ps[i].Identity() < ps[j].Identity() })
	for _, p := range ps {
		if p.Hidden() {
			continue
		}
		pubs := p.Publications()
		sort.Slice(pubs, func(i, j int) bool { return pubs[i].Sid() < pubs[j].Sid() })
		var video, audio *sfu.Publication
		for _, pub := range pubs {
			src := pub.Info().Source
			switch {
			case pub.Kind() == sfu.Video && videoEncoding(pub.Codec().MimeType) != "" &&
				(video == nil || src == string(protocol.SourceCamera) && video.Info().Source != src):
				video = pub
			case pub.Kind() == sfu.Audio && audioEncoding(pub.Codec()) != "" &&
				(audio == nil || src == string(protocol.SourceMicrophone) && audio.Info().Source != src):
				audio = pub
			}
		}
		if video != nil && len(videos) < maxCells {
			videos = append(videos, video)
		}
		if audio != nil && len(audios) < maxMixed {
			audios = append(audios, audio)
		}
	}
	return videos, audios
}

// sids lists the publications' sids, videos first.
func sids(videos, audios []*sfu.Publication) []string {
	out := []string{}
	for _, p := range append(append([]*sfu.Publication{}, videos...), audios...) {
		out = append(out, p.Sid())
	}
	return out
}

// checkTarget accepts rtmp:// and rtmps:// URLs with a host and an application.
func checkTarget(raw string) error {
	if len(raw) > maxURL {
		return protocol.Errorf(protocol.CodeBadRequest, "url over %d bytes", maxURL)
	}
	for _, c := range raw {
		if c <= ' ' || c == 0x7f {
			return protocol.Errorf(protocol.CodeBadRequest, "url has spaces or control characters")
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return protocol.Errorf(protocol.CodeBadRequest, "url: %v", err)
	}
	if u.Scheme != "rtmp" && u.Scheme != "rtmps" {
		return protocol.Errorf(protocol.CodeBadRequest, "url must be rtmp:// or rtmps://, not %q", truncate(u.Scheme+":", 16))
	}
	if u.Hostname() == "" || strings.Trim(u.Path, "/") == "" || u.Opaque != "" {
		return protocol.Errorf(protocol.CodeBadRequest, "url must be %s://host[:port]/app/stream-key", u.Scheme)
	}
	return nil
}

// redact hides an RTMP URL's stream key (its last path element) and query.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(url)"
	}
	u.User, u.RawQuery = nil, ""
	if i := strings.LastIndexByte(u.Path, '/'); i > 0 {
		u.Path = u.Path[:i] + "/…"
	}
	u.RawPath = ""
	return u.Scheme + "://" + u.Host + u.Path
}

func videoEncoding(mime string) string {
	switch {
	case strings.EqualFold(mime, webrtc.MimeTypeH264):
		return "H264"
	case strings.EqualFold(mime, webrtc.MimeTypeVP8):
		return "VP8"
	case strings.EqualFold(mime, webrtc.MimeTypeVP9):
		return "VP9"
	}
	return ""
}

func audioEncoding(c sfu.Codec) string {
	switch {
	case strings.EqualFold(c.MimeType, webrtc.MimeTypeOpus):
		return "opus/48000/2"
	case strings.EqualFold(c.MimeType, webrtc.MimeTypePCMU):
		return "PCMU/8000"
	case strings.EqualFold(c.MimeType, webrtc.MimeTypePCMA):
		return "PCMA/8000"
	}
	return ""
}

// start attaches the sinks and starts ffmpeg on them.
func (p *push) start() error {
	var sdp strings.Builder
	sdp.WriteString("v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=petrel egress\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n")
	args := []string{"-hide_banner", "-nostdin", "-loglevel", "error", "-protocol_whitelist", "pipe,udp,rtp",
		"-f", "sdp", "-analyzeduration", "2000000", "-i", "pipe:0"}
	keyEvery := passKeyEvery
	p.outsDone = make(chan struct{})
	add := func(pub *sfu.Publication, video bool, pt uint8, rtpmap, fmtp string) error {
		port, err := freePortPair()
		if err != nil {
			return err
		}
		kind := "audio"
		if video {
			kind = "video"
		}
		fmt.Fprintf(&sdp, "m=%s %d RTP/AVP %d\r\na=rtpmap:%d %s\r\n", kind, port, pt, pt, rtpmap)
		if fmtp != "" {
			fmt.Fprintf(&sdp, "a=fmtp:%d %s\r\n", pt, fmtp)
		}
		o, err := newRTPOut(pub, video, pt, 0x5e0000+uint32(len(p.outs)), port)
		if err != nil {
			return err
		}
		p.outs = append(p.outs, o)
		return nil
	}
	for _, v := range p.videos {
		enc, fmtp := videoEncoding(v.Codec().MimeType), ""
		if enc == "H264" {
			fmtp = v.Codec().SDPFmtpLine
		}
		if err := add(v, true, 96, enc+"/90000", fmtp); err != nil {
			p.detach()
			return err
		}
	}
	for _, a := range p.audios {
		if err := add(a, false, 97, audioEncoding(a.Codec()), ""); err != nil {
			p.detach()
			return err
		}
	}
	x264 := []string{"-c:v", "libx264", "-preset", "veryfast", "-tune", "zerolatency", "-pix_fmt", "yuv420p",
		"-force_key_frames", "expr:gte(t,n_forced*2)"}
	aac := []string{"-c:a", "aac", "-b:a", "128k", "-ar", "48000"}
	switch {
	case p.composite:
		keyEvery = transcodeKeyEvery
		graph, maps := compositeGraph(len(p.videos), len(p.audios))
		if graph != "" {
			args = append(args, "-filter_complex", graph)
		}
		args = append(args, maps...)
		if len(p.videos) > 0 {
			args = append(args, x264...)
		}
		if len(p.audios) > 0 {
			args = append(args, aac...)
		}
	default:
		if len(p.videos) > 0 && videoEncoding(p.videos[0].Codec().MimeType) == "H264" {
			args = append(args, "-c:v", "copy")
		} else if len(p.videos) > 0 {
			keyEvery = transcodeKeyEvery
			args = append(args, x264...)
		}
		if len(p.audios) > 0 {
			args = append(args, aac...)
		}
	}
	if strings.HasPrefix(p.info.URL, "rtmps:") {
		// ffmpeg trusts any certificate unless told to verify.
		args = append(args, "-tls_verify", "1")
		if p.ps.o.CAFile != "" {
			args = append(args, "-ca_file", p.ps.o.CAFile)
		}
	}
	args = append(args, "-f", "flv", "-flvflags", "no_duration_filesize", "-progress", "pipe:1", "-stats_period", "0.5", p.info.URL)
	cmd := exec.Command(p.bin, args...)
	cmd.Stdin = strings.NewReader(sdp.String())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.detach()
		return err
	}
	cmd.Stderr = &tailWriter{max: 4 << 10}
	dieWithServer(cmd)
	if err := cmd.Start(); err != nil {
		p.detach()
		return fmt.Errorf("ffmpeg: %w", err)
	}
	p.cmd = cmd
	active := make(chan struct{})
	go readProgress(stdout, active)
	p.activeC = active
	// ffmpeg binds its ports while it reads the SDP: the packets before are
	// lost, and the sinks' keyframe requests repeat until one gets through.
	for _, o := range p.outs {
		go o.run(p.outsDone, keyEvery)
		p.rm = append(p.rm, o.pub.AddSink(o))
	}
	return nil
}

// compositeGraph is the filter graph of a composite of n videos and m
// audios: each video fitted (letterboxed) into its cell of a grid of
// compositeW x compositeH, the audios mixed; and the -map arguments of its
// outputs.
func compositeGraph(n, m int) (string, []string) {
	var g strings.Builder
	var maps []string
	if n > 0 {
		cols := 1
		for cols*cols < n {
			cols++
		}
		rows := (n + cols - 1) / cols
		w, h := compositeW/cols&^1, compositeH/rows&^1
		var layout []string
		for i := 0; i < n; i++ {
			fmt.Fprintf(&g, "[0:v:%d]scale=%d:%d:force_original_aspect_ratio=decrease,pad=%d:%d:(ow-iw)/2:(oh-ih)/2,setsar=1,fps=%d[v%d];",
				i, w, h, w, h, compositeFPS, i)
			layout = append(layout, fmt.Sprintf("%d_%d", i%cols*w, i/cols*h))
		}
		if n == 1 {
			fmt.Fprintf(&g, "[v0]pad=%d:%d:(ow-iw)/2:(oh-ih)/2[v];", compositeW, compositeH)
		} else {
			for i := 0; i < n; i++ {
				fmt.Fprintf(&g, "[v%d]", i)
			}
			fmt.Fprintf(&g, "xstack=inputs=%d:layout=%s:fill=black,pad=%d:%d[v];", n, strings.Join(layout, "|"), compositeW, compositeH)
		}
		maps = append(maps, "-map", "[v]")
	}
	if m == 1 {
		maps = append(maps, "-map", "0:a:0")
	} else if m > 1 {
		for i := 0; i < m; i++ {
			fmt.Fprintf(&g, "[0:a:%d]", i)
		}
		fmt.Fprintf(&g, "amix=inputs=%d:normalize=0[a];", m)
		maps = append(maps, "-map", "[a]")
	}
	return strings.TrimSuffix(g.String(), ";"), maps
}

// run runs ffmpeg until the egress ends; a composite whose room's tracks
// changed starts a new ffmpeg with them (the target sees a new stream).
func (p *push) run() {
	for {
		state, msg, restart := p.watch()
		p.detach()
		if !restart {
			p.ps.finish(p, state, msg)
			return
		}
		room := p.ps.o.Manager.Room(p.info.Room)
		if room != nil {
			p.videos, p.audios = pickComposite(room)
		}
		if room == nil || len(p.videos)+len(p.audios) == 0 {
			p.setWhy("the room has no track left")
			p.ps.finish(p, protocol.EgressComplete, "")
			return
		}
		p.ps.mu.Lock()
		p.info.Tracks = sids(p.videos, p.audios)
		p.ps.mu.Unlock()
		p.ps.setState(p, protocol.EgressStarting, "")
		if err := p.start(); err != nil {
			p.ps.finish(p, protocol.EgressFailed, err.Error())
			return
		}
		p.log.Info("rtmp composite restarted with the room's tracks", "tracks", p.snapshot().Tracks)
	}
}

// watch follows one ffmpeg to its end: how the egress ended, or restart.
func (p *push) watch() (state, msg string, restart bool) {
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	startBy := time.NewTimer(startTimeout)
	defer startBy.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	active, quit := p.activeC, p.quit
	stopping, restarting, changed := false, false, 0
	var grace <-chan time.Time
	fail := ""
	end := func() {
		// SIGINT: ffmpeg ends the stream (FLV trailer, RTMP deleteStream).
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		grace = time.After(stopGrace)
	}
	for {
		select {
		case <-active:
			active = nil
			startBy.Stop()
			p.ps.setState(p, protocol.EgressActive, "")
			p.log.Info("rtmp egress active")
		case <-startBy.C:
			if active != nil && !stopping && !restarting {
				fail = fmt.Sprintf("no media reached the target within %s (the tracks sent no keyframe, or the target did not answer)", startTimeout)
				_ = p.cmd.Process.Kill()
			}
		case <-tick.C:
			switch {
			case stopping || restarting:
			case p.composite:
				// Twice in a row: a participant's tracks come one by one.
				if changed++; !p.layoutChanged() {
					changed = 0
				}
				if changed >= 2 {
					restarting = true
					end()
				}
			case !p.tracksThere():
				p.stop("the tracks were unpublished or their participant left")
			}
		case <-quit:
			if !stopping {
				stopping = true
				quit = nil
				p.ps.setState(p, protocol.EgressEnding, "")
				if grace == nil {
					end()
				}
			}
		case <-grace:
			_ = p.cmd.Process.Kill()
		case err := <-exited:
			switch {
			case fail != "":
				return protocol.EgressFailed, fail, false
			case restarting && !stopping:
				return "", "", true
			case err != nil && !stopping:
				return protocol.EgressFailed, p.ffmpegError(err), false
			}
			return protocol.EgressComplete, "", false
		}
	}
}

// layoutChanged says whether the room's tracks a composite would take now
// differ from those it sends.
func (p *push) layoutChanged() bool {
	room := p.ps.o.Manager.Room(p.info.Room)
	if room == nil {
		return true
	}
	v, a := pickComposite(room)
	return !slices.Equal(v, p.videos) || !slices.Equal(a, p.audios)
}

// detach removes the sinks and stops the senders of the ffmpeg that ran.
func (p *push) detach() {
	for _, rm := range p.rm {
		rm()
	}
	if p.outsDone != nil {
		close(p.outsDone)
		p.outsDone = nil
	}
	for _, o := range p.outs {
		o.close()
	}
	p.rm, p.outs = nil, nil
}

// tracksThere says whether the egress's participant is in its room and
// still publishes its tracks.
func (p *push) tracksThere() bool {
	room := p.ps.o.Manager.Room(p.info.Room)
	if room == nil || p.owner == nil || room.ByIdentity(p.owner.Identity()) != p.owner {
		return false
	}
	pubs := p.owner.Publications()
	for _, want := range append(append([]*sfu.Publication{}, p.videos...), p.audios...) {
		if !slices.Contains(pubs, want) {
			return false
		}
	}
	return true
}

func (p *push) setWhy(why string) {
	p.ps.mu.Lock()
	if p.why == "" {
		p.why = why
	}
	p.ps.mu.Unlock()
}

// stop asks the egress to end, for why; it is ending until ffmpeg has.
func (p *push) stop(why string) {
	p.once.Do(func() {
		p.setWhy(why)
		close(p.quit)
	})
}

// ffmpegError is the end of ffmpeg's complaint, without the target's stream key.
func (p *push) ffmpegError(err error) string {
	tail := strings.TrimSpace(p.cmd.Stderr.(*tailWriter).String())
	tail = strings.ReplaceAll(tail, p.info.URL, redact(p.info.URL))
	if u, err := url.Parse(p.info.URL); err == nil {
		if key := path.Base(u.Path); len(key) >= 4 {
			tail = strings.ReplaceAll(tail, key, "…")
		}
	}
	lines := strings.Split(tail, "\n")
	var keep []string
	for i := len(lines) - 1; i >= 0 && len(keep) < 3; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "Exiting normally") {
			continue
		}
		// "[tcp @ 0x55d1c3a0] Connection refused": the address is noise.
		if strings.HasPrefix(l, "[") {
			if j := strings.Index(l, "] "); j > 0 {
				l = l[j+2:]
			}
		}
		keep = append([]string{l}, keep...)
	}
	if len(keep) == 0 {
		return "ffmpeg ended: " + err.Error()
	}
	return "ffmpeg: " + strings.Join(keep, "; ")
}

func (p *push) snapshot() protocol.EgressInfo {
	p.ps.mu.Lock()
	defer p.ps.mu.Unlock()
	return p.copyInfo()
}

// copyInfo is p.info to hand out. Under ps.mu.
func (p *push) copyInfo() protocol.EgressInfo {
	in := p.info
	in.Tracks = append([]string{}, p.info.Tracks...)
	return in
}

func ended(state string) bool {
	return state == protocol.EgressComplete || state == protocol.EgressFailed
}

// setState moves a running egress to state and reports egress_updated.
func (ps *Pushes) setState(p *push, state, msg string) {
	ps.mu.Lock()
	if ended(p.info.State) || p.info.State == state {
		ps.mu.Unlock()
		return
	}
	p.info.State, p.info.Error, p.info.Since = state, msg, time.Now().UnixMilli()
	ps.mu.Unlock()
	ps.emit(p, webhook.EgressUpdated)
}

// finish detaches the egress from its tracks, records its end, and reports
// egress_ended; the list keeps the last keptEnded ended egresses.
func (ps *Pushes) finish(p *push, state, msg string) {
	ps.mu.Lock()
	p.info.State, p.info.Error, p.info.Since = state, msg, time.Now().UnixMilli()
	if state == protocol.EgressComplete {
		p.info.Reason = p.why
	}
	n := 0
	for _, x := range ps.all {
		if ended(x.info.State) {
			n++
		}
	}
	for i := 0; n > keptEnded && i < len(ps.all); {
		if ended(ps.all[i].info.State) {
			ps.all = append(ps.all[:i], ps.all[i+1:]...)
			n--
			continue
		}
		i++
	}
	ps.mu.Unlock()
	if state == protocol.EgressFailed {
		p.log.Warn("rtmp egress failed", "err", msg)
	} else {
		p.log.Info("rtmp egress ended", "why", p.snapshot().Reason)
	}
	ps.emit(p, webhook.EgressEnded)
}

// emit reports kind with the egress's state, without its URL (the stream key).
func (ps *Pushes) emit(p *push, kind string) {
	info := p.snapshot()
	info.URL = ""
	ri := protocol.RoomInfo{Name: info.Room}
	if r := ps.o.Manager.Room(info.Room); r != nil {
		ri = r.Info()
	}
	ps.o.Manager.Emit(sfu.Event{Kind: kind, Room: ri, Info: info})
}

// Stop asks egress id to end and answers its state (ending, or how it ended).
func (ps *Pushes) Stop(id string) (protocol.EgressInfo, error) {
	ps.mu.Lock()
	var p *push
	for _, x := range ps.all {
		if x.info.ID == id {
			p = x
		}
	}
	ps.mu.Unlock()
	if p == nil {
		return protocol.EgressInfo{}, protocol.Errorf(protocol.CodeNotFound, "no egress %q", truncate(id, 64))
	}
	p.stop("stopped through the API")
	// The state moves to ending on the egress's goroutine: wait for it.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if in := p.snapshot(); in.State != protocol.EgressStarting && in.State != protocol.EgressActive {
			return in, nil
		}
	}
	return p.snapshot(), nil
}

// List is every running egress and the last ended ones, oldest first.
func (ps *Pushes) List() []protocol.EgressInfo {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]protocol.EgressInfo, 0, len(ps.all))
	for _, p := range ps.all {
		out = append(out, p.copyInfo())
	}
	return out
}

// Close stops every egress and waits for them to end.
func (ps *Pushes) Close() {
	ps.mu.Lock()
	ps.closed = true
	all := append([]*push(nil), ps.all...)
	ps.mu.Unlock()
	for _, p := range all {
		p.stop("the server shut down")
	}
	ps.wg.Wait()
}

// readProgress closes active when ffmpeg reports bytes written to the target.
func readProgress(r io.Reader, active chan struct{}) {
	sc := bufio.NewScanner(r)
	closed := false
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "total_size=")
		if !closed && ok && v != "0" && v != "N/A" {
			close(active)
			closed = true
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// tailWriter keeps the last max bytes written (ffmpeg's error text).
type tailWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.Clone(t.b))
}

// Ports handed to ffmpeg stay reserved for portHold: ffmpeg binds them a
// moment after it starts, and another egress must not take them meanwhile.
const portHold = 30 * time.Second

var (
	portMu sync.Mutex
	handed = map[int]time.Time{}
)

// freePortPair finds a free loopback UDP port whose next one is free too
// (ffmpeg takes RTP on the first, RTCP on the second), below the kernel's
// ephemeral range so that no socket the system numbers itself takes it
// before ffmpeg binds it.
func freePortPair() (int, error) {
	lo, hi := portRange()
	if hi-lo < 2 {
		return 0, errors.New("no room for ffmpeg's UDP ports outside the kernel's ephemeral range")
	}
	portMu.Lock()
	defer portMu.Unlock()
	for p, at := range handed {
		if time.Since(at) > portHold {
			delete(handed, p)
		}
	}
	for i := 0; i < 64; i++ {
		n, err := rand.Int(rand.Reader, big.NewInt(int64((hi-lo)/2)))
		if err != nil {
			return 0, err
		}
		port := lo + 2*int(n.Int64())
		if _, ok := handed[port]; ok {
			continue
		}
		a, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			continue
		}
		b, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port + 1})
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		handed[port] = time.Now()
		return port, nil
	}
	return 0, errors.New("no free pair of loopback UDP ports for ffmpeg")
}

// portRange is where freePortPair looks: the 20000 ports below the kernel's
// ephemeral range (Linux's default 32768–60999), else above it.
func portRange() (lo, hi int) {
	eLo, eHi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if a, err := strconv.Atoi(f[0]); err == nil {
				eLo = a
			}
			if a, err := strconv.Atoi(f[1]); err == nil {
				eHi = a
			}
		}
	}
	if eLo-2 >= 1024+2000 {
		return max(1024, eLo-20000), eLo - 2
	}
	return eHi + 1, 65534
}

func newEgressID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "EG_" + hex.EncodeToString(b[:])
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// AdminRoutes adds the egress calls to the admin API, each wrapped with
// admin (docs/protocol.md, "Egress").
func (ps *Pushes) AdminRoutes(mux *http.ServeMux, admin func(http.Handler) http.Handler) {
	h := func(pattern string, f func(w http.ResponseWriter, r *http.Request) (any, error)) {
		mux.Handle(pattern, admin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v, err := f(w, r)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			if err != nil {
				code := protocol.CodeOf(err)
				status := map[string]int{protocol.CodeBadRequest: 400, protocol.CodeNotFound: 404,
					protocol.CodeServerBusy: 503, CodeUnavailable: 503}[code]
				if status == 0 {
					status = 500
				}
				w.WriteHeader(status)
				_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": protocol.MessageOf(err)})
				return
			}
			_ = json.NewEncoder(w).Encode(v)
		})))
	}
	h("POST /v1/admin/egress", func(w http.ResponseWriter, r *http.Request) (any, error) {
		var req protocol.CreateEgress
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10)).Decode(&req); err != nil {
			return nil, protocol.Errorf(protocol.CodeBadRequest, "body must be {kind: rtmp, room, url, identity | tracks}: %v", err)
		}
		return ps.Start(req)
	})
	h("GET /v1/admin/egress", func(w http.ResponseWriter, r *http.Request) (any, error) {
		return ps.List(), nil
	})
	h("DELETE /v1/admin/egress/{id}", func(w http.ResponseWriter, r *http.Request) (any, error) {
		return ps.Stop(r.PathValue("id"))
	})
}
