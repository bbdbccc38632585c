package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ringside/ringside/internal/localjob"
	"github.com/ringside/ringside/sidecar/quantile"
)

// TrainerSpec says which trainer a benchmark's workers run.
type TrainerSpec struct {
	// Trainer is "go" (the ring all-reduce trainer) or "pytorch"
	// (examples/pytorch/train.py: an MLP under DistributedDataParallel).
	Trainer string
	// Mode is "live" (the trainer re-forms in place) or "restart" (the
	// PyTorch script under `ringside exec`, restarted on every generation).
	Mode string
	// TrainerBin is the ring trainer binary; empty looks for ringtrainer
	// next to this executable, then in PATH.
	TrainerBin string
	// Python runs the PyTorch script: Debian's python3-torch lives in the
	// system Python, hence /usr/bin/python3.
	Python string
	// Script is examples/pytorch/train.py; empty looks in the working
	// directory, then next to this executable (bin/../examples/pytorch).
	Script   string
	StepTime time.Duration
	// LogDir, when set, is where the job's processes write their logs,
	// kept after the run; empty uses a temporary directory, removed.
	LogDir string
}

// jobDir returns the directory of a benchmark's job and its cleanup: logDir
// kept, or a temporary one removed.
func jobDir(logDir, name string) (string, func(), error) {
	if logDir != "" {
		return logDir, func() {}, os.MkdirAll(logDir, 0o755)
	}
	dir, err := os.MkdirTemp("", "ringside-bench-"+name+"-")
	return dir, func() { os.RemoveAll(dir) }, err
}

// DefaultPython is the interpreter the PyTorch trainer runs with.
const DefaultPython = "/usr/bin/python3"

func (s TrainerSpec) validate() error {
	switch {
	case s.Trainer != "go" && s.Trainer != "pytorch":
		return fmt.Errorf("trainer %q: want go or pytorch", s.Trainer)
	case s.Mode != "live" && s.Mode != "restart":
		return fmt.Errorf("mode %q: want live or restart", s.Mode)
	case s.Trainer == "go" && s.Mode == "restart":
		return errors.New("mode restart runs the PyTorch script under `ringside exec`: use --trainer pytorch")
	}
	return nil
}

// command returns the trainer command of every worker; dir is the job's
// scratch directory (restart mode keeps its checkpoint there).
func (s TrainerSpec) command(dir string) ([]string, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if s.Trainer == "go" {
		bin, err := localjob.FindTrainer(s.TrainerBin)
		if err != nil {
			return nil, err
		}
		return []string{bin, "--step-time", s.StepTime.String()}, nil
	}
	python := s.Python
	if python == "" {
		python = DefaultPython
	}
	out, err := exec.Command(python, "-c", "import torch.distributed as d; assert d.is_available()").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s cannot import torch.distributed (%v: %s): install PyTorch (Debian: apt-get install --no-install-recommends python3-torch) or pass --python",
			python, err, strings.TrimSpace(lastLine(string(out))))
	}
	script, err := findScript(s.Script)
	if err != nil {
		return nil, err
	}
	step := fmt.Sprintf("%g", s.StepTime.Seconds())
	if s.Mode == "live" {
		return []string{python, script, "--step-time", step, "--stats-dir", statsDir(dir)}, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return []string{self, "exec", "--stop-timeout", "2s", "--max-restarts", "1000", "--preload", "torch", "--",
		python, script, "--mode", "restart", "--step-time", step, "--checkpoint", filepath.Join(dir, "checkpoint.pt")}, nil
}

// CheckFault checks a fault against the mode it is to hit.
func CheckFault(fault, mode string) error {
	switch {
	case fault != "kill" && fault != "stop" && fault != "trainer":
		return fmt.Errorf("fault %q: want kill, stop or trainer", fault)
	case mode == "restart" && fault == "stop":
		return errors.New("fault stop freezes the worker's processes, but `ringside exec` runs the script in its own process group: use --fault kill in restart mode")
	}
	return nil
}

