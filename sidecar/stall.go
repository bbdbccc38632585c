package sidecar

import (
	"context"
	"slices"
	"time"

	"github.com/ringside/ringside/sidecar/quantile"
)

// A peer that falls silent (SIGSTOP, a lost node, a cut link) holds every
// survivor's collective: their trainers stop stepping within a step of
// each other. Gossip finds the peer when one of its probes happens to
// reach it (a fifth of a second on average at N=8, up to several tenths);
// the survivors' sidecars see their trainers stop at once, and have the
// silent peer checked then.
const (
	// stallSteps is how many p90 step times without a step make a stall.
	// Its checks skip the throttle of other hints (checkEvery): on a busy
	// machine pauses of twice the p90 come every few seconds, and the
	// check of a peer that had just fallen silent was throttled behind one
	// that had found it alive (bench recovery --fault stop: p50 0.90 s
	// throttled, 0.65-0.68 s not; 0.63-0.75 s at 3 x, throttled).
	stallSteps = 2
	// stallFloor is the shortest stall: a pause of a fast trainer's
	// scheduling or collection is none.
	stallFloor = 100 * time.Millisecond
	// stallMinSteps is how many steps set the pace.
	stallMinSteps = 8
	// earlyStallFloor is the shortest stall before the pace is set: the
	// first steps of a ring include its warm-up. Without it, a peer frozen
	// in a ring's first steps held no trainer up, and waited out the
	// idle refute window and then its lease and grace (bench recovery
	// --fault stop: 7.6 s for the first stop, 0.35-0.46 s for the others).
	earlyStallFloor = time.Second
)

// stallLimit returns how long a pause in the steps of times (seconds,
// the recent step times) is a stall: stallSteps x their p90, at least
// stallFloor; before stallMinSteps, stallSteps x the slowest of them, at
// least earlyStallFloor; false before any step.
func stallLimit(times []float64) (time.Duration, bool) {
	if len(times) == 0 {
		return 0, false
	}
	if len(times) < stallMinSteps {
		slowest := time.Duration(slices.Max(times) * float64(time.Second))
		return max(stallSteps*slowest, earlyStallFloor), true
	}
	p90 := time.Duration(quantile.Of(times, 0.9) * float64(time.Second))
	return max(stallSteps*p90, stallFloor), true
}

// watchStalls has the detector check this member's ring neighbours once
// each time the trainer, after a step, makes no other for its stall limit
// (stallLimit): the pause of a trainer whose collective waits on a silent
// peer. A pause for any other reason (a checkpoint, an evaluation, the
// re-forming after a generation) costs a ping of each neighbour. Until the
// next step the trainer counts as held up (Agent.held): this member's
// votes say so, and a silent peer's eviction need not wait the idle
// refute window (coordinator.Config.IdleRefuteWindow).
func (a *Agent) watchStalls(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var limit time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case limit = <-a.stepped:
			a.held.Store(false)
			timer.Reset(limit)
		case <-timer.C:
			a.held.Store(true)
			a.detect.trainerStalled(limit)
		}
	}
}
