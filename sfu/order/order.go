// Package order puts a sink's RTP packets back in sequence order. A packet
// lost between a publisher and the server comes again after the server's
// NACK: later, and after the packets that followed it. A sink that assembles
// frames (a recording, an HLS muxer) waits up to Wait for it before it goes
// on without it (and waits for a keyframe).
package order

import "time"

const (
	Slots = 512 // about 2 s of a 2.5 Mbit/s layer
	Wait  = 300 * time.Millisecond
)

// Buffer holds one sequence's out-of-order packets; one goroutine owns it.
// Packets it releases or drops pass to the caller's out and drop, which take
// ownership.
type Buffer[T any] struct {
	slots    [Slots]*T
	next     uint16 // the sequence number released next
	held     int
	started  bool
	gapSince time.Time // when the packet at next was first missed
}

// Push takes p (sequence number seq) and releases, in order, every packet it
// completes. A packet older than what was already released, or a duplicate,
// goes to drop.
func (o *Buffer[T]) Push(p *T, seq uint16, now time.Time, out, drop func(*T)) {
	if !o.started {
		o.started, o.next = true, seq
	}
	d := int16(seq - o.next)
	if d < 0 {
		drop(p)
		return
	}
	if int(d) >= Slots {
		// Too far ahead to hold: what is missing is not coming in time.
		o.Flush(out)
		o.started, o.next = true, seq
	}
	i := seq % Slots
	if o.slots[i] != nil {
		drop(p)
		return
	}
	o.slots[i] = p
	o.held++
	o.drain(out)
	o.Expire(now, out)
}

// Expire gives up on the missing packet once it was waited for Wait, and
// releases what follows it. A sink calls it from a ticker too, for a hole
// after which nothing more comes.
func (o *Buffer[T]) Expire(now time.Time, out func(*T)) {
	for o.held > 0 {
		if o.gapSince.IsZero() {
			o.gapSince = now
		}
		if now.Sub(o.gapSince) < Wait {
			return
		}
		o.skip(out)
	}
	o.gapSince = time.Time{}
}

// Flush releases every held packet in order, skipping the holes; the next
// packet starts a new sequence (another simulcast layer, a stop).
func (o *Buffer[T]) Flush(out func(*T)) {
	for o.held > 0 {
		o.skip(out)
	}
	o.started, o.gapSince = false, time.Time{}
}

// skip moves past the missing packets to the next held one and releases from
// there; the next hole gets a wait of its own.
func (o *Buffer[T]) skip(out func(*T)) {
	for o.slots[o.next%Slots] == nil {
		o.next++
	}
	o.gapSince = time.Time{}
	o.drain(out)
}

func (o *Buffer[T]) drain(out func(*T)) {
	for {
		i := o.next % Slots
		p := o.slots[i]
		if p == nil {
			return
		}
		o.slots[i] = nil
		o.held--
		o.next++
		out(p)
	}
}
