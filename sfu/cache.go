package sfu

import "sync"

// PacketCache keeps the last packets of one published track so that every
// subscriber's NACK is answered from one copy. Slots are allocated once; Put copies
// into them. The lock is per track and held for one copy: subscribers' NACK readers
// and the track's reader never wait on a room-wide lock.
type PacketCache struct {
	mu    sync.Mutex
	mask  uint16
	slots [][]byte
	lens  []uint16
	seqs  []uint16
	valid []bool
}

const maxPacket = 1500

// NewPacketCache returns a cache of size slots (a power of two ≤ 32768).
func NewPacketCache(size int) *PacketCache {
	buf := make([]byte, size*maxPacket)
	c := &PacketCache{
		mask:  uint16(size - 1),
		slots: make([][]byte, size),
		lens:  make([]uint16, size),
		seqs:  make([]uint16, size),
		valid: make([]bool, size),
	}
	for i := range c.slots {
		c.slots[i] = buf[i*maxPacket : (i+1)*maxPacket : (i+1)*maxPacket]
	}
	return c
}

// Put stores pkt under seq and returns the stored copy. The copy stays valid until
// the slot is reused len(slots) sequence numbers later; the reader goroutine that
// calls Put is the only one that overwrites slots, so it may use the copy for the
// whole fan-out of this packet.
func (c *PacketCache) Put(seq uint16, pkt []byte) []byte {
	if len(pkt) > maxPacket {
		return nil
	}
	i := seq & c.mask
	c.mu.Lock()
	n := copy(c.slots[i], pkt)
	c.lens[i] = uint16(n)
	c.seqs[i] = seq
	c.valid[i] = true
	c.mu.Unlock()
	return c.slots[i][:n]
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
