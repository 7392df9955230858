package metrics

import "github.com/prometheus/client_golang/prometheus"

// Webhook metrics (docs/webhooks.md).
var (
	// WebhookEvents counts events per URL by outcome: delivered, or dropped
	// because the URL's queue was full (queue_full), every attempt failed
	// (attempts_exhausted) or the server stopped first (shutdown).
	WebhookEvents = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "petrel_webhook_events_total", Help: "Webhook events by outcome (delivered, queue_full, attempts_exhausted, shutdown)."}, []string{"result"})
	// WebhookFailures counts failed attempts (a transport error or a status other than 2xx).
	WebhookFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "petrel_webhook_failed_attempts_total", Help: "Webhook delivery attempts that failed (transport error or non-2xx status)."})
	// WebhookQueued is how many events wait for delivery, all URLs together.
	WebhookQueued = prometheus.NewGauge(prometheus.GaugeOpts{Name: "petrel_webhook_queued", Help: "Webhook events waiting for delivery."})
)

func init() {
	Registry.MustRegister(WebhookEvents, WebhookFailures, WebhookQueued)
}
