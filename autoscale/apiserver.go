package autoscale

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// apiServerProbePeriod is how often the controller asks the API server
// whether it serves, and how long it waits for the answer: 2 s, the
// leader election's retry period, so an outage shows before the leader's
// renew deadline (10 s) ends its leadership.
const apiServerProbePeriod = 2 * time.Second

// apiServerProbe asks the API server's /readyz every period (what every
// authenticated client may read) and keeps the answer, so that an outage
// is plain to see: the controller's /readyz fails naming it, the gauge
// ringside_autoscale_apiserver_up is 0, and the log says when it began
// and when it ended. The informers' own retries only log each failed
// watch, and a leader's failed renewals only after the renew deadline.
type apiServerProbe struct {
	ready  func(ctx context.Context) error
	period time.Duration
	clock  clock.Clock
	log    *slog.Logger
	up     prometheus.Gauge

	mu    sync.Mutex
	err   error     // the last probe's failure; nil while the API server serves
	since time.Time // when the failures began
}

var _ healthCheck = (*apiServerProbe)(nil)

// newAPIServerProbe returns a probe of the API server that r talks to,
// its gauge registered with reg.
func newAPIServerProbe(r rest.Interface, reg prometheus.Registerer, log *slog.Logger) *apiServerProbe {
	ready := func(ctx context.Context) error {
		return r.Get().AbsPath("/readyz").Do(ctx).Error()
	}
	return newProbe(ready, apiServerProbePeriod, clock.RealClock{}, reg, log)
}

func newProbe(ready func(context.Context) error, period time.Duration, clk clock.Clock, reg prometheus.Registerer, log *slog.Logger) *apiServerProbe {
	p := &apiServerProbe{ready: ready, period: period, clock: clk, log: log,
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringside_autoscale_apiserver_up",
			Help: "1 while the API server answers the controller's probe of its /readyz (every 2 s), 0 while it does not: nothing is synced or resized then, and the jobs train on at their size.",
		})}
	p.up.Set(1) // until a probe fails: a controller that started has reached it
	reg.MustRegister(p.up)
	return p
}

// run probes every period until ctx ends.
func (p *apiServerProbe) run(ctx context.Context) {
	for {
		p.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(p.period):
		}
	}
}

// probe asks once, within a period, and records the answer; the log
// says when the API server stops and starts answering.
func (p *apiServerProbe) probe(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, p.period)
	err := p.ready(pctx)
	cancel()
	if ctx.Err() != nil {
		return // stopping: not the API server's fault
	}
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err != nil && p.err == nil:
		p.since = now
		p.up.Set(0)
		p.log.Error("the API server is unreachable: no ElasticScaler is synced or resized until it answers; the jobs train on at their size", "err", err)
	case err == nil && p.err != nil:
		p.up.Set(1)
		p.log.Info("the API server answers again", "unreachable_for", now.Sub(p.since).Round(time.Millisecond))
	}
	p.err = err
}

// Check is a readiness check of /readyz: it fails while the API server
// does not answer, with why and since when. It is no liveness check: a
// restart would not bring the API server back.
func (p *apiServerProbe) Check(*http.Request) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		return nil
	}
	return fmt.Errorf("the API server is unreachable (for %s): %w", p.clock.Since(p.since).Round(time.Second), p.err)
}
