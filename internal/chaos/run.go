package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ringside/ringside/internal/localjob"
	"github.com/ringside/ringside/sidecar/quantile"
)

// Config sizes a run.
type Config struct {
	Workers int
	Events  int
	Seed    uint64
	// Kinds are the fault kinds the schedule draws from.
	Kinds []Kind
	// Ringside runs the sidecars and etcd (empty: this executable);
	// TrainerBin is the ring trainer (empty: next to ringside, or in PATH).
	Ringside, TrainerBin string
	StepTime, Settle     time.Duration
	// Min is the policy's smallest world size; the run keeps at least
	// max(Min, 2) workers alive.
	Min int
	// HoldScale stretches each freeze and outage (drawn between 1 and 4
	// seconds).
	HoldScale float64
	// LogDir keeps every process's log; empty uses a temporary directory.
	LogDir string
	// RequireAll fails the run when a fault kind cannot be played here
	// (a partition without iptables), instead of leaving it out.
	RequireAll bool
	Check      CheckConfig
	Timeout    time.Duration
}

// DefaultConfig is what `ringside bench chaos` runs.
func DefaultConfig() Config {
	return Config{Workers: 8, Events: 100, Seed: 1, Kinds: AllKinds, StepTime: 50 * time.Millisecond,
		Settle: 500 * time.Millisecond, Min: 1, HoldScale: 1, Check: DefaultCheckConfig(), Timeout: 2 * time.Hour}
}

// Result is one run: the events played, the violations counted and the
// resume times.
type Result struct {
	Bench               string  `json:"bench"`
	Events              int     `json:"events"`
	Deadlocks           int     `json:"deadlocks"`
	Divergences         int     `json:"divergences"`
	LostCommittedSteps  int64   `json:"lost_committed_steps"`
	SplitBrain          int     `json:"split_brain"`
	SpuriousGenerations int     `json:"spurious_generations"`
	LiveEvictions       int     `json:"live_evictions"`
	MaxResumeS          float64 `json:"max_resume_s"`
	ResumeP50S          float64 `json:"resume_p50_s"`
	// The rest qualifies the line.
	Seed         uint64 `json:"seed"`
	Workers      int    `json:"workers"`
	Linearizable bool   `json:"linearizable"`
	Duplicates   int    `json:"duplicate_generations"`
	Decreasing   int    `json:"decreasing_generations"`
	Unsynced     int    `json:"unsynced"`
	// OutageExpiries are the leases etcd expired after an outage outlived
	// them, re-registered in place (not evictions by the protocol).
	OutageExpiries int `json:"outage_expiries"`
	Generations    int `json:"generations"`
	// Violations by fault kind, and each violation in a sentence.
	ByKind     map[Kind]map[string]int `json:"by_kind,omitempty"`
	Violations []string                `json:"-"`
}

// Summary gives the counts in a sentence.
func (r Result) Summary() string {
	return fmt.Sprintf("%d workers, %d events (seed %d): %d deadlocks, %d divergences, %d lost committed steps, %d split brain, %d spurious generations, %d live evictions, %d unsynced; linearizable %t; resume p50 %.3fs, max %.3fs",
		r.Workers, r.Events, r.Seed, r.Deadlocks, r.Divergences, r.LostCommittedSteps, r.SplitBrain, r.SpuriousGenerations,
		r.LiveEvictions, r.Unsynced, r.Linearizable, r.ResumeP50S, r.MaxResumeS)
}

// harness is one run in progress.
type harness struct {
	cfg      Config
	progress io.Writer
	job      *localjob.Job
	etcd     *etcdProc
	rec      *recorder
	recCtx   context.Context
	live     map[string]*localjob.Worker // running, unfrozen, counted in the job
	frozen   map[string]*localjob.Worker
	followed map[string]bool // workers whose event stream the recorder follows
	floor    int
}

