// Package mix is the server's audio mixer for audio-mixed rooms (like Janus's
// AudioBridge): it decodes every visible participant's Opus, mixes for each
// participant everyone but themselves, and sends each one mixed track.
package mix

import (
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/audio/opus"
	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/lograte"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

const (
	// scanEvery: how soon a room turned mixed (or no longer) is followed.
	scanEvery = 250 * time.Millisecond
	// frameDur is the mixing clock, one Opus frame.
	frameDur = 20 * time.Millisecond
	// maxBehind is how late the loop may run and still make up the frames.
	maxBehind = 200 * time.Millisecond
	// membersEvery frames the loop looks for new and gone tracks and people.
	membersEvery = 10
	// silenceLevel is the mean square (in 16-bit units, about -60 dBFS) under
	// which a decoded frame is left out of the mix; hangover frames of
	// silence pass before a speaker's own encoder stops (see output).
	silenceLevel = 33 * 33
	hangover     = 25
	// bitrate of each encoded mix: speech at good quality, mono.
	bitrate = 32000
	// payloadType is the Opus payload type of the mixed tracks.
	payloadType = 111
)

// Mixer follows the rooms and mixes those set to audio mix (sfu.Room.AudioMix).
type Mixer struct {
	mgr   *sfu.Manager
	log   *slog.Logger
	rooms map[*sfu.Room]*roomMix // run's alone
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// Start follows mgr's rooms until Close.
func Start(mgr *sfu.Manager, log *slog.Logger) *Mixer {
	m := &Mixer{mgr: mgr, log: log, rooms: map[*sfu.Room]*roomMix{}, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	return m
}

// Close stops every room's mix and waits for them.
func (m *Mixer) Close() {
	m.once.Do(func() { close(m.stop) })
	<-m.done
}

func (m *Mixer) run() {
	defer close(m.done)
	t := time.NewTicker(scanEvery)
	defer t.Stop()
	for {
		m.scan()
		select {
		case <-m.stop:
			for room, rm := range m.rooms {
				rm.close()
				delete(m.rooms, room)
			}
			return
		case <-t.C:
		}
	}
}

func (m *Mixer) scan() {
	open := map[*sfu.Room]bool{}
	for _, room := range m.mgr.Rooms() {
		if !room.AudioMix() {
			continue
		}
		open[room] = true
		if m.rooms[room] == nil {
			m.rooms[room] = startRoom(room, m.mgr, m.log.With("room", room.Name()))
		}
	}
	for room, rm := range m.rooms {
		if !open[room] {
			rm.close()
			delete(m.rooms, room)
		}
	}
}

// roomMix mixes one room on its own goroutine.
type roomMix struct {
	room *sfu.Room
	mgr  *sfu.Manager
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}

	// The loop's alone.
	inputs  map[*sfu.Publication]*input
	outputs map[string]*output // by listener identity
	// all is the mix of everyone for WHEP viewers who are not in the room
	// (sfu.Manager.PlayWHEP picks it); nil if it could not be published.
	all     *output
	full    []int32       // everyone's sum
	pcm     []int16       // a clipped frame to encode
	shared  *opus.Encoder // the mix of everyone, for those not in it
	sharedN int
	sharedP [opus.MaxPacket]byte
	joinErr lograte.Limit
	// members' scratch, reused
	seenPub map[*sfu.Publication]bool
	seenID  map[string]bool
}

func startRoom(room *sfu.Room, mgr *sfu.Manager, log *slog.Logger) *roomMix {
	rm := &roomMix{room: room, mgr: mgr, log: log, stop: make(chan struct{}), done: make(chan struct{}),
		inputs: map[*sfu.Publication]*input{}, outputs: map[string]*output{},
		full: make([]int32, opus.FrameSamples), pcm: make([]int16, opus.FrameSamples),
		seenPub: map[*sfu.Publication]bool{}, seenID: map[string]bool{}}
	go rm.run()
	log.Info("audio mix started")
	return rm
}

func (rm *roomMix) close() {
	close(rm.stop)
	<-rm.done
	rm.log.Info("audio mix stopped")
}

func (rm *roomMix) run() {
	defer close(rm.done)
	defer rm.teardown()
	var err error
	if rm.shared, err = opus.NewEncoder(bitrate); err != nil {
		rm.log.Error("audio mix: encoder", "err", err)
		return
	}
	if rm.all, err = newOutput(rm.mgr, rm.room.Name(), auth.MixRoomIdentity, ""); err != nil {
		rm.log.Warn("audio mix: no mix for WHEP viewers", "err", err)
	}
	// A deadline clock rather than a ticker: a loop delayed by a busy host
	// catches up (its frames are due), up to maxBehind, then drops the rest.
	next := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	for n := 0; ; n++ {
		if n%membersEvery == 0 {
			rm.members()
		}
		rm.frame()
		next = next.Add(frameDur)
		d := time.Until(next)
		if d < -maxBehind {
			next, d = time.Now(), 0
		}
		if d <= 0 {
			select {
			case <-rm.stop:
				return
			default:
				continue
			}
		}
		t.Reset(d)
		select {
		case <-rm.stop:
			return
		case <-t.C:
		}
	}
}

// members attaches to new audio tracks and gives newcomers their mixed track,
// and lets go of what is gone.
func (rm *roomMix) members() {
	seenPub, seenID := rm.seenPub, rm.seenID
	clear(seenPub)
	clear(seenID)
	for _, p := range rm.room.Participants() {
		for _, pub := range p.Publications() {
			if pub.Info().Kind != "audio" || !strings.EqualFold(pub.Codec().MimeType, "audio/opus") {
				continue
			}
			seenPub[pub] = true
			if rm.inputs[pub] != nil {
				continue
			}
			dec, err := opus.NewDecoder()
			if err != nil {
				rm.log.Error("audio mix: decoder", "err", err)
				continue
			}
			in := newInput(p.Identity(), dec)
			in.remove = pub.AddSink(in)
			rm.inputs[pub] = in
		}
		if p.Local() {
			continue // no connection to send a mix on
		}
		// Also for a publisher without the subscribe grant (a WHIP caller):
		// a WHEP viewer of the same identity hears it; while nobody receives
		// the track it is not encoded.
		seenID[p.Identity()] = true
		if rm.outputs[p.Identity()] == nil {
			o, err := newOutput(rm.mgr, rm.room.Name(), auth.MixPrefix+p.Identity(), p.Identity())
			if err != nil {
				if _, ok := rm.joinErr.Allow(10 * time.Second); ok {
					rm.log.Warn("audio mix: no mixed track for a participant", "identity", p.Identity(), "err", err)
				}
				continue
			}
			rm.outputs[p.Identity()] = o
		}
	}
	for pub, in := range rm.inputs {
		if !seenPub[pub] {
			in.remove()
			in.dec.Close()
			delete(rm.inputs, pub)
		}
	}
	for id, o := range rm.outputs {
		if !seenID[id] {
			o.close()
			delete(rm.outputs, id)
		}
	}
}

// frame mixes and sends one 20 ms frame.
func (rm *roomMix) frame() {
	clear(rm.full)
	for _, o := range rm.outputs {
		o.own, o.talking = o.own[:0], false
	}
	for _, in := range rm.inputs {
		if !in.frame() {
			in.quiet = hangover
			continue
		}
		var energy int64
		for _, s := range in.pcm {
			energy += int64(s) * int64(s)
		}
		o := rm.outputs[in.owner]
		if energy < silenceLevel*opus.FrameSamples {
			in.quiet = min(in.quiet+1, hangover)
			if o != nil && in.quiet < hangover {
				o.talking = true
			}
			continue // silent: nothing to add
		}
		in.quiet = 0
		for i, s := range in.pcm {
			rm.full[i] += int32(s)
		}
		if o != nil {
			o.own, o.talking = append(o.own, in), true
		}
	}
	// Those whose own voice is not in the mix hear the shared mix, encoded once.
	needShared := rm.all != nil && rm.all.heard()
	for _, o := range rm.outputs {
		if !o.ownMix() && o.heard() {
			needShared = true
			break
		}
	}
	rm.sharedN = 0
	if needShared {
		clip(rm.pcm, rm.full, nil)
		if n, err := rm.shared.Encode(rm.pcm, rm.sharedP[:]); err == nil {
			rm.sharedN = n
		}
	}
	if rm.sharedN > 0 && rm.all != nil && rm.all.heard() {
		rm.all.send(rm.sharedP[:rm.sharedN])
	}
	for _, o := range rm.outputs {
		if !o.heard() {
			continue
		}
		if !o.ownMix() {
			if rm.sharedN > 0 {
				o.send(rm.sharedP[:rm.sharedN])
			}
			continue
		}
		// Minus one: the sum without the listener's own tracks.
		clip(rm.pcm, rm.full, o.own)
		if n, err := o.encode(rm.pcm); err == nil {
			o.send(o.pkt[:n])
		}
	}
}

// clip writes full minus own's frames to pcm, clipped to 16 bits.
func clip(pcm []int16, full []int32, own []*input) {
	for i, v := range full {
		for _, in := range own {
			v -= int32(in.pcm[i])
		}
		pcm[i] = int16(max(-32768, min(32767, v)))
	}
}

func (rm *roomMix) teardown() {
	for pub, in := range rm.inputs {
		in.remove()
		in.dec.Close()
		delete(rm.inputs, pub)
	}
	for id, o := range rm.outputs {
		o.close()
		delete(rm.outputs, id)
	}
	if rm.all != nil {
		rm.all.close()
		rm.all = nil
	}
	if rm.shared != nil {
		rm.shared.Close()
	}
}

// output is one listener's mixed track, published by a hidden participant
// whose audience is the listener alone (or, for the room's mix, no one: only
// WHEP viewers get it).
type output struct {
	identity string
	part     *sfu.Participant
	track    *sfu.LocalTrack
	pub      *sfu.Publication
	enc      *opus.Encoder // made when the listener first speaks
	own      []*input      // the listener's tracks in this frame's mix
	talking  bool          // one of them was, within the hangover
	hdr      rtp.Header
	buf      [12 + opus.MaxPacket]byte
	pkt      [opus.MaxPacket]byte
}

// newOutput publishes a mixed track as participant name, seen by listener
// alone ("": by no one).
func newOutput(mgr *sfu.Manager, room, name, listener string) (*output, error) {
	opt := sfu.LocalOptions{Room: room, Identity: name, Name: "audio mix", Hidden: true,
		Grants: auth.Grants{Publish: true}, Origin: sfu.Server}
	if listener != "" {
		opt.Audience = []string{listener}
	}
	part, err := mgr.JoinLocal(opt)
	if err != nil {
		return nil, err
	}
	ssrc := rand.Uint32()
	track, err := part.PublishLocal(sfu.LocalTrackOptions{
		Info:  protocol.TrackInfo{Kind: "audio", Source: "microphone", Name: "mix", SSRC: ssrc},
		Codec: sfu.Codec{MimeType: "audio/opus", ClockRate: opus.Rate, Channels: 2, PayloadType: payloadType}})
	if err != nil {
		part.Close("left")
		return nil, err
	}
	return &output{identity: listener, part: part, track: track, pub: track.Publication(),
		hdr: rtp.Header{Version: 2, PayloadType: payloadType, SSRC: ssrc, SequenceNumber: uint16(rand.Uint32()), Timestamp: rand.Uint32(), Marker: true}}, nil
}

// ownMix: the listener's voice is in the mix, or was within the hangover
// (their own encoder goes on through short pauses, so that their stream does
// not flip between encoders between words).
func (o *output) ownMix() bool {
	return len(o.own) > 0 || (o.talking && o.enc != nil)
}

// heard: someone receives the track (a WebRTC client, a WHEP viewer, a sink
// inside the server).
func (o *output) heard() bool { return len(o.pub.Subscribers()) > 0 || o.pub.HasSinks() }

func (o *output) encode(pcm []int16) (int, error) {
	if o.enc == nil {
		enc, err := opus.NewEncoder(bitrate)
		if err != nil {
			return 0, err
		}
		o.enc = enc
	}
	return o.enc.Encode(pcm, o.pkt[:])
}

// send writes one frame as the next RTP packet of the track.
func (o *output) send(payload []byte) {
	n, err := o.hdr.MarshalTo(o.buf[:])
	if err != nil {
		return
	}
	n += copy(o.buf[n:], payload)
	_ = o.track.WriteRTP(o.buf[:n])
	o.hdr.Marker = false
	o.hdr.SequenceNumber++
	o.hdr.Timestamp += opus.FrameSamples
}

func (o *output) close() {
	o.track.Close()
	o.part.Close("left")
	if o.enc != nil {
		o.enc.Close()
	}
}
