package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/pki"
	"github.com/ringside/ringside/internal/promcheck"
)

func writePair(t *testing.T, ca *pki.CA, cn, certFile, keyFile string, mtime time.Time) {
	t.Helper()
	p, err := ca.Server(cn, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{certFile, keyFile} {
		if err := os.Chtimes(f, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

// A certificate written over the old one is served from the next check
// on; one that does not load leaves the last good one in place.
func TestTheServingCertificateIsReloaded(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	base := time.Now().Add(-time.Hour)
	writePair(t, ca, "first", certFile, keyFile, base)
	r, err := newCertReloader(certFile, keyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		t.Helper()
		r.mu.Lock()
		r.checked = time.Time{} // the next get checks the files
		r.mu.Unlock()
		c, err := r.get(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
	if got := cn(); got != "first" {
		t.Fatalf("serving %q, want first", got)
	}
	writePair(t, ca, "second", certFile, keyFile, base.Add(time.Minute))
	if got := cn(); got != "second" {
		t.Fatalf("after a new pair was written, serving %q, want second", got)
	}
	if err := os.WriteFile(certFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := cn(); got != "second" {
		t.Fatalf("after a broken certificate was written, serving %q, want the last good one", got)
	}
	if _, err := newCertReloader(filepath.Join(dir, "none.crt"), keyFile, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a missing certificate file was accepted")
	}
}

// The webhook serves admission reviews over TLS and its metrics count
// them.
func TestServeAnswersOverTLS(t *testing.T) {
	m := serveOneInjection(t)
	if !strings.Contains(string(m), `ringside_webhook_admissions_total{result="injected"} 1`) {
		t.Errorf("metrics do not count the injection:\n%s", m)
	}
}

// The webhook's /metrics, as Prometheus scrapes it from the metrics
// address, keeps Prometheus' conventions (promtool check metrics).
func TestTheWebhooksMetricsPassPromtool(t *testing.T) {
	promcheck.Check(t, serveOneInjection(t))
}

// serveOneInjection serves the webhook until the test ends, has it inject
// one pod over TLS and returns what its metrics address serves on
// /metrics then.
func serveOneInjection(t *testing.T) []byte {
	t.Helper()
	ca, err := pki.NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair(t, ca, "webhook", certFile, keyFile, time.Now())
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServerConfig{Addr: addr, CertFile: certFile, KeyFile: keyFile, MetricsAddr: metricsAddr},
			&Handler{Config: DefaultConfig("ringside:test")}, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(c.CloseIdleConnections)
	body := review("CREATE", []byte(`{"metadata":{"name":"p","labels":{"ringside.dev/job":"j"}},"spec":{"containers":[{"name":"t","image":"x"}]}}`))
	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err = c.Post("https://"+addr+"/inject", "application/json", bytes.NewReader(body))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the listener is not up yet
	}
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"patch"`) {
		t.Fatalf("answered %d: %s", resp.StatusCode, out)
	}
	resp, err = http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return m
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr())
}
