package telemetry

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServeAnswersUntilItsContextEnds(t *testing.T) {
	reg := NewRegistry()
	mux := http.NewServeMux()
	mux.Handle("/metrics", MetricsHandler(reg))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}, l) }()

	resp, err := http.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after its context ended: %v, want nil", err)
	}
	if _, err := http.Get("http://" + l.Addr().String() + "/metrics"); err == nil {
		t.Fatal("still answering after Serve returned")
	}
}

func TestServeReturnsAListenersFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close() // Accept fails at once
	err = Serve(context.Background(), &http.Server{ReadHeaderTimeout: time.Second}, l)
	if err == nil || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve on a closed listener: %v, want net.ErrClosed", err)
	}
}

func TestServeNeedsAListener(t *testing.T) {
	if err := Serve(context.Background(), &http.Server{}); err == nil {
		t.Fatal("Serve with no listener returned nil")
	}
}
