package sidecar_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/internal/promcheck"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/sidecartest"
	"github.com/ringside/ringside/trainer/client"
)

// The sidecar's /metrics, as Prometheus scrapes it from the probe address,
// keeps Prometheus' conventions (promtool check metrics). A rendezvous and
// a malformed member in etcd give the labelled metrics their samples: a
// vector without any is not in the exposition, and so not checked.
func TestTheSidecarsMetricsPassPromtool(t *testing.T) {
	srv := etcdtest.Start(t)
	a := sidecartest.Start(t, srv.Endpoints(), "promtool", "w0", func(c *sidecar.Config) { c.ProbeAddr = "127.0.0.1:0" })
	addr := a.ProbeAddr()
	trainer := client.New(a.Socket)
	defer trainer.Close()
	if _, err := trainer.Rendezvous(context.Background(), 0, 10*time.Second); err != nil {
		t.Fatalf("rendezvous: %v", err)
	}
	cli := etcdtest.Client(t, srv)
	if _, err := cli.Put(context.Background(), record.Prefix("default", "promtool")+"members/bad", `{"id":"bad","slots":-1}`); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the malformed member counted", func() bool {
		return sampleValue(t, a.Gatherer(), "ringside_invalid_records_total", "kind", "member") >= 1
	})

	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
	}
	promcheck.Check(t, body)
}
