package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// tailProbe is how long after the last frame sent its final packet is sent
// again (see Session.last).
const tailProbe = 40 * time.Millisecond

// Topic is the data-message topic of playback control.
const Topic = "playback"

// Rate limits and the rate above which only keyframes are sent (the decoder
// could not keep up with every frame, and nobody sees them at that speed).
const (
	MinRate      = 0.25
	MaxRate      = 8
	keyOnlyAbove = 2
)

// maxControlBytes bounds one control message.
const maxControlBytes = 4096

type sessionKey struct{ cam, viewer string }

// request is a playback control message from a viewer.
type request struct {
	ID   json.RawMessage `json:"id"`
	Op   string          `json:"op"`
	From *int64          `json:"from"` // play: start here (Unix ms)
	T    *int64          `json:"t"`    // seek: to here (Unix ms)
	Rate *float64        `json:"rate"` // rate
}

type command struct {
	req   request
	reply func([]byte)
}

// HandlePlayback takes one control message from viewer for camera id; reply
// sends a data message back to the viewer on topic "playback". The camera
// gateway calls it for messages addressed to identity "camera".
func (r *Recorder) HandlePlayback(id, viewer string, payload []byte, reply func([]byte)) {
	var req request
	if len(payload) > maxControlBytes {
		r.log.Info("playback: oversize message", "camera", id, "from", viewer, "bytes", len(payload))
		reply(errReply(nil, "message larger than 4096 bytes"))
		return
	}
	if err := json.Unmarshal(payload, &req); err != nil {
		r.log.Info("playback: bad message", "camera", id, "from", viewer, "err", err)
		reply(errReply(idOf(payload), "bad JSON: "+err.Error()))
		return
	}
	switch req.Op {
	case "play", "pause", "seek", "rate", "step", "stop", "ranges":
	default:
		r.log.Info("playback: unknown op", "camera", id, "from", viewer, "op", req.Op)
		reply(errReply(req.ID, fmt.Sprintf("unknown op %q (play, pause, seek, rate, step, stop, ranges)", req.Op)))
		return
	}
	if req.Op == "ranges" {
		b, _ := json.Marshal(map[string]any{"id": req.ID, "ok": true, "ranges": r.store.Ranges(id)})
		reply(b)
		return
	}
	key := sessionKey{id, viewer}
	r.mu.Lock()
	s := r.sessions[key]
	closed := r.closed
	r.mu.Unlock()
	if closed {
		reply(errReply(req.ID, "recording is shutting down"))
		return
	}
	if s == nil {
		if req.Op == "stop" {
			reply(okReply(req.ID, nil))
			return
		}
		c := r.store.lookup(id)
		if c == nil || len(r.store.Ranges(id)) == 0 {
			reply(errReply(req.ID, fmt.Sprintf("camera %q has no recordings", id)))
			return
		}
		var err error
		if s, err = r.newSession(c, viewer); err != nil {
			r.log.Warn("playback: start session", "camera", id, "viewer", viewer, "err", err)
			reply(errReply(req.ID, "cannot start playback: "+err.Error()))
			return
		}
	}
	select {
	case s.cmds <- command{req, reply}:
	default:
		reply(errReply(req.ID, "too many playback commands at once"))
	}
}

func idOf(payload []byte) json.RawMessage {
	var v struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(payload, &v)
	return v.ID
}

func errReply(id json.RawMessage, text string) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"id": id, "error": text})
	return b
}

