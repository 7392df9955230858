package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/config"
)

// testCA is a CA made for the test, which signs node certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // its certificate, PEM
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(t.TempDir(), name+".pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue makes a node certificate for 127.0.0.1, for serving and dialing,
// and returns its certificate and key files.
func (ca *testCA) issue(t *testing.T, node string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: node},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, node+".crt"), filepath.Join(dir, node+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestNodeLinksOverTLS: with cluster.tls, two nodes link over HTTPS, each
// verifying the other's certificate against the cluster's CA, and media
// crosses the link; the plain HTTP port refuses link offers, and the TLS
// listener refuses a client without a certificate of the CA.
func TestNodeLinksOverTLS(t *testing.T) {
	redisAddr := startRedis(t)
	ca := newTestCA(t, "cluster-ca")
	withTLS := func(id string) func(*config.Config) {
		cert, key := ca.issue(t, id)
		return func(c *config.Config) {
			c.Cluster.Redis = redisAddr
			c.Cluster.TLS = config.ClusterTLS{CAFile: ca.file, CertFile: cert, KeyFile: key, Listen: "127.0.0.1:0"}
		}
	}
	a := startNodeWith(t, "a", withTLS("a"), nil)
	b := startNodeWith(t, "b", withTLS("b"), nil)
	linkURL := ""
	for deadline := time.Now().Add(5 * time.Second); linkURL == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, x := range a.srv.Cluster.Nodes() {
			if x.ID == "b" {
				linkURL = x.LinkURL
			}
		}
	}
	if !strings.HasPrefix(linkURL, "https://127.0.0.1:") {
		t.Fatalf("node b's link URL %q, want its HTTPS listener", linkURL)
	}

	alice := join(t, a.ws, "tls", "alice")
	bob := join(t, b.ws, "tls", "bob")
	fb := watch(bob)
	publish(t, alice, newVideo(t, "alice-cam"))
	fb.waitFrames(t, 30, 15*time.Second, "bob (node b) gets alice's video over the TLS-made link")
	if l := a.srv.Cluster.Links()["b"]; l == nil {
		t.Fatal("no link from a to b")
	}

	// The plain port takes no link offers once links are on TLS.
	resp, err := http.Post(b.url+"/v1/cluster/link", "application/json", strings.NewReader(`{"from":"x","sdp":"v=0"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a link offer on the plain port: %s, want 403", resp.Status)
	}
	// A client without a certificate, or with one another CA signed, does
	// not get through the handshake; one that does not trust the CA refuses
	// the node's certificate.
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	other := newTestCA(t, "other-ca")
	oc, ok := other.issue(t, "mallory")
	otherCert, err := tls.LoadX509KeyPair(oc, ok)
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*tls.Config{
		"no client certificate":   {RootCAs: pool},
		"another CA's client":     {RootCAs: pool, Certificates: []tls.Certificate{otherCert}},
		"a client without the CA": {Certificates: []tls.Certificate{otherCert}},
	} {
		c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := c.Post(linkURL+"/v1/cluster/link", "application/json", strings.NewReader(`{"from":"x","sdp":"v=0"}`))
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: %s, want a failed handshake", name, resp.Status)
		}
	}
}
