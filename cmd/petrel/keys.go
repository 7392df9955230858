package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/petrel-sfu/petrel/auth"
)

const devKey = "devkey"

// loadKeys returns the signing keys: the configured key and secret, or in
// development mode a secret generated once and kept in the user's config
// directory, so that `petrel token` and `petrel serve` agree without setup.
func loadKeys(key, secret string) (keys auth.Keys, apiKey string, dev bool, err error) {
	if key != "" {
		return auth.Keys{key: secret}, key, false, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, "petrel", "dev-secret")
	b, err := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if err != nil || len(s) < 32 {
		var r [24]byte
		if _, err := rand.Read(r[:]); err != nil {
			return nil, "", false, err
		}
		s = hex.EncodeToString(r[:])
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, "", false, fmt.Errorf("dev secret: %w", err)
		}
		if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
			return nil, "", false, fmt.Errorf("dev secret: %w", err)
		}
	}
	return auth.Keys{devKey: s}, devKey, true, nil
}
