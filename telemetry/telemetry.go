// Package telemetry is what every ringside component (the sidecar, the
// controller, the webhook) shows the platform it runs on: a Prometheus
// registry with the Go runtime's and the process's collectors, its
// /metrics handler, and HTTP servers that run until their context ends and
// then shut down, letting the requests in flight finish.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ShutdownTimeout bounds how long a server's requests in flight may take
// once its context ended: a scrape or a probe takes milliseconds, and a
// long poll of the trainer API is cut short rather than holding up exit.
const ShutdownTimeout = 2 * time.Second

// NewRegistry returns a registry holding the Go runtime's and the
// process's collectors, the series every component's dashboards expect.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// MetricsHandler serves reg in the Prometheus exposition format, counting
// its own errors in reg.
func MetricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// Serve serves srv on every listener (over TLS when srv.TLSConfig is set,
// with its GetCertificate) until ctx ends or a listener fails, then shuts
// srv down within ShutdownTimeout. It blocks until every listener is done
// and returns the first failure, nil when ctx ended it.
func Serve(ctx context.Context, srv *http.Server, listeners ...net.Listener) error {
	if len(listeners) == 0 {
		return errors.New("telemetry: no listener to serve on")
	}
	// Read once, before serving: the first Serve sets srv up for HTTP/2,
	// writing TLSConfig.
	useTLS := srv.TLSConfig != nil
	errc := make(chan error, len(listeners))
	for _, l := range listeners {
		go func() {
			var err error
			if useTLS {
				err = srv.ServeTLS(l, "", "")
			} else {
				err = srv.Serve(l)
			}
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			} else if err != nil {
				err = fmt.Errorf("serve on %s: %w", l.Addr(), err)
			}
			errc <- err
		}()
	}
	var first error
	pending := len(listeners)
	select {
	case <-ctx.Done():
	case first = <-errc:
		pending--
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close() // requests still in flight past the timeout
	}
	for ; pending > 0; pending-- {
		if err := <-errc; first == nil {
			first = err
		}
	}
	return first
}
