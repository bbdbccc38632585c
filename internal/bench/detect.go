package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
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
	// Idle is how long the job runs untouched to count false positives
	// and measure one sidecar's idle CPU and memory.
	Idle time.Duration
	// Load is how many busy processes spin on the CPU from the moment the
	// job formed until the end: false positives and detection under load.
	Load    int
	Timeout time.Duration
	// LogDir, when set, is where the sidecars write their logs, kept
	// after the run; empty uses a temporary directory, removed.
	LogDir string
}

// DefaultDetectConfig is what `ringside bench detect` runs.
func DefaultDetectConfig() DetectConfig {
	return DetectConfig{Members: 8, Kills: 5, Idle: time.Minute, Timeout: 15 * time.Minute}
}

// DetectResult is one run of the detection benchmark.
type DetectResult struct {
	Bench          string  `json:"bench"`
	Members        int     `json:"members"`
	Kills          int     `json:"kills"`
	DetectP50S     float64 `json:"detect_p50_s"`
	DetectP95S     float64 `json:"detect_p95_s"`
	CommitP50S     float64 `json:"commit_p50_s"`
	CommitP95S     float64 `json:"commit_p95_s"`
	FalsePositives int     `json:"false_positives"`
	Load           int     `json:"load"`
	SidecarRSSMiB  float64 `json:"sidecar_rss_mib"`
	// SidecarAnonMiB is the sidecar's own part of SidecarRSSMiB; the rest
	// is pages of the executable, shared by every sidecar on the machine.
	SidecarAnonMiB float64 `json:"sidecar_rss_anon_mib"`
	// SidecarCPUPct is the median over the sidecars of each one's CPU time
	// while the job idled, in percent of one core; SidecarCPUMaxPct the
	// busiest one's (often the leader). The memory figures are medians too.
	SidecarCPUPct    float64 `json:"sidecar_cpu_pct"`
	SidecarCPUMaxPct float64 `json:"sidecar_cpu_max_pct"`
}

// measureIdle sets the sidecars' CPU and memory figures: CPU from each
// one's CPU seconds at the start of an idle period of length d (cpu0).
func (r *DetectResult) measureIdle(ws []*localjob.Worker, cpu0 []float64, d time.Duration) {
	var cpu, rss, anon []float64
	for i, w := range ws {
		pid := w.SidecarPID()
		cpu = append(cpu, 100*(cpuSeconds(pid)-cpu0[i])/d.Seconds())
		rss = append(rss, rssMiB(pid))
		anon = append(anon, anonMiB(pid))
	}
	r.SidecarCPUPct = quantile.Each(cpu, 0.5)[0]
	r.SidecarCPUMaxPct = slices.Max(cpu)
	r.SidecarRSSMiB = quantile.Each(rss, 0.5)[0]
	r.SidecarAnonMiB = quantile.Each(anon, 0.5)[0]
}

type seen struct {
	worker string
	event  api.Event
	at     time.Time
}

// Detect runs cfg.Members sidecar processes on an embedded etcd, lets them
// idle, then SIGKILLs one at a time (a new member replaces each victim) and
// times, over every survivor, when gossip declared the victim dead and when
// the generation without it arrived.
func Detect(ctx context.Context, cfg DetectConfig, progress io.Writer) (DetectResult, error) {
	if cfg.Members < 2 || cfg.Kills < 1 || cfg.Load < 0 {
		return DetectResult{}, errors.New("need at least 2 members, 1 kill and a load of 0 or more")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	dir, cleanup, err := jobDir(cfg.LogDir, "detect")
	if err != nil {
		return DetectResult{}, err
	}
	defer cleanup()
	job, err := localjob.Start(ctx, localjob.Config{Job: "detect", Dir: dir})
	if err != nil {
		return DetectResult{}, err
	}
	defer job.Close()

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
				case seenCh <- seen{worker: w.ID, event: e, at: time.Now()}:
				case <-ctx.Done():
					return
				}
			}
		}()
		return w, nil
	}
	for range cfg.Members {
		if _, err := spawn(); err != nil {
			return DetectResult{}, err
		}
	}
	fmt.Fprintf(progress, "%d sidecars started; waiting for the generation with all of them\n", cfg.Members)
	if err := awaitEveryone(ctx, seenCh, job.Workers(), func(r *api.Rendezvous) bool { return r.WorldSize == cfg.Members }); err != nil {
		return DetectResult{}, err
	}

	res := DetectResult{Bench: "detect", Members: cfg.Members, Kills: cfg.Kills, Load: cfg.Load}
	if cfg.Load > 0 {
		load, err := startLoad(ctx, cfg.Load)
		if err != nil {
			return DetectResult{}, err
		}
		defer load.stop()
		fmt.Fprintf(progress, "%d busy processes started\n", cfg.Load)
	}
	fmt.Fprintf(progress, "idle for %s: counting false positives, measuring every sidecar\n", cfg.Idle)
	idlers := slices.Collect(maps.Values(job.Workers()))
	cpu0 := make([]float64, len(idlers))
	for i, w := range idlers {
		cpu0[i] = cpuSeconds(w.SidecarPID())
	}
	t0 := time.Now()
	idle := time.After(cfg.Idle)
idleLoop:
	for {
		select {
		case s := <-seenCh:
			if s.event.Type == api.EventMemberDead {
				res.FalsePositives++
			}
		case <-idle:
			break idleLoop
		case <-ctx.Done():
			return DetectResult{}, ctx.Err()
		}
	}
	res.measureIdle(idlers, cpu0, time.Since(t0))

	var detects, commits []float64
	for k := range cfg.Kills {
		live := job.Workers()
		victim := live[slices.Min(slices.Collect(maps.Keys(live)))]
		killedAt := time.Now()
		job.Kill(victim)
		detect, commit, err := awaitDeath(ctx, seenCh, job.Workers(), victim.ID, killedAt)
		if err != nil {
			return DetectResult{}, err
		}
		detects, commits = append(detects, detect), append(commits, commit)
		fmt.Fprintf(progress, "kill %d/%d (%s): dead everywhere after %.3fs, generation without it after %.3fs\n",
			k+1, cfg.Kills, victim.ID, detect, commit)
		if _, err := spawn(); err != nil {
			return DetectResult{}, err
		}
		if err := awaitEveryone(ctx, seenCh, job.Workers(), func(r *api.Rendezvous) bool { return r.WorldSize == cfg.Members }); err != nil {
			return DetectResult{}, err
		}
	}
	d, c := quantile.Each(detects, 0.5, 0.95), quantile.Each(commits, 0.5, 0.95)
	res.DetectP50S, res.DetectP95S = d[0], d[1]
	res.CommitP50S, res.CommitP95S = c[0], c[1]
	return res, nil
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
