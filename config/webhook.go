package config

import (
	"errors"
	"net/url"
	"time"
)

// Webhook configures the notifications of room events (the webhook package,
// docs/webhooks.md). It is off unless URLs are set.
type Webhook struct {
	// URLs each receive every event, POSTed as JSON; empty disables webhooks.
	URLs []string `yaml:"urls" flag:"webhook-urls" usage:"comma-separated URLs that receive room events (empty: no webhooks)"`
	// APIKey names the key whose secret signs the notifications (default: api_key).
	APIKey string `yaml:"api_key" flag:"webhook-api-key" usage:"API key whose secret signs webhooks (default: api_key)"`
	// Attempts bounds the deliveries of one event to one URL; then it is dropped.
	Attempts int `yaml:"attempts" flag:"webhook-attempts" usage:"delivery attempts of one event before it is dropped"`
	// Backoff is the wait after the first failed attempt; it doubles after each.
	Backoff time.Duration `yaml:"backoff" flag:"webhook-backoff" usage:"wait after a failed delivery, doubled after each"`
	// Queue bounds the events waiting for one URL; more are dropped.
	Queue int `yaml:"queue" flag:"webhook-queue" usage:"events waiting per URL before new ones are dropped"`
	// Timeout bounds one delivery attempt.
	Timeout time.Duration `yaml:"timeout" flag:"webhook-timeout" usage:"time for one delivery attempt"`
}

func defaultWebhook() Webhook {
	// Six attempts from 500 ms span about 16 s of waiting: a receiver's restart.
	return Webhook{Attempts: 6, Backoff: 500 * time.Millisecond, Queue: 1000, Timeout: 5 * time.Second}
}

func (w Webhook) validate() error {
	for _, u := range w.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return errors.New("webhook.urls must be http:// or https:// URLs")
		}
	}
	if w.Attempts < 1 || w.Queue < 1 || w.Backoff <= 0 || w.Timeout <= 0 {
		return errors.New("webhook.attempts and webhook.queue must be at least 1, webhook.backoff and webhook.timeout positive")
	}
	return nil
}
