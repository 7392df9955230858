package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/server"
)

func init() { register("serve", "run the media server", serveMain) }

func serveMain(args []string) int {
	cfg, err := config.Load("serve", args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel serve:", err)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "petrel serve: log_level:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	keys, apiKey, dev, err := loadKeys(cfg.APIKey, cfg.APISecret)
	if err != nil {
		log.Error("keys", "err", err)
		return 1
	}
	s, err := server.Start(cfg, keys, apiKey, dev, log)
	if err != nil {
		log.Error("start", "err", err)
		return 1
	}
	url := "http://" + s.HTTPAddr + "/"
	if host, port, _ := net.SplitHostPort(s.HTTPAddr); host == "::" || host == "0.0.0.0" || strings.HasPrefix(host, "[") {
		url = "http://localhost:" + port + "/"
	}
	fmt.Printf("\nPetrel is running.\n  Open:    %s\n  API key: %s", url, apiKey)
	if dev {
		fmt.Printf(" (development mode; secret kept in your config directory)\n  Token:   petrel token --room demo --identity alice --publish --subscribe\n\n")
	} else {
		fmt.Printf("\n\n")
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-s.Err():
		log.Error("http server", "err", err)
		return 1
	case sg := <-stop:
		log.Info("shutting down", "signal", sg.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	return 0
}
