package sfu

import (
	"sync"
	"time"
)

// PacketCache keeps the last packets of one published track so that every
// subscriber's NACK is answered from one copy. The lock is per track and held for
// one copy: subscribers' NACK readers and the track's reader never wait on a
// room-wide lock.
//
// It holds about cacheHorizon of packets: it starts small and doubles (up to
// the configured size) when a packet would overwrite one younger than that, so
// a 500 kbit/s camera keeps 64 slots (96 KB) where a 5 Mbit/s one grows to 512,
// instead of every video track holding 1.5 MB from the start. A NACK for a
// packet older than the horizon is too late to help anyway: the receiver has
// asked for a keyframe by then. A camera's layer also keeps its last GOP
// (Pin), which new subscribers start from.
type PacketCache struct {
	mu    sync.Mutex
	mask  uint16
	max   int
	slots [][]byte
	lens  []uint16
	seqs  []uint16
	valid []bool
	at    []int64 // arrival (sfu clock) of the packet in each slot
	// pin, when pinned, is the first packet of the GOP a camera's new
	// subscribers start from (gop.go): it and what follows stay, up to max.
	pin    uint16
	pinned bool
}

const maxPacket = 1500

// cacheHorizon is how long a packet should stay in the cache, and
// minCacheSlots where a cache starts.
const (
	cacheHorizon  = int64(time.Second)
	minCacheSlots = 64
)

// NewPacketCache returns a cache of at most size slots (a power of two ≤ 32768).
func NewPacketCache(size int) *PacketCache {
	c := &PacketCache{max: size}
	c.resize(min(size, minCacheSlots))
	return c
}

// resize makes the ring n slots long (a power of two, larger than before),
// keeping what it holds: each packet moves, with its buffer, to its slot in the
// new ring, and the new slots get buffers of one new block.
func (c *PacketCache) resize(n int) {
	slots, lens, seqs := make([][]byte, n), make([]uint16, n), make([]uint16, n)
	valid, at := make([]bool, n), make([]int64, n)
	mask := uint16(n - 1)
	var spare [][]byte
	for i := range c.slots {
		if c.valid[i] {
			j := c.seqs[i] & mask
			slots[j], lens[j], seqs[j], valid[j], at[j] = c.slots[i], c.lens[i], c.seqs[i], true, c.at[i]
		} else {
			spare = append(spare, c.slots[i])
		}
	}
	block := make([]byte, (n-len(c.slots))*maxPacket)
	for j := range slots {
		if slots[j] != nil {
			continue
		}
		if k := len(spare); k > 0 {
			slots[j], spare = spare[k-1], spare[:k-1]
			continue
		}
		slots[j], block = block[:maxPacket:maxPacket], block[maxPacket:]
	}
	c.slots, c.lens, c.seqs, c.valid, c.at, c.mask = slots, lens, seqs, valid, at, mask
}

// Pin keeps the packets from seq on (the start of the GOP new subscribers
// replay), however old, as far as the cache's size allows. Only the reader
// goroutine calls it, as it calls Put.
func (c *PacketCache) Pin(seq uint16) {
	c.mu.Lock()
	c.pin, c.pinned = seq, true
	c.mu.Unlock()
}

// Size is how many slots the cache has now.
func (c *PacketCache) Size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.slots)
}

// Put stores pkt, which arrived at t (sfu clock), under seq and returns the
// stored copy. The copy stays valid until the next Put: the reader goroutine
// that calls Put is the only one that overwrites (or moves) slots, so it may
// use the copy for the whole fan-out of this packet.
func (c *PacketCache) Put(seq uint16, pkt []byte, t int64) []byte {
	if len(pkt) > maxPacket {
		return nil
	}
	c.mu.Lock()
	i := seq & c.mask
	for c.valid[i] && c.seqs[i] != seq && len(c.slots) < c.max &&
		(t-c.at[i] < cacheHorizon || (c.pinned && int16(c.seqs[i]-c.pin) >= 0)) {
		c.resize(2 * len(c.slots))
		i = seq & c.mask
	}
	n := copy(c.slots[i], pkt)
	c.lens[i] = uint16(n)
	c.seqs[i] = seq
	c.valid[i] = true
	c.at[i] = t
	out := c.slots[i][:n]
	c.mu.Unlock()
	return out
}

// Get copies the packet with seq into dst and returns its length, or 0 if it is no
// longer (or never was) cached.
func (c *PacketCache) Get(seq uint16, dst []byte) int {
	i := seq & c.mask
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid[i] || c.seqs[i] != seq {
		return 0
	}
	return copy(dst, c.slots[i][:c.lens[i]])
}

// GetAt is Get that also returns when the packet arrived (sfu clock).
func (c *PacketCache) GetAt(seq uint16, dst []byte) (int, int64) {
	i := seq & c.mask
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid[i] || c.seqs[i] != seq {
		return 0, 0
	}
	return copy(dst, c.slots[i][:c.lens[i]]), c.at[i]
}

// Arrival is when the packet with seq arrived (sfu clock), 0 if not cached.
func (c *PacketCache) Arrival(seq uint16) int64 {
	i := seq & c.mask
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid[i] || c.seqs[i] != seq {
		return 0
	}
	return c.at[i]
}
