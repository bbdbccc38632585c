package client

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestWaitForAnAbsentSidecarSaysWhatItWaitsForAndGivesUp(t *testing.T) {
	sock := t.TempDir() + "/none.sock"
	c := New(sock)
	defer c.Close()
	var log bytes.Buffer // Wait logs from the caller's goroutine
	w := Waiting{Limit: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&log, nil)), retry: time.Millisecond, report: time.Nanosecond}
	err := c.Wait(context.Background(), w, func(ctx context.Context) error { return c.Ready(ctx) })
	var absent *WaitError
	if !errors.As(err, &absent) || absent.Addr != sock || absent.Waited != w.Limit {
		t.Fatalf("Wait = %v, want a *WaitError for %s after %s", err, sock, w.Limit)
	}
	if !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "100ms") {
		t.Errorf("error %q does not name the socket and the wait", err)
	}
	if got := log.String(); !strings.Contains(got, "waiting for the sidecar's trainer API") || !strings.Contains(got, "addr="+sock) {
		t.Errorf("log %q does not say what it waits for", got)
	}
}

func TestWaitReturnsOnceTheAttemptSucceeds(t *testing.T) {
	c := New(t.TempDir() + "/none.sock")
	defer c.Close()
	tries := 0
	err := c.Wait(context.Background(), Waiting{retry: time.Millisecond}, func(context.Context) error {
		if tries++; tries < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("Wait = %v after %d tries, want nil after 3", err, tries)
	}
}

func TestWaitEndsWithItsContext(t *testing.T) {
	c := New(t.TempDir() + "/none.sock")
	defer c.Close()
	cause := errors.New("stopped")
	ctx, cancel := context.WithCancelCause(context.Background())
	err := c.Wait(ctx, Waiting{retry: time.Millisecond}, func(context.Context) error {
		cancel(cause)
		return errors.New("not yet")
	})
	if !errors.Is(err, cause) {
		t.Fatalf("Wait = %v, want the context's cause", err)
	}
}
