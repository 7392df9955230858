package mix

import (
	"sync"

	"github.com/petrel-sfu/petrel/audio/opus"
	"github.com/petrel-sfu/petrel/sfu"
)

const (
	// jitterSlots is the reorder window of an input: 16 packets (320 ms of
	// 20 ms packets, 160 ms of 10 ms ones); a packet further ahead restarts
	// the input there.
	jitterSlots = 16
	// playoutDelay is how many frames an input buffers before it is first
	// played: 40 ms absorbs the jitter of most paths.
	playoutDelay = 2
	// idleSamples (200 ms) without a packet end an input's concealment (DTX,
	// a muted microphone, a publisher gone quiet): it is silent and costs nothing.
	idleSamples = 10 * opus.FrameSamples
	// fifoSamples holds what one packet decodes to (up to 120 ms) on top of
	// less than a frame left from the one before.
	fifoSamples = opus.MaxPacketSamples + opus.FrameSamples
	// maxTakes bounds the packets one frame decodes (10 ms packets take 2,
	// 2.5 ms ones 8).
	maxTakes = 8
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
	idle    int    // samples concealed in a row with no packet to play

	// The mixing loop's alone.
	remove func()
	dec    *opus.Decoder
	pkt    [opus.MaxPacket]byte
	// Packets are 2.5 to 120 ms long: they are decoded into fifo, from which
	// each frame takes its 20 ms (pcm).
	fifo  []int16
	have  int     // samples in fifo
	last  int     // the last packet's length in samples: what a loss conceals
	pcm   []int16 // this frame's samples
	quiet int     // frames since the last one above silenceLevel
}

func newInput(owner string, dec *opus.Decoder) *input {
	return &input{owner: owner, dec: dec, fifo: make([]int16, fifoSamples), last: opus.FrameSamples,
		pcm: make([]int16, opus.FrameSamples), quiet: hangover}
}

// frame puts the input's next 20 ms in pcm, decoding (or concealing) as many
// packets as that takes. false: nothing to play (waiting, or idle).
func (in *input) frame() bool {
	for tries := 0; in.have < opus.FrameSamples && tries < maxTakes; tries++ {
		n, play := in.take(in.last)
		if !play {
			break
		}
		room := in.fifo[in.have:]
		got, err := 0, error(nil)
		if n > 0 {
			if got, err = in.dec.Decode(in.pkt[:n], room); err == nil {
				in.last = got
			}
		}
		if n == 0 || err != nil {
			got, err = in.dec.Conceal(room[:in.last]) // lost, or corrupt
		}
		if err != nil {
			break
		}
		in.have += got
	}
	if in.have == 0 {
		return false
	}
	// Short of a frame only when the input stops: the rest is silence.
	n := copy(in.pcm, in.fifo[:min(in.have, opus.FrameSamples)])
	clear(in.pcm[n:])
	in.have = copy(in.fifo, in.fifo[n:in.have])
	return true
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

// take returns the next packet: n > 0 a packet (in in.pkt), n == 0 with
// play true a lost one to conceal (of dur samples, the last packet's
// length), play false nothing to play.
func (in *input) take(dur int) (n int, play bool) {
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
	// Missing: concealed if later packets wait (a loss), or for up to
	// idleSamples of underrun, then the input falls idle.
	in.next++
	for i := range in.slots {
		if in.slots[i].ok {
			return 0, true
		}
	}
	in.idle += dur
	if in.idle >= idleSamples {
		in.started = false
		return 0, false
	}
	return 0, true
}
