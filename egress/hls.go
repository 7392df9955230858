// Package egress serves rooms' tracks and cameras to passive viewers outside
// WebRTC: LL-HLS with fMP4 (CMAF) segments and parts (docs/egress.md).
package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// Options are what the HLS egress attaches to.
type Options struct {
	Config  config.HLS
	FFmpeg  string // transcodes VP8 and VP9 video to H.264 (empty: they are refused)
	Manager *sfu.Manager
	Cameras *camera.Gateway // nil: no camera routes
	Keys    auth.Keys
	Log     *slog.Logger
}

// HLS runs one muxer per watched track, on demand.
type HLS struct {
	cfg    config.HLS
	ffmpeg string
	mgr    *sfu.Manager
	cams   *camera.Gateway
	keys   auth.Keys
	log    *slog.Logger

	mu      sync.Mutex
	streams map[string]*stream
	closed  bool
	done    chan struct{}

	refusedLog atomic.Int64
}

// New starts the idle reaper; Close stops every muxer.
func New(o Options) *HLS {
	h := &HLS{cfg: o.Config, ffmpeg: o.FFmpeg, mgr: o.Manager, cams: o.Cameras, keys: o.Keys, log: o.Log,
		streams: map[string]*stream{}, done: make(chan struct{})}
	go h.reap()
	return h
}

// Close stops every muxer; requests after it answer 503.
func (h *HLS) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.done)
	ss := h.streams
	h.streams = map[string]*stream{}
	h.mu.Unlock()
	for _, s := range ss {
		s.close()
	}
}

// Streams is the number of muxers running.
func (h *HLS) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.streams)
}

// Routes adds the viewer endpoints:
//
//	GET /v1/rooms/{room}/hls/{file}     a room's video (?track= picks one) and its publisher's audio
//	GET /v1/cameras/{id}/hls/{file}     a camera's video and audio
//
// {file} is index.m3u8 (the multivariant playlist) or a name it leads to.
func (h *HLS) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/rooms/{room}/hls/{file}", func(w http.ResponseWriter, r *http.Request) {
		room := r.PathValue("room")
		may := func(c *auth.Claims) bool { return c.MayWatch(room) }
		h.serve(w, r, room, may, func() (*sfu.Publication, *sfu.Publication, *httpError) {
			return h.roomTracks(room, r.URL.Query().Get("track"))
		})
	})
	if h.cams != nil {
		mux.HandleFunc("GET /v1/cameras/{id}/hls/{file}", func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			// A token for the camera's room or for the wall (which shows every camera).
			may := func(c *auth.Claims) bool { return c.MayWatchCamera(id) }
			h.serve(w, r, camera.RoomOf(id), may, func() (*sfu.Publication, *sfu.Publication, *httpError) {
				c := h.cams.Camera(id)
				if c == nil {
					return nil, nil, &httpError{http.StatusNotFound, protocol.CodeNotFound, "no camera " + id}
				}
				v, a := c.LiveTracks()
				if v == nil {
					return nil, nil, &httpError{http.StatusServiceUnavailable, protocol.CodeServerBusy, "the camera has no video yet"}
				}
				return v, a, nil
			})
		})
	}
}

type httpError struct {
	status  int
	code    string
	message string
}

func writeError(w http.ResponseWriter, e *httpError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if e.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": e.code, "message": e.message})
}

