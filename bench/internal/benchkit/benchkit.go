// Package benchkit holds what the benchmark programs that start a `petrel
// serve` of their own share: the key pair they start it with, tokens,
// /metrics readings and bounded parallel joins.
package benchkit

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/petrel-sfu/petrel/auth"
)

// APIKey and APISecret are what the benchmarks start the server with
// (PETREL_API_SECRET) and sign their tokens with.
const (
	APIKey    = "benchkey"
	APISecret = "bench-secret-bench-secret-bench-secret-0123"
)

// Token is a participant's token for room; viewers get no publish grant.
func Token(room, identity string, publish bool) string {
	c := auth.Claims{Room: room, Grants: auth.Grants{Publish: publish, Subscribe: true, PublishData: true}}
	c.RegisteredClaims = jwt.RegisteredClaims{Subject: identity}
	return sign(c)
}

// AdminToken is a token for the admin API.
func AdminToken() string {
	c := auth.Claims{Grants: auth.Grants{Admin: true}}
	c.RegisteredClaims = jwt.RegisteredClaims{Subject: "bench-admin"}
	return sign(c)
}

func sign(c auth.Claims) string {
	tok, err := auth.Keys{APIKey: APISecret}.Sign(APIKey, c, time.Hour)
	if err != nil {
		panic(err) // a constant key pair: cannot fail
	}
	return tok
}

// Metric reads name{direction="dir"} from the server's /metrics at
// httpAddr (host:port); 0 when the counter was never incremented.
func Metric(httpAddr, name, dir string) (float64, error) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics: %s", resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	prefix := name + `{direction="` + dir + `"} `
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// Parallel runs f(0..n-1), eight at a time, and returns the first error.
func Parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := f(i); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
