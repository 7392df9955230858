package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// A room recording plays back in room recording/<id>: a viewer joins it (a
// token for that room with the subscribe grant) and sends the cameras'
// playback messages (topic "playback", same ops and replies) to identity
// "camera", the recording's own participant there (the recorder keeps one in
// each such room while a viewer is in it, so the cameras' timeline talks to it
// unchanged). A session publishes, to that viewer only, one track per recorded
// track, as recorded (no transcoding), all driven by one clock: the position
// on the recording's wall-clock timeline advances at the rate, and every
// track sends what was recorded up to it, so the participants stay in sync as
// they were recorded.

// PlaybackRoomPrefix names the rooms where room recordings are played back.
const PlaybackRoomPrefix = "recording/"

// playCodecs are the codecs played back, by recorded MIME type: the room's own
// payload types (rtc.Codecs).
var playCodecs = map[string]sfu.Codec{
	"audio/opus": opusCodec,
	"audio/pcmu": {MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1, PayloadType: 0},
	"audio/pcma": {MimeType: webrtc.MimeTypePCMA, ClockRate: 8000, Channels: 1, PayloadType: 8},
	"video/vp8":  {MimeType: webrtc.MimeTypeVP8, ClockRate: clock, PayloadType: 96},
	"video/vp9":  {MimeType: webrtc.MimeTypeVP9, ClockRate: clock, SDPFmtpLine: "profile-id=0", PayloadType: 98},
	"video/h264": h264Codec,
	"video/av1":  {MimeType: webrtc.MimeTypeAV1, ClockRate: clock, PayloadType: 45},
}

type roomSessionKey struct{ room, viewer string }

// scanPlaybackRooms keeps the recording's participant in every playback room
// a viewer is in, and takes it out of rooms nobody else is in (so they close).
func (r *Recorder) scanPlaybackRooms() {
	want := map[string]*sfu.Room{}
	for _, room := range r.mgr.Rooms() {
		id, ok := strings.CutPrefix(room.Name(), PlaybackRoomPrefix)
		if !ok {
			continue
		}
		if _, err := r.roomRecording(id); err != nil {
			continue
		}
		for _, p := range room.Participants() {
			if p.Identity() != CameraIdentity {
				want[room.Name()] = room
				break
			}
		}
	}
	r.mu.Lock()
	var gone []*sfu.Participant
	for name, h := range r.hosts {
		if want[name] == nil || h.Room() != want[name] {
			gone = append(gone, h)
			delete(r.hosts, name)
		}
	}
	var add []*sfu.Room
	for name, room := range want {
		if r.hosts[name] == nil {
			add = append(add, room)
		}
	}
	r.mu.Unlock()
	for _, h := range gone {
		h.Close("no viewer")
	}
	for _, room := range add {
		name := room.Name()
		id := strings.TrimPrefix(name, PlaybackRoomPrefix)
		h, err := r.mgr.JoinLocal(sfu.LocalOptions{Room: name, Identity: CameraIdentity, Name: "recording " + id,
			Grants: auth.Grants{PublishData: true}, Origin: sfu.Server})
		if err != nil {
			r.log.Warn("room playback: join", "room", name, "err", err)
			continue
		}
		h.OnData(func(_ bool, hd sfu.DataHeader, payload []byte) {
			if hd.Topic != Topic || hd.From == "" || hd.From == CameraIdentity {
				return
			}
			from := hd.From
			r.HandleRoomPlayback(id, from, payload, func(b []byte) { h.PublishData(true, Topic, []string{from}, b) })
		})
		r.mu.Lock()
		if r.closed || r.hosts[name] != nil {
			r.mu.Unlock()
			h.Close("not needed")
			continue
		}
		r.hosts[name] = h
		r.mu.Unlock()
	}
}

