package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/ringside/ringside/internal/localjob"
	"github.com/ringside/ringside/sidecar/quantile"
	"github.com/ringside/ringside/trainer/api"
)

// awaitReady waits until the worker's sidecar holds a generation.
func awaitReady(ctx context.Context, w *localjob.Worker) error {
	for {
		if w.API.Ready(ctx) == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", w.ID, ctx.Err())
		case <-time.After(20 * time.Millisecond): // polling readyz until the first generation
		}
	}
}

// DetectConfig sizes the failure-detection benchmark.
type DetectConfig struct {
	Members int
	Kills   int
	// Runs is how many times the whole benchmark runs, each on a fresh
	// job: a false eviction is rare, so it takes many runs to show.
	Runs int
	// Idle is how long the job runs untouched to count false positives
	// and measure one sidecar's idle CPU and memory.
	Idle time.Duration
	// Load is how many busy processes spin on the CPU from the moment the
	// job formed until the end: false positives and detection under load.
	Load int
	// Timeout bounds each run.
	Timeout time.Duration
	// LogDir, when set, is where the sidecars write their logs, kept
	// after the run (one subdirectory per run); empty uses a temporary
	// directory, removed.
	LogDir string
	// NodeSize is how many sidecars play the pods of one node: they
	// share a copy of the executable, and no two nodes share one (see
	// localjob.Config.NodeSize); 0 has every sidecar share this one.
	NodeSize int
}

// The bounds of DetectConfig: every sidecar is a process of this machine
// with its own loopback address.
const (
	MaxDetectMembers = 256
	MaxDetectRuns    = 1000
)

// DefaultDetectConfig is what `ringside bench detect` runs.
func DefaultDetectConfig() DetectConfig {
	return DetectConfig{Members: 8, Kills: 5, Runs: 1, Idle: time.Minute, Timeout: 15 * time.Minute, NodeSize: 8}
}

// Validate says what is wrong with cfg, naming the flag to change.
func (cfg DetectConfig) Validate() error {
	var errs []error
	if cfg.Members < 2 || cfg.Members > MaxDetectMembers {
		errs = append(errs, fmt.Errorf("--members %d: want 2 to %d (each sidecar is a process of this machine, on its own loopback address)", cfg.Members, MaxDetectMembers))
	}
	if cfg.Runs < 1 || cfg.Runs > MaxDetectRuns {
		errs = append(errs, fmt.Errorf("--runs %d: want 1 to %d", cfg.Runs, MaxDetectRuns))
	}
	if cfg.Kills < 1 {
		errs = append(errs, fmt.Errorf("--kills %d: want at least 1", cfg.Kills))
	}
	if cfg.NodeSize < 0 {
		errs = append(errs, fmt.Errorf("--node-size %d: want 0 (every sidecar runs this executable) or more sidecars per node", cfg.NodeSize))
	}
	if cfg.Load < 0 {
		errs = append(errs, fmt.Errorf("--load %d: want 0 (none) or more busy processes", cfg.Load))
	}
	if cfg.Idle < 0 || cfg.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--idle %s must not be negative and --timeout %s must be positive", cfg.Idle, cfg.Timeout))
	}
	return errors.Join(errs...)
}

// DetectRun is what one run of the detection benchmark measured.
type DetectRun struct {
	Run        int     `json:"run"`
	DetectP50S float64 `json:"detect_p50_s"`
	DetectP95S float64 `json:"detect_p95_s"`
	CommitP50S float64 `json:"commit_p50_s"`
	CommitP95S float64 `json:"commit_p95_s"`
	// FalseSuspicions counts the votes cast against members whose process
	// was alive; each costs nothing unless a second one joins it.
	FalseSuspicions int `json:"false_suspicions"`
	// FalseEvictions counts the members that a generation left out while
	// their process was alive and their network up.
	FalseEvictions int     `json:"false_evictions"`
	SidecarRSSMiB  float64 `json:"sidecar_rss_mib"`
	SidecarCPUPct  float64 `json:"sidecar_cpu_pct"`

	detects, commits, cpu, rss, anon []float64
}

