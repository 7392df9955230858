// Package lograte lets one log line through per interval for events a client
// can repeat at will, and counts the lines it held back.
package lograte

import (
	"sync"
	"time"
)

// Limit is ready to use as its zero value.
type Limit struct {
	mu    sync.Mutex
	last  time.Time
	quiet int
}

// Allow reports whether to log now (the first call, then once every interval)
// and how many calls were held back since the last line logged.
func (l *Limit) Allow(every time.Duration) (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.last.IsZero() || now.Sub(l.last) >= every {
		held, l.last, l.quiet = l.quiet, now, 0
		return held, true
	}
	l.quiet++
	return 0, false
}
