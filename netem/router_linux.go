package netem

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// batch is how many packets one loop iteration reads before it delivers
// what is due: it bounds the extra delay a burst can add to due packets.
const batch = 32

// maxTick bounds coalesce: the longest the forwarding thread lets packets
// wait in the TUN's queue under load.
const maxTick = 100 * time.Microsecond

// coalesce is how often the forwarding thread wakes under load: an eighth
// of the link's delay, at most maxTick, so its timing error stays within a
// sixteenth of the delay each way. Woken once per packet's arrival and once
// per packet's due time, it took more CPU than the endpoints it carries
// (60% of one here for 150 Mbit/s of paced 1.4 KB datagrams, 21% for 280
// Mbit/s of TCP, whose segments come in bursts), preempting them as a
// real-time thread; a NIC's interrupt coalescing (ethtool's rx-usecs) is of
// the same order. A link with no delay (rate or loss only) keeps exact
// per-packet timing.
func coalesce(p *Params) int64 { return int64(min(p.Delay/8, maxTick)) }

// direction forwards packets from one TUN to the other through a link model.
// One goroutine, locked to its thread, owns the link: it reads with ppoll
// (nanosecond timeouts, unlike the Go netpoller's milliseconds). Idle, it
// wakes when a packet arrives or is due; under load, once per coalesce
// tick, reading what arrived meanwhile (stamped at the middle of the tick)
// and delivering what is due within half a tick either side.
type direction struct {
	name     string
	in, out  int
	wake     int // eventfd: set() and close() interrupt the poll
	params   atomic.Pointer[Params]
	link     *link
	base     time.Time
	closed   atomic.Bool
	done     chan struct{}
	realtime bool
	statsMu  sync.Mutex
	stats    Stats
}

func newDirection(name string, in, out int, p Params, seed uint64, maxPackets int, base time.Time) (*direction, error) {
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	d := &direction{name: name, in: in, out: out, wake: wake, link: newLink(seed, maxPackets), base: base, done: make(chan struct{})}
	d.params.Store(&p)
	return d, nil
}

func (d *direction) now() int64 { return int64(time.Since(d.base)) }

func (d *direction) set(p Params) {
	d.params.Store(&p)
	d.kick()
}

func (d *direction) kick() {
	one := [8]byte{1}
	unix.Write(d.wake, one[:])
}

func (d *direction) close() {
	if d.closed.Swap(true) {
		return
	}
	d.kick()
	<-d.done
	unix.Close(d.wake)
}

func (d *direction) snapshot() Stats {
	d.statsMu.Lock()
	defer d.statsMu.Unlock()
	return d.stats
}

func (d *direction) run() {
	defer close(d.done)
	// The thread stays locked to the end: a thread made real-time (or with
	// a changed timer slack) must die with this goroutine, not go back to
	// the runtime's pool, where it ran other goroutines, os/exec forked the
	// lab's processes from it, and the runtime cloned new threads from it,
	// all SCHED_FIFO: the browsers and servers of every later lab run were
	// real-time (ahead of everyone else on the machine), and a CPU-limited
	// cgroup refused them (EINVAL, no RT runtime in the group).
	runtime.LockOSThread()
	// The default 50 µs timer slack would blur sub-millisecond delays.
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	if d.realtime {
		// Kernel netem runs in softirq context, ahead of every process;
		// a real-time thread is the userspace equivalent, so endpoints
		// that saturate the CPUs do not add their scheduling delay to
		// the emulated link. The loop always blocks in ppoll, and the
		// kernel's RT throttling keeps a share for everyone else. Threads
		// the runtime clones from this one start as normal threads.
		unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 10, Flags: unix.SCHED_FLAG_RESET_ON_FORK}, 0)
	}

	l := d.link
	var scratch [bufSize]byte
	var drain [8]byte
	fds := []unix.PollFd{{Fd: int32(d.in), Events: unix.POLLIN}, {Fd: int32(d.wake), Events: unix.POLLIN}}
	var ts unix.Timespec
	var woke, slept int64 // the last wake, and when a coalescing sleep began (0: none)
	for !d.closed.Load() {
		p := d.params.Load()
		tick := coalesce(p)
		l.stats.Wakes++
		at := d.now()
		if slept != 0 {
			// It came during the sleep: its middle, but never more than half
			// a tick before the wake, or a sleep the host stretched would
			// deliver the packet early.
			at = max((slept+at)/2, at-tick/2)
		}
		busy, more := false, false
		for i := 0; i < batch; i++ {
			pkt := l.get()
			buf := scratch[:]
			if pkt != nil {
				buf = pkt.buf[:]
			}
			n, err := unix.Read(d.in, buf)
			if err != nil || n <= 0 {
				if pkt != nil {
					l.put(pkt)
				}
				break
			}
			busy = true
			if pkt == nil {
				l.stats.In++
				l.stats.PoolDrop++
				continue
			}
			pkt.n = n
			l.enqueue(pkt, at, p)
			more = i == batch-1
		}
		now := d.now()
		for pkt := l.popDue(now + tick/2); pkt != nil; pkt = l.popDue(now + tick/2) {
			busy = true
			if _, err := unix.Write(d.out, pkt.buf[:pkt.n]); err != nil {
				l.stats.WriteErr++
			} else {
				if late := now - pkt.due; late > 0 {
					l.stats.LateNs += uint64(late)
					l.stats.LateMaxNs = max(l.stats.LateMaxNs, uint64(late))
				}
				l.stats.Out++
				l.stats.Bytes += uint64(pkt.n)
			}
			l.put(pkt)
		}
		d.statsMu.Lock()
		d.stats = l.stats
		d.statsMu.Unlock()
		if more {
			continue
		}
		slept = 0
		poll := fds
		tsp := (*unix.Timespec)(nil)
		if due, ok := l.nextDue(); ok {
			wait := due - tick/2 - d.now()
			if wait <= 0 {
				continue
			}
			ts = unix.NsecToTimespec(wait)
			tsp = &ts
		}
		if tick > 0 && busy {
			// Under load: the next pass is a tick after this one, and
			// what arrives meanwhile waits in the TUN's queue.
			now = d.now()
			if woke+tick <= now {
				woke = now
				continue
			}
			ts = unix.NsecToTimespec(woke + tick - now)
			tsp, poll, slept = &ts, fds[1:], now
		}
		for i := range poll {
			poll[i].Revents = 0
		}
		_, err := unix.Ppoll(poll, tsp, nil)
		woke = d.now()
		if err != nil && !errors.Is(err, unix.EINTR) {
			// A broken TUN (the lab is being torn down) ends the direction.
			return
		}
		if fds[1].Revents&unix.POLLIN != 0 {
			unix.Read(d.wake, drain[:])
		}
	}
}