// startTraining starts the local job named name, its sidecars batching
// joins for settle, adds workers workers running the trainer, and waits
// until all of them train together. dir is the job's directory; stop
// closes the job and removes dir (unless LogDir keeps it).
// Each of opts adjusts the job's configuration before it starts.
func (s TrainerSpec) startTraining(ctx context.Context, name string, workers int, settle time.Duration, progress io.Writer,
	opts ...func(*localjob.Config)) (job *localjob.Job, track *localjob.Tracker, dir string, stop func(), err error) {
	dir, cleanup, err := jobDir(s.LogDir, name)
	if err != nil {
		return nil, nil, "", nil, err
	}
	if err := os.MkdirAll(statsDir(dir), 0o755); err != nil {
		cleanup()
		return nil, nil, "", nil, err
	}
	trainer, err := s.command(dir)
	if err == nil {
		cfg := localjob.Config{Trainer: trainer, Job: name, Dir: dir, SidecarArgs: []string{"--settle", settle.String()}}
		for _, o := range opts {
			o(&cfg)
		}
		job, err = localjob.Start(ctx, cfg)
	}
	if err != nil {
		cleanup()
		return nil, nil, "", nil, err
	}
	stop = func() { job.Close(); cleanup() }
	track = localjob.NewTracker(job)
	for range workers {
		if _, err := job.AddWorker(ctx); err != nil {
			stop()
			return nil, nil, "", nil, err
		}
	}
	fmt.Fprintf(progress, "%d workers started; waiting for all of them to train together\n", workers)
	if _, err := track.AllStepAt(ctx, workers, time.Now()); err != nil {
		stop()
		return nil, nil, "", nil, err
	}
	return job, track, dir, stop, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// findScript locates examples/pytorch/train.py.
func findScript(path string) (string, error) {
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("trainer script: %w", err)
		}
		return filepath.Abs(path)
	}
	candidates := []string{filepath.Join("examples", "pytorch", "train.py")}
	if self, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(self), "..", "examples", "pytorch", "train.py"))
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return filepath.Abs(c)
		}
	}
	return "", errors.New("examples/pytorch/train.py not found in the working directory or next to ringside: run from the repository root or pass --trainer-script")
}

// GoodputConfig sizes the goodput benchmark.
type GoodputConfig struct {
	TrainerSpec
	Workers int
	// Baseline is how long the undisturbed job is measured first.
	Baseline time.Duration
	// Duration is the disturbed phase; a fault every KillEvery.
	Duration, KillEvery time.Duration
	// Fault is "kill" (SIGKILL) or "stop" (SIGSTOP, then SIGKILL once the
	// others resumed).
	Fault   string
	Settle  time.Duration
	Timeout time.Duration
}

// DefaultGoodputConfig is what `ringside bench goodput` runs.
func DefaultGoodputConfig() GoodputConfig {
	return GoodputConfig{
		TrainerSpec: TrainerSpec{Trainer: "pytorch", Mode: "live", Python: DefaultPython, StepTime: 50 * time.Millisecond},
		Workers:     8, Baseline: 30 * time.Second, Duration: 10 * time.Minute, KillEvery: 60 * time.Second,
		Fault: "kill", Settle: 500 * time.Millisecond, Timeout: 30 * time.Minute,
	}
}

// GoodputResult is one run of the goodput benchmark.
type GoodputResult struct {
	Bench      string  `json:"bench"`
	Trainer    string  `json:"trainer"`
	Mode       string  `json:"mode"`
	Fault      string  `json:"fault"`
	Workers    int     `json:"workers"`
	DurationS  float64 `json:"duration_s"`
	KillEveryS float64 `json:"kill_every_s"`
	Faults     int     `json:"faults"`
	// BaselineStepsPerS is the undisturbed job's rate, measured within the
	// disturbed run: every stretch at the full world size inside one
	// generation (less its first second) is a window, and the rate is the
	// windows' steps over their time. BaselineP10/P90 are the windows'
	// rates at p10 and p90 relative to it (their spread: a goodput closer
	// to 1 than that spread cannot be told from 1), BaselineWindows how
	// many there were and BaselineCoveredS the time they covered.
	BaselineStepsPerS float64 `json:"baseline_steps_per_s"`
	BaselineP10       float64 `json:"baseline_p10"`
	BaselineP90       float64 `json:"baseline_p90"`
	BaselineWindows   int     `json:"baseline_windows"`
	BaselineCoveredS  float64 `json:"baseline_covered_s"`
	// UpfrontStepsPerS is the rate of the undisturbed phase before the
	// faults (Baseline long), for comparison; goodput falls back on it
	// when the run holds no window.
	UpfrontStepsPerS float64 `json:"upfront_steps_per_s"`
	// UsefulSteps is how far the job's step counter advanced during the
	// disturbed phase (steps redone after a fault count once);
	// ExpectedSteps is what the baseline rate makes in the same time.
	UsefulSteps   int64   `json:"useful_steps"`
	ExpectedSteps float64 `json:"expected_steps"`
	Goodput       float64 `json:"goodput"`
	// SampleGoodput weighs each useful step by the world size it ran at,
	// against the full world: steps at a smaller size after a fault teach
	// the model less.
	SampleGoodput float64 `json:"sample_goodput"`
	// StallP50S is the median time from a fault to the job's first step
	// in the next generation.
	StallP50S float64 `json:"stall_p50_s"`
	StallMaxS float64 `json:"stall_max_s"`
	// StallSumS is the stalls summed: 1 - StallSumS/DurationS is the
	// goodput the stalls alone leave, without any baseline rate.
	StallSumS float64 `json:"stall_sum_s"`
}

