// Package record records cameras continuously into segmented fragmented-MP4
// files with a keyframe index and retention, plays recordings back to one viewer
// over the viewer's own peer connection (controlled with data messages on topic
// "playback"), and exports time ranges as MP4 files. docs/recording.md.
package record

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/sfu"
)

// CameraIdentity is the identity whose tracks are recorded in each camera room.
const CameraIdentity = auth.CameraIdentity

// RoomPrefix names camera rooms: camera/<id>.
const RoomPrefix = "camera/"

// Recorder watches camera rooms and records every camera's video track.
type Recorder struct {
	mgr   *sfu.Manager
	store *Store
	cfg   config.Recording
	log   *slog.Logger
	only  map[string]bool

	mu       sync.Mutex
	tracks   map[*sfu.Publication]*recTrack
	sessions map[sessionKey]*Session
	// Room recordings (room.go): every one by id, the active ones by room
	// name, and room instances whose recording was stopped by hand (the room
	// setting does not start it again).
	rooms  map[string]*roomRec
	live   map[string]*roomRec
	noAuto map[*sfu.Room]bool
	// Room playback (roomplay.go): the recording's participant in each
	// playback room with a viewer, and the sessions.
	hosts        map[string]*sfu.Participant
	roomSessions map[roomSessionKey]*roomSession
	// composites are the composite jobs by recording id (composite.go); ffmpeg
	// is the binary they run ("": ffmpeg from PATH).
	composites map[string]*compositeJob
	ffmpeg     string
	done       chan struct{}
	wg         sync.WaitGroup
	closed     bool

	// watchEvery is how often rooms are checked for cameras that came or went.
	watchEvery time.Duration
	// source gives AAC cameras' audio (SetAudioSource).
	source atomic.Pointer[AudioSource]
	// aacPlayer plays recorded AAC back as Opus (SetAACPlayer).
	aacPlayer atomic.Pointer[AACPlayerFunc]
	// refusedLog is the unix ns of the last log line about a refused request.
	refusedLog atomic.Int64
}

// AACPlayer transcodes one playback session's recorded AAC to Opus on its
// audio track: Push takes access units with their AAC RTP timestamps (never
// blocks), SetActive starts or stops the transcoder, Close ends it.
type AACPlayer interface {
	Push(ts uint32, au []byte)
	SetActive(on bool)
	Close()
}

// AACPlayerFunc makes an AACPlayer for AAC with AudioSpecificConfig asc,
// writing Opus (payload type 111, SSRC ssrc) to track.
type AACPlayerFunc func(asc []byte, track *sfu.LocalTrack, ssrc uint32) (AACPlayer, error)

// SetAACPlayer lets playback send recorded AAC (as Opus, transcoded by the
// camera gateway's ffmpeg transcoder); without it AAC recordings play video only.
func (r *Recorder) SetAACPlayer(f AACPlayerFunc) { r.aacPlayer.Store(&f) }

// SetAudioSource lets the recorder take the audio that camera rooms carry
// transcoded (AAC) from the cameras as it came.
func (r *Recorder) SetAudioSource(src AudioSource) { r.source.Store(&src) }

type recTrack struct {
	rec    *trackRec
	remove func()
	// removeAudio detaches the camera's audio (nil: none attached).
	removeAudio func()
}

// New opens the store (repairing what a crash left) and starts watching.
func New(mgr *sfu.Manager, cfg config.Recording, log *slog.Logger) (*Recorder, error) {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "record")
	if cfg.Segment <= 0 {
		cfg.Segment = 10 * time.Second
	}
	st, err := OpenStore(cfg.Dir, cfg.MaxAge, int64(cfg.MaxSizeMB)<<20, log)
	if err != nil {
		return nil, err
	}
	r := &Recorder{mgr: mgr, store: st, cfg: cfg, log: log, tracks: map[*sfu.Publication]*recTrack{},
		sessions: map[sessionKey]*Session{}, done: make(chan struct{}), watchEvery: 250 * time.Millisecond,
		rooms: map[string]*roomRec{}, live: map[string]*roomRec{}, noAuto: map[*sfu.Room]bool{},
		hosts: map[string]*sfu.Participant{}, roomSessions: map[roomSessionKey]*roomSession{},
		composites: map[string]*compositeJob{}}
	if err := r.loadRooms(); err != nil {
		return nil, fmt.Errorf("room recordings: %w", err)
	}
	if len(cfg.Cameras) > 0 {
		r.only = map[string]bool{}
		for _, id := range cfg.Cameras {
			r.only[id] = true
		}
	}
	st.Prune(time.Now())
	r.wg.Add(1)
	go r.watch()
	log.Info("recording", "dir", cfg.Dir, "segment", cfg.Segment, "max_age", cfg.MaxAge, "max_size_mb", cfg.MaxSizeMB)
	return r, nil
}

