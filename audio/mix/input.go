package mix

import (
	"sync"

	"github.com/petrel-sfu/petrel/audio/opus"
	"github.com/petrel-sfu/petrel/sfu"
)

const (
	// jitterSlots is the reorder window of an input: 16 packets (320 ms of
	// 20 ms frames); a packet further ahead restarts the input there.
	jitterSlots = 16
	// playoutDelay is how many frames an input buffers before it is first
	// played: 40 ms absorbs the jitter of most paths.
	playoutDelay = 2
	// idleFrames without a packet end an input's concealment (DTX, a muted
	// microphone, a publisher gone quiet): it is silent and costs nothing.
	idleFrames = 10
)

// slot holds one received packet until its turn.
type slot struct {
	seq uint16
	n   int
	ok  bool
	buf [opus.MaxPacket]byte
}

// input is one publisher's audio track: a sink that fills a small jitter
// buffer on the forwarding goroutine, and the decoder the mixing loop drains
// it through.
type input struct {
	owner string // the publisher's identity

	mu      sync.Mutex
	slots   [jitterSlots]slot
	started bool   // a packet arrived since the input last fell idle
	wait    int    // frames still to buffer before playout
	next    uint16 // the sequence number played next
	idle    int    // frames in a row with nothing to play

	// The mixing loop's alone.
	remove func()
	dec    *opus.Decoder
	pkt    [opus.MaxPacket]byte
	pcm    []int16 // one decoded frame (room for 120 ms packets)
	quiet  int     // frames since the last one above silenceLevel
}

// WriteRTP implements sfu.Sink: it copies the payload into its slot.
func (in *input) WriteRTP(p *sfu.Packet) {
	if len(p.Payload) == 0 || len(p.Payload) > opus.MaxPacket {
		return
	}
	seq := p.Header.SequenceNumber
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.started {
		d := int16(seq - in.next)
		if d < 0 {
			return // late: its frame was played or concealed
		}
		if d >= jitterSlots {
			in.started = false // a jump (a new stream): start over from here
		}
	}
	if !in.started {
		in.started, in.next, in.wait, in.idle = true, seq, playoutDelay, 0
		for i := range in.slots {
			in.slots[i].ok = false
		}
	}
	s := &in.slots[seq%jitterSlots]
	s.seq, s.n, s.ok = seq, copy(s.buf[:], p.Payload), true
}

// take returns this frame's packet: n > 0 a packet (in in.pkt), n == 0 with
// play true a lost one to conceal, play false nothing to play.
func (in *input) take() (n int, play bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.started {
		return 0, false
	}
	if in.wait > 0 {
		in.wait--
		return 0, false
	}
	s := &in.slots[in.next%jitterSlots]
	if s.ok && s.seq == in.next {
		n = copy(in.pkt[:], s.buf[:s.n])
		s.ok = false
		in.next++
		in.idle = 0
		return n, true
	}
	// Missing: concealed if later packets wait (a loss), or for a few frames
	// of underrun, then the input falls idle.
	in.next++
	for i := range in.slots {
		if in.slots[i].ok {
			return 0, true
		}
	}
	in.idle++
	if in.idle >= idleFrames {
		in.started = false
		return 0, false
	}
	return 0, true
}
