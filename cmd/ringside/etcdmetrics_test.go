package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/promcheck"
)

// `ringside etcd`'s /metrics, which the chart's etcd ServiceMonitor
// scrapes from --listen-metrics-url, passes promtool check metrics, with
// one allowance: etcd's own metrics (etcd_*) keep names that break the
// naming lints (etcd_server_health_failures, a counter without _total;
// gauges such as etcd_debugging_mvcc_keys_total ending in _total;
// durations in milliseconds). Those are etcd's, for etcd to rename: its
// users' dashboards and alerts query them as they are. They must still
// parse and be unique, and every other metric there (Go runtime, process,
// gRPC) must pass every lint.
func TestEtcdsMetricsPassPromtool(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d", l.Addr().(*net.TCPAddr).Port)
	l.Close()

	cmd := newEtcdCmd()
	cmd.SetArgs([]string{"--data-dir", t.TempDir(), "--listen-client-url", "http://127.0.0.1:0",
		"--listen-peer-url", "http://127.0.0.1:0", "--listen-metrics-url", metricsURL, "--etcd-log-level", "fatal"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ringside etcd = %v, want nil when its context ends", err)
		}
	}()

	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, []byte, error) {
		resp, err := c.Get(metricsURL + path)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, body, err
	}
	// The metrics listener serves once the member does: /readyz answers
	// 200 once it is in a cluster with a leader.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, err := get("/readyz")
		if err == nil && code == http.StatusOK {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("ringside etcd returned %v before it served", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 30s (last: %d, %v)", code, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, body, err := get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", code, err)
	}
	if !strings.Contains(string(body), "etcd_server_has_leader 1") {
		t.Fatalf("/metrics lacks etcd_server_has_leader 1: not the serving member's metrics?\n%.2000s", body)
	}
	promcheck.Check(t, body, promcheck.Upstream("etcd_"))
}
