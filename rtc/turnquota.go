package rtc

import (
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// turnQuota bounds live allocations per identity (the username is
// "<expiry>:<identity>", and each join mints a new expiry) and per client IP.
// A slot is taken when Pion asks (admit) and given back when the allocation
// goes; one Pion did not create after admitting is given back after a while.
type turnQuota struct {
	perUser, perIP int
	log            *slog.Logger
	refused        *logLimit

	mu      sync.Mutex
	users   map[string]int
	ips     map[netip.Addr]int
	pending map[string]quotaEntry // admitted, by client transport address
	live    map[string]quotaEntry
}

type quotaEntry struct {
	user string
	ip   netip.Addr
	at   time.Time
}

// pendingTimeout: Pion creates the allocation right after admitting it, so an
// entry still pending after this failed to allocate.
const pendingTimeout = 10 * time.Second

func (q *turnQuota) admit(user, _ string, src net.Addr) bool {
	_, id, _ := strings.Cut(user, ":")
	ip := addrIP(src)
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, e := range q.pending {
		if now.Sub(e.at) > pendingTimeout {
			q.release(e)
			delete(q.pending, k)
		}
	}
	if (q.perUser > 0 && q.users[id] >= q.perUser) || (q.perIP > 0 && q.ips[ip] >= q.perIP) {
		if n, ok := q.refused.allow(); ok {
			q.log.Warn("turn allocation quota reached", "src", src.String(), "identity", id, "since_last", n)
		}
		return false
	}
	q.users[id]++
	q.ips[ip]++
	q.pending[src.String()] = quotaEntry{user: id, ip: ip, at: now}
	return true
}

func (q *turnQuota) created(src net.Addr) {
	k := src.String()
	q.mu.Lock()
	if e, ok := q.pending[k]; ok {
		delete(q.pending, k)
		q.live[k] = e
	}
	q.mu.Unlock()
}

func (q *turnQuota) deleted(src net.Addr) {
	k := src.String()
	q.mu.Lock()
	if e, ok := q.live[k]; ok {
		delete(q.live, k)
		q.release(e)
	}
	q.mu.Unlock()
}

func (q *turnQuota) release(e quotaEntry) {
	if q.users[e.user]--; q.users[e.user] <= 0 {
		delete(q.users, e.user)
	}
	if q.ips[e.ip]--; q.ips[e.ip] <= 0 {
		delete(q.ips, e.ip)
	}
}

func addrIP(a net.Addr) netip.Addr {
	var ip net.IP
	switch a := a.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	}
	addr, _ := netip.AddrFromSlice(ip)
	return addr.Unmap()
}

// logLimit lets one log line through per period and counts the rest, for
// events an attacker can repeat at will.
type logLimit struct {
	every time.Duration
	mu    sync.Mutex
	last  time.Time
	quiet int
}

func newLogLimit(every time.Duration) *logLimit { return &logLimit{every: every} }

// allow reports whether to log now, and how many were suppressed since the last line.
func (l *logLimit) allow() (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.last) >= l.every {
		n := l.quiet
		l.last, l.quiet = now, 0
		return n, true
	}
	l.quiet++
	return 0, false
}