// Run plays a seeded schedule of cfg.Events faults on a job of cfg.Workers
// workers and checks the recorded history. An error means the run could
// not be carried out; violations are in the result.
func Run(ctx context.Context, cfg Config, progress io.Writer) (Result, error) {
	if cfg.Workers < 3 || cfg.Events < 1 {
		return Result{}, errors.New("chaos: need at least 3 workers and 1 event")
	}
	kinds := cfg.Kinds
	if slices.Contains(kinds, Partition) {
		if err := canPartition(); err != nil {
			if cfg.RequireAll {
				return Result{}, fmt.Errorf("chaos: %w, and every fault kind is required: leave partition out of --faults", err)
			}
			kinds = slices.DeleteFunc(slices.Clone(kinds), func(k Kind) bool { return k == Partition })
			fmt.Fprintf(progress, "leaving gossip partitions out: %v\n", err)
		}
	}
	if len(kinds) == 0 {
		return Result{}, errors.New("chaos: no fault kind to play")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	h, stop, err := start(ctx, cfg, progress)
	if err != nil {
		return Result{}, err
	}
	hist, err := h.play(ctx, Schedule(cfg.Seed, cfg.Events, kinds))
	stop()
	if err != nil {
		return Result{}, err
	}
	rep := Check(hist, cfg.Check)
	if cfg.LogDir != "" {
		if err := writeHistory(filepath.Join(cfg.LogDir, "history.json"), hist, rep); err != nil {
			return Result{}, err
		}
	}
	res := Result{Bench: "chaos", Events: len(hist.Faults), Deadlocks: rep.Deadlocks, Divergences: rep.Divergences,
		LostCommittedSteps: rep.LostCommittedSteps, SplitBrain: rep.SplitBrain, SpuriousGenerations: rep.SpuriousGenerations,
		LiveEvictions: rep.LiveEvictions, OutageExpiries: rep.OutageExpiries, Seed: cfg.Seed, Workers: cfg.Workers, Linearizable: rep.Linearizable,
		Duplicates: rep.DuplicateGenerations, Decreasing: rep.DecreasingGenerations, Unsynced: rep.Unsynced,
		Generations: len(hist.Commits), ByKind: rep.ByKind, Violations: rep.Violations}
	if len(rep.ResumeS) > 0 {
		res.ResumeP50S, res.MaxResumeS = quantile.Of(rep.ResumeS, 0.5), slices.Max(rep.ResumeS)
	}
	for _, v := range rep.Violations {
		fmt.Fprintln(progress, "violation:", v)
	}
	return res, nil
}

// writeHistory keeps the history and its verdict for a look afterwards.
func writeHistory(path string, hist History, rep Report) error {
	b, err := json.MarshalIndent(struct {
		History History
		Report  Report
	}{hist, rep}, "", " ")
	if err != nil {
		return fmt.Errorf("encode history: %w", err)
	}
	return os.WriteFile(path, b, 0o644)
}

// start runs etcd, the job, the recorder and the first workers.
func start(ctx context.Context, cfg Config, progress io.Writer) (*harness, func(), error) {
	if cfg.Ringside == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, nil, err
		}
		cfg.Ringside = self
	}
	trainer, err := localjob.FindTrainer(cfg.TrainerBin)
	if err != nil {
		return nil, nil, err
	}
	dir, cleanup := cfg.LogDir, func() {}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "ringside-chaos-"); err != nil {
			return nil, nil, err
		}
		cleanup = func() { os.RemoveAll(dir) }
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	e, err := startEtcd(ctx, cfg.Ringside, dir)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	job, err := localjob.Start(ctx, localjob.Config{Ringside: cfg.Ringside, Trainer: []string{trainer, "--step-time", cfg.StepTime.String()},
		Job: "chaos", Dir: dir, Endpoints: e.endpoints(),
		SidecarArgs: []string{"--settle", cfg.Settle.String(), "--min", fmt.Sprint(max(cfg.Min, 1))}})
	if err != nil {
		e.close()
		cleanup()
		return nil, nil, err
	}
	recCtx, recCancel := context.WithCancel(ctx)
	rec, err := startRecorder(recCtx, e.endpoints(), "default", "chaos", job.Lines())
	if err != nil {
		recCancel()
		job.Close()
		e.close()
		cleanup()
		return nil, nil, err
	}
	rec.edit(func(hist *History) { hist.Min = max(cfg.Min, 1) })
	h := &harness{cfg: cfg, progress: progress, job: job, etcd: e, rec: rec, recCtx: recCtx,
		live: map[string]*localjob.Worker{}, frozen: map[string]*localjob.Worker{}, followed: map[string]bool{}, floor: max(cfg.Min, 2)}
	var once bool
	stop := func() {
		if once {
			return
		}
		once = true
		recCancel()
		job.Close()
		rec.stop()
		e.close()
		cleanup()
	}
	return h, stop, nil
}

