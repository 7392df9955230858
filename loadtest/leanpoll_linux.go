package loadtest

import (
	"errors"
	"net/netip"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// leanPoller reads the sockets of many connected lean peers from one
// goroutine. A goroutine per peer pays a netpoller wake-up (epoll_wait, a
// futex, the scheduler) for every datagram, because packets of one peer come
// tens of milliseconds apart: in a real run that costs as much as the receive
// and the decrypt together. The poller instead sleeps for an interval, asks
// its own epoll set which sockets have data and drains each of them with
// non-blocking recvfrom(2) calls, so one wake-up serves every packet that
// arrived meanwhile. The price is up to one interval of added delay, which the
// delay figures include.
type leanPoller struct {
	every time.Duration
	epfd  int

	mu    sync.Mutex // held while a batch is handled; remove takes it
	peers map[int32]*leanPeer
	stop  chan struct{}
	done  chan struct{}
}

func newLeanPoller(every time.Duration) (*leanPoller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	lp := &leanPoller{every: every, epfd: fd, peers: map[int32]*leanPeer{}, stop: make(chan struct{}), done: make(chan struct{})}
	go lp.run()
	return lp, nil
}

// Close stops the poller (after its peers are closed).
func (lp *leanPoller) Close() {
	close(lp.stop)
	<-lp.done
	_ = syscall.Close(lp.epfd)
}

// add takes over l's socket; l's own reader goroutine must have returned.
func (lp *leanPoller) add(l *leanPeer) error {
	rc, err := l.conn.SyscallConn()
	if err != nil {
		return err
	}
	var fd int
	if err := rc.Control(func(s uintptr) { fd = int(s) }); err != nil {
		return err
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
	if err := syscall.EpollCtl(lp.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return err
	}
	lp.peers[int32(fd)] = l
	l.pollFD = fd
	return nil
}

// remove stops reading l's socket; after it returns the poller never touches
// l again and the socket may be closed.
func (lp *leanPoller) remove(l *leanPeer) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.peers[int32(l.pollFD)] == l {
		_ = syscall.EpollCtl(lp.epfd, syscall.EPOLL_CTL_DEL, l.pollFD, nil)
		delete(lp.peers, int32(l.pollFD))
	}
}

func (lp *leanPoller) run() {
	defer close(lp.done)
	events := make([]syscall.EpollEvent, 256)
	buf := make([]byte, 1500)
	var sa syscall.RawSockaddrInet4
	t := time.NewTicker(lp.every)
	defer t.Stop()
	for {
		select {
		case <-lp.stop:
			return
		case <-t.C:
		}
		for {
			n, err := syscall.EpollWait(lp.epfd, events, 0)
			if err != nil && !errors.Is(err, syscall.EINTR) {
				return
			}
			if n <= 0 {
				break
			}
			lp.mu.Lock()
			for _, ev := range events[:n] {
				l := lp.peers[ev.Fd]
				if l == nil {
					continue
				}
				// Drain the socket: what arrived during the interval.
				for {
					k, from, ok := recvFrom4(int(ev.Fd), buf, &sa)
					if !ok {
						break
					}
					l.handle(buf[:k], from)
				}
			}
			lp.mu.Unlock()
			if n < len(events) {
				break
			}
		}
	}
}

// recvFrom4 is a non-blocking recvfrom(2) into buf without allocating (the
// syscall package's Recvfrom returns the address as an interface).
func recvFrom4(fd int, buf []byte, sa *syscall.RawSockaddrInet4) (int, netip.AddrPort, bool) {
	salen := uint32(syscall.SizeofSockaddrInet4)
	n, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)),
		syscall.MSG_DONTWAIT, uintptr(unsafe.Pointer(sa)), uintptr(unsafe.Pointer(&salen)))
	if e != 0 || sa.Family != syscall.AF_INET {
		return 0, netip.AddrPort{}, false
	}
	port := uint16(sa.Port>>8 | sa.Port<<8) // network order
	return int(n), netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), true
}