// DetectResult is the detection benchmark over all its runs: percentiles
// over every kill of every run, the false alarms summed, the footprint
// the median over every sidecar of every run.
type DetectResult struct {
	Bench           string  `json:"bench"`
	Members         int     `json:"members"`
	Runs            int     `json:"runs"`
	Kills           int     `json:"kills"`
	DetectP50S      float64 `json:"detect_p50_s"`
	DetectP95S      float64 `json:"detect_p95_s"`
	CommitP50S      float64 `json:"commit_p50_s"`
	CommitP95S      float64 `json:"commit_p95_s"`
	FalseSuspicions int     `json:"false_suspicions"`
	FalseEvictions  int     `json:"false_evictions"`
	Load            int     `json:"load"`
	SidecarRSSMiB   float64 `json:"sidecar_rss_mib"`
	// SidecarAnonMiB is the sidecar's own part of SidecarRSSMiB; the rest
	// is pages of the executable, shared by every sidecar on the machine.
	SidecarAnonMiB float64 `json:"sidecar_rss_anon_mib"`
	// SidecarCPUPct is the median over the sidecars of each one's CPU time
	// while the job idled, in percent of one core; SidecarCPUMaxPct the
	// busiest one's (often the leader). The memory figures are medians too.
	SidecarCPUPct    float64     `json:"sidecar_cpu_pct"`
	SidecarCPUMaxPct float64     `json:"sidecar_cpu_max_pct"`
	PerRun           []DetectRun `json:"per_run"`
}

// measureIdle records the sidecars' CPU and memory: CPU from each one's
// CPU seconds at the start of an idle period of length d (cpu0).
func (r *DetectRun) measureIdle(ws []*localjob.Worker, cpu0 []float64, d time.Duration) {
	for i, w := range ws {
		pid := w.SidecarPID()
		r.cpu = append(r.cpu, 100*(cpuSeconds(pid)-cpu0[i])/d.Seconds())
		r.rss = append(r.rss, rssMiB(pid))
		r.anon = append(r.anon, anonMiB(pid))
	}
	r.SidecarCPUPct = quantile.Each(r.cpu, 0.5)[0]
	r.SidecarRSSMiB = quantile.Each(r.rss, 0.5)[0]
}

type seen struct {
	worker string
	event  api.Event
	// at is when the worker's sidecar published the event (its time, on
	// this machine's clock), not when this process read it: with 128
	// sidecars of the same executable on two busy cores, this process
	// stalled for seconds on page faults of its own code (a kernel
	// memory monitor held the pages locked while it walked every
	// process that maps them), and those seconds are not the job's.
	at time.Time
}

// eventTime is e's time, or now for an event without one.
func eventTime(e api.Event) time.Time {
	if e.Time.IsZero() {
		return time.Now()
	}
	return e.Time
}

