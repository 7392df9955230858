//go:build !linux

package session

import (
	"net/netip"
	"syscall"
)

// batchSys without sendmmsg(2): Flush writes the datagrams one by one.
type batchSys struct {
	to [BatchSize]netip.AddrPort
	n  [BatchSize]int
}

func (s *batchSys) init(*Batch) {}

func (s *batchSys) put(i int, to netip.AddrPort, n int, _ bool) bool {
	s.to[i], s.n[i] = to, n
	return true
}

func (s *batchSys) send(b *Batch) {
	for i := 0; i < b.n; i++ {
		if _, err := b.s.conn.WriteToUDPAddrPort(b.bufs[i][:s.n[i]], s.to[i]); err != nil {
			b.errs++
		}
	}
}

func socketIs6(syscall.RawConn) bool { return false }