// fileName is what the muxer names its playlists, init sections, segments and
// parts; anything else is refused before the muxer sees it.
var fileName = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}\.(m3u8|mp4)$`)

// tokenOf reads a bearer token, or ?access_token= (a player cannot set headers
// on the requests a playlist leads to; the muxer repeats the query on every URI
// it writes), or ?token= as the other viewer endpoints take it.
func tokenOf(r *http.Request) string {
	if v := r.Header.Get("Authorization"); len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	q := r.URL.Query()
	if t := q.Get("access_token"); t != "" {
		return t
	}
	return q.Get("token")
}

func (h *HLS) serve(w http.ResponseWriter, r *http.Request, room string, may func(*auth.Claims) bool, resolve func() (*sfu.Publication, *sfu.Publication, *httpError)) {
	if h.cfg.Disabled {
		writeError(w, &httpError{http.StatusNotFound, protocol.CodeNotFound, "HLS egress is disabled on this server (hls.disabled)"})
		return
	}
	file := r.PathValue("file")
	if !fileName.MatchString(file) {
		writeError(w, &httpError{http.StatusNotFound, protocol.CodeNotFound, "no such HLS file"})
		return
	}
	claims, err := h.keys.Verify(tokenOf(r))
	if err != nil {
		status, code := protocol.TokenRefusal(err)
		h.refused(r, code, err)
		writeError(w, &httpError{status, code, err.Error()})
		return
	}
	if !may(claims) {
		h.refused(r, protocol.CodeForbidden, errors.New("token for another room or without subscribe"))
		writeError(w, &httpError{http.StatusForbidden, protocol.CodeForbidden, fmt.Sprintf("the token does not allow watching room %q (a token for it with the subscribe grant)", room)})
		return
	}
	video, audio, herr := resolve()
	if herr != nil {
		writeError(w, herr)
		return
	}
	s, herr := h.stream(room, video, audio)
	if herr != nil {
		writeError(w, herr)
		return
	}
	s.handle(w, r, h.blockTimeout())
}

// blockTimeout bounds a request waiting for media (the first segment, or a
// blocking playlist reload): three segments, as the LL-HLS spec lets a
// server answer 503 after three target durations.
func (h *HLS) blockTimeout() time.Duration {
	d := 3 * h.cfg.Segment
	if d < 3*time.Second {
		d = 3 * time.Second
	}
	return d
}

// roomTracks picks a room's video (the track named, else the first video
// published, participants in identity order) and its publisher's first
// audio; a room without video gives its first audio alone.
func (h *HLS) roomTracks(name, track string) (*sfu.Publication, *sfu.Publication, *httpError) {
	room := h.mgr.Room(name)
	if room == nil {
		return nil, nil, &httpError{http.StatusNotFound, protocol.CodeNotFound, fmt.Sprintf("no room %q", name)}
	}
	ps := room.Participants()
	sort.Slice(ps, func(i, j int) bool { return ps[i].Identity() < ps[j].Identity() })
	var video, audio, firstAudio *sfu.Publication
	for _, p := range ps {
		if p.Hidden() {
			continue
		}
		pubs := p.Publications()
		sort.Slice(pubs, func(i, j int) bool { return pubs[i].Sid() < pubs[j].Sid() })
		for _, pub := range pubs {
			switch {
			case track != "" && pub.Sid() == track:
				if pub.Kind() == sfu.Video {
					video = pub
				} else {
					return nil, pub, nil
				}
			case track == "" && video == nil && pub.Kind() == sfu.Video:
				video = pub
			case firstAudio == nil && pub.Kind() == sfu.Audio:
				firstAudio = pub
			}
		}
		if video != nil {
			for _, pub := range pubs {
				if pub.Kind() == sfu.Audio {
					audio = pub
					break
				}
			}
			return video, audio, nil
		}
	}
	if track != "" {
		return nil, nil, &httpError{http.StatusNotFound, protocol.CodeNotFound, fmt.Sprintf("no track %q in room %q", track, name)}
	}
	if firstAudio != nil {
		return nil, firstAudio, nil
	}
	return nil, nil, &httpError{http.StatusNotFound, protocol.CodeNotFound, fmt.Sprintf("room %q has no published track", name)}
}

// stream finds or starts the muxer of these tracks.
func (h *HLS) stream(room string, video, audio *sfu.Publication) (*stream, *httpError) {
	if video != nil && !strings.EqualFold(video.Codec().MimeType, webrtc.MimeTypeH264) && (h.ffmpeg == "" || !transcodable(video.Codec().MimeType)) {
		return nil, &httpError{http.StatusUnsupportedMediaType, protocol.CodeBadRequest,
			"HLS egress carries H.264 video, and transcodes VP8 and VP9; the track is " + video.Codec().MimeType + " (watch it over WebRTC or WHEP)"}
	}
	if audio != nil && !strings.EqualFold(audio.Codec().MimeType, webrtc.MimeTypeOpus) {
		if video == nil {
			return nil, &httpError{http.StatusUnsupportedMediaType, protocol.CodeBadRequest,
				"HLS egress carries Opus audio; the track is " + audio.Codec().MimeType}
		}
		audio = nil // G.711 has no fMP4 form players take: video alone
	}
	key := room
	if video != nil {
		key += "/" + video.Sid()
	}
	if audio != nil {
		key += "/" + audio.Sid()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, &httpError{http.StatusServiceUnavailable, protocol.CodeServerBusy, "the server is shutting down"}
	}
	if s := h.streams[key]; s != nil {
		s.lastUse.Store(time.Now().UnixNano())
		return s, nil
	}
	if len(h.streams) >= h.cfg.MaxStreams {
		return nil, &httpError{http.StatusServiceUnavailable, protocol.CodeServerBusy,
			fmt.Sprintf("%d HLS streams are running, the most this server allows (hls.max_streams)", h.cfg.MaxStreams)}
	}
	s, err := startStream(h.cfg, h.ffmpeg, video, audio, h.log.With("hls", key))
	if err != nil {
		h.log.Error("hls: muxer", "stream", key, "err", err)
		return nil, &httpError{http.StatusInternalServerError, protocol.CodeInternal, "the HLS muxer did not start"}
	}
	h.streams[key] = s
	h.log.Info("hls stream started", "stream", key, "video", video != nil, "audio", audio != nil)
	return s, nil
}

// reap stops the muxers nobody asked anything of for cfg.Idle.
func (h *HLS) reap() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		cut := time.Now().Add(-h.cfg.Idle).UnixNano()
		var idle []*stream
		h.mu.Lock()
		for k, s := range h.streams {
			// A request still waiting (the first segment, a blocking
			// reload) is a viewer too.
			if s.lastUse.Load() < cut && s.waiting.Load() == 0 {
				delete(h.streams, k)
				idle = append(idle, s)
				h.log.Info("hls stream stopped: no viewer", "stream", k)
			}
		}
		h.mu.Unlock()
		for _, s := range idle {
			s.close()
		}
	}
}

// refused logs a refused request at most once a second (a client can repeat
// it at will); the URL, which may hold the token, is never logged.
func (h *HLS) refused(r *http.Request, code string, err error) {
	now := time.Now().UnixNano()
	if last := h.refusedLog.Load(); now-last >= int64(time.Second) && h.refusedLog.CompareAndSwap(last, now) {
		h.log.Warn("hls request refused", "path", r.URL.Path, "remote", r.RemoteAddr, "code", code, "err", err)
	}
}

// recorder holds a muxer's answer until it is complete, so that a request
// given up on (timeout) never shares the client's writer with the muxer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