// Detect runs the detection benchmark cfg.Runs times, each on a fresh job
// (see detectOnce), and sums up.
func Detect(ctx context.Context, cfg DetectConfig, progress io.Writer) (DetectResult, error) {
	if err := cfg.Validate(); err != nil {
		return DetectResult{}, err
	}
	res := DetectResult{Bench: "detect", Members: cfg.Members, Runs: cfg.Runs, Kills: cfg.Kills, Load: cfg.Load}
	var detects, commits, cpu, rss, anon []float64
	for i := range cfg.Runs {
		run, err := detectOnce(ctx, cfg, i+1, progress)
		if err != nil {
			return DetectResult{}, fmt.Errorf("run %d of %d: %w", i+1, cfg.Runs, err)
		}
		fmt.Fprintf(progress, "run %d/%d: detected p50 %.3fs p95 %.3fs; %d false suspicions, %d false evictions\n",
			i+1, cfg.Runs, run.DetectP50S, run.DetectP95S, run.FalseSuspicions, run.FalseEvictions)
		res.FalseSuspicions += run.FalseSuspicions
		res.FalseEvictions += run.FalseEvictions
		detects, commits = append(detects, run.detects...), append(commits, run.commits...)
		cpu, rss, anon = append(cpu, run.cpu...), append(rss, run.rss...), append(anon, run.anon...)
		res.PerRun = append(res.PerRun, run)
	}
	d, c := quantile.Each(detects, 0.5, 0.95), quantile.Each(commits, 0.5, 0.95)
	res.DetectP50S, res.DetectP95S = d[0], d[1]
	res.CommitP50S, res.CommitP95S = c[0], c[1]
	res.SidecarCPUPct, res.SidecarCPUMaxPct = quantile.Each(cpu, 0.5)[0], slices.Max(cpu)
	res.SidecarRSSMiB, res.SidecarAnonMiB = quantile.Each(rss, 0.5)[0], quantile.Each(anon, 0.5)[0]
	return res, nil
}

// detectOnce runs cfg.Members sidecar processes on an embedded etcd, lets
// them idle, then SIGKILLs one at a time (a new member replaces each
// victim) and times, over every survivor, when it was told the victim is
// dead and when the generation without it arrived. Every vote against, and
// every generation without, a member whose process ran is a false alarm.
func detectOnce(ctx context.Context, cfg DetectConfig, run int, progress io.Writer) (res DetectRun, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	logDir := cfg.LogDir
	if logDir != "" && cfg.Runs > 1 {
		logDir = filepath.Join(logDir, fmt.Sprintf("run%d", run))
	}
	dir, cleanup, err := jobDir(logDir, "detect")
	if err != nil {
		return DetectRun{}, err
	}
	defer cleanup()
	const jobName = "detect"
	// No trainer runs, so no socket is reset: a reset lists the host's
	// whole connection table, which here is every member's.
	job, err := localjob.Start(ctx, localjob.Config{Job: jobName, Dir: dir, SidecarArgs: []string{"--socket-reset=false"}, NodeSize: cfg.NodeSize})
	if err != nil {
		return DetectRun{}, err
	}
	defer job.Close()
	alarms, err := watchAlarms(ctx, job.Endpoints(), sidecarNamespace, jobName, progress)
	if err != nil {
		return DetectRun{}, err
	}
	res.Run = run
	defer func() { res.FalseSuspicions, res.FalseEvictions = alarms.stop() }()

	seenCh := make(chan seen, 1024)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	spawn := func() (*localjob.Worker, error) {
		w, err := job.AddWorker(ctx)
		if err != nil {
			return nil, err
		}
		if err := awaitReady(ctx, w); err != nil {
			return nil, err
		}
		evs, err := w.API.Events(ctx)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range evs {
				select {
				case seenCh <- seen{worker: w.ID, event: e, at: eventTime(e)}:
				case <-ctx.Done():
					return
				}
			}
		}()
		return w, nil
	}
	for range cfg.Members {
		if _, err := spawn(); err != nil {
			return DetectRun{}, err
		}
	}
	fmt.Fprintf(progress, "%d sidecars started; waiting for the generation with all of them\n", cfg.Members)
	if err := awaitEveryone(ctx, seenCh, job.Workers(), func(r *api.Rendezvous) bool { return r.WorldSize == cfg.Members }); err != nil {
		return DetectRun{}, err
	}

	if cfg.Load > 0 {
		load, err := startLoad(ctx, cfg.Load)
		if err != nil {
			return DetectRun{}, err
		}
		defer load.stop()
		fmt.Fprintf(progress, "%d busy processes started\n", cfg.Load)
	}
	fmt.Fprintf(progress, "idle for %s: counting false alarms, measuring every sidecar\n", cfg.Idle)
	idlers := slices.Collect(maps.Values(job.Workers()))
	cpu0 := make([]float64, len(idlers))
	for i, w := range idlers {
		cpu0[i] = cpuSeconds(w.SidecarPID())
	}
	t0 := time.Now()
	if err := drainFor(ctx, seenCh, cfg.Idle); err != nil {
		return DetectRun{}, err
	}
	res.measureIdle(idlers, cpu0, time.Since(t0))

	for k := range cfg.Kills {
		live := job.Workers()
		victim := live[slices.Min(slices.Collect(maps.Keys(live)))]
		alarms.kill(victim.ID)
		// From the signal, not from before it: this process stalled for
		// seconds before it sent one (see seen.at).
		killedAt := job.Kill(victim)
		detect, commit, err := awaitDeath(ctx, seenCh, job.Workers(), victim.ID, killedAt)
		if err != nil {
			return DetectRun{}, err
		}
		res.detects, res.commits = append(res.detects, detect), append(res.commits, commit)
		fmt.Fprintf(progress, "kill %d/%d (%s): dead everywhere after %.3fs, generation without it after %.3fs\n",
			k+1, cfg.Kills, victim.ID, detect, commit)
		if _, err := spawn(); err != nil {
			return DetectRun{}, err
		}
		if err := awaitEveryone(ctx, seenCh, job.Workers(), func(r *api.Rendezvous) bool { return r.WorldSize == cfg.Members }); err != nil {
			return DetectRun{}, err
		}
	}
	d, c := quantile.Each(res.detects, 0.5, 0.95), quantile.Each(res.commits, 0.5, 0.95)
	res.DetectP50S, res.DetectP95S = d[0], d[1]
	res.CommitP50S, res.CommitP95S = c[0], c[1]
	return res, nil
}

