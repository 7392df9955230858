package cluster

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/cluster"
	"github.com/petrel-sfu/petrel/config"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key,
// as an operator would make one for a private Redis.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "petrel-test-redis"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "redis.crt"), filepath.Join(dir, "redis.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// syncBuffer collects a node's log lines from its goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A cluster on a Redis that wants a password and speaks only TLS with a
// self-signed certificate: nodes given the password and the certificate
// form the cluster and cascade a room; a client without the password, or
// without trusting the certificate, is refused with a clear error; the
// password appears in no node's log, even at debug level.
func TestRedisPasswordTLS(t *testing.T) {
	const password = "s3cret-redis-pass-7f2a"
	cert, key := selfSigned(t)
	addr := startRedisWith(t, "127.0.0.1", func(port int) []string {
		return []string{"--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-ca-cert-file", cert, "--tls-auth-clients", "no", "--requirepass", password}
	})
	ctx := ctxT(t, 10*time.Second)
	if _, err := cluster.Dial(ctx, cluster.RedisOptions{Addr: addr, CAFile: cert}); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("Redis without the password: got %v, want a NOAUTH error", err)
	}
	if _, err := cluster.Dial(ctx, cluster.RedisOptions{Addr: addr, Password: password, TLS: true}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Redis with an untrusted certificate: got %v, want a certificate error", err)
	}
	if _, err := cluster.Dial(ctx, cluster.RedisOptions{Addr: addr, Password: password}); err == nil {
		t.Fatal("plain TCP to a TLS-only Redis worked")
	}

	logs := map[string]*syncBuffer{"a": {}, "b": {}}
	tune := func(c *config.Config) {
		c.Cluster.Redis, c.Cluster.RedisPassword, c.Cluster.RedisTLSCA = addr, password, cert
	}
	a := startNodeWith(t, "a", tune, logs["a"])
	b := startNodeWith(t, "b", tune, logs["b"])
	waitFor(t, 5*time.Second, "nodes see each other through the TLS Redis", func() bool {
		return len(a.srv.Cluster.Nodes()) == 2 && len(b.srv.Cluster.Nodes()) == 2
	})
	alice := join(t, a.ws, "tls", "alice")
	publish(t, alice, newVideo(t, "alice-cam"))
	bob := join(t, b.ws, "tls", "bob")
	watch(bob).waitFrames(t, 30, 15*time.Second, "bob (node b) gets alice's video")

	// A node with a wrong password does not start, and says why.
	_, err := tryStartNode(t, "c", func(c *config.Config) { tune(c); c.Cluster.RedisPassword = "wrong" }, nil)
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("node with a wrong password: %v", err)
	}
	for id, l := range logs {
		if strings.Contains(l.String(), password) {
			t.Errorf("node %s logged the Redis password", id)
		}
		if !strings.Contains(l.String(), "cluster node started") {
			t.Errorf("node %s log has no start line (is the log captured?)", id)
		}
	}
}

// Drain and undrain through the admin API: a drained node is not offered to
// new participants; after undrain it is again, and its participants were not
// closed at the end of the drain grace period.
func TestUndrain(t *testing.T) {
	r := startRedis(t)
	short := func(c *config.Config) { c.Cluster.Redis = r; c.Cluster.DrainGrace = 2 * time.Second }
	a, b := startNodeWith(t, "a", short, nil), startNodeWith(t, "b", short, nil)
	waitFor(t, 5*time.Second, "nodes see each other", func() bool {
		return len(a.srv.Cluster.Nodes()) == 2 && len(b.srv.Cluster.Nodes()) == 2
	})
	alice := join(t, a.ws, "undrain", "alice")
	nearA := map[string]float64{"a": 1, "b": 200}

	admin := func(path string, tok string) int {
		req, _ := http.NewRequest("POST", b.url+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := admin("/v1/admin/cluster/nodes/a/drain", token(t, "undrain", "mallory")); code != http.StatusUnauthorized {
		t.Fatalf("drain with a participant's token: HTTP %d, want 401", code)
	}
	if code := admin("/v1/admin/cluster/nodes/nosuch/drain", adminToken(t)); code != http.StatusNotFound {
		t.Fatalf("drain of an unknown node: HTTP %d, want 404", code)
	}
	if code := admin("/v1/admin/cluster/nodes/a/drain", adminToken(t)); code != http.StatusOK {
		t.Fatalf("drain: HTTP %d", code)
	}
	waitEvent(t, alice, "reconnect", 5*time.Second)
	waitFor(t, 5*time.Second, "placement stops offering the draining node a", func() bool {
		id, _ := place(t, b.url, "undrain", nearA)
		return id == "b"
	})
	if code := admin("/v1/admin/cluster/nodes/a/undrain", adminToken(t)); code != http.StatusOK {
		t.Fatalf("undrain: HTTP %d", code)
	}
	waitFor(t, 5*time.Second, "placement offers node a again", func() bool {
		id, _ := place(t, b.url, "undrain", nearA)
		return id == "a"
	})
	// Past the drain grace: alice, who stayed, is still connected.
	time.Sleep(3 * time.Second)
	select {
	case <-alice.Done():
		t.Fatal("alice was closed although the drain was withdrawn")
	default:
	}
	if err := alice.SendData([]byte("still here"), true, true); err != nil {
		t.Fatalf("alice's connection: %v", err)
	}
}

func adminToken(t *testing.T) string {
	c := auth.Claims{Grants: auth.Grants{Admin: true}}
	c.Subject = "operator"
	tok, err := auth.Keys{apiKey: apiSecret}.Sign(apiKey, c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
