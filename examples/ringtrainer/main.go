// Command ringtrainer is a small data-parallel trainer without Python, for
// demos, tests and benchmarks of ringside.
//
// It takes its rank from the sidecar next to it (the trainer API on a unix
// socket), forms a TCP ring with its neighbours, and every step all-reduces
// an int64 vector with a real ring all-reduce (reduce-scatter, then
// all-gather) and checks that every element is the exact sum over all
// ranks. It follows generation changes the way a live-mode trainer does: a
// new generation aborts the step in flight at once, the ring is formed again
// at the new ranks, and training goes on from the job's last completed step
// without restarting the process.
//
// Each completed step prints one JSON line on stdout,
//
//	{"step":12,"generation":3,"rank":1,"world":3,"sum_ok":true,"t":1767225600.123456}
//
// and each ring formed prints
//
//	{"event":"ring","generation":3,"rank":1,"world":3,"t":1767225600.012345}
//
// Logs go to stderr. Exit codes: 0 after a clean drain or once --steps is
// reached; 1 on a wrong sum (its step line says "sum_ok":false) or another
// fatal error; 2 on bad flags; 3 when the sidecar cannot be reached.
//
// Usage:
//
//	ringtrainer --socket /var/run/ringside/ringside.sock [--local-rank 0] [--port 29700]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/ringside/ringside/trainer/client"
)

// Exit codes.
const (
	exitOK        = 0
	exitFailed    = 1 // a wrong sum, or another fatal error
	exitUsage     = 2 // bad flags, or flags that disagree with the sidecar or the peers
	exitNoSidecar = 3 // the sidecar's API does not answer
)

// exitError is a fatal error with its exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr, sigs))
}

// run is the whole program; it returns the exit code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer, sigs <-chan os.Signal) int {
	cfg, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "ringtrainer:", err)
		return exitUsage
	}
	log := newLogger(cfg, stderr)
	t := newTrainer(cfg, client.New(cfg.Socket), newOutput(stdout), log)

	ctx, cancel := context.WithCancelCause(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { t.handleSignals(ctx, sigs, cancel) })
	err = t.run(ctx)
	cancel(nil)
	wg.Wait()

	if err == nil {
		return exitOK
	}
	code := exitFailed
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	fmt.Fprintln(stderr, "ringtrainer:", err)
	return code
}

// handleSignals turns the first SIGINT or SIGTERM into a drain (the
// sidecar is asked to leave, so the others re-form without this member)
// and the second into a stop without one.
func (t *trainer) handleSignals(ctx context.Context, sigs <-chan os.Signal, stop context.CancelCauseFunc) {
	select {
	case <-ctx.Done():
		return
	case s := <-sigs:
		t.log.Info("asked to stop; draining", "signal", s.String())
	}
	if err := t.leave(ctx); err != nil {
		stop(&exitError{exitNoSidecar, fmt.Errorf("asked to stop, but the sidecar did not take the leave request: %w", err)})
		return
	}
	select {
	case <-ctx.Done():
	case s := <-sigs:
		stop(&exitError{exitFailed, fmt.Errorf("second %s: stopping without waiting for the drain", s)})
	}
}