// HandleRoomPlayback takes one control message from viewer for room
// recording id; reply answers the viewer on topic "playback".
func (r *Recorder) HandleRoomPlayback(id, viewer string, payload []byte, reply func([]byte)) {
	var req request
	if len(payload) > maxControlBytes {
		reply(errReply(nil, "message larger than 4096 bytes"))
		return
	}
	if err := json.Unmarshal(payload, &req); err != nil {
		reply(errReply(idOf(payload), "bad JSON: "+err.Error()))
		return
	}
	switch req.Op {
	case "play", "pause", "seek", "rate", "step", "stop", "ranges":
	default:
		reply(errReply(req.ID, fmt.Sprintf("unknown op %q (play, pause, seek, rate, step, stop, ranges)", req.Op)))
		return
	}
	rr, err := r.roomRecording(id)
	if err != nil {
		reply(errReply(req.ID, err.Error()))
		return
	}
	room := PlaybackRoomPrefix + id
	rm := r.mgr.Room(room)
	var vp *sfu.Participant
	if rm != nil {
		vp = rm.ByIdentity(viewer)
	}
	if vp == nil {
		reply(errReply(req.ID, fmt.Sprintf("viewer %q is not in room %s", viewer, room)))
		return
	}
	if !vp.Grants().Subscribe {
		reply(errReply(req.ID, "the token does not allow subscribing (playback is watching)"))
		return
	}
	if req.Op == "ranges" {
		b, _ := json.Marshal(map[string]any{"id": req.ID, "ok": true, "ranges": rr.ranges()})
		reply(b)
		return
	}
	key := roomSessionKey{room, viewer}
	r.mu.Lock()
	s, closed := r.roomSessions[key], r.closed
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
		if s, err = r.newRoomSession(rr, room, viewer); err != nil {
			r.log.Warn("room playback: start", "recording", id, "viewer", viewer, "err", err)
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

// ranges is the union of the tracks' recorded ranges.
func (rr *roomRec) ranges() []Range {
	info := rr.snapshot()
	var all []Range
	for _, t := range info.Tracks {
		all = append(all, t.Ranges...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].From < all[j].From })
	out := []Range{}
	for _, g := range all {
		if n := len(out); n > 0 && g.From <= out[n-1].To+gapTicks/90 {
			out[n-1].To = max(out[n-1].To, g.To)
			continue
		}
		out = append(out, g)
	}
	return out
}

// roomSession plays one room recording to one viewer.
type roomSession struct {
	rec    *Recorder
	rr     *roomRec
	room   string
	viewer string
	part   *sfu.Participant
	tracks []*playTrack
	cmds   chan command
	done   chan struct{}
	ended  chan struct{}
	start  time.Time

	// Owned by run.
	playing bool
	rate    float64
	pos     uint64 // the recording time on screen (90 kHz Unix)
	havePos bool
	last    time.Time // when pos last advanced
}

// playTrack is one recorded track played back.
type playTrack struct {
	s      *roomSession
	info   RoomTrackInfo
	c      *camStore
	lt     *sfu.LocalTrack
	audio  bool
	clk    uint64 // RTP clock rate
	pay    func(data []byte, emit func(p []byte, last bool))
	rd     *reader
	ssrc   uint32
	pt     uint8
	seq    uint16
	ts0    uint32
	ts     uint32
	sent   bool
	keyReq atomic.Bool
	burst  int
	pkt    rtp.Packet
}

func payloaderFor(mime string) func(data []byte, emit func(p []byte, last bool)) {
	var p rtp.Payloader
	switch mime {
	case "video/h264":
		z := packetizer{mtu: 1200}
		return z.payloads
	case "video/vp8":
		p = &codecs.VP8Payloader{EnablePictureID: true}
	case "video/vp9":
		p = &codecs.VP9Payloader{}
	case "video/av1":
		p = &codecs.AV1Payloader{}
	default:
		return func(data []byte, emit func([]byte, bool)) { emit(data, false) }
	}
	return func(data []byte, emit func([]byte, bool)) {
		ps := p.Payload(1200, data)
		for i, x := range ps {
			emit(x, i == len(ps)-1)
		}
	}
}

func (r *Recorder) newRoomSession(rr *roomRec, room, viewer string) (*roomSession, error) {
	p, err := r.mgr.JoinLocal(sfu.LocalOptions{Room: room, Identity: PlaybackIdentity(viewer), Name: "playback",
		Audience: []string{viewer}, Grants: auth.Grants{Publish: true, PublishData: true}, Origin: sfu.Server})
	if err != nil {
		return nil, err
	}
	s := &roomSession{rec: r, rr: rr, room: room, viewer: viewer, part: p, cmds: make(chan command, 16),
		done: make(chan struct{}), ended: make(chan struct{}), rate: 1, start: time.Now()}
	fail := func(err error) (*roomSession, error) {
		for _, t := range s.tracks {
			t.lt.Close()
		}
		p.Close("playback failed")
		return nil, err
	}
	for _, ti := range rr.snapshot().Tracks {
		c := rr.store.lookup(ti.Key)
		mime := strings.ToLower(ti.MimeType)
		codec, ok := playCodecs[mime]
		if c == nil || !ok || len(ti.Ranges) == 0 {
			continue
		}
		t := &playTrack{s: s, info: ti, c: c, audio: ti.Kind == "audio", clk: uint64(codec.ClockRate), pay: payloaderFor(mime),
			ssrc: rand.Uint32(), pt: uint8(codec.PayloadType), seq: uint16(rand.Uint32()), ts0: rand.Uint32()}
		t.lt, err = p.PublishLocal(sfu.LocalTrackOptions{
			Info:  protocol.TrackInfo{Kind: ti.Kind, Source: ti.Source, Name: ti.Identity, SSRC: t.ssrc},
			Codec: codec, Queue: 8192})
		if err != nil {
			return fail(err)
		}
		if !t.audio {
			t.lt.OnKeyframeRequest(func() { t.keyReq.Store(true) })
		}
		s.tracks = append(s.tracks, t)
	}
	if len(s.tracks) == 0 {
		return fail(errors.New("nothing recorded to play"))
	}
	key := roomSessionKey{room, viewer}
	r.mu.Lock()
	if r.closed || r.roomSessions[key] != nil {
		r.mu.Unlock()
		return fail(errors.New("session exists"))
	}
	r.roomSessions[key] = s
	r.mu.Unlock()
	go s.run(key)
	r.log.Info("room playback started", "recording", rr.info.ID, "viewer", viewer, "tracks", len(s.tracks))
	return s, nil
}

func (s *roomSession) close() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	<-s.ended
}