// Goodput runs Workers workers, measures their undisturbed step rate for
// Baseline, then for Duration faults one worker every KillEvery (rotating
// through the ranks, rank 0 included) and starts a replacement at once,
// as a pod's controller would; goodput is the useful steps of that phase
// over the steps the undisturbed job would have made in it.
func Goodput(ctx context.Context, cfg GoodputConfig, progress io.Writer) (GoodputResult, error) {
	if cfg.Fault == "trainer" {
		return GoodputResult{}, errors.New("fault trainer is for bench recovery: use --fault kill or stop")
	}
	if err := CheckFault(cfg.Fault, cfg.Mode); err != nil {
		return GoodputResult{}, err
	}
	if cfg.Workers < 2 || cfg.Duration <= 0 || cfg.KillEvery <= 0 || cfg.Baseline <= 0 {
		return GoodputResult{}, errors.New("need at least 2 workers and positive --duration, --kill-every and --baseline")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	job, rec, _, stop, err := cfg.startTraining(ctx, "goodput", cfg.Workers, cfg.Settle, progress)
	if err != nil {
		return GoodputResult{}, err
	}
	defer stop()

	res := GoodputResult{Bench: "goodput", Trainer: cfg.Trainer, Mode: cfg.Mode, Fault: cfg.Fault, Workers: cfg.Workers,
		DurationS: cfg.Duration.Seconds(), KillEveryS: cfg.KillEvery.Seconds()}
	b0, t0 := rec.Top(), time.Now()
	if err := rec.Until(ctx, t0.Add(cfg.Baseline)); err != nil {
		return res, err
	}
	b1, t1 := rec.Top(), time.Now()
	res.UpfrontStepsPerS = float64(b1-b0) / t1.Sub(t0).Seconds()
	fmt.Fprintf(progress, "undisturbed: %.2f steps/s over %s\n", res.UpfrontStepsPerS, cfg.Baseline)
	if res.UpfrontStepsPerS <= 0 {
		return res, errors.New("the undisturbed job made no steps")
	}

	var samples []rateSample
	rec.Every(100*time.Millisecond, func() {
		gen, world := rec.Generation(), 0
		for _, l := range rec.Last() {
			if l.Generation == gen {
				world = max(world, l.World)
			}
		}
		samples = append(samples, rateSample{at: time.Now(), top: rec.Top(), gen: gen, world: world, fullWorld: world == cfg.Workers})
	})
	defer rec.Every(0, nil)
	start, s0 := time.Now(), rec.Top()
	end := start.Add(cfg.Duration)
	var stalls []float64
	var frozen []*localjob.Worker
	for k := 0; ; k++ {
		next := start.Add(time.Duration(k+1) * cfg.KillEvery)
		if !next.Before(end) {
			break
		}
		if err := rec.Until(ctx, next); err != nil {
			return res, err
		}
		victim := rec.ByRank(k % cfg.Workers)
		if victim == nil {
			return res, fmt.Errorf("fault %d: no live worker holds rank %d", k+1, k%cfg.Workers)
		}
		at, gen := time.Now(), rec.Generation()
		if cfg.Fault == "kill" {
			job.Kill(victim)
		} else {
			job.Freeze(victim)
			frozen = append(frozen, victim)
		}
		if _, err := job.AddWorker(ctx); err != nil {
			return res, err
		}
		res.Faults++
		resumed, ok, err := rec.FirstStepAbove(ctx, gen, end)
		if err != nil {
			return res, fmt.Errorf("after the %s of %s: %w", cfg.Fault, victim.ID, err)
		}
		stall := end.Sub(at) // stalled till the end of the phase
		if ok {
			stall = max(0, resumed.Sub(at))
		}
		stalls = append(stalls, stall.Seconds())
		fmt.Fprintf(progress, "%s %d (rank %d, %s): the job stepped in a new generation after %.3fs\n", cfg.Fault, k+1, k%cfg.Workers, victim.ID, stall.Seconds())
		for _, f := range frozen {
			job.Kill(f) // a frozen pod is gone for good once the others moved on
		}
		frozen = frozen[:0]
	}
	if err := rec.Until(ctx, end); err != nil {
		return res, err
	}
	s1, elapsed := rec.Top(), time.Since(start)
	pooled, rates, covered := inRunBaseline(samples)
	res.BaselineStepsPerS, res.BaselineWindows, res.BaselineCoveredS = pooled, len(rates), covered.Seconds()
	res.BaselineP10, res.BaselineP90 = spread(rates, pooled)
	if pooled <= 0 {
		res.BaselineStepsPerS = res.UpfrontStepsPerS
	}
	fmt.Fprintf(progress, "undisturbed within the run: %.2f steps/s over %d windows (%.0fs; p10 %.3f, p90 %.3f of it); up front %.2f steps/s\n",
		res.BaselineStepsPerS, len(rates), covered.Seconds(), res.BaselineP10, res.BaselineP90, res.UpfrontStepsPerS)
	res.UsefulSteps = s1 - s0
	res.ExpectedSteps = res.BaselineStepsPerS * elapsed.Seconds()
	res.Goodput = float64(res.UsefulSteps) / res.ExpectedSteps
	res.SampleGoodput = float64(rec.Samples(s0, s1)) / (res.ExpectedSteps * float64(cfg.Workers))
	p := quantile.Each(stalls, 0.5, 1)
	res.StallP50S, res.StallMaxS = p[0], p[1]
	for _, st := range stalls {
		res.StallSumS += st
	}
	return res, nil
}
