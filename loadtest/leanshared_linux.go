package loadtest

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// leanShared is one UDP socket for every lean peer of a run, read by one
// goroutine with recvmmsg(2).
//
// A socket per peer costs, per datagram, a wake-up of the peer's goroutine
// (epoll, futex, scheduler) and one recvfrom(2): the packets of one viewer
// come tens of milliseconds apart, so nothing can be batched per socket, and
// an earlier poller over many sockets still paid a system call per datagram.
// Servers tell peers apart by remote address, so peers need distinct
// addresses, not distinct sockets: each peer gets its own loopback address
// (127.X.Y.Z, all of 127/8 is local) on one shared port. The socket is bound
// to the wildcard address on the loopback device only (SO_BINDTODEVICE, so
// nothing outside the machine reaches it), asks for each datagram's
// destination address (IP_PKTINFO), and sends with the peer's address as
// source. Every interval the reader drains the socket in batches of up to 64
// datagrams per system call and hands each to the peer its destination
// address names; the interval is the delay this adds.
type leanShared struct {
	fd    int
	port  uint16
	net   [2]byte // the first two octets of the peers' addresses
	every time.Duration
	next  atomic.Uint32

	mu sync.Mutex // held while a batch is handled; remove takes it
	// peers is indexed by the last two octets of a peer's address (the
	// first two are net): an index, not a map lookup, per datagram.
	// leanReserved marks an address taken by a peer not yet activated.
	peers []*leanPeer
	stop  chan struct{}
	done  chan struct{}

	// the reader's batch, allocated once
	hdrs  [leanBatch]mmsghdr
	iovs  [leanBatch]syscall.Iovec
	names [leanBatch]syscall.RawSockaddrInet4
	oobs  [leanBatch][64]byte
	bufs  [leanBatch][1500]byte
}

const leanBatch = 64

// mmsghdr is struct mmsghdr of recvmmsg(2).
type mmsghdr struct {
	hdr syscall.Msghdr
	n   uint32
	_   [4]byte
}

var leanNets atomic.Uint32

// leanReserved stands in the address table for a peer that is set up but
// not yet receiving.
var leanReserved = &leanPeer{}

func leanIndex(a [4]byte) int { return int(a[2])<<8 | int(a[3]) }

// newLeanShared opens the shared socket. bind must be a loopback address:
// the peers' addresses are taken from 127/8.
func newLeanShared(bind string, every time.Duration) (*leanShared, error) {
	ip, err := netip.ParseAddr(bind)
	if err != nil || !ip.Is4() || !ip.IsLoopback() {
		return nil, fmt.Errorf("lean peers on one shared socket need a loopback bind address (127.0.0.0/8), not %q; use a reader per peer (-lean-poll 0) elsewhere", bind)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fail := func(what string, err error) (*leanShared, error) {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("lean shared socket: %s: %w", what, err)
	}
	if err := syscall.SetsockoptString(fd, syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, "lo"); err != nil {
		return fail("bind to the loopback device (needs CAP_NET_RAW)", err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IP, syscall.IP_PKTINFO, 1); err != nil {
		return fail("IP_PKTINFO", err)
	}
	// Every viewer's keyframe bursts land in this one buffer.
	if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 32<<20) != nil {
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<20)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{}); err != nil {
		return fail("bind", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	// A second octet per run of this process, so that two runs' peers never
	// share an address (the ports differ anyway).
	n := 64 + byte(leanNets.Add(1)%128)
	s := &leanShared{fd: fd, port: uint16(sa.(*syscall.SockaddrInet4).Port), net: [2]byte{127, n}, every: every,
		peers: make([]*leanPeer, 1<<16), stop: make(chan struct{}), done: make(chan struct{})}
	for i := range s.hdrs {
		s.iovs[i] = syscall.Iovec{Base: &s.bufs[i][0]}
		s.iovs[i].SetLen(len(s.bufs[i]))
		s.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&s.names[i]))
		s.hdrs[i].hdr.Iov = &s.iovs[i]
		s.hdrs[i].hdr.Iovlen = 1
		s.hdrs[i].hdr.Control = &s.oobs[i][0]
	}
	if every > 0 {
		go s.run()
	} else {
		close(s.done) // the caller drains with recv and deliver (benchmarks)
	}
	return s, nil
}

