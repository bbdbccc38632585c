package client

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// DefaultWait is how long a trainer-side tool waits for its sidecar at
// start unless told otherwise: a sidecar starts in a second or two, but
// against a cold etcd, or after the kubelet restarted it, it may take most
// of a minute to serve.
const DefaultWait = 60 * time.Second

// Waiting says how Wait waits for the sidecar.
type Waiting struct {
	// Limit bounds the wait; 0 waits until ctx ends.
	Limit time.Duration
	// Log gets a line every few seconds while the sidecar does not answer,
	// naming what is awaited (nil: slog.Default()).
	Log *slog.Logger

	// retry and report are the intervals between attempts and between log
	// lines (0: 200 ms and 5 s); tests shorten them.
	retry, report time.Duration
}

// WaitError is Wait giving up: no sidecar answered at Addr within Waited.
// Err is the last attempt's error.
type WaitError struct {
	Addr   string
	Waited time.Duration
	Err    error
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("no sidecar answered at %s within %s: %v", e.Addr, e.Waited, e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }

// Wait calls attempt until it returns nil, as a trainer waits at start for
// a sidecar that may come up after it (in a pod, the containers start in
// any order; on a laptop, the sidecar may not run at all). It logs what it
// waits for every few seconds. It returns a *WaitError once w.Limit has
// passed, or ctx's cause when ctx ends first.
func (c *Client) Wait(ctx context.Context, w Waiting, attempt func(context.Context) error) error {
	retry, report := w.retry, w.report
	if retry <= 0 {
		retry = 200 * time.Millisecond
	}
	if report <= 0 {
		report = 5 * time.Second
	}
	log := w.Log
	if log == nil {
		log = slog.Default()
	}
	start := time.Now()
	var deadline <-chan time.Time
	if w.Limit > 0 {
		t := time.NewTimer(w.Limit)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(retry)
	defer tick.Stop()
	nextReport := start.Add(report)
	for {
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if now := time.Now(); !now.Before(nextReport) {
			nextReport = now.Add(report)
			log.Info("waiting for the sidecar's trainer API", "addr", c.addr,
				"waited", now.Sub(start).Round(time.Second), "limit", w.Limit, "err", err)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline:
			return &WaitError{Addr: c.addr, Waited: w.Limit, Err: err}
		case <-tick.C:
		}
	}
}
