package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/trainer/api"
	"github.com/ringside/ringside/trainer/client"
)

const (
	// pollWait is one rendezvous long poll.
	pollWait = 30 * time.Second
	// reformAfter is how long a rank whose ring broke waits for a new
	// generation before it forms the same one again: a peer's trainer
	// that crashed and came back, while its sidecar stayed, leaves the
	// generation as it is.
	reformAfter = 5 * time.Second
	// retryEvery paces calls to a sidecar that did not answer.
	retryEvery = 100 * time.Millisecond
)

// trainer is one rank's training process.
type trainer struct {
	cfg Config
	api *client.Client
	out *output
	log *slog.Logger

	gens     generations
	draining atomic.Bool

	// Owned by run's goroutine.
	data      *dataListener
	completed int64 // the job's last completed step
	samples   int64 // this process's samples, one per step
	vec       []int64
}

func newTrainer(cfg Config, api *client.Client, out *output, log *slog.Logger) *trainer {
	return &trainer{cfg: cfg, api: api, out: out, log: log, vec: make([]int64, cfg.Vector)}
}

var (
	// errStepsDone ends a run that reached --steps.
	errStepsDone = errors.New("ringtrainer: reached --steps")
	// errSidecarLost is a sidecar that stopped answering for longer than
	// cfg.ConnectTimeout.
	errSidecarLost = errors.New("lost the sidecar")
)

// run trains until a drain leaves this member out, --steps is reached, or
// a fatal error; it returns nil for the first two.
func (t *trainer) run(ctx context.Context) error {
	if err := t.awaitSidecar(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil)
	wg.Go(func() {
		if err := t.watchEvents(ctx); err != nil {
			cancel(err)
		}
	})
	defer t.closeListener()

	var after int64
	var wait time.Duration // 0: long poll for as long as it takes
	for {
		r, err := t.awaitGeneration(ctx, after, wait)
		if errors.Is(err, client.ErrNoGeneration) {
			t.log.Info("no new generation after the ring broke; forming the same one again", "generation", after)
			r, err = t.awaitGeneration(ctx, after-1, 0)
		}
		if err != nil {
			if t.draining.Load() && (ctx.Err() == nil || errors.Is(err, errSidecarLost)) {
				t.log.Info("drained: the sidecar has gone", "err", err)
				return nil
			}
			return err
		}
		after, wait = r.Generation, 0
		t.gens.saw(r.Generation)
		log := t.log.With("member", r.Member, "generation", r.Generation)
		switch {
		case r.State != record.StateActive && t.draining.Load():
			log.Info("drained: the generation leaves this member out", "state", r.State, "step", t.completed)
			return nil
		case r.State != record.StateActive:
			log.Info("not training in this generation; waiting for the next", "state", r.State, "reason", r.Reason)
			continue
		case t.draining.Load():
			log.Info("draining: not training in this generation; waiting for the one without this member")
			continue
		}

		err = t.trainGeneration(ctx, r, log)
		var broken *peerError
		switch {
		case errors.Is(err, errStepsDone):
			return nil
		case errors.As(err, &broken):
			t.report(ctx, r, broken, log)
			wait = reformAfter
		case err != nil:
			return err
		}
	}
}

// awaitSidecar waits until the sidecar's API answers, at most
// cfg.ConnectTimeout: in a pod the sidecar may start after the trainer.
func (t *trainer) awaitSidecar(ctx context.Context) error {
	err := t.api.Wait(ctx, client.Waiting{Limit: t.cfg.ConnectTimeout, Log: t.log}, func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := t.api.Ready(rctx); err != nil && unreachable(err) {
			return err
		}
		return nil // a sidecar without a generation yet answers too
	})
	var absent *client.WaitError
	if errors.As(err, &absent) {
		return &exitError{exitNoSidecar, fmt.Errorf("%w: start `ringside sidecar --socket %s` next to this trainer, point --socket (RINGSIDE_SOCKET) at its socket, or wait longer with --connect-timeout", err, t.cfg.Socket)}
	}
	return err
}

// unreachable tells a sidecar that is not there from one that answered
// with an error.
func unreachable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, context.DeadlineExceeded)
}

// awaitGeneration long polls for a generation numbered above after. With
// limit > 0 it returns client.ErrNoGeneration once limit has passed. A
// sidecar that stays unreachable for cfg.ConnectTimeout is fatal; while
// draining, the first failure is returned (a drained sidecar exits).
func (t *trainer) awaitGeneration(ctx context.Context, after int64, limit time.Duration) (*api.Rendezvous, error) {
	var deadline, failingSince time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	for {
		wait := pollWait
		if limit > 0 {
			if wait = min(wait, time.Until(deadline)); wait <= 0 {
				return nil, client.ErrNoGeneration
			}
		}
		r, err := t.api.Rendezvous(ctx, after, wait)
		switch {
		case err == nil:
			return r, nil
		case errors.Is(err, client.ErrNoGeneration):
			failingSince = time.Time{}
			continue
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case t.draining.Load():
			return nil, err
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
		}
		if time.Since(failingSince) > t.cfg.ConnectTimeout {
			return nil, t.sidecarLost(err)
		}
		t.log.Warn("rendezvous with the sidecar failed; retrying", "err", err)
		sleep(ctx, retryEvery)
	}
}

func (t *trainer) sidecarLost(err error) error {
	return &exitError{exitNoSidecar, fmt.Errorf("%w: it did not answer at %s for %s (%v); a trainer without its sidecar is out of the job", errSidecarLost, t.cfg.Socket, t.cfg.ConnectTimeout, err)}
}

// report tells the sidecar which neighbour broke the ring, so it checks
// that member now instead of waiting for gossip.
func (t *trainer) report(ctx context.Context, r *api.Rendezvous, broken *peerError, log *slog.Logger) {
	if t.gens.newer(r.Generation) {
		log.Info("ring closed by a generation change", "err", broken)
		return
	}
	log.Warn("ring broke; waiting for the next generation", "err", broken)
	if broken.peer.member == r.Member {
		return // two slots of this member: nothing for the sidecar to check
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := t.api.ReportFailure(rctx, api.FailureReport{Peer: broken.peer.member, Error: broken.Error()}); err != nil {
		log.Warn("could not report the broken ring to the sidecar", "peer", broken.peer.member, "err", err)
	}
}

// leave asks the sidecar to drain this member: used when the trainer
// itself is told to stop.
func (t *trainer) leave(ctx context.Context) error {
	t.draining.Store(true)
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return t.api.Leave(lctx)
}

// listen returns the data listener on addr, opened on first use and kept
// for the next generations.
func (t *trainer) listen(addr string) (*dataListener, error) {
	if t.data != nil && t.data.addr == addr {
		return t.data, nil
	}
	t.closeListener()
	l, err := listenData(addr, t.log)
	if err != nil {
		return nil, &exitError{exitUsage, fmt.Errorf("listen for ring links on %s: %w: pick a free --port base", addr, err)}
	}
	t.data = l
	return l, nil
}

func (t *trainer) closeListener() {
	if t.data != nil {
		t.data.close()
		t.data = nil
	}
}
