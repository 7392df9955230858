package cluster

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLinkTokenBoundToRequest: a link token is good for the one request it
// was made for (method, path and body), by the node that made it, within
// its short lifetime, and once.
func TestLinkTokenBoundToRequest(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"from":"node.a","sdp":"v=0"}`)
	tok := signLink(secret, "node.a", "POST", "/v1/cluster/link", body, now)
	used := newUsedTokens(16)
	check := func(tok, method, path string, body []byte, at time.Time) error {
		from, jti, until, err := checkLink(secret, tok, method, path, body, at)
		if err != nil {
			return err
		}
		if from != "node.a" {
			t.Fatalf("from %q", from)
		}
		return used.use(jti, until, at)
	}
	for name, c := range map[string]struct {
		tok, method, path string
		body              []byte
		at                time.Time
	}{
		"another body":   {tok, "POST", "/v1/cluster/link", []byte(`{"from":"node.a","sdp":"v=1"}`), now},
		"another path":   {tok, "POST", "/v1/cluster/place", body, now},
		"another method": {tok, "PUT", "/v1/cluster/link", body, now},
		"expired":        {tok, "POST", "/v1/cluster/link", body, now.Add(linkTokenTTL + time.Second)},
		"from the future": {signLink(secret, "node.a", "POST", "/v1/cluster/link", body, now.Add(linkTokenTTL+time.Second)),
			"POST", "/v1/cluster/link", body, now},
		"another secret": {signLink([]byte("another secret of 32 bytes......"), "node.a", "POST", "/v1/cluster/link", body, now),
			"POST", "/v1/cluster/link", body, now},
		"forged sender": {strings.Replace(tok, "node.a.", "node.b.", 1), "POST", "/v1/cluster/link", body, now},
		"garbage":       {"a.b", "POST", "/v1/cluster/link", body, now},
		"empty":         {"", "POST", "/v1/cluster/link", body, now},
	} {
		if err := check(c.tok, c.method, c.path, c.body, c.at); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := check(tok, "POST", "/v1/cluster/link", body, now.Add(time.Second)); err != nil {
		t.Fatalf("the request it was made for: %v", err)
	}
	if err := check(tok, "POST", "/v1/cluster/link", body, now.Add(2*time.Second)); err == nil {
		t.Fatal("a replayed token was accepted")
	}
}

// TestUsedTokensBounded: the replay set forgets ids whose tokens expired,
// and refuses rather than grows when it is full of live ones.
func TestUsedTokensBounded(t *testing.T) {
	u := newUsedTokens(4)
	now := time.Unix(1000, 0)
	for i := 0; i < 4; i++ {
		if err := u.use(strconv.Itoa(i), now.Add(time.Second), now); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.use("x", now.Add(time.Second), now); err == nil {
		t.Fatal("a full set took another id")
	}
	later := now.Add(2 * time.Second)
	if err := u.use("y", later.Add(time.Second), later); err != nil {
		t.Fatalf("after the others expired: %v", err)
	}
	if n := len(u.m); n != 1 {
		t.Fatalf("%d ids kept, want 1", n)
	}
}
