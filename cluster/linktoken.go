package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A node-to-node request carries a token made with the cluster secret for
// that one request: it names the sending node, holds a hash of the method,
// path and body, a unique id and the time it was made, and the receiving node
// takes each id once. A captured request can neither be sent again nor have
// its body changed.

// linkTokenTTL is how long a token is good for after (and, for clock skew
// between nodes, before) the time it names: it is made for a request sent at once.
const linkTokenTTL = 30 * time.Second

// maxUsedTokens bounds the ids remembered: node requests are few (one per
// link), so a set full of live ids is an attack, refused rather than grown.
const maxUsedTokens = 4096

// requestHash covers what a token is for: method, path and body.
func requestHash(method, path string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(method + " " + path + "\x00"))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func linkMAC(secret []byte, signed string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("petrel link\x00" + signed))
	return hex.EncodeToString(m.Sum(nil))
}

// signLink makes the token of one request: "<from>.<unix seconds>.<id>.<request
// hash>.<hex hmac>" (a node id may hold dots; the other fields do not).
func signLink(secret []byte, from, method, path string, body []byte, now time.Time) string {
	var id [16]byte
	_, _ = rand.Read(id[:])
	signed := from + "." + strconv.FormatInt(now.Unix(), 10) + "." + hex.EncodeToString(id[:]) + "." + requestHash(method, path, body)
	return signed + "." + linkMAC(secret, signed)
}

// checkLink verifies a token against the request it came with and returns
// its sender, its id and until when the id must be remembered.
func checkLink(secret []byte, tok, method, path string, body []byte, now time.Time) (from, id string, until time.Time, err error) {
	parts := strings.Split(tok, ".")
	if len(parts) < 5 {
		return "", "", time.Time{}, errors.New("malformed link token")
	}
	k := len(parts) - 4
	from = strings.Join(parts[:k], ".")
	ts, err := strconv.ParseInt(parts[k], 10, 64)
	if err != nil {
		return "", "", time.Time{}, errors.New("malformed link token time")
	}
	signed := tok[:len(tok)-len(parts[k+3])-1]
	if !hmac.Equal([]byte(linkMAC(secret, signed)), []byte(parts[k+3])) {
		return "", "", time.Time{}, errors.New("bad link token")
	}
	at := time.Unix(ts, 0)
	if d := now.Sub(at); d > linkTokenTTL || d < -linkTokenTTL {
		return "", "", time.Time{}, errors.New("link token expired")
	}
	if !hmac.Equal([]byte(parts[k+2]), []byte(requestHash(method, path, body))) {
		return "", "", time.Time{}, errors.New("the link token was made for another request")
	}
	return from, parts[k+1], at.Add(linkTokenTTL), nil
}

// usedTokens remembers the ids of tokens taken, each until its token
// expires (after that the token is refused as expired anyway).
type usedTokens struct {
	mu  sync.Mutex
	m   map[string]time.Time
	max int
}

func newUsedTokens(max int) *usedTokens { return &usedTokens{m: map[string]time.Time{}, max: max} }

var errReplayed = errors.New("link token already used")

// use takes id once.
func (u *usedTokens) use(id string, until, now time.Time) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if exp, ok := u.m[id]; ok && now.Before(exp) {
		return errReplayed
	}
	if len(u.m) >= u.max {
		for k, exp := range u.m {
			if !now.Before(exp) {
				delete(u.m, k)
			}
		}
		if len(u.m) >= u.max {
			return errors.New("too many node requests at once")
		}
	}
	u.m[id] = until
	return nil
}
