package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ringside/ringside/sidecar/quantile"
)

// RecoveryConfig sizes the recovery benchmark.
type RecoveryConfig struct {
	// TrainerSpec picks the trainer (go or pytorch) and its mode.
	TrainerSpec
	Workers int
	Kills   int
	// Fault is "kill" (SIGKILL) or "stop" (SIGSTOP: a silent peer).
	Fault string
	// Pause is how long the full job trains before each fault (restart
	// mode's warm processes import torch meanwhile, as between real
	// faults minutes apart).
	Pause   time.Duration
	Settle  time.Duration
	Timeout time.Duration
}

// DefaultRecoveryConfig is what `ringside bench recovery` runs.
func DefaultRecoveryConfig() RecoveryConfig {
	return RecoveryConfig{TrainerSpec: TrainerSpec{Trainer: "go", Mode: "live", Python: DefaultPython, StepTime: 50 * time.Millisecond},
		Workers: 8, Kills: 8, Fault: "kill", Settle: 500 * time.Millisecond, Timeout: 15 * time.Minute}
}

// RecoveryResult is one run of the recovery benchmark.
type RecoveryResult struct {
	Bench            string  `json:"bench"`
	Trainer          string  `json:"trainer"`
	Mode             string  `json:"mode,omitempty"`
	Fault            string  `json:"fault"`
	Workers          int     `json:"workers"`
	Kills            int     `json:"kills"`
	KillToResumeP50S float64 `json:"kill_to_resume_p50_s"`
	KillToResumeP95S float64 `json:"kill_to_resume_p95_s"`
	DrainLostSteps   int64   `json:"drain_lost_steps"`
	JoinToTrainP50S  float64 `json:"join_to_train_p50_s"`
	SettleS          float64 `json:"settle_s"`
	PauseS           float64 `json:"pause_s,omitempty"`
	// The PyTorch trainer in live mode: what one commit took on average
	// (the trainer commits after every step), and the bytes a re-form's
	// sync moved (p50 and largest; only ranks whose commit is older are
	// sent the state, so a kill moves little and a join one snapshot).
	CommitMsPerStep float64 `json:"commit_ms_per_step,omitempty"`
	SyncBytesP50    int64   `json:"sync_bytes_p50,omitempty"`
	SyncBytesMax    int64   `json:"sync_bytes_max,omitempty"`
}

