package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ringside/ringside/trainer/api"
)

// trainGeneration forms r's ring and steps until the generation is
// aborted (nil), the ring breaks (*peerError), --steps is reached
// (errStepsDone), or a fatal error (*exitError).
func (t *trainer) trainGeneration(ctx context.Context, r *api.Rendezvous, log *slog.Logger) error {
	if t.cfg.LocalRank >= r.LocalWorldSize {
		return &exitError{exitUsage, fmt.Errorf("--local-rank %d, but member %s has %d slots: start one trainer per slot with --local-rank 0 to %d, or raise the sidecar's --slots", t.cfg.LocalRank, r.Member, r.LocalWorldSize, r.LocalWorldSize-1)}
	}
	gctx, leave := t.gens.enter(ctx, r.Generation)
	defer leave()
	rg, err := t.formRing(gctx, r)
	if err != nil {
		return aborted(gctx, err)
	}
	defer rg.close()
	stop := context.AfterFunc(gctx, rg.close)
	defer stop()
	log = log.With("rank", rg.rank, "world", rg.world)

	// Ranks may differ by a step: one that finished its all-gather
	// before the ring went down, and one that did not. The step one rank
	// completed was reduced over every rank's data, so the job has it.
	progress := []int64{t.completed}
	if err := rg.allreduce(progress, opMax); err != nil {
		return aborted(gctx, err)
	}
	if progress[0] > t.completed {
		log.Info("going on from the ring's last completed step", "own", t.completed, "step", progress[0])
		t.completed = progress[0]
	}
	t.out.ring(r.Generation, rg.rank, rg.world)
	if rg.world > 1 {
		log = log.With("left", rg.leftPeer.member, "right", rg.rightPeer.member)
	}
	log.Info("ring formed", "step", t.completed)

	for {
		if t.cfg.Steps > 0 && t.completed >= t.cfg.Steps {
			log.Info("reached --steps", "step", t.completed)
			return errStepsDone
		}
		if t.draining.Load() {
			// The links stay open: the others block in their next step
			// until the generation without this member aborts it, instead
			// of seeing a broken ring.
			log.Info("drain: stopped after a completed step; waiting to be left out", "step", t.completed)
			<-gctx.Done()
			return nil
		}
		if err := t.step(gctx, rg); err != nil {
			return aborted(gctx, err)
		}
	}
}

// aborted turns the error of a generation that was aborted on purpose
// into nil; fatal errors stay.
func aborted(gctx context.Context, err error) error {
	var fatal *exitError
	if errors.As(err, &fatal) || gctx.Err() == nil {
		return err
	}
	return nil
}

// step runs the job's next step: compute, all-reduce, check, report.
func (t *trainer) step(ctx context.Context, rg *ring) error {
	step := t.completed + 1
	start := time.Now()
	fill(t.vec, step, rg.rank)
	// The forward and backward pass, and the modeled communication.
	if !sleep(ctx, t.cfg.computeTime(rg.world, step)) {
		return ctx.Err()
	}
	// The all-reduce waits for the slowest rank: its time is this rank's
	// wait, what went before is its own compute.
	computed := time.Now()
	if err := rg.allreduce(t.vec, opSum); err != nil {
		return err
	}
	times := stepTimes{compute: computed.Sub(start), wait: time.Since(computed)}
	if i := verify(t.vec, step, rg.world); i >= 0 {
		t.out.step(step, rg.generation, rg.rank, rg.world, false)
		return &exitError{exitFailed, fmt.Errorf("step %d, generation %d: element %d of the all-reduced vector is %d, want %d (the sum over %d ranks): the ring all-reduce is wrong",
			step, rg.generation, i, t.vec[i], expected(step, rg.world, i), rg.world)}
	}
	t.completed = step
	t.samples++
	t.out.step(step, rg.generation, rg.rank, rg.world, true)
	times.total = time.Since(start)
	t.heartbeat(ctx, rg, times)
	return nil
}

// stepTimes splits a step's time into compute and the wait in the ring.
type stepTimes struct{ total, compute, wait time.Duration }

// heartbeat reports the step to the sidecar. Only local rank 0 reports:
// the sidecar keeps one heartbeat per member, and its slots step together.
func (t *trainer) heartbeat(ctx context.Context, rg *ring, took stepTimes) {
	if t.cfg.LocalRank != 0 {
		return
	}
	// An abort of the generation must not drop the report of a step done.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	hb := api.Heartbeat{Step: t.completed, Samples: t.samples, StepTimeS: took.total.Seconds(), Generation: rg.generation,
		ComputeTimeS: took.compute.Seconds(), WaitTimeS: took.wait.Seconds()}
	if err := t.api.Heartbeat(hctx, hb); err != nil {
		t.log.Debug("heartbeat not taken", "err", err)
	}
}
