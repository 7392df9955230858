package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/petrel-sfu/petrel/config"
)

// With cluster.tls, the requests nodes make to each other (link offers) go
// to a listener of their own over HTTPS, and both sides show a certificate
// the cluster's CA signed: a node dials only peers whose certificate the CA
// signed for the address it dials, and serves only peers with one too. The
// node advertises that listener's URL in its record (NodeInfo.LinkURL); the
// plain HTTP port then refuses link offers.

// nodeTLS is what startTLS sets up.
type nodeTLS struct {
	client *tls.Config
	srv    *http.Server
	url    string
}

// startTLS loads the CA and the node's certificate, starts the HTTPS
// listener for node requests and returns the client config to dial with.
func (n *Node) startTLS(c config.ClusterTLS) (*nodeTLS, error) {
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("cluster.tls.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("cluster.tls.ca_file %s: no PEM certificate", c.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("cluster.tls cert_file/key_file: %w", err)
	}
	ln, err := tls.Listen("tcp", c.Listen, &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13})
	if err != nil {
		return nil, fmt.Errorf("cluster.tls.listen: %w", err)
	}
	u := c.URL
	if u == "" {
		host := "127.0.0.1"
		if p, err := url.Parse(n.url); err == nil && p.Hostname() != "" {
			host = p.Hostname()
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		u = "https://" + net.JoinHostPort(host, port)
	}
	t := &nodeTLS{client: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13},
		srv: &http.Server{Handler: n.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10},
		url: u}
	go func() {
		if err := t.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Warn("cluster tls listener", "err", err)
		}
	}()
	n.log.Info("node links over TLS", "listen", ln.Addr().String(), "url", u)
	return t, nil
}

// linkURL is where this node sends node requests for peer: its TLS
// listener when node links use TLS (a peer without one is not dialed: the
// link would go in the clear).
func (n *Node) linkURL(peer NodeInfo) (string, error) {
	if n.tls == nil {
		return peer.URL, nil
	}
	if peer.LinkURL == "" {
		return "", errors.New("the peer has no TLS node-link URL (cluster.tls on every node)")
	}
	return peer.LinkURL, nil
}

// linkSelf is the node-link URL this node advertises ("" without TLS).
func (n *Node) linkSelf() string {
	if n.tls == nil {
		return ""
	}
	return n.tls.url
}

func (n *Node) stopTLS() {
	if n.tls != nil {
		_ = n.tls.srv.Close()
	}
}