// play adds the workers, plays the events and returns the history once the
// job settled after the last one.
func (h *harness) play(ctx context.Context, events []Event) (History, error) {
	t0 := time.Now()
	if err := h.replace(ctx); err != nil {
		return History{}, err
	}
	if _, ok := h.settle(ctx, t0); !ok {
		return History{}, fmt.Errorf("chaos: %d workers did not train together within %s", h.cfg.Workers, h.cfg.Check.DeadlockAfter)
	}
	fmt.Fprintf(h.progress, "%d workers train together after %.1fs\n", len(h.live), time.Since(t0).Seconds())
	stalls := 0
	for i, ev := range events {
		if ctx.Err() != nil {
			return History{}, ctx.Err()
		}
		f, err := h.strike(ctx, ev)
		if err != nil {
			return History{}, fmt.Errorf("event %d (%s): %w", i+1, ev.Kind, err)
		}
		h.rec.edit(func(hist *History) { hist.Faults = append(hist.Faults, f) })
		resumed := "did not resume"
		if f.Kind == ScaleUp {
			resumed = "added"
		} else if !f.Resumed.IsZero() {
			from := f.At
			if !f.End.IsZero() && (f.Kind == EtcdRestart || f.Kind == EtcdFreeze) {
				from = f.End
			}
			resumed = fmt.Sprintf("resumed after %.3fs", f.Resumed.Sub(from).Seconds())
		}
		if err := h.replace(ctx); err != nil {
			return History{}, err
		}
		t1 := time.Now()
		_, ok := h.settle(ctx, t1)
		fmt.Fprintf(h.progress, "event %d/%d %s %v: %s; %d workers, generation %d%s\n", i+1, len(events), f.Kind, f.Targets,
			resumed, len(h.live), h.rec.look(t1).latest.Number, map[bool]string{true: "", false: " (not settled)"}[ok])
		if f.Resumed.IsZero() && !ok {
			if stalls++; stalls >= 2 {
				fmt.Fprintln(h.progress, "the job stalled twice in a row: ending the schedule here")
				break
			}
			h.unstick(ctx)
		} else {
			stalls = 0
		}
	}
	h.rec.edit(func(hist *History) { hist.End = time.Now() })
	hist := h.snapshot()
	return hist, nil
}

// snapshot copies the history recorded so far.
func (h *harness) snapshot() History {
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	hist := h.rec.h
	hist.Workers = map[string]*Life{}
	for id, l := range h.rec.h.Workers {
		c := *l
		c.Frozen, c.Partitioned = slices.Clone(l.Frozen), slices.Clone(l.Partitioned)
		hist.Workers[id] = &c
	}
	hist.Commits, hist.Deliveries, hist.Steps = slices.Clone(hist.Commits), slices.Clone(hist.Deliveries), slices.Clone(hist.Steps)
	hist.Evictions, hist.Registrations, hist.Faults = slices.Clone(hist.Evictions), slices.Clone(hist.Registrations), slices.Clone(hist.Faults)
	return hist
}

// settle waits until every live worker steps in the newest generation,
// which holds exactly them, after since; it returns when the last of them
// first did. It gives up after the deadlock bound.
func (h *harness) settle(ctx context.Context, since time.Time) (time.Time, bool) {
	deadline := time.NewTimer(h.cfg.Check.DeadlockAfter)
	defer deadline.Stop()
	for {
		v := h.rec.look(since)
		for id, w := range h.live {
			if v.started[id] && !h.followed[id] {
				h.rec.follow(h.recCtx, w)
				h.followed[id] = true
			}
		}
		if t, ok := h.settled(v); ok {
			return t, true
		}
		select {
		case <-v.changed:
		case <-deadline.C:
			return time.Time{}, false
		case <-ctx.Done():
			return time.Time{}, false
		}
	}
}

func (h *harness) settled(v view) (time.Time, bool) {
	ring := v.latest.Members
	if len(ring) != len(h.live) {
		return time.Time{}, false
	}
	var last time.Time
	for _, id := range ring {
		t, ok := v.stepped[id]
		if _, live := h.live[id]; !live || !ok {
			return time.Time{}, false
		}
		if t.After(last) {
			last = t
		}
	}
	return last, true
}

// replace adds workers until the job has cfg.Workers live ones.
func (h *harness) replace(ctx context.Context) error {
	for len(h.live) < h.cfg.Workers {
		if err := h.add(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) add(ctx context.Context) error {
	w, err := h.job.AddWorker(ctx)
	if err != nil {
		return err
	}
	h.live[w.ID] = w
	h.rec.edit(func(hist *History) { hist.Workers[w.ID] = &Life{ID: w.ID, Started: time.Now()} })
	return nil
}

// unstick kills every live worker that is not stepping in the newest
// generation, so that replacements can bring the job back.
func (h *harness) unstick(ctx context.Context) {
	v := h.rec.look(time.Now().Add(-h.cfg.Check.DeadlockAfter))
	for _, id := range slices.Sorted(maps.Keys(h.live)) {
		if _, ok := v.stepped[id]; !ok {
			fmt.Fprintf(h.progress, "%s is stuck: killing it\n", id)
			h.kill(h.live[id], true, true)
		}
	}
	if err := h.replace(ctx); err == nil {
		h.settle(ctx, time.Now())
	}
}
