package config

// WebTransport configures the HTTP/3 endpoint for WebTransport media
// (webtransport/, docs/webtransport.md). It listens on UDP on the same host and
// port number as the HTTP server.
type WebTransport struct {
	Enabled bool `yaml:"enabled" flag:"webtransport" usage:"serve WebTransport (HTTP/3 over UDP) on the HTTP port number"`
	// CertFile and KeyFile are the production certificate (PEM). Empty means a
	// generated self-signed ECDSA certificate valid 10 days, whose SHA-256 the
	// web app pins with serverCertificateHashes (GET /v1/wt-cert-hash).
	CertFile string `yaml:"cert_file" flag:"webtransport-cert" usage:"WebTransport TLS certificate (PEM); empty: self-signed development certificate"`
	KeyFile  string `yaml:"key_file" flag:"webtransport-key" usage:"WebTransport TLS key (PEM)"`
	// AllowedOrigins are page origins accepted besides the server's own host
	// ("*" accepts any).
	AllowedOrigins []string `yaml:"allowed_origins"`
}
