package session

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batchSys is a Batch's sendmmsg(2) state, set up once: a message header,
// an iovec and a destination address per buffer.
type batchSys struct {
	hdrs   [BatchSize]mmsghdr
	iovs   [BatchSize]syscall.Iovec
	names  [BatchSize]syscall.RawSockaddrInet6 // or a RawSockaddrInet4 in its first bytes
	off    int                                 // the next message to send, in send
	n      int
	failed int                   // messages the kernel refused, in send
	write  func(fd uintptr) bool // allocated once: RawConn.Write's callback
}

// mmsghdr is struct mmsghdr of sendmmsg(2).
type mmsghdr struct {
	hdr syscall.Msghdr
	n   uint32
	_   [4]byte
}

func (s *batchSys) init(b *Batch) {
	for i := range s.hdrs {
		s.iovs[i] = syscall.Iovec{Base: &b.bufs[i][0]}
		s.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&s.names[i]))
		s.hdrs[i].hdr.Iov = &s.iovs[i]
		s.hdrs[i].hdr.Iovlen = 1
	}
	s.write = s.sendmmsg
}

// put addresses message i, n bytes long, to `to` on an IPv6 socket or an
// IPv4 one; false if `to` cannot be reached from that socket.
func (s *batchSys) put(i int, to netip.AddrPort, n int, v6 bool) bool {
	s.iovs[i].SetLen(n)
	port := [2]byte{byte(to.Port() >> 8), byte(to.Port())} // network order
	if v6 {
		sa := &s.names[i]
		*sa = syscall.RawSockaddrInet6{Family: syscall.AF_INET6, Addr: to.Addr().As16()}
		*(*[2]byte)(unsafe.Pointer(&sa.Port)) = port
		s.hdrs[i].hdr.Namelen = syscall.SizeofSockaddrInet6
		return true
	}
	a := to.Addr().Unmap()
	if !a.Is4() {
		return false
	}
	sa := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&s.names[i]))
	*sa = syscall.RawSockaddrInet4{Family: syscall.AF_INET, Addr: a.As4()}
	*(*[2]byte)(unsafe.Pointer(&sa.Port)) = port
	s.hdrs[i].hdr.Namelen = syscall.SizeofSockaddrInet4
	return true
}

// send writes messages 0..b.n-1 with as few sendmmsg(2) calls as the
// kernel allows, waiting in Go's poller when the socket buffer is full.
func (s *batchSys) send(b *Batch) {
	s.off, s.n, s.failed = 0, b.n, 0
	if b.s.raw == nil {
		b.errs = b.n
		return
	}
	if err := b.s.raw.Write(s.write); err != nil {
		s.failed += s.n - s.off // the socket is closed
	}
	b.errs = s.failed
}

// sendmmsg is a raw system call: on the non-blocking socket it never blocks
// (a full buffer is EAGAIN, waited out in Go's poller), so the runtime's
// syscall bookkeeping and the wake of its monitor thread buy nothing.
func (s *batchSys) sendmmsg(fd uintptr) bool {
	for s.off < s.n {
		r, _, e := syscall.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&s.hdrs[s.off])), uintptr(s.n-s.off), 0, 0, 0)
		switch e {
		case 0:
			s.off += int(r)
		case syscall.EAGAIN:
			return false // wait until the socket is writable
		case syscall.EINTR:
		default:
			// The first message failed (an address the kernel will not
			// send to): skip it, send the rest.
			s.off++
			s.failed++
		}
	}
	return true
}

// socketIs6 reports whether the socket behind raw is an IPv6 one (which
// needs IPv4 destinations as IPv4-mapped addresses).
func socketIs6(raw syscall.RawConn) bool {
	v6 := false
	_ = raw.Control(func(fd uintptr) {
		sa, err := syscall.Getsockname(int(fd))
		_, v6 = sa.(*syscall.SockaddrInet6)
		_ = err
	})
	return v6
}
