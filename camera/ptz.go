package camera

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/petrel-sfu/petrel/camera/onvif"
)

// Topic ptz: viewers move the camera. Each request is validated (known op,
// ranges, the viewer's ptz grant), rate limited per viewer, and forwarded to the
// camera's ONVIF PTZ service by one worker per camera, so a slow camera delays
// only its own PTZ (never the camera's other topics) and requests reach it in
// order. Continuous moves are coalesced: a joystick sends many, the camera needs
// only the latest velocity, so a move waiting for the worker is replaced by a
// newer one (its sender gets {"id":..,"result":{"superseded":true}}).

const (
	// ptzRate and ptzBurst bound the requests a viewer may make per second; moves
	// are exempt because they coalesce instead.
	ptzRate  = 10
	ptzBurst = 10
	// ptzMoveInterval paces the moves sent to the camera (10 per second).
	ptzMoveInterval = 100 * time.Millisecond
	// ptzMoveTimeout is how long a continuous move lasts unless renewed: a viewer
	// that vanishes mid-move leaves a camera that stops by itself.
	ptzMoveTimeout = 2 * time.Second
	ptzQueue       = 16
	ptzMaxViewers  = 1024
)

// PTZRequest is a message on topic ptz.
type PTZRequest struct {
	ID json.RawMessage `json:"id"`
	// Op: move (continuous, velocities), stop, absolute, relative,
	// preset.goto, preset.set, preset.list, status.
	Op   string   `json:"op"`
	Pan  *float64 `json:"pan,omitempty"`
	Tilt *float64 `json:"tilt,omitempty"`
	Zoom *float64 `json:"zoom,omitempty"`
	// Timeout of a move in seconds (0.1-10, default 2).
	Timeout float64 `json:"timeout,omitempty"`
	// Preset token (preset.goto; preset.set to overwrite one) and name (preset.set).
	Preset string `json:"preset,omitempty"`
	Name   string `json:"name,omitempty"`
}

// parsePTZ validates a request; the error text goes back to the viewer.
func parsePTZ(payload []byte) (*PTZRequest, error) {
	if len(payload) > 4096 {
		return nil, errors.New("request too large")
	}
	var r PTZRequest
	if err := json.Unmarshal(payload, &r); err != nil {
		return nil, fmt.Errorf("request is not a JSON object: %v", err)
	}
	rng := func(name string, v *float64, lo, hi float64, need bool) error {
		if v == nil {
			if need {
				return fmt.Errorf("%s: %s is required", r.Op, name)
			}
			return nil
		}
		if math.IsNaN(*v) || *v < lo || *v > hi {
			return fmt.Errorf("%s: %s %v out of [%v, %v]", r.Op, name, *v, lo, hi)
		}
		return nil
	}
	vector := func(plo, phi, zlo, zhi float64) error {
		if r.Pan == nil && r.Tilt == nil && r.Zoom == nil {
			return fmt.Errorf("%s: needs pan/tilt and/or zoom", r.Op)
		}
		if (r.Pan == nil) != (r.Tilt == nil) {
			// ONVIF moves pan and tilt as one vector; a missing one would be sent as 0.
			zero := 0.0
			if r.Pan == nil {
				r.Pan = &zero
			} else {
				r.Tilt = &zero
			}
		}
		return errors.Join(rng("pan", r.Pan, plo, phi, false), rng("tilt", r.Tilt, plo, phi, false), rng("zoom", r.Zoom, zlo, zhi, false))
	}
	switch r.Op {
	case "move":
		if err := vector(-1, 1, -1, 1); err != nil {
			return nil, err
		}
		if r.Timeout != 0 && (math.IsNaN(r.Timeout) || r.Timeout < 0.1 || r.Timeout > 10) {
			return nil, fmt.Errorf("move: timeout %v out of [0.1, 10] seconds", r.Timeout)
		}
	case "absolute":
		if err := vector(-1, 1, 0, 1); err != nil {
			return nil, err
		}
	case "relative":
		if err := vector(-2, 2, -1, 1); err != nil {
			return nil, err
		}
	case "preset.goto":
		if err := checkPresetToken(r.Preset); err != nil {
			return nil, err
		}
	case "preset.set":
		if r.Name == "" || len(r.Name) > 64 || strings.ContainsFunc(r.Name, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
			return nil, errors.New("preset.set: name must be 1-64 printable bytes")
		}
		if r.Preset != "" {
			if err := checkPresetToken(r.Preset); err != nil {
				return nil, err
			}
		}
	case "stop", "preset.list", "status":
	case "":
		return nil, errors.New("op is required")
	default:
		return nil, fmt.Errorf("unknown op %q (move, stop, absolute, relative, preset.goto, preset.set, preset.list, status)", clipText(r.Op, 32))
	}
	return &r, nil
}

