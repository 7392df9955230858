package rtc

import (
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/petrel-sfu/petrel/lograte"
)

// turnQuota bounds live allocations per identity (the username is
// "<expiry>:<identity>", and each join mints a new expiry) and per client IP.
// A slot is taken when Pion asks (admit) and given back when the allocation
// goes; one Pion did not create after admitting is given back after a while.
type turnQuota struct {
	perUser, perIP int
	log            *slog.Logger
	refused        lograte.Limit

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
		if n, ok := q.refused.Allow(refusedLogEvery); ok {
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

// refusedLogEvery is how often a refused TURN request is logged: an attacker
// can repeat one at will.
const refusedLogEvery = 10 * time.Second
