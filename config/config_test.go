package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "petrel.yaml")
	if err := os.WriteFile(file, []byte("http: ':9000'\nrtc:\n  udp_port: 9001\n  tcp_port: 9002\nlimits:\n  max_participants_per_room: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PETREL_RTC_TCP_PORT", "9102")
	t.Setenv("PETREL_RESUME_WINDOW", "5s")
	c, err := Load("serve", []string{"--config", file, "--rtc-udp-port", "9201", "--loopback"})
	if err != nil {
		t.Fatal(err)
	}
	if c.RTC.UDPPort != 9201 { // flag beats file
		t.Errorf("udp port %d", c.RTC.UDPPort)
	}
	if c.RTC.TCPPort != 9102 { // env beats file
		t.Errorf("tcp port %d", c.RTC.TCPPort)
	}
	if c.Limits.MaxParticipantsPerRoom != 7 { // file beats default
		t.Errorf("max participants %d", c.Limits.MaxParticipantsPerRoom)
	}
	if c.RTC.ResumeWindow != 5*time.Second || c.TURN.CredentialTTL != time.Hour {
		t.Errorf("durations %v %v", c.RTC.ResumeWindow, c.TURN.CredentialTTL)
	}
	if c.HTTP != "127.0.0.1:9000" || c.TURN.RelayIP != "127.0.0.1" { // loopback mode
		t.Errorf("loopback mode: http %q relay %q", c.HTTP, c.TURN.RelayIP)
	}
}

func TestRejects(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(bad, []byte("htp: ':1'\n"), 0o600)
	for name, args := range map[string][]string{
		"unknown key":  {"--config", bad},
		"short secret": {"--api-key", "k", "--api-secret", "short"},
		"secret alone": {"--api-secret", "0123456789012345678901234567890123"},
		"bad port":     {"--rtc-udp-port", "70000"},
		"bad cache":    {"--packet-cache", "1000"},
		"stray arg":    {"extra"},
		"bad duration": {"--turn-ttl", "soon"},
		"webhook url":  {"--webhook-urls", "ftp://example.com/hook"},
		"no retries":   {"--webhook-urls", "http://127.0.0.1:1/hook", "--webhook-attempts", "0"},
	} {
		if _, err := Load("serve", args); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	t.Setenv("PETREL_MAX_PARTICIPANTS", "many")
	if _, err := Load("serve", nil); err == nil {
		t.Error("bad env value accepted")
	}
}

func TestTrustedProxies(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "petrel.yaml")
	if err := os.WriteFile(file, []byte("trusted_proxies: [10.0.0.0/8]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load("serve", []string{"--config", file})
	if err != nil || len(c.TrustedProxies) != 1 || c.TrustedProxies[0] != "10.0.0.0/8" {
		t.Fatalf("file: %v %q", err, c.TrustedProxies)
	}
	t.Setenv("PETREL_TRUSTED_PROXIES", "192.0.2.1, 2001:db8::/32")
	if c, err = Load("serve", []string{"--config", file}); err != nil || len(c.TrustedProxies) != 2 || c.TrustedProxies[1] != "2001:db8::/32" {
		t.Fatalf("env: %v %q", err, c.TrustedProxies)
	}
	if c, err = Load("serve", []string{"--trusted-proxies", "127.0.0.1"}); err != nil || len(c.TrustedProxies) != 1 || c.TrustedProxies[0] != "127.0.0.1" {
		t.Fatalf("flag: %v %q", err, c.TrustedProxies)
	}
	if _, err := Load("serve", []string{"--trusted-proxies", "proxy.example"}); err == nil {
		t.Fatal("a name was accepted as a trusted proxy")
	}
}

func TestRecordsRoom(t *testing.T) {
	r := Recording{Rooms: []string{"standup", "class-*"}}
	for room, want := range map[string]bool{"standup": true, "standup2": false, "class-7": true, "class": false,
		"camera/door": false, "recording/x-1": false, "other": false} {
		if got := r.RecordsRoom(room); got != want {
			t.Errorf("RecordsRoom(%q) = %v", room, got)
		}
	}
	if !(Recording{Rooms: []string{"*"}}).RecordsRoom("any") || (Recording{Rooms: []string{"*"}}).RecordsRoom("camera/door") {
		t.Error(`"*" must match every room but camera rooms`)
	}
	for _, bad := range [][]string{{""}, {"a*b"}, {"**"}} {
		if err := (Recording{Dir: "/tmp/x", Segment: 10 * time.Second, Rooms: bad}).validate(); err == nil {
			t.Errorf("rooms %q accepted", bad)
		}
	}
}

func TestWebhookURLsFromFlag(t *testing.T) {
	c, err := Load("serve", []string{"--webhook-urls", "http://127.0.0.1:9/a, https://hooks.example/b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Webhook.URLs) != 2 || c.Webhook.URLs[1] != "https://hooks.example/b" || c.Webhook.Attempts != 6 {
		t.Fatalf("webhook: %+v", c.Webhook)
	}
}

func TestGCPercent(t *testing.T) {
	c, err := Load("serve", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.GCPercent != 50 {
		t.Errorf("default gc_percent %d, want 50", c.GCPercent)
	}
	if c, err = Load("serve", []string{"--gc-percent", "120"}); err != nil || c.GCPercent != 120 {
		t.Errorf("--gc-percent 120: %d, %v", c.GCPercent, err)
	}
	if _, err := Load("serve", []string{"--gc-percent", "0"}); err == nil {
		t.Error("gc_percent 0 accepted")
	}
}
