package rtc

import (
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// recvBatch is how many datagrams one recvmmsg(2) may take off the shared
// socket: a video frame's packets from one publisher, or packets of several,
// arrive together; each read that finds the socket empty parks the reader.
const recvBatch = 16

// recvMTU is the largest datagram read whole (Pion's mux reads 8192 too).
const recvMTU = 8192

// reader reads the shared UDP socket in batches with recvmmsg(2), made
// as a raw system call: the call never blocks (the socket is non-blocking;
// an empty socket parks the goroutine in Go's poller), so the runtime's
// syscall bookkeeping, and the wake of its monitor thread that the first
// system call after an idle spell makes, buy nothing. It belongs to the
// mux's one reader goroutine.
type reader struct {
	raw   syscall.RawConn
	bufs  [recvBatch][recvMTU]byte
	hdrs  [recvBatch]mmsghdr
	iovs  [recvBatch]syscall.Iovec
	names [recvBatch]syscall.RawSockaddrInet6
	n     int // datagrams read by the last call
	next  int // the next one to hand out
	errno syscall.Errno
	read  func(fd uintptr) bool // allocated once: RawConn.Read's callback
}

// mmsghdr is struct mmsghdr of recvmmsg(2).
type mmsghdr struct {
	hdr syscall.Msghdr
	n   uint32
	_   [4]byte
}

func newReader(c *net.UDPConn) *reader {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	r := &reader{raw: raw}
	for i := range r.hdrs {
		r.iovs[i] = syscall.Iovec{Base: &r.bufs[i][0]}
		r.iovs[i].SetLen(recvMTU)
		r.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		r.hdrs[i].hdr.Iov = &r.iovs[i]
		r.hdrs[i].hdr.Iovlen = 1
	}
	r.read = r.recvmmsg
	return r
}

func (r *reader) recvmmsg(fd uintptr) bool {
	for i := range r.hdrs {
		r.hdrs[i].hdr.Namelen = syscall.SizeofSockaddrInet6
		r.hdrs[i].hdr.Flags = 0
	}
	for {
		n, _, e := syscall.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), recvBatch, 0, 0, 0)
		switch e {
		case 0:
			r.n, r.next, r.errno = int(n), 0, 0
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // empty: wait in Go's poller
		default:
			r.n, r.next, r.errno = 0, 0, e
			return true
		}
	}
}

// nextDatagram returns the next datagram and its sender, reading a new batch when
// the last one is used up. The datagram is valid until the next call.
func (r *reader) nextDatagram() ([]byte, netip.AddrPort, error) {
	for {
		for r.next < r.n {
			i := r.next
			r.next++
			h := &r.hdrs[i]
			if h.hdr.Flags&syscall.MSG_TRUNC != 0 {
				continue // larger than any media or ICE datagram: dropped
			}
			from, ok := sockaddr(&r.names[i])
			if !ok {
				continue
			}
			return r.bufs[i][:h.n], from, nil
		}
		if err := r.raw.Read(r.read); err != nil {
			return nil, netip.AddrPort{}, err
		}
		if r.errno != 0 {
			return nil, netip.AddrPort{}, &net.OpError{Op: "read", Net: "udp", Err: r.errno}
		}
	}
}

// sockaddr decodes a sender's address as the kernel wrote it, in the form
// ReadFromUDPAddrPort gives (an IPv6 socket's IPv4 senders stay mapped).
func sockaddr(sa *syscall.RawSockaddrInet6) (netip.AddrPort, bool) {
	switch sa.Family {
	case syscall.AF_INET:
		sa4 := (*syscall.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), uint16(p[0])<<8|uint16(p[1])), true
	case syscall.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		a := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 {
			a = a.WithZone(strconv.FormatUint(uint64(sa.Scope_id), 10)) // link-local: replies need the interface
		}
		return netip.AddrPortFrom(a, uint16(p[0])<<8|uint16(p[1])), true
	}
	return netip.AddrPort{}, false
}