// Store is where the recordings are.
func (r *Recorder) Store() *Store { return r.store }

// Close stops recording (closing every segment cleanly) and every playback.
func (r *Recorder) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	close(r.done)
	sess := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		sess = append(sess, s)
	}
	r.mu.Unlock()
	r.wg.Wait()
	for _, s := range sess {
		s.Close("server closing")
	}
	r.closePlayback()
	r.closeComposites()
	r.closeRooms()
	r.mu.Lock()
	for pub, t := range r.tracks {
		t.remove()
		if t.removeAudio != nil {
			t.removeAudio()
		}
		t.rec.stop()
		delete(r.tracks, pub)
	}
	r.mu.Unlock()
}

func (r *Recorder) watch() {
	defer r.wg.Done()
	t := time.NewTicker(r.watchEvery)
	defer t.Stop()
	lastPrune := time.Now()
	for {
		select {
		case <-r.done:
			return
		case <-t.C:
		}
		r.scan()
		r.scanRooms()
		r.scanPlaybackRooms()
		if time.Since(lastPrune) > 30*time.Second {
			lastPrune = time.Now()
			r.store.Prune(time.Now())
		}
	}
}

// scan attaches a recorder to every camera video track not yet recorded and
// stops those whose track is gone. Polling keeps the sfu free of recorder hooks;
// a quarter second of a new camera's first GOP is not lost, as the sink's
// keyframe request starts the recording anyway.
func (r *Recorder) scan() {
	seen := map[*sfu.Publication]bool{}
	for _, room := range r.mgr.Rooms() {
		id, ok := strings.CutPrefix(room.Name(), RoomPrefix)
		if !ok || !validID(id) || (r.only != nil && !r.only[id]) {
			continue
		}
		p := room.ByIdentity(CameraIdentity)
		if p == nil {
			continue
		}
		var audio *sfu.Publication
		var aconf AudioConf
		for _, pub := range p.Publications() {
			if pub.Kind() != sfu.Audio {
				continue
			}
			if c, ok := confOf(pub); ok {
				audio, aconf = pub, c
			}
		}
		for _, pub := range p.Publications() {
			// An alternate track (an H.265 camera's H.264 transcode) is not
			// recorded: its sink would keep the transcoder running for good.
			if pub.Kind() != sfu.Video || pub.Alternate() || !strings.EqualFold(pub.Codec().MimeType, webrtc.MimeTypeH264) {
				continue
			}
			seen[pub] = true
			r.mu.Lock()
			t, have := r.tracks[pub]
			r.mu.Unlock()
			if !have {
				t = r.start(id, pub)
			}
			// The camera's audio goes into the same segments (audio.go): AAC
			// as the camera sent it (not the room's transcoded Opus), Opus
			// and G.711 from the room.
			if t.removeAudio == nil {
				if src := r.source.Load(); src != nil {
					conf, stop, ok := (*src)(id, t.rec.sourceFeed())
					if ok {
						t.rec.aconf.Store(&conf)
						r.mu.Lock()
						t.removeAudio = stop
						r.mu.Unlock()
						r.log.Info("recording audio", "camera", id, "codec", conf.Codec, "rate", conf.Rate)
						continue
					}
				}
			}
			if audio != nil && t.removeAudio == nil {
				rm := t.rec.attachAudio(audio, aconf)
				r.mu.Lock()
				t.removeAudio = rm
				r.mu.Unlock()
				r.log.Info("recording audio", "camera", id, "track", audio.Sid(), "codec", aconf.Codec)
			}
		}
	}
	r.mu.Lock()
	var gone []*recTrack
	for pub, t := range r.tracks {
		if !seen[pub] {
			gone = append(gone, t)
			delete(r.tracks, pub)
		}
	}
	r.mu.Unlock()
	for _, t := range gone {
		t.remove()
		if t.removeAudio != nil {
			t.removeAudio()
		}
		t.rec.stop()
		r.log.Info("recording stopped", "track", t.rec.pub.Sid())
	}
}

func (r *Recorder) start(id string, pub *sfu.Publication) *recTrack {
	rec := newTrackRec(r.store.cam(id), pub, r.cfg.Segment, r.log.With("camera", id, "track", pub.Sid()))
	go rec.run()
	t := &recTrack{rec: rec}
	r.mu.Lock()
	r.tracks[pub] = t
	r.mu.Unlock()
	t.remove = pub.AddSink(rec)
	r.log.Info("recording started", "camera", id, "track", pub.Sid(), "codec", pub.Codec().MimeType)
	return t
}

// Ranges lists a camera's recorded ranges (Unix ms).
func (r *Recorder) Ranges(id string) []Range { return r.store.Ranges(id) }
