package gate

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/petrel-sfu/petrel/protocol"
)

const (
	// maxTracked bounds the addresses whose join allowance is remembered
	// (two maps of this size at most, a few MB).
	maxTracked = 1 << 14
	// forgetAfter is how long an address's allowance is kept unused; it has
	// refilled long before (the burst is two seconds' worth).
	forgetAfter = time.Minute
)

// Joins admits the joins of clients whose token has been verified: first
// against the client address's own allowance, then against the server-wide
// budget, so that one address spends its allowance and not everyone's.
type Joins struct {
	global *rate.Limiter
	perIP  rate.Limit
	burst  int

	mu        sync.Mutex
	cur, prev map[netip.Addr]*rate.Limiter
	rotated   time.Time
}

// NewJoins admits global joins a second for the server and perIP for each
// address (0: no per-address limit), each with a burst of two seconds' worth.
func NewJoins(global, perIP int) *Joins {
	return &Joins{
		global: rate.NewLimiter(rate.Limit(global), 2*global),
		perIP:  rate.Limit(perIP), burst: 2 * perIP,
		cur: map[netip.Addr]*rate.Limiter{}, rotated: time.Now(),
	}
}

// Admit spends one join of a's allowance and of the server's budget.
func (j *Joins) Admit(a netip.Addr) error {
	if j.perIP > 0 && !j.allow(key(a)) {
		return protocol.Errorf(protocol.CodeRateLimited, "too many joins from your address, try again shortly")
	}
	if !j.global.Allow() {
		return protocol.Errorf(protocol.CodeServerBusy, "too many joins, try again shortly")
	}
	return nil
}

func (j *Joins) allow(a netip.Addr) bool {
	now := time.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	// Two generations: an address used in the last one moves to the current
	// one, and the previous one is dropped whole, so the maps stay bounded
	// without a scan.
	if len(j.cur) >= maxTracked || now.Sub(j.rotated) >= forgetAfter {
		j.prev, j.cur, j.rotated = j.cur, make(map[netip.Addr]*rate.Limiter, len(j.cur)/2), now
	}
	l := j.cur[a]
	if l == nil {
		if l = j.prev[a]; l == nil {
			l = rate.NewLimiter(j.perIP, j.burst)
		}
		j.cur[a] = l
	}
	return l.AllowN(now, 1)
}

// key is the unit an address is limited as: an IPv4 address, or an IPv6 /64
// (one subscriber's network: an attacker holds all of it).
func key(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}
