package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var keys = Keys{"k1": strings.Repeat("s", 32), "k2": strings.Repeat("t", 32)}

func TestTokenRoundTrip(t *testing.T) {
	tok, err := keys.Sign("k1", Claims{Room: "r", Grants: Grants{Publish: true}, RegisteredClaims: jwt.RegisteredClaims{Subject: "alice"}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c, err := keys.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Identity() != "alice" || c.Room != "r" || !c.Grants.Publish || c.Grants.Subscribe {
		t.Fatalf("claims %+v", c)
	}
}

func TestTokenRejections(t *testing.T) {
	good, _ := keys.Sign("k1", Claims{Room: "r", RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}, time.Minute)
	expired, _ := keys.Sign("k1", Claims{Room: "r", RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}, -time.Minute)
	noSub, _ := keys.Sign("k1", Claims{Room: "r"}, time.Minute)
	forged, _ := Keys{"k1": strings.Repeat("x", 32)}.Sign("k1", Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}, time.Minute)
	unknownKey, _ := Keys{"k9": strings.Repeat("s", 32)}.Sign("k9", Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}, time.Minute)
	parts := strings.Split(good, ".")
	none := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + "."
	tampered := parts[0] + "." + strings.TrimRight(parts[1], "=") + "x." + parts[2]
	for name, tc := range map[string]struct {
		tok  string
		want error
	}{
		"empty":       {"", ErrUnauthorized},
		"garbage":     {"not.a.jwt", ErrUnauthorized},
		"expired":     {expired, ErrExpired},
		"no subject":  {noSub, ErrUnauthorized},
		"forged":      {forged, ErrUnauthorized},
		"unknown key": {unknownKey, ErrUnauthorized},
		"alg none":    {none, ErrUnauthorized},
		"tampered":    {tampered, ErrUnauthorized},
		"huge":        {strings.Repeat("a", 10000), ErrUnauthorized},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := keys.Verify(tc.tok)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestTURNCredentials(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	u, p := TURNCredentials("sec", "alice", time.Hour, now)
	if !strings.HasSuffix(u, ":alice") {
		t.Fatalf("user %q", u)
	}
	got, ok := CheckTURN("sec", u, now.Add(59*time.Minute))
	if !ok || got != p {
		t.Fatal("valid credentials rejected")
	}
	if _, ok := CheckTURN("sec", u, now.Add(61*time.Minute)); ok {
		t.Fatal("expired credentials accepted")
	}
	if got, _ := CheckTURN("other", u, now); got == p {
		t.Fatal("password does not depend on the secret")
	}
	if _, ok := CheckTURN("sec", "alice", now); ok {
		t.Fatal("username without expiry accepted")
	}
}

func FuzzVerify(f *testing.F) {
	good, _ := keys.Sign("k1", Claims{Room: "r", RegisteredClaims: jwt.RegisteredClaims{Subject: "a"}}, time.Minute)
	f.Add(good)
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = keys.Verify(s)
	})
}
