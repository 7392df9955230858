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
// Without a config directory it refuses: a secret in a shared temporary
// directory would let any local user mint tokens.
func loadKeys(key, secret string) (keys auth.Keys, apiKey string, dev bool, err error) {
	if key != "" {
		return auth.Keys{key: secret}, key, false, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return nil, "", false, fmt.Errorf("no api_key/api_secret configured (PETREL_API_KEY, PETREL_API_SECRET) and no user config directory for a development secret ($XDG_CONFIG_HOME or $HOME): %w", err)
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
