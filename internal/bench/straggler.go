package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/localjob"
)

// StragglerConfig sizes the straggler benchmark.
type StragglerConfig struct {
	// Ringside runs the sidecars (empty: this executable); TrainerBin is
	// the ring trainer (empty: next to this executable, or in PATH).
	Ringside   string
	TrainerBin string
	Workers    int
	// Slow is the straggler's factor on its compute (the ring trainer's
	// --step-time), from step SlowFrom on.
	Slow     float64
	SlowFrom int64
	StepTime time.Duration
	// Clean is the clean run's length (0: none), After how long the job
	// is measured once the straggler's replacement trains.
	Clean, After time.Duration
	// StatusInterval is the sidecars' --status-interval: detection takes
	// the window plus up to one interval.
	StatusInterval time.Duration
	Straggler      coordinator.StragglerConfig
	Timeout        time.Duration
	LogDir         string
}

// DefaultStragglerConfig is what `ringside bench straggler` runs.
func DefaultStragglerConfig() StragglerConfig {
	s := coordinator.DefaultStragglerConfig()
	s.Action = record.ActionReplace
	return StragglerConfig{
		Workers: 8, Slow: 1.5, SlowFrom: 300, StepTime: 50 * time.Millisecond,
		Clean: 10 * time.Minute, After: 60 * time.Second, StatusInterval: 250 * time.Millisecond,
		Straggler: s, Timeout: 40 * time.Minute,
	}
}