// Recovery runs Workers workers (sidecar + trainer: the Go ring trainer, or
// the PyTorch example in live or restart mode) on an embedded
// etcd; Kills times it SIGKILLs (or SIGSTOPs) one worker, rotating the
// victim through the ring's ranks (rank 0 and the leader's included), and
// times from the fault until every survivor finished a step at the smaller
// world size; a new worker replaces each victim, timed from its start to
// its first step in the full ring. Last, one worker drains and the
// survivors' step counters are checked for redone steps.
func Recovery(ctx context.Context, cfg RecoveryConfig, progress io.Writer) (RecoveryResult, error) {
	if err := CheckFault(cfg.Fault, cfg.Mode); err != nil {
		return RecoveryResult{}, err
	}
	if cfg.Workers < 3 || cfg.Kills < 1 {
		return RecoveryResult{}, errors.New("need at least 3 workers and 1 kill")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	job, w, dir, stop, err := cfg.startTraining(ctx, "recovery", cfg.Workers, cfg.Settle, progress)
	if err != nil {
		return RecoveryResult{}, err
	}
	defer stop()

	res := RecoveryResult{Bench: "recovery", Trainer: cfg.Trainer, Mode: cfg.Mode, Fault: cfg.Fault, Workers: cfg.Workers,
		Kills: cfg.Kills, SettleS: cfg.Settle.Seconds(), PauseS: cfg.Pause.Seconds()}
	var resumes, joins []float64
	for k := range cfg.Kills {
		if err := w.Until(ctx, time.Now().Add(cfg.Pause)); err != nil {
			return res, err
		}
		victim := w.ByRank(k % cfg.Workers)
		if victim == nil {
			return res, errors.New("no worker holds the victim's rank")
		}
		// Who trains again: the survivors, or in restart mode after a
		// trainer kill everyone, the victim's script restarted by exec.
		world, gen := cfg.Workers-1, w.Generation()
		var err error
		t0 := time.Now()
		switch {
		case cfg.Fault == "kill":
			job.Kill(victim)
		case cfg.Fault == "stop":
			job.Freeze(victim)
		case cfg.Mode == "restart":
			err = job.KillScript(victim)
			world = cfg.Workers
		default:
			err = job.KillTrainer(victim)
		}
		if err != nil {
			return res, err
		}
		done, err := w.AllStepAbove(ctx, world, gen, t0)
		if err != nil {
			return res, fmt.Errorf("after the %s of %s: %w", cfg.Fault, victim.ID, err)
		}
		resumes = append(resumes, done.Sub(t0).Seconds())
		if world == cfg.Workers {
			fmt.Fprintf(progress, "%s %d/%d (rank %d, %s): every worker trained again after %.3fs\n",
				cfg.Fault, k+1, cfg.Kills, k%cfg.Workers, victim.ID, resumes[k])
			continue
		}
		if cfg.Fault != "kill" {
			job.Kill(victim)
		}
		t1 := time.Now()
		nw, err := job.AddWorker(ctx)
		if err != nil {
			return res, err
		}
		if _, err := w.AllStepAt(ctx, cfg.Workers, t1); err != nil {
			return res, err
		}
		joins = append(joins, w.LastOf(nw.ID).Time().Sub(t1).Seconds())
		fmt.Fprintf(progress, "%s %d/%d (rank %d, %s): survivors resumed after %.3fs; %s joined and trained after %.3fs\n",
			cfg.Fault, k+1, cfg.Kills, k%cfg.Workers, victim.ID, resumes[k], nw.ID, joins[k])
	}

	// A drain loses nothing: survivors continue from the step after the
	// last one they completed together.
	drained := w.ByRank(1)
	if drained == nil {
		return res, errors.New("no worker holds rank 1 to drain")
	}
	before := w.Last()
	t2 := time.Now()
	if err := job.Drain(drained); err != nil {
		return res, err
	}
	if _, err := w.AllStepAt(ctx, cfg.Workers-1, t2); err != nil {
		return res, fmt.Errorf("after draining %s: %w", drained.ID, err)
	}
	if trainer, sidecar, err := drained.Wait(ctx); err != nil {
		return res, err
	} else if trainer != 0 || sidecar != 0 {
		return res, fmt.Errorf("drained worker %s exited with trainer %d, sidecar %d; want 0 and 0", drained.ID, trainer, sidecar)
	}
	for id, first := range w.First() {
		if id == drained.ID {
			continue
		}
		if lost := before[id].Step + 1 - first.Step; lost > 0 {
			res.DrainLostSteps += lost
		}
	}
	fmt.Fprintf(progress, "drained %s: survivors lost %d steps\n", drained.ID, res.DrainLostSteps)
	p := quantile.Each(resumes, 0.5, 0.95)
	res.KillToResumeP50S, res.KillToResumeP95S = p[0], p[1]
	res.JoinToTrainP50S = quantile.Of(joins, 0.5)
	if cfg.Trainer == "pytorch" && cfg.Mode == "live" {
		costs, err := readTrainerCosts(statsDir(dir))
		if err != nil {
			return res, err
		}
		res.CommitMsPerStep = costs.CommitMs
		res.SyncBytesP50, res.SyncBytesMax = syncBytesFigures(costs)
		fmt.Fprintf(progress, "a commit took %.2f ms per step; a re-form's sync moved %d bytes (p50), %d at most\n",
			res.CommitMsPerStep, res.SyncBytesP50, res.SyncBytesMax)
	}
	return res, nil
}
