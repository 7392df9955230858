package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Ingress kinds: the protocol a stream key is good for.
const (
	IngressRTMP = "rtmp"
	IngressSRT  = "srt"
)

// ErrBadIngress is an ingress that cannot be created as asked.
var ErrBadIngress = errors.New("bad ingress")

// MaxIngresses bounds how many stream keys a server holds.
const MaxIngresses = 1000

// streamKeyPrefix marks a stream key, which is never a token (no dots).
const streamKeyPrefix = "sk_"

// Ingress is a stream key and what it stands for: publishing into Room as
// Identity (shown as Name) over Kind.
type Ingress struct {
	ID       string
	Kind     string
	Room     string
	Identity string
	Name     string
	Key      string
	Created  time.Time
}

// Claims are what the key allows, as a token's would be: publish only, in
// its room, as its identity.
func (in Ingress) Claims() *Claims {
	c := &Claims{Room: in.Room, Name: in.Name, Grants: Grants{Publish: true}}
	c.Subject = in.Identity
	c.Issuer = "ingress:" + in.ID
	return c
}

// IngressKeys holds the stream keys the admin API created, in memory.
type IngressKeys struct {
	mu    sync.Mutex
	byID  map[string]*Ingress
	byKey map[[32]byte]*Ingress // by the key's SHA-256: the map never holds the key as a lookup string
}

// NewIngressKeys makes an empty set of stream keys.
func NewIngressKeys() *IngressKeys {
	return &IngressKeys{byID: map[string]*Ingress{}, byKey: map[[32]byte]*Ingress{}}
}

// Create makes a random stream key for publishing into room as identity
// over kind. It refuses what a token for them would be refused for.
func (k *IngressKeys) Create(kind, room, identity, name string) (Ingress, error) {
	if kind != IngressRTMP && kind != IngressSRT {
		return Ingress{}, fmt.Errorf("%w: ingress kind %q: want rtmp or srt", ErrBadIngress, kind)
	}
	if room == "" || identity == "" {
		return Ingress{}, fmt.Errorf("%w: an ingress needs a room and an identity", ErrBadIngress)
	}
	if len(identity) > 128 || len(room) > 128 || len(name) > 256 {
		return Ingress{}, fmt.Errorf("%w: identity, room or name too long", ErrBadIngress)
	}
	in := Ingress{ID: "IN_" + randText(10), Kind: kind, Room: room, Identity: identity, Name: name,
		Key: streamKeyPrefix + randText(20), Created: time.Now()}
	if err := in.Claims().checkIdentity(); err != nil {
		return Ingress{}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.byID) >= MaxIngresses {
		return Ingress{}, fmt.Errorf("%w: %d ingresses exist, the most a server holds", ErrBadIngress, MaxIngresses)
	}
	k.byID[in.ID] = &in
	k.byKey[sha256.Sum256([]byte(in.Key))] = &in
	return in, nil
}

// Verify returns the claims of stream key key used over kind, and its
// ingress. ok is false when key is no stream key at all (a token, perhaps);
// err refuses a stream key that exists for another kind.
func (k *IngressKeys) Verify(key, kind string) (c *Claims, in Ingress, ok bool, err error) {
	if k == nil || !strings.HasPrefix(key, streamKeyPrefix) {
		return nil, Ingress{}, false, nil
	}
	k.mu.Lock()
	p := k.byKey[sha256.Sum256([]byte(key))]
	k.mu.Unlock()
	if p == nil {
		return nil, Ingress{}, true, fmt.Errorf("%w: unknown stream key", ErrUnauthorized)
	}
	if p.Kind != kind {
		return nil, Ingress{}, true, fmt.Errorf("%w: the stream key is for %s, not %s", ErrUnauthorized, p.Kind, kind)
	}
	return p.Claims(), *p, true, nil
}

// Exists says whether the ingress id still exists.
func (k *IngressKeys) Exists(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.byID[id] != nil
}

// Delete removes an ingress: its key stops working.
func (k *IngressKeys) Delete(id string) (Ingress, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.byID[id]
	if p == nil {
		return Ingress{}, false
	}
	delete(k.byID, id)
	delete(k.byKey, sha256.Sum256([]byte(p.Key)))
	return *p, true
}

// List returns every ingress, oldest first.
func (k *IngressKeys) List() []Ingress {
	k.mu.Lock()
	out := make([]Ingress, 0, len(k.byID))
	for _, p := range k.byID {
		out = append(out, *p)
	}
	k.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Created.Equal(out[j].Created) {
			return out[i].ID < out[j].ID
		}
		return out[i].Created.Before(out[j].Created)
	})
	return out
}

// randText is n random bytes in lower-case base32: 20 bytes are 160 bits.
func randText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}