func (c StragglerConfig) validate() error {
	var errs []error
	if c.Workers < minStragglerWorkers {
		errs = append(errs, fmt.Errorf("--workers %d: want at least %d (the leader compares a member with the ring's median)", c.Workers, minStragglerWorkers))
	}
	if !(c.Slow > c.Straggler.Factor && c.Slow <= 100) {
		errs = append(errs, fmt.Errorf("--slow %g: want above the straggler factor %g (and at most 100)", c.Slow, c.Straggler.Factor))
	}
	if c.SlowFrom < 1 || c.StepTime <= 0 || c.Clean < 0 || c.After <= 0 || c.StatusInterval <= 0 || c.Timeout <= 0 {
		errs = append(errs, errors.New("--slow-from, --step-time, --after, --status-interval and --timeout must be positive, --clean not negative"))
	}
	if err := c.Straggler.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// minStragglerWorkers: a ring of fewer has no median worth the name.
const minStragglerWorkers = 3

// StragglerResult is one run of the straggler benchmark. Goodput is the
// job's samples per second: each step counts the world size it ran at.
type StragglerResult struct {
	Bench           string  `json:"bench"`
	Workers         int     `json:"workers"`
	Slow            float64 `json:"slow"`
	StepTimeS       float64 `json:"step_time_s"`
	Factor          float64 `json:"factor"`
	WindowSteps     int64   `json:"window_steps"`
	StatusIntervalS float64 `json:"status_interval_s"`
	// CleanS is the clean run's length; CleanFalsePositives the members
	// named in it (every one is false: nobody is slowed);
	// CleanSamplesPerS its goodput.
	CleanS              float64 `json:"clean_s"`
	CleanFalsePositives int     `json:"clean_false_positives"`
	CleanSamplesPerS    float64 `json:"clean_samples_per_s"`
	// SlowFromStep is the straggler's first slow step; Detected whether
	// the leader named it, DetectSteps the job's steps from its first slow
	// step to the naming (the job's step counter when it was named, less
	// SlowFromStep-1), DetectS the time.
	SlowFromStep int64   `json:"slow_from_step"`
	Detected     bool    `json:"detected"`
	DetectSteps  int64   `json:"detect_steps"`
	DetectS      float64 `json:"detect_s"`
	// FalsePositives are other members named in the slowed run.
	FalsePositives int `json:"false_positives"`
	// Goodput before the slow-down, while the straggler slows the ring,
	// from its naming until its replacement trains (the drain, world-1,
	// the join), and for After once the ring is whole again; ReplaceS is
	// that middle phase's length.
	BeforeSamplesPerS    float64 `json:"before_samples_per_s"`
	DuringSamplesPerS    float64 `json:"during_samples_per_s"`
	ReplacingSamplesPerS float64 `json:"replacing_samples_per_s"`
	AfterSamplesPerS     float64 `json:"after_samples_per_s"`
	ReplaceS             float64 `json:"replace_s"`
	// AfterVsClean is the goodput after the replacement over the clean
	// run's (0 without a clean run).
	AfterVsClean float64 `json:"after_vs_clean"`
}

var _ Result = StragglerResult{}

// Summary gives the detection, the false positives and the goodputs.
func (r StragglerResult) Summary() string {
	return fmt.Sprintf("%d workers, one slowed %.2fx from step %d: named after %d steps (%.1fs); false positives %d in a %.0fs clean run, %d in the slowed one; goodput before %.1f, during %.1f, replacing %.1f, after %.1f samples/s (%.3f of the clean run's %.1f)",
		r.Workers, r.Slow, r.SlowFromStep, r.DetectSteps, r.DetectS, r.CleanFalsePositives, r.CleanS, r.FalsePositives,
		r.BeforeSamplesPerS, r.DuringSamplesPerS, r.ReplacingSamplesPerS, r.AfterSamplesPerS, r.AfterVsClean, r.CleanSamplesPerS)
}

// Straggler measures straggler detection and replacement: a clean run of
// Workers ring trainers for Clean, counting the members the leader names
// (false positives); then a run where one trainer computes Slow times as
// long from step SlowFrom, timing its naming, and replacing it as a pod's
// controller would (a new worker once it drained), with the job's goodput
// in each phase.
func Straggler(ctx context.Context, cfg StragglerConfig, progress io.Writer) (StragglerResult, error) {
	res := StragglerResult{Bench: "straggler", Workers: cfg.Workers, Slow: cfg.Slow, StepTimeS: cfg.StepTime.Seconds(),
		Factor: cfg.Straggler.Factor, WindowSteps: cfg.Straggler.Window, StatusIntervalS: cfg.StatusInterval.Seconds(),
		CleanS: cfg.Clean.Seconds(), SlowFromStep: cfg.SlowFrom}
	if err := cfg.validate(); err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if cfg.Clean > 0 {
		if err := cleanRun(ctx, cfg, &res, progress); err != nil {
			return res, fmt.Errorf("clean run: %w", err)
		}
	}
	if err := slowedRun(ctx, cfg, &res, progress); err != nil {
		return res, fmt.Errorf("slowed run: %w", err)
	}
	if res.CleanSamplesPerS > 0 {
		res.AfterVsClean = res.AfterSamplesPerS / res.CleanSamplesPerS
	}
	return res, nil
}

// stragglerJob is a local job of ring trainers whose sidecars look for
// stragglers, and the leader's findings as they come.
type stragglerJob struct {
	job      *localjob.Job
	track    *localjob.Tracker
	findings chan finding // members named
	stop     func()
}

func startStragglerJob(ctx context.Context, cfg StragglerConfig, name string, slowOne bool, progress io.Writer) (*stragglerJob, error) {
	logDir := cfg.LogDir
	if logDir != "" {
		logDir = filepath.Join(logDir, name) // the clean run's and the slowed run's apart
	}
	dir, cleanup, err := jobDir(logDir, name)
	if err != nil {
		return nil, err
	}
	trainer, err := localjob.FindTrainer(cfg.TrainerBin)
	if err != nil {
		cleanup()
		return nil, err
	}
	s := cfg.Straggler
	job, err := localjob.Start(ctx, localjob.Config{Ringside: cfg.Ringside, Trainer: []string{trainer, "--step-time", cfg.StepTime.String()}, Job: name, Dir: dir,
		SidecarArgs: []string{"--expected-size", strconv.Itoa(cfg.Workers), "--status-interval", cfg.StatusInterval.String(),
			"--straggler-policy", string(s.Action), "--straggler-factor", fmt.Sprint(s.Factor),
			"--straggler-window", fmt.Sprint(s.Window), "--straggler-max-share", fmt.Sprint(s.MaxShare)}})
	if err != nil {
		cleanup()
		return nil, err
	}
	sj := &stragglerJob{job: job, track: localjob.NewTracker(job), findings: make(chan finding, 64)}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	sj.stop = func() { stopWatch(); <-watched; job.Close(); cleanup() }
	client, err := clientv3.New(clientv3.Config{Endpoints: job.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		close(watched)
		sj.stop()
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	prefix := record.Prefix("default", name) + record.StragglersDir
	go func() {
		defer close(watched)
		defer client.Close()
		for wr := range client.Watch(wctx, prefix, clientv3.WithPrefix()) {
			for _, ev := range wr.Events {
				if !ev.IsCreate() {
					continue
				}
				id, f, err := record.DecodeStraggler(string(ev.Kv.Key), ev.Kv.Value)
				if err != nil {
					fmt.Fprintf(progress, "a malformed finding: %v\n", err)
					continue
				}
				sj.findings <- finding{id, f}
			}
		}
	}()
	for i := range cfg.Workers {
		var args []string
		if slowOne && i == cfg.Workers-1 {
			args = []string{"--slow", fmt.Sprint(cfg.Slow), "--slow-from", strconv.FormatInt(cfg.SlowFrom, 10)}
		}
		if _, err := job.AddWorkerArgs(ctx, args); err != nil {
			sj.stop()
			return nil, err
		}
	}
	fmt.Fprintf(progress, "%s: %d workers started; waiting for all of them to train together\n", name, cfg.Workers)
	sj.track.Every(100*time.Millisecond, func() {}) // the waits look at the findings even while no step comes
	if _, err := sj.track.AllStepAt(ctx, cfg.Workers, time.Now()); err != nil {
		sj.stop()
		return nil, err
	}
	return sj, nil
}

// finding is a member the leader named.
type finding struct {
	id string
	record.Straggler
}

// named returns the members named since the last call.
func (sj *stragglerJob) named() []finding {
	var out []finding
	for {
		select {
		case f := <-sj.findings:
			out = append(out, f)
		default:
			return out
		}
	}
}

// rate is the job's samples per second from (step, time) a to b.
func (sj *stragglerJob) rate(fromStep int64, from time.Time, toStep int64, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	return float64(sj.track.Samples(fromStep, toStep)) / to.Sub(from).Seconds()
}

// settleTime is how long after the ring forms the rates start: the first
// steps of a new ring run slower.
const settleTime = 2 * time.Second

func cleanRun(ctx context.Context, cfg StragglerConfig, res *StragglerResult, progress io.Writer) error {
	sj, err := startStragglerJob(ctx, cfg, "straggler-clean", false, progress)
	if err != nil {
		return err
	}
	defer sj.stop()
	if err := sj.track.Until(ctx, time.Now().Add(settleTime)); err != nil {
		return err
	}
	t0, s0 := time.Now(), sj.track.Top()
	if err := sj.track.Until(ctx, t0.Add(cfg.Clean)); err != nil {
		return err
	}
	t1, s1 := time.Now(), sj.track.Top()
	named := sj.named()
	res.CleanFalsePositives = len(named)
	res.CleanSamplesPerS = sj.rate(s0, t0, s1, t1)
	fmt.Fprintf(progress, "clean run: %.1f samples/s over %s, named %v\n", res.CleanSamplesPerS, cfg.Clean, ids(named))
	return nil
}

func slowedRun(ctx context.Context, cfg StragglerConfig, res *StragglerResult, progress io.Writer) error {
	sj, err := startStragglerJob(ctx, cfg, "straggler", true, progress)
	if err != nil {
		return err
	}
	defer sj.stop()
	slowID := fmt.Sprintf("w%d", cfg.Workers-1)
	straggler := sj.job.Workers()[slowID]
	t0, s0 := time.Now(), sj.track.Top()
	if s0 >= cfg.SlowFrom-1 {
		return fmt.Errorf("the job was at step %d when every worker trained, past --slow-from %d: raise it", s0, cfg.SlowFrom)
	}
	// Before: up to the straggler's first slow step.
	if _, err := sj.track.Await(ctx, time.Time{}, func() bool { return sj.track.Top() >= cfg.SlowFrom-1 }); err != nil {
		return err
	}
	tSlow, sSlow := time.Now(), sj.track.Top()
	res.BeforeSamplesPerS = sj.rate(s0, t0, sSlow, tSlow)
	fmt.Fprintf(progress, "before: %.1f samples/s; %s computes %.2fx from step %d\n", res.BeforeSamplesPerS, slowID, cfg.Slow, cfg.SlowFrom)

	// During: until the leader names it (or a window of steps four times
	// over has passed without).
	var others []finding
	var found finding
	deadline := time.Now().Add(time.Duration(10*float64(cfg.Straggler.Window)*cfg.Slow) * cfg.StepTime)
	ok, err := sj.track.Await(ctx, deadline, func() bool {
		for _, f := range sj.named() {
			if f.id == slowID {
				res.Detected, found = true, f
			} else {
				others = append(others, f)
			}
		}
		return res.Detected
	})
	if err != nil {
		return err
	}
	tNamed, sNamed := time.Now(), sj.track.Top()
	res.DuringSamplesPerS = sj.rate(sSlow, tSlow, sNamed, tNamed)
	if !ok {
		res.FalsePositives = len(others)
		return fmt.Errorf("%s was not named within %s of its slow-down (named instead: %v)", slowID, deadline.Sub(tSlow).Round(time.Second), ids(others))
	}
	// The step the leader named it at; the time as the bench saw it.
	res.DetectSteps, res.DetectS = found.Step-(cfg.SlowFrom-1), tNamed.Sub(tSlow).Seconds()
	fmt.Fprintf(progress, "named %s at step %d, slow since step %d by the leader's count (%.2fx the median): %d steps (%.1fs) after its first slow step; the bench saw it at step %d\n",
		slowID, found.Step, found.SinceStep, found.Ratio(), res.DetectSteps, res.DetectS, sNamed)

	// Replacing: the straggler drains and exits; a new worker takes its
	// place, as its pod would be recreated.
	if cfg.Straggler.Action == record.ActionReplace {
		if _, err := sj.track.Await(ctx, time.Time{}, func() bool {
			select {
			case <-straggler.Sidecar().Done():
				return true
			default:
				return false
			}
		}); err != nil {
			return fmt.Errorf("waiting for %s to drain: %w", slowID, err)
		}
		sj.job.Kill(straggler) // gone already: only forgets it
		if _, err := sj.job.AddWorker(ctx); err != nil {
			return err
		}
		if _, err := sj.track.AllStepAbove(ctx, cfg.Workers, sj.track.Generation(), time.Now()); err != nil {
			return fmt.Errorf("waiting for the replacement to train: %w", err)
		}
	}
	tBack, sBack := time.Now(), sj.track.Top()
	res.ReplaceS = tBack.Sub(tNamed).Seconds()
	res.ReplacingSamplesPerS = sj.rate(sNamed, tNamed, sBack, tBack)
	fmt.Fprintf(progress, "replaced in %.1fs: %.1f samples/s meanwhile\n", res.ReplaceS, res.ReplacingSamplesPerS)

	if err := sj.track.Until(ctx, tBack.Add(settleTime)); err != nil {
		return err
	}
	t2, s2 := time.Now(), sj.track.Top()
	if err := sj.track.Until(ctx, t2.Add(cfg.After)); err != nil {
		return err
	}
	t3, s3 := time.Now(), sj.track.Top()
	res.AfterSamplesPerS = sj.rate(s2, t2, s3, t3)
	others = append(others, sj.named()...)
	res.FalsePositives = len(others)
	fmt.Fprintf(progress, "after: %.1f samples/s; others named: %v\n", res.AfterSamplesPerS, ids(others))
	return nil
}

func ids(fs []finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.id
	}
	return out
}