// reserve gives l the next free address; nothing is delivered to l before
// activate (Connect sets up what handle needs first).
func (s *leanShared) reserve(l *leanPeer) error {
	for range 1 << 16 {
		k := s.next.Add(1)
		a := [4]byte{s.net[0], s.net[1], byte(k >> 8), byte(k)}
		if a[3] == 0 || a[3] == 255 {
			continue
		}
		s.mu.Lock()
		if s.peers[leanIndex(a)] == nil {
			s.peers[leanIndex(a)] = leanReserved
			s.mu.Unlock()
			l.sh, l.laddr = s, netip.AddrPortFrom(netip.AddrFrom4(a), s.port)
			return nil
		}
		s.mu.Unlock()
	}
	return errors.New("lean shared socket: no free address")
}

// activate starts delivering l's datagrams to l.handle.
func (s *leanShared) activate(l *leanPeer) {
	s.mu.Lock()
	s.peers[leanIndex(l.laddr.Addr().As4())] = l
	s.mu.Unlock()
}

// remove stops delivering to l; after it returns the reader never touches l.
func (s *leanShared) remove(l *leanPeer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := leanIndex(l.laddr.Addr().As4())
	if p := s.peers[i]; p == l || p == leanReserved {
		s.peers[i] = nil
	}
}

// send writes b to `to` from the peer address `from` (sendmsg(2) with an
// IP_PKTINFO source). Sends are rare next to receives (checks, handshake,
// RTCP about once a second), so this may allocate.
func (s *leanShared) send(b []byte, from, to netip.AddrPort) error {
	var oob [syscall.SizeofCmsghdr + syscall.SizeofInet4Pktinfo + 4]byte
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = syscall.IPPROTO_IP, syscall.IP_PKTINFO
	h.SetLen(syscall.CmsgLen(syscall.SizeofInet4Pktinfo))
	pi := (*syscall.Inet4Pktinfo)(unsafe.Pointer(&oob[syscall.CmsgLen(0)]))
	pi.Spec_dst = from.Addr().As4()
	dst := &syscall.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().As4()}
	return syscall.Sendmsg(s.fd, b, oob[:syscall.CmsgSpace(syscall.SizeofInet4Pktinfo)], dst, 0)
}

// Close stops the reader and closes the socket (after the peers are closed).
func (s *leanShared) Close() {
	close(s.stop)
	<-s.done
	_ = syscall.Close(s.fd)
}

func (s *leanShared) run() {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		for {
			n := s.recv()
			if n > 0 {
				s.deliver(n)
			}
			if n < leanBatch {
				break
			}
		}
	}
}

// recv reads up to leanBatch datagrams without waiting; 0 when none.
func (s *leanShared) recv() int {
	for i := range s.hdrs {
		s.hdrs[i].hdr.Namelen = syscall.SizeofSockaddrInet4
		s.hdrs[i].hdr.SetControllen(len(s.oobs[i]))
		s.hdrs[i].hdr.Flags = 0
	}
	for {
		n, _, e := syscall.Syscall6(syscall.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.hdrs[0])), leanBatch,
			syscall.MSG_DONTWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0
		}
		return int(n)
	}
}

// deliver hands datagrams 0..n-1 of the batch to their peers.
func (s *leanShared) deliver(n int) {
	now := time.Now() // one arrival time for the batch: they waited at most the interval
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		h := &s.hdrs[i]
		dst, ok := pktinfoDst(s.oobs[i][:h.hdr.Controllen])
		if !ok || s.names[i].Family != syscall.AF_INET || dst[0] != s.net[0] || dst[1] != s.net[1] {
			continue
		}
		l := s.peers[leanIndex(dst)]
		if l == nil || l == leanReserved {
			continue // a peer already gone: late packets
		}
		sa := &s.names[i]
		from := netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port>>8|sa.Port<<8))
		l.handle(s.bufs[i][:h.n], from, now)
	}
}

// pktinfoDst finds the IP_PKTINFO control message and returns the
// datagram's destination address (ipi_addr).
func pktinfoDst(oob []byte) ([4]byte, bool) {
	for len(oob) >= syscall.SizeofCmsghdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		if h.Len < syscall.SizeofCmsghdr || int(h.Len) > len(oob) {
			return [4]byte{}, false
		}
		if h.Level == syscall.IPPROTO_IP && h.Type == syscall.IP_PKTINFO && int(h.Len) >= syscall.CmsgLen(syscall.SizeofInet4Pktinfo) {
			pi := (*syscall.Inet4Pktinfo)(unsafe.Pointer(&oob[syscall.CmsgLen(0)]))
			return pi.Addr, true
		}
		oob = oob[min(cmsgAlign(int(h.Len)), len(oob)):]
	}
	return [4]byte{}, false
}

func cmsgAlign(n int) int {
	return (n + int(unsafe.Sizeof(uintptr(0))) - 1) &^ (int(unsafe.Sizeof(uintptr(0))) - 1)
}