// drainFor reads the sidecars' events for d: the job idles.
func drainFor(ctx context.Context, seenCh <-chan seen, d time.Duration) error {
	end := time.After(d)
	for {
		select {
		case <-seenCh:
		case <-end:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// awaitEveryone waits until every live worker has announced a generation
// that satisfies ok.
func awaitEveryone(ctx context.Context, seenCh <-chan seen, live map[string]*localjob.Worker, ok func(*api.Rendezvous) bool) error {
	have := map[string]bool{}
	for len(have) < len(live) {
		select {
		case s := <-seenCh:
			if s.event.Type == api.EventGeneration && live[s.worker] != nil && ok(s.event.Generation) {
				have[s.worker] = true
			}
		case <-ctx.Done():
			return fmt.Errorf("%d of %d sidecars reached the expected generation: %w", len(have), len(live), ctx.Err())
		}
	}
	return nil
}

// awaitDeath returns, from killedAt, when the last survivor was told of the
// victim's death and when the last one held a generation without it.
func awaitDeath(ctx context.Context, seenCh <-chan seen, live map[string]*localjob.Worker, victim string, killedAt time.Time) (detect, commit float64, err error) {
	dead, gone := map[string]time.Time{}, map[string]time.Time{}
	for len(dead) < len(live) || len(gone) < len(live) {
		select {
		case s := <-seenCh:
			if live[s.worker] == nil {
				continue
			}
			switch {
			case s.event.Type == api.EventMemberDead && s.event.Member == victim:
				if _, ok := dead[s.worker]; !ok {
					dead[s.worker] = s.at
				}
			case s.event.Type == api.EventGeneration && !inGeneration(s.event.Generation, victim):
				if _, ok := gone[s.worker]; !ok {
					gone[s.worker] = s.at
				}
			}
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("waiting for %s to be declared dead: %w", victim, ctx.Err())
		}
	}
	return latest(dead).Sub(killedAt).Seconds(), latest(gone).Sub(killedAt).Seconds(), nil
}

func inGeneration(r *api.Rendezvous, id string) bool {
	for _, m := range r.Members {
		if m.ID == id {
			return true
		}
	}
	return false
}

func latest(ts map[string]time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}