func checkPresetToken(t string) error {
	if t == "" || len(t) > 64 || strings.ContainsFunc(t, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		return errors.New("preset token must be 1-64 printable bytes")
	}
	return nil
}

// ptzJob is one request waiting for the camera.
type ptzJob struct {
	from string
	req  *PTZRequest
}

// ptzWorker forwards one camera's requests to its ONVIF PTZ service.
type ptzWorker struct {
	client *onvif.Client
	reply  func(to string, payload []byte)
	log    *slog.Logger

	mu       sync.Mutex
	move     *ptzJob // the latest continuous move not yet sent
	queue    []ptzJob
	wake     chan struct{}
	profile  string
	lastMove time.Time
	buckets  map[string]*bucket
}

func newPTZWorker(client *onvif.Client, reply func(string, []byte), log *slog.Logger) *ptzWorker {
	return &ptzWorker{client: client, reply: reply, log: log, wake: make(chan struct{}, 1), buckets: map[string]*bucket{}}
}

// submit queues a validated request; it never blocks.
func (w *ptzWorker) submit(from string, r *PTZRequest) {
	w.mu.Lock()
	var superseded *ptzJob
	var refused string
	switch r.Op {
	case "move":
		superseded = w.move
		w.move = &ptzJob{from, r}
	default:
		b := w.buckets[from]
		if b == nil {
			if len(w.buckets) >= ptzMaxViewers {
				w.pruneLocked()
			}
			b = &bucket{tokens: ptzBurst, last: time.Now()}
			w.buckets[from] = b
		}
		switch {
		case !b.take(time.Now()):
			refused = fmt.Sprintf("rate limited: at most %d PTZ requests per second", ptzRate)
		case len(w.queue) >= ptzQueue:
			refused = "camera busy: too many PTZ requests waiting"
		default:
			if r.Op == "stop" {
				// A stop overrides any move still waiting: sending it after the stop
				// would start the camera again.
				superseded = w.move
				w.move = nil
			}
			w.queue = append(w.queue, ptzJob{from, r})
		}
	}
	w.mu.Unlock()
	if superseded != nil {
		w.reply(superseded.from, result(superseded.req.ID, map[string]any{"superseded": true}))
	}
	if refused != "" {
		w.log.Info("ptz request refused", "from", from, "op", r.Op, "why", refused)
		w.reply(from, errReply(r.ID, refused))
		return
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *ptzWorker) pruneLocked() {
	now := time.Now()
	for k, b := range w.buckets {
		if now.Sub(b.last) > 10*time.Second {
			delete(w.buckets, k)
		}
	}
	if len(w.buckets) >= ptzMaxViewers {
		clear(w.buckets)
	}
}

// run forwards requests until ctx ends.
func (w *ptzWorker) run(ctx context.Context) {
	for {
		job, ok := w.next()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			}
			continue
		}
		if job.req.Op == "move" {
			// Pace moves; a newer move arriving meanwhile replaces this one.
			if d := ptzMoveInterval - time.Since(w.lastMove); d > 0 {
				w.mu.Lock()
				w.move = &job
				w.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
				w.mu.Lock()
				if w.move != &job {
					w.mu.Unlock()
					continue // superseded (replied by submit) or cancelled by a stop
				}
				w.move = nil
				w.mu.Unlock()
			}
			w.lastMove = time.Now()
		}
		res, err := w.do(ctx, job.req)
		if err != nil {
			w.log.Info("ptz request failed", "from", job.from, "op", job.req.Op, "err", err)
			w.reply(job.from, errReply(job.req.ID, err.Error()))
			continue
		}
		w.reply(job.from, result(job.req.ID, res))
	}
}

// next takes queued requests first (a stop must not wait behind moves), then
// the pending move.
func (w *ptzWorker) next() (ptzJob, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) > 0 {
		j := w.queue[0]
		w.queue = w.queue[1:]
		return j, true
	}
	if w.move != nil {
		j := *w.move
		w.move = nil
		return j, true
	}
	return ptzJob{}, false
}

