package autoscale

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ringside/ringside/internal/testbin"
)

// An API server that stops answering shows at once in the controller's
// /readyz (naming it, with how long), its gauge and its log; when it
// answers again, all three say so.
func TestAnUnreachableAPIServerFailsReadinessAndTheGauge(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	var logs testbin.Buffer
	reg := prometheus.NewRegistry()
	answer := error(nil)
	p := newProbe(func(context.Context) error { return answer }, 2*time.Second, clk, reg, slog.New(slog.NewTextHandler(&logs, nil)))
	f := newFixture(t, startEtcd(t))
	f.c.onLeading(false) // a standby: ready but for the API server
	h := f.c.handler(f.reg, nil, p)
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	ctx := t.Context()

	p.probe(ctx)
	if code, body := readyz(); code != http.StatusOK || testutil.ToFloat64(p.up) != 1 {
		t.Fatalf("answering: /readyz %d %q, up %v; want 200, 1", code, body, testutil.ToFloat64(p.up))
	}
	answer = errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
	p.probe(ctx)
	clk.Step(5 * time.Second)
	p.probe(ctx) // a second failure: the outage is still dated from the first
	code, body := readyz()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "API server is unreachable (for 5s)") || !strings.Contains(body, "connection refused") {
		t.Errorf("unreachable: /readyz %d %q; want 503 naming the API server, the time and the cause", code, body)
	}
	if got := testutil.ToFloat64(p.up); got != 0 {
		t.Errorf("ringside_autoscale_apiserver_up = %v while unreachable, want 0", got)
	}
	if n := strings.Count(logs.String(), "the API server is unreachable"); n != 1 {
		t.Errorf("%d log lines of the outage, want 1:\n%s", n, logs.String())
	}

	answer = nil
	clk.Step(3 * time.Second)
	p.probe(ctx)
	if code, body := readyz(); code != http.StatusOK || testutil.ToFloat64(p.up) != 1 {
		t.Errorf("back: /readyz %d %q, up %v; want 200, 1", code, body, testutil.ToFloat64(p.up))
	}
	if !strings.Contains(logs.String(), "the API server answers again") || !strings.Contains(logs.String(), "unreachable_for=8s") {
		t.Errorf("no log line of the recovery with the outage's length:\n%s", logs.String())
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}
