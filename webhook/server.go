package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/ringside/ringside/telemetry"

	"github.com/prometheus/client_golang/prometheus"
)

// certCheckInterval is how often the serving certificate's files are
// looked at for a new one (cert-manager and kubelet secret refresh write
// them in place).
const certCheckInterval = 10 * time.Second

// ServerConfig is where and how the webhook serves.
type ServerConfig struct {
	// Addr serves the webhook (POST /inject) over TLS, with
	// CertFile and KeyFile, re-read when they change.
	Addr, CertFile, KeyFile string
	// MetricsAddr, when set, serves /metrics, /healthz and /readyz in
	// plain HTTP (they are also served on Addr).
	MetricsAddr string
}

// Serve runs the webhook h until ctx ends.
func Serve(ctx context.Context, cfg ServerConfig, h *Handler, log *slog.Logger) error {
	certs, err := newCertReloader(cfg.CertFile, cfg.KeyFile, log)
	if err != nil {
		return err
	}
	reg := telemetry.NewRegistry()
	admissions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringside_webhook_admissions_total",
		Help: "Admission reviews answered, by result: injected, skipped, denied or invalid.",
	}, []string{"result"})
	duration := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ringside_webhook_admission_duration_seconds",
		Help:    "Time to answer an admission review.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
	})
	reg.MustRegister(admissions, duration)
	for _, r := range []string{"injected", "skipped", "denied", "invalid"} {
		admissions.WithLabelValues(r)
	}
	h.Observe = func(result string) { admissions.WithLabelValues(result).Inc() }
	mux := http.NewServeMux()
	mux.Handle("/inject", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		duration.Observe(time.Since(start).Seconds())
	}))
	probes := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }
	for _, m := range []*http.ServeMux{mux, probes} {
		m.HandleFunc("/healthz", ok)
		m.HandleFunc("/readyz", ok)
		m.Handle("/metrics", telemetry.MetricsHandler(reg))
	}
	servers := []*http.Server{{
		Addr: cfg.Addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get},
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
	if cfg.MetricsAddr != "" {
		servers = append(servers, &http.Server{Addr: cfg.MetricsAddr, Handler: probes, ReadHeaderTimeout: 10 * time.Second})
	}
	listeners := make([]net.Listener, 0, len(servers))
	for _, srv := range servers {
		l, err := net.Listen("tcp", srv.Addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return fmt.Errorf("listen on %s: %w", srv.Addr, err)
		}
		log.Info("serving", "addr", l.Addr().String(), "tls", srv.TLSConfig != nil)
		listeners = append(listeners, l)
	}
	// One server failing ends the others: a webhook without its probes
	// (or the reverse) is better restarted whole.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			err := telemetry.Serve(ctx, srv, listeners[i])
			cancel()
			errc <- err
		}()
	}
	var first error
	for range servers {
		if err := <-errc; first == nil {
			first = err
		}
	}
	return first
}

// certReloader serves the key pair in its files, loading it again when a
// file's modification time changes (checked at most every
// certCheckInterval), and keeps the last good one when a new one does not
// load.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	mtimes  [2]time.Time
	checked time.Time
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("webhook: the server config needs a certificate and a key file: the API server calls webhooks over TLS only")
	}
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.load(time.Now()); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= certCheckInterval {
		if err := r.load(now); err != nil {
			r.log.Warn("the new serving certificate does not load; keeping the old one", "err", err)
		}
	}
	return r.cert, nil
}

// load reads the pair when either file changed; r.mu held (or r new).
func (r *certReloader) load(now time.Time) error {
	r.checked = now
	var mtimes [2]time.Time
	for i, f := range []string{r.certFile, r.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return fmt.Errorf("serving certificate: %w", err)
		}
		mtimes[i] = st.ModTime()
	}
	if r.cert != nil && mtimes == r.mtimes {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	if r.cert != nil {
		r.log.Info("loaded a new serving certificate", "file", r.certFile)
	}
	r.cert, r.mtimes = &cert, mtimes
	return nil
}