func okReply(id json.RawMessage, fields map[string]any) []byte {
	m := map[string]any{"id": id, "ok": true}
	if len(id) == 0 {
		m["id"] = nil
	}
	for k, v := range fields {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// Session plays one camera's recording to one viewer: a local participant
// visible only to that viewer publishes the played-back video, re-packetized
// from the stored samples with one continuous RTP sequence and timestamp line
// whatever the viewer does (seeks, rate changes, pauses).
type Session struct {
	rec    *Recorder
	cam    *camStore
	viewer string
	part   *sfu.Participant
	track  *sfu.LocalTrack
	cmds   chan command
	keyReq chan struct{}
	done   chan struct{}
	ended  chan struct{}

	// Owned by run.
	rd      *reader
	playing bool
	rate    float64
	cur     uint64 // decode time of the frame on screen
	haveCur bool
	nextAt  time.Time
	atEnd   bool
	keyAt   uint64 // decode time of the keyframe the current GOP starts at

	// RTP output state: continuous across everything.
	ssrc  uint32
	pt    uint8
	seq   uint16
	ts    uint32 // last timestamp sent
	ts0   uint32 // timestamp at start
	tsAt  time.Time
	pk    packetizer
	pkt   rtp.Packet
	start time.Time
	// last is the last packet sent, marshalled: sent again shortly after a
	// burst ends so that the viewer notices a lost tail (and NACKs it) even
	// though nothing follows while the frame is held.
	last     []byte
	tailDue  time.Time
	tailSent bool
	// burstPkts counts packets since the last pause in a burst (see send).
	burstPkts int
	// aout plays the recording's audio (playaudio.go); nil without audio.
	aout *audioOut
}

// PlaybackIdentity is the identity of a viewer's playback participant.
func PlaybackIdentity(viewer string) string { return auth.PlaybackPrefix + viewer }

var h264Codec = sfu.Codec{MimeType: webrtc.MimeTypeH264, ClockRate: clock, SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f", PayloadType: 102}

func (r *Recorder) newSession(c *camStore, viewer string) (*Session, error) {
	room := RoomPrefix + c.id
	if rm := r.mgr.Room(room); rm == nil || rm.ByIdentity(viewer) == nil {
		return nil, fmt.Errorf("viewer %q is not in room %s", viewer, room)
	}
	p, err := r.mgr.JoinLocal(sfu.LocalOptions{Room: room, Identity: PlaybackIdentity(viewer), Name: "playback",
		Audience: []string{viewer}, Grants: auth.Grants{Publish: true, PublishData: true}, Origin: sfu.Server})
	if err != nil {
		return nil, err
	}
	s := &Session{rec: r, cam: c, viewer: viewer, part: p, cmds: make(chan command, 16),
		keyReq: make(chan struct{}, 1), done: make(chan struct{}), ended: make(chan struct{}),
		rate: 1, ssrc: rand.Uint32(), pt: uint8(h264Codec.PayloadType), seq: uint16(rand.Uint32()),
		ts0: rand.Uint32(), pk: packetizer{mtu: 1200}, start: time.Now()}
	s.track, err = p.PublishLocal(sfu.LocalTrackOptions{
		Info:  protocol.TrackInfo{Kind: "video", Source: "camera", Name: "playback", SSRC: s.ssrc},
		Codec: h264Codec, Queue: 8192})
	if err != nil {
		p.Close("playback failed")
		return nil, err
	}
	if err := s.publishAudio(); err != nil {
		s.track.Close()
		p.Close("playback failed")
		return nil, err
	}
	s.track.OnKeyframeRequest(func() {
		select {
		case s.keyReq <- struct{}{}:
		default:
		}
	})
	key := sessionKey{c.id, viewer}
	r.mu.Lock()
	if r.closed || r.sessions[key] != nil {
		r.mu.Unlock()
		s.track.Close()
		if s.aout != nil {
			s.aout.close()
		}
		p.Close("playback replaced")
		return nil, errors.New("session exists")
	}
	r.sessions[key] = s
	r.mu.Unlock()
	go s.run(key)
	r.log.Info("playback started", "camera", c.id, "viewer", viewer)
	return s, nil
}

// Close ends the session.
func (s *Session) Close(why string) {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	<-s.ended
}

func (s *Session) run(key sessionKey) {
	defer close(s.ended)
	defer func() {
		s.rec.mu.Lock()
		if s.rec.sessions[key] == s {
			delete(s.rec.sessions, key)
		}
		s.rec.mu.Unlock()
		if s.rd != nil {
			s.rd.close()
		}
		s.track.Close()
		if s.aout != nil {
			s.aout.close()
		}
		s.part.Close("playback ended")
		s.rec.log.Info("playback ended", "camera", key.cam, "viewer", key.viewer)
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	tail := time.NewTimer(time.Hour)
	defer tail.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var lastKey time.Time
	for {
		if s.playing {
			d := time.Until(s.nextAt)
			if d < 0 {
				d = 0
			}
			timer.Reset(d)
		} else {
			timer.Stop()
		}
		if !s.tailSent && len(s.last) > 0 {
			tail.Reset(max(time.Until(s.tailDue), 0))
		}
		select {
		case <-tail.C:
			if !s.tailSent && !time.Now().Before(s.tailDue) {
				s.tailSent = true
				_ = s.track.WriteRTP(s.last)
			}
		case <-s.done:
			return
		case c := <-s.cmds:
			if c.req.Op == "stop" {
				c.reply(okReply(c.req.ID, nil))
				return
			}
			s.command(c)
		case <-timer.C:
			if s.playing {
				s.advance()
			}
		case <-s.keyReq:
			// The viewer's decoder needs a keyframe (it subscribed after the
			// burst, or lost packets): resend the GOP up to the frame shown.
			if s.haveCur && time.Since(lastKey) > 300*time.Millisecond {
				lastKey = time.Now()
				_ = s.seekTo(s.cur, false)
			}
		case <-tick.C:
			rm := s.rec.mgr.Room(RoomPrefix + s.cam.id)
			if rm == nil || rm.ByIdentity(s.viewer) == nil {
				return // the viewer left
			}
			if s.playing {
				s.event("position")
			}
		}
	}
}

func (s *Session) state() string {
	if s.playing {
		return "playing"
	}
	return "paused"
}

func (s *Session) fields() map[string]any {
	return map[string]any{"t": int64(s.cur / 90), "state": s.state(), "rate": s.rate,
		"identity": s.part.Identity(), "track": s.track.Sid()}
}

func (s *Session) event(name string) {
	m := map[string]any{"event": name, "t": int64(s.cur / 90), "state": s.state(), "rate": s.rate}
	b, _ := json.Marshal(m)
	s.part.PublishData(true, Topic, []string{s.viewer}, b)
}

func (s *Session) command(c command) {
	q := c.req
	fail := func(text string) { c.reply(errReply(q.ID, text)) }
	switch q.Op {
	case "play":
		if q.From != nil {
			if err := s.seekChecked(*q.From); err != nil {
				fail(err.Error())
				return
			}
		} else if !s.haveCur {
			// No position yet: start at the beginning of the recording.
			rs := s.rec.store.Ranges(s.cam.id)
			if err := s.seekChecked(rs[0].From); err != nil {
				fail(err.Error())
				return
			}
		}
		s.playing = true
		s.atEnd = false
		s.nextAt = time.Now().Add(s.frameGap())
	case "pause":
		s.playing = false
	case "seek":
		if q.T == nil {
			fail("seek needs t (Unix ms)")
			return
		}
		if err := s.seekChecked(*q.T); err != nil {
			fail(err.Error())
			return
		}
		if s.playing {
			s.nextAt = time.Now().Add(s.frameGap())
		}
	case "rate":
		if q.Rate == nil || *q.Rate < MinRate || *q.Rate > MaxRate {
			fail(fmt.Sprintf("rate must be between %g and %g", float64(MinRate), float64(MaxRate)))
			return
		}
		s.rate = *q.Rate
	case "step":
		if !s.haveCur {
			fail("nothing to step from: seek or play first")
			return
		}
		s.playing = false
		if !s.sendNext(true) {
			fail("end of recording")
			return
		}
	}
	// The AAC transcoder runs while the session plays at 1x.
	s.aout.setActive(s.playing && s.rate == 1)
	c.reply(okReply(q.ID, s.fields()))
	s.event("position")
}

// seekChecked refuses times outside every recorded range.
func (s *Session) seekChecked(ms int64) error {
	rs := s.rec.store.Ranges(s.cam.id)
	if len(rs) == 0 {
		return errors.New("no recordings")
	}
	if ms < rs[0].From || ms > rs[len(rs)-1].To {
		return fmt.Errorf("no recording at %d: recordings span %d to %d", ms, rs[0].From, rs[len(rs)-1].To)
	}
	// Frame times are reported in whole milliseconds, rounded down: the frame
	// shown for ms is the last one starting before the end of that millisecond,
	// so seeking to a reported frame time shows that very frame.
	return s.seekTo(uint64(ms)*90+89, true)
}

// seekTo shows the frame on screen at t: the last frame at or before t, reached
// by sending the GOP from its keyframe in a burst (the decoder needs them all),
// then holding. When t lies in a gap, the first frame after the gap is shown.
func (s *Session) seekTo(t uint64, reopen bool) error {
	if s.rd != nil {
		s.rd.close()
	}
	rd, err := s.cam.openAt(t)
	if err != nil {
		s.rd = nil
		return err
	}
	s.rd = rd
	s.atEnd = false
	if s.aout != nil {
		s.aout.sent = 0 // the audio starts again at the frame shown
	}
	first := true
	for {
		nx, err := rd.peek()
		if err != nil {
			break
		}
		if !first && nx.t > t {
			break
		}
		smp, _ := rd.next()
		if smp.key {
			s.keyAt = smp.t
		}
		s.send(smp, true)
		first = false
	}
	return nil
}

// frameGap is the wall time until the frame after the current one is due.
func (s *Session) frameGap() time.Duration {
	if s.rd == nil {
		return 0
	}
	nx, err := s.peekPlayable()
	if err != nil {
		return 0
	}
	d := time.Duration(float64(nx.t-s.cur) / clock / s.rate * float64(time.Second))
	// Skip over gaps in the recording (no waiting through them), and never
	// wait longer than a second for one frame.
	return min(d, time.Second)
}

// peekPlayable is the next frame playback would send at the current rate.
func (s *Session) peekPlayable() (sample, error) {
	for {
		nx, err := s.rd.peek()
		if err != nil {
			return nx, err
		}
		if nx.key || s.rate <= keyOnlyAbove {
			return nx, nil
		}
		_, _ = s.rd.next() // keyframes only at high rates
	}
}

// advance sends the due frame and schedules the next.
func (s *Session) advance() {
	if !s.sendNext(false) {
		s.playing = false
		s.atEnd = true
		s.aout.setActive(false)
		s.event("end")
		return
	}
	s.playAudio()
	s.nextAt = s.nextAt.Add(s.frameGap())
	if time.Until(s.nextAt) < -time.Second {
		s.nextAt = time.Now() // fell far behind (a loaded machine): do not race to catch up
	}
}

// sendNext sends the next frame (every frame when step is set).
func (s *Session) sendNext(step bool) bool {
	if s.rd == nil {
		return false
	}
	var smp sample
	var err error
	if step {
		smp, err = s.rd.next()
	} else {
		if _, err = s.peekPlayable(); err == nil {
			smp, err = s.rd.next()
		}
	}
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.rec.log.Warn("playback: read", "camera", s.cam.id, "err", err)
		}
		return false
	}
	s.send(smp, false)
	return true
}

// send packetizes one frame. Timestamps follow the wall clock of sending (so the
// viewer's jitter buffer sees media that arrives on time whatever the rate) and
// always advance, so a burst after a seek is a run of distinct frames.
func (s *Session) send(smp sample, burst bool) {
	now := time.Now()
	// The session's clock: RTP time since the session began. Frames of a burst
	// are at least a millisecond apart (a receiver renders by millisecond: two
	// frames in the same one and the later, the frame sought, was not shown);
	// the lead a burst takes is given back as the clock catches up.
	ts := s.ts0 + uint32(int64(now.Sub(s.start).Seconds()*clock))
	if !s.tsAt.IsZero() && int32(ts-s.ts) < clock/1000 {
		ts = s.ts + clock/1000
	}
	s.ts, s.tsAt = ts, now
	s.cur, s.haveCur = smp.t, true
	s.pk.payloads(smp.data, func(payload []byte, last bool) {
		s.pkt.Header = rtp.Header{Version: 2, PayloadType: s.pt, SequenceNumber: s.seq, Timestamp: ts, SSRC: s.ssrc, Marker: last}
		s.pkt.Payload = payload
		s.seq++
		if last {
			s.last, _ = s.pkt.Marshal()
		}
		if burst {
			// A GOP sent at once overflows a receiver's socket buffer (Linux's
			// default 208 KiB holds about 90 such packets): pause briefly every
			// 32 packets, about 300 Mbit/s, a few milliseconds per GOP.
			if s.burstPkts++; s.burstPkts >= 32 {
				s.burstPkts = 0
				time.Sleep(time.Millisecond)
			}
		}
		if err := s.track.WritePacket(&s.pkt); err != nil && !strings.Contains(err.Error(), "closed") {
			s.rec.log.Debug("playback: write", "err", err)
		}
	})
	s.tailDue, s.tailSent = now.Add(tailProbe), false
}
