package gate

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/petrel-sfu/petrel/protocol"
)

// Refusals logs refused requests without letting whoever repeats them flood
// the log: the first refusal after a quiet interval is logged in full, those
// that follow within the interval are counted and summarized in one line when
// it ends.
type Refusals struct {
	log   *slog.Logger
	msg   string
	every time.Duration

	mu         sync.Mutex
	quietUntil time.Time
	counts     map[string]int
	first      string // remote of the first refusal counted
	pending    bool   // a summary is scheduled
}

// NewRefusals logs under msg at most one detailed line and one summary per
// interval every.
func NewRefusals(log *slog.Logger, msg string, every time.Duration) *Refusals {
	return &Refusals{log: log, msg: msg, every: every, counts: map[string]int{}}
}

// Note records that door refused r with err.
func (l *Refusals) Note(door string, r *http.Request, err error) {
	l.NoteRemote(door, r.RemoteAddr, err)
}

// NoteRemote records that door refused a client at remote with err.
func (l *Refusals) NoteRemote(door, remote string, err error) {
	code := "refused" // a plain error: its text says why
	var pe *protocol.Error
	if errors.As(err, &pe) {
		code = pe.Code
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.pending && now.After(l.quietUntil) {
		l.quietUntil = now.Add(l.every)
		l.log.Info(l.msg, "door", door, "code", code, "err", err, "remote", remote)
		return
	}
	if len(l.counts) == 0 {
		l.first = remote
	}
	l.counts[door+" "+code]++
	if !l.pending {
		l.pending = true
		time.AfterFunc(l.quietUntil.Sub(now), l.flush)
	}
}

func (l *Refusals) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = false
	if len(l.counts) == 0 {
		return
	}
	total := 0
	for _, n := range l.counts {
		total += n
	}
	l.log.Warn(l.msg+" (summary)", "count", total, "by", l.counts, "first_remote", l.first, "interval", l.every)
	l.counts = map[string]int{}
	l.quietUntil = time.Now().Add(l.every)
}
