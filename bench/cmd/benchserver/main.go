// Command benchserver is `petrel serve` for benchmarks: the same configuration
// (config.Load with the serve flags) and the same server.Start, plus a pprof
// listener on a separate loopback port so that a benchmark driver can profile a
// chosen window. It prints "READY http=ADDR pprof=ADDR" on stdout once listening.
// It is a separate process from the driver so that the server's CPU time
// (/proc/PID/stat) counts nothing but the server.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/server"
)

func main() {
	cfg, err := config.Load("benchserver", os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchserver:", err)
		os.Exit(2)
	}
	if cfg.APIKey == "" {
		fmt.Fprintln(os.Stderr, "benchserver: needs --api-key and --api-secret (or PETREL_API_SECRET)")
		os.Exit(2)
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	s, err := server.Start(cfg, auth.Keys{cfg.APIKey: cfg.APISecret}, cfg.APIKey, false, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchserver:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchserver: pprof:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go func() { _ = http.Serve(ln, mux) }()
	fmt.Printf("READY http=%s pprof=%s\n", s.HTTPAddr, ln.Addr())

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-s.Err():
		fmt.Fprintln(os.Stderr, "benchserver:", err)
		os.Exit(1)
	case <-stop:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = s.Shutdown(ctx)
}