// do performs one request against the camera.
func (w *ptzWorker) do(ctx context.Context, r *PTZRequest) (any, error) {
	if w.profile == "" {
		p, err := w.client.PTZProfile(ctx)
		if err != nil {
			return nil, fmt.Errorf("camera PTZ unavailable: %w", err)
		}
		w.profile = p
	}
	v := onvif.Vector{Pan: r.Pan, Tilt: r.Tilt, Zoom: r.Zoom}
	var err error
	switch r.Op {
	case "move":
		t := ptzMoveTimeout
		if r.Timeout > 0 {
			t = time.Duration(r.Timeout * float64(time.Second))
		}
		err = w.client.ContinuousMove(ctx, w.profile, v, t)
	case "stop":
		err = w.client.Stop(ctx, w.profile)
	case "absolute":
		err = w.client.AbsoluteMove(ctx, w.profile, v)
	case "relative":
		err = w.client.RelativeMove(ctx, w.profile, v)
	case "preset.goto":
		err = w.client.GotoPreset(ctx, w.profile, r.Preset)
	case "preset.set":
		tok, err := w.client.SetPreset(ctx, w.profile, r.Name, r.Preset)
		if err != nil {
			return nil, err
		}
		return map[string]any{"preset": tok}, nil
	case "preset.list":
		ps, err := w.client.GetPresets(ctx, w.profile)
		if err != nil {
			return nil, err
		}
		return map[string]any{"presets": ps}, nil
	case "status":
		st, err := w.client.GetStatus(ctx, w.profile)
		if err != nil {
			return nil, err
		}
		return map[string]any{"pan": st.Pan, "tilt": st.Tilt, "zoom": st.Zoom, "panTilt": st.PanTiltMove, "zoomStatus": st.ZoomMove}, nil
	}
	if err != nil {
		return nil, err
	}
	return map[string]any{}, nil
}

// bucket is a token bucket.
type bucket struct {
	tokens float64
	last   time.Time
}

func (b *bucket) take(now time.Time) bool { return b.takeAt(now, ptzRate, ptzBurst) }

func (b *bucket) takeAt(now time.Time, rate, burst float64) bool {
	b.tokens = math.Min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// result encodes {"id":..,"result":v}.
func result(id json.RawMessage, v any) []byte {
	b, err := json.Marshal(struct {
		ID     json.RawMessage `json:"id"`
		Result any             `json:"result"`
	}{rawID(id), v})
	if err != nil {
		return errReply(id, "cannot encode result")
	}
	return b
}

// rawID is the request's id if it is a number or a string, else null.
func rawID(id json.RawMessage) json.RawMessage {
	return json.RawMessage(requestID([]byte(`{"id":` + string(orNull(id)) + `}`)))
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// registerDeviceTopics routes the camera-control topics of every camera.
func registerDeviceTopics(g *Gateway) {
	g.HandleTopic("ptz", "ptz", handlePTZ)
	g.HandleTopic("http", "ptz", handleHTTP)
	g.HandleTopic("talk", "ptz", handleTalk)
}

// handlePTZ is the TopicHandler of topic ptz.
func handlePTZ(c *Camera, from string, _ bool, payload []byte) {
	req, err := parsePTZ(payload)
	if err != nil {
		c.log.Info("ptz request rejected", "from", from, "err", err)
		c.Reply(from, "ptz", errorReply(payload, err.Error()))
		return
	}
	cfg := c.Config()
	if cfg.ONVIF.URL == "" {
		c.Reply(from, "ptz", errReply(req.ID, "camera "+c.ID()+" has no ONVIF PTZ configured"))
		return
	}
	c.devMu.Lock()
	w := c.ptz
	if w == nil {
		cl, err := onvif.New(onvif.Config{URL: cfg.ONVIF.URL, User: cfg.ONVIF.User, Password: cfg.ONVIF.Password, Log: c.log})
		if err != nil {
			c.devMu.Unlock()
			c.Reply(from, "ptz", errReply(req.ID, err.Error()))
			return
		}
		w = newPTZWorker(cl, func(to string, b []byte) { c.Reply(to, "ptz", b) }, c.log)
		c.ptz = w
		go func() {
			w.run(c.ctx)
			c.devMu.Lock()
			if c.ptz == w {
				c.ptz = nil
			}
			c.devMu.Unlock()
		}()
	}
	c.devMu.Unlock()
	w.submit(from, req)
}

// errReply encodes {"id":..,"error":text}.
func errReply(id json.RawMessage, text string) []byte {
	b, _ := json.Marshal(struct {
		ID    json.RawMessage `json:"id"`
		Error string          `json:"error"`
	}{rawID(id), text})
	return b
}