func (s *roomSession) run(key roomSessionKey) {
	defer close(s.ended)
	defer func() {
		s.rec.mu.Lock()
		if s.rec.roomSessions[key] == s {
			delete(s.rec.roomSessions, key)
		}
		s.rec.mu.Unlock()
		for _, t := range s.tracks {
			if t.rd != nil {
				t.rd.close()
			}
			t.lt.Close()
		}
		s.part.Close("playback ended")
		s.rec.log.Info("room playback ended", "room", key.room, "viewer", key.viewer)
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	lastCheck := time.Now()
	for {
		select {
		case <-s.done:
			return
		case c := <-s.cmds:
			if c.req.Op == "stop" {
				c.reply(okReply(c.req.ID, nil))
				return
			}
			s.command(c)
		case now := <-tick.C:
			if s.playing {
				s.pos += uint64(now.Sub(s.last).Seconds() * s.rate * clock)
				s.last = now
				s.skipGap()
				s.sendUpTo(s.pos, false)
				if _, end := s.span(); s.pos >= uint64(end)*90 {
					s.playing = false
					s.event("end")
				}
			}
			for _, t := range s.tracks {
				if t.keyReq.Swap(false) && s.havePos {
					t.position(s.pos, true) // resend the GOP up to the frame shown
				}
			}
			if now.Sub(lastCheck) >= 500*time.Millisecond {
				lastCheck = now
				rm := s.rec.mgr.Room(s.room)
				if rm == nil || rm.ByIdentity(s.viewer) == nil {
					return // the viewer left
				}
				if s.playing {
					s.event("position")
				}
			}
		}
	}
}

// span is the recording's first and last recorded instant (Unix ms).
func (s *roomSession) span() (from, to int64) {
	rs := s.rr.ranges()
	if len(rs) == 0 {
		return 0, 0
	}
	return rs[0].From, rs[len(rs)-1].To
}

func (s *roomSession) fields() map[string]any {
	state := "paused"
	if s.playing {
		state = "playing"
	}
	tracks := make([]map[string]any, 0, len(s.tracks))
	for _, t := range s.tracks {
		tracks = append(tracks, map[string]any{"track": t.lt.Sid(), "identity": t.info.Identity, "kind": t.info.Kind, "source": t.info.Source})
	}
	return map[string]any{"t": int64(s.pos / 90), "state": state, "rate": s.rate, "identity": s.part.Identity(), "tracks": tracks}
}

func (s *roomSession) event(name string) {
	state := "paused"
	if s.playing {
		state = "playing"
	}
	b, _ := json.Marshal(map[string]any{"event": name, "t": int64(s.pos / 90), "state": state, "rate": s.rate})
	s.part.PublishData(true, Topic, []string{s.viewer}, b)
}

func (s *roomSession) command(c command) {
	q := c.req
	fail := func(text string) { c.reply(errReply(q.ID, text)) }
	switch q.Op {
	case "play":
		from, _ := s.span()
		switch {
		case q.From != nil:
			if err := s.seek(*q.From); err != nil {
				fail(err.Error())
				return
			}
		case !s.havePos:
			if err := s.seek(from); err != nil {
				fail(err.Error())
				return
			}
		}
		s.playing, s.last = true, time.Now()
	case "pause":
		s.playing = false
	case "seek":
		if q.T == nil {
			fail("seek needs t (Unix ms)")
			return
		}
		if err := s.seek(*q.T); err != nil {
			fail(err.Error())
			return
		}
		s.last = time.Now()
	case "rate":
		if q.Rate == nil || *q.Rate < MinRate || *q.Rate > MaxRate {
			fail(fmt.Sprintf("rate must be between %g and %g", float64(MinRate), float64(MaxRate)))
			return
		}
		s.rate = *q.Rate
	case "step":
		if !s.havePos {
			fail("nothing to step from: seek or play first")
			return
		}
		s.playing = false
		next, ok := s.nextVideo()
		if !ok {
			fail("end of recording")
			return
		}
		s.pos = next
		s.sendUpTo(next, true)
	}
	c.reply(okReply(q.ID, s.fields()))
	s.event("position")
}

// seek shows every track as it was at ms: each video track's frame at or
// before it (its GOP sent in a burst), the audio from there on.
func (s *roomSession) seek(ms int64) error {
	from, to := s.span()
	if ms < from || ms > to {
		return fmt.Errorf("no recording at %d: the recording spans %d to %d", ms, from, to)
	}
	s.pos, s.havePos = uint64(ms)*90+89, true
	for _, t := range s.tracks {
		t.position(s.pos, true)
	}
	return nil
}

// skipGap jumps over stretches where no track recorded anything (more than
// a second ahead of every track's next sample), as camera playback does.
func (s *roomSession) skipGap() {
	next := ^uint64(0)
	for _, t := range s.tracks {
		if t.rd == nil {
			continue
		}
		if smp, err := t.rd.peek(); err == nil {
			next = min(next, smp.t)
		}
	}
	if next != ^uint64(0) && next > s.pos+clock {
		s.pos = next
	}
}

// nextVideo is the time of the next video frame of any track after pos.
func (s *roomSession) nextVideo() (uint64, bool) {
	best, ok := ^uint64(0), false
	for _, t := range s.tracks {
		if t.audio || t.rd == nil {
			continue
		}
		if smp, err := t.rd.peek(); err == nil && smp.t < best {
			best, ok = smp.t, true
		}
	}
	return best, ok
}

// sendUpTo sends every track's samples up to pos: video at the rate's
// selection (keyframes only above 2x), audio at 1x only (no resampling; other
// rates and steps are silent).
func (s *roomSession) sendUpTo(pos uint64, step bool) {
	for _, t := range s.tracks {
		if t.rd == nil {
			t.position(pos, false)
			if t.rd == nil {
				continue
			}
		}
		for {
			smp, err := t.rd.peek()
			if err != nil || smp.t > pos {
				break
			}
			_, _ = t.rd.next()
			switch {
			case t.audio && (step || s.rate != 1):
			case !t.audio && !step && s.rate > keyOnlyAbove && !smp.key:
			default:
				t.send(smp, false)
			}
		}
	}
}

// position opens the track's reader for pos; with burst, a video track sends
// the GOP up to the frame at pos at once (nothing when the track begins
// later: the reader then waits at its first keyframe).
func (t *playTrack) position(pos uint64, burst bool) {
	if t.rd != nil {
		t.rd.close()
		t.rd = nil
	}
	rd, err := t.c.openAt(pos)
	if err != nil {
		return
	}
	t.rd = rd
	for {
		smp, err := rd.peek()
		if err != nil || smp.t > pos {
			return
		}
		_, _ = rd.next()
		if !t.audio && burst {
			t.send(smp, true)
		}
	}
}

// send packetizes one sample. Video timestamps follow the wall clock of
// sending and always advance (a burst is a run of distinct frames, a
// millisecond apart); audio timestamps advance by each sample's duration,
// re-anchored on the wall clock after a pause or a jump.
func (t *playTrack) send(smp sample, burst bool) {
	now := time.Now()
	wall := t.ts0 + uint32(uint64(now.Sub(t.s.start).Microseconds())*t.clk/1e6)
	ts := wall
	if t.sent {
		step := uint32(t.clk / 1000)
		if t.audio {
			step = uint32(uint64(smp.dur) * t.clk / clock)
		}
		if d := int32(wall - t.ts); d < int32(step) || (t.audio && d < int32(t.clk/5)) {
			ts = t.ts + step
		}
	}
	t.ts, t.sent = ts, true
	t.pay(smp.data, func(payload []byte, last bool) {
		t.pkt.Header = rtp.Header{Version: 2, PayloadType: t.pt, SequenceNumber: t.seq, Timestamp: ts, SSRC: t.ssrc, Marker: last}
		t.pkt.Payload = payload
		t.seq++
		if burst {
			if t.burst++; t.burst >= 32 {
				t.burst = 0
				time.Sleep(time.Millisecond) // as camera bursts: spare the receiver's socket buffer
			}
		}
		if err := t.lt.WritePacket(&t.pkt); err != nil && !errors.Is(err, sfu.ErrLocalTrackClosed) {
			t.s.rec.log.Debug("room playback: write", "err", err)
		}
	})
}

func (r *Recorder) closePlayback() {
	r.mu.Lock()
	ss := make([]*roomSession, 0, len(r.roomSessions))
	for _, s := range r.roomSessions {
		ss = append(ss, s)
	}
	hosts := make([]*sfu.Participant, 0, len(r.hosts))
	for name, h := range r.hosts {
		hosts = append(hosts, h)
		delete(r.hosts, name)
	}
	r.mu.Unlock()
	for _, s := range ss {
		s.close()
	}
	for _, h := range hosts {
		h.Close("server closing")
	}
}
