package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ringside/ringside/autoscale"
	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// AutoscaleConfig is the simulated job and cluster of `ringside bench
// autoscale`: one training job, the same traces of preemptions and of
// cluster capacity, run under three controllers.
type AutoscaleConfig struct {
	// Seed draws the traces and the measurement noise: one seed, one run.
	Seed uint64
	// Duration is the simulated time; 4 h holds several preemptions and
	// capacity shortages and lets the noise scale grow.
	Duration time.Duration
	// SyncPeriod is how often each controller decides: 15 s, the
	// HorizontalPodAutoscaler's.
	SyncPeriod time.Duration
	// Min, Max and Unit bound every controller's replicas.
	Min, Max, Unit int32
	// Fixed is the fixed-size baseline's replicas; 0 takes the midpoint
	// of [Min, Max] on the unit, the size one would pick without knowing
	// the curve.
	Fixed int32
	// TargetEfficiency is the ringside policy's least marginal efficiency.
	TargetEfficiency float64
	// RatePerWorker (samples/s) and CommCost shape the throughput:
	// n·r / (1 + c·(n-1)). c = 0.04 is a ring whose all-reduce costs 4 %
	// of a step per extra worker: 32 workers run at 45 % of linear.
	RatePerWorker, CommCost float64
	// BatchPerWorker is one worker's samples per step; with the gradient
	// noise scale it gives the statistical efficiency
	// (GNS + B) / (GNS + n·B) of n workers' batch.
	BatchPerWorker float64
	// GNSStart and GNSEnd are the gradient noise scale (samples) at the
	// start and the end of the run: it grows as training progresses, so
	// larger batches become worth more (the knee moves up).
	GNSStart, GNSEnd float64
	// Noise is the relative standard deviation of a throughput reading;
	// OutlierRate the share of readings a straggler cuts to 30 %.
	Noise, OutlierRate float64
	// StartupTime is from a pod placed to its worker in the job;
	// ReformTime the training lost at every change of the members (the
	// ring re-forms); DrainTime how long a leaving pod holds its GPU.
	StartupTime, ReformTime, DrainTime time.Duration
	// Preemptions each kill 1 to 4 of the job's pods and withhold their
	// GPUs for 5 to 20 minutes (the pods are recreated and wait for
	// room).
	Preemptions int
	// PendingPeriods each drop the GPUs the cluster has for the job from
	// Capacity to LowCapacity for 20 to 40 minutes: pods beyond it stay
	// Pending (running ones are not evicted).
	PendingPeriods        int
	Capacity, LowCapacity int32
	// PendingTimeout is the ringside policy's pendingTimeoutSeconds.
	PendingTimeout time.Duration
	// CPUUtilization is what a CPU (or GPU) utilization metric reads on a
	// training worker at any size (it is busy stepping or waiting in the
	// all-reduce), and CPUTarget the HorizontalPodAutoscaler's target.
	CPUUtilization, CPUTarget float64
}

// DefaultAutoscaleConfig returns the default scenario (each value's why
// is on AutoscaleConfig).
func DefaultAutoscaleConfig() AutoscaleConfig {
	return AutoscaleConfig{
		Seed: 1, Duration: 4 * time.Hour, SyncPeriod: 15 * time.Second,
		Min: 1, Max: 32, Unit: 1, TargetEfficiency: 0.7,
		RatePerWorker: 400, CommCost: 0.04, BatchPerWorker: 64, GNSStart: 512, GNSEnd: 4096,
		Noise: 0.05, OutlierRate: 0.02,
		StartupTime: 30 * time.Second, ReformTime: 10 * time.Second, DrainTime: 5 * time.Second,
		Preemptions: 6, PendingPeriods: 2, Capacity: 32, LowCapacity: 5,
		PendingTimeout: 120 * time.Second, CPUUtilization: 0.9, CPUTarget: 0.8,
	}
}

// Validate names every value out of range.
func (c AutoscaleConfig) Validate() error {
	var errs []error
	if c.Duration < time.Minute || c.SyncPeriod < time.Second || c.SyncPeriod > c.Duration {
		errs = append(errs, fmt.Errorf("duration %s, sync period %s: want a sync period of 1 s or more within a duration of 1 min or more", c.Duration, c.SyncPeriod))
	}
	if c.Unit < 1 || c.Min < c.Unit || c.Max < c.Min || c.Min%c.Unit != 0 || c.Max%c.Unit != 0 {
		errs = append(errs, fmt.Errorf("min %d, max %d, unit %d: want 1 <= unit <= min <= max, min and max multiples of unit", c.Min, c.Max, c.Unit))
	}
	if c.Fixed != 0 && (c.Fixed < c.Min || c.Fixed > c.Max || c.Fixed%c.Unit != 0) {
		errs = append(errs, fmt.Errorf("fixed %d: want a multiple of unit in [min, max], or 0 for the midpoint", c.Fixed))
	}
	if !(c.TargetEfficiency > 0 && c.TargetEfficiency <= 1) {
		errs = append(errs, fmt.Errorf("target efficiency %v: want more than 0, at most 1", c.TargetEfficiency))
	}
	if !(c.RatePerWorker > 0) || !(c.CommCost >= 0) || !(c.BatchPerWorker > 0) || !(c.GNSStart >= 0) || !(c.GNSEnd >= 0) {
		errs = append(errs, errors.New("rate and batch per worker must be positive, comm cost and the noise scales 0 or more"))
	}
	if !(c.Noise >= 0 && c.Noise < 1) || !(c.OutlierRate >= 0 && c.OutlierRate <= 1) {
		errs = append(errs, fmt.Errorf("noise %v, outlier rate %v: want noise in [0, 1), a rate in [0, 1]", c.Noise, c.OutlierRate))
	}
	if c.StartupTime < 0 || c.ReformTime < 0 || c.DrainTime < 0 || c.PendingTimeout < time.Second {
		errs = append(errs, errors.New("startup, reform and drain times must be 0 or more, the pending timeout 1 s or more"))
	}
	if c.Preemptions < 0 || c.PendingPeriods < 0 || c.Capacity < 1 || c.LowCapacity < 0 || c.LowCapacity > c.Capacity {
		errs = append(errs, fmt.Errorf("preemptions %d, pending periods %d, capacity %d, low capacity %d: want counts of 0 or more and 0 <= low <= capacity, capacity >= 1",
			c.Preemptions, c.PendingPeriods, c.Capacity, c.LowCapacity))
	}
	if !(c.CPUUtilization > 0) || !(c.CPUTarget > 0) {
		errs = append(errs, errors.New("CPU utilization and target must be positive"))
	}
	return errors.Join(errs...)
}

// AutoscaleResult compares the controllers on one scenario.
type AutoscaleResult struct {
	Bench string `json:"bench"`
	// GoodputPerGPU is useful samples (samples times their statistical
	// efficiency) per GPU-second allocated: placed pods hold a GPU,
	// pending ones do not.
	GoodputPerGPU Controllers `json:"goodput_per_gpu"`
	// Reversals is the most direction changes of ringside's scale events
	// (an up then a down, or a down then an up) within any one scale-down
	// stabilization window.
	Reversals int `json:"reversals"`
	// ScaleEvents counts ringside's changes of the target's replicas.
	ScaleEvents int `json:"scale_events"`
	// DirectionChanges counts all of ringside's reversals, however far
	// apart.
	DirectionChanges int `json:"direction_changes"`
	// Goodput is the useful samples each controller's job processed, and
	// MeanWorkers its mean workers in the job: a higher goodput per GPU is
	// bought with a smaller job.
	Goodput     Controllers `json:"goodput_samples"`
	MeanWorkers Controllers `json:"mean_workers"`
	Seed        uint64      `json:"seed"`
	DurationS   float64     `json:"duration_s"`
	WindowS     float64     `json:"window_s"`
}

// Controllers holds one figure per controller, in the order the issue's
// target names them.
type Controllers struct {
	Ringside float64 `json:"ringside"`
	HPACPU   float64 `json:"hpa_cpu"`
	Fixed    float64 `json:"fixed"`
}

// Summary compares the goodput per GPU and says how steady ringside was.
func (r AutoscaleResult) Summary() string {
	return fmt.Sprintf("%.0fs simulated (seed %d): goodput per GPU-second ringside %.1f (%.1f workers on average), CPU-style HPA %.1f (%.1f), fixed %.1f (%.1f); ringside scaled %d times, at most %d reversals within a %.0fs window (%d in all)",
		r.DurationS, r.Seed, r.GoodputPerGPU.Ringside, r.MeanWorkers.Ringside, r.GoodputPerGPU.HPACPU, r.MeanWorkers.HPACPU,
		r.GoodputPerGPU.Fixed, r.MeanWorkers.Fixed, r.ScaleEvents, r.Reversals, r.WindowS, r.DirectionChanges)
}

var _ Result = AutoscaleResult{}

// Autoscale runs the scenario under the ringside policy, a CPU-style
// HorizontalPodAutoscaler rule and a fixed size. It is deterministic
// given cfg.Seed.
func Autoscale(cfg AutoscaleConfig) (AutoscaleResult, error) {
	if err := cfg.Validate(); err != nil {
		return AutoscaleResult{}, err
	}
	if cfg.Fixed == 0 {
		cfg.Fixed = max(cfg.Min, (cfg.Min+cfg.Max)/2/cfg.Unit*cfg.Unit)
	}
	tr := newTrace(cfg)
	runs := []*simJob{
		runSim(cfg, tr, &ringsideController{cfg: cfg}),
		runSim(cfg, tr, &hpaCPUController{cfg: cfg}),
		runSim(cfg, tr, fixedController{cfg.Fixed}),
	}
	res := AutoscaleResult{Bench: "autoscale", Seed: cfg.Seed, DurationS: cfg.Duration.Seconds(), WindowS: autoscaleWindow.Seconds()}
	per := func(f func(*simJob) float64) Controllers {
		return Controllers{Ringside: round3(f(runs[0])), HPACPU: round3(f(runs[1])), Fixed: round3(f(runs[2]))}
	}
	res.GoodputPerGPU = per(func(j *simJob) float64 { return j.goodput / max(j.gpuSeconds, 1) })
	res.Goodput = per(func(j *simJob) float64 { return math.Round(j.goodput) })
	res.MeanWorkers = per(func(j *simJob) float64 { return j.workerSeconds / cfg.Duration.Seconds() })
	res.ScaleEvents = len(runs[0].events)
	res.Reversals, res.DirectionChanges = reversals(runs[0].events, autoscaleWindow)
	return res, nil
}

// autoscaleWindow is the default scale-down stabilization window, which
// the ringside controller runs with.
const autoscaleWindow = 300 * time.Second

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// trace is what happens to the cluster, the same for every controller.
type trace struct {
	preempt  map[int][]preemption // by second
	lowUntil []span
	phi      func(t float64) float64
}

type preemption struct {
	kill int32
	hold int
}

type span struct{ from, to int }

func newTrace(cfg AutoscaleConfig) trace {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7472616365))
	secs := int(cfg.Duration.Seconds())
	margin := min(600, secs/10)
	at := func() int { return margin + rng.IntN(max(secs-2*margin, 1)) }
	tr := trace{preempt: map[int][]preemption{}}
	for range cfg.Preemptions {
		t := at()
		tr.preempt[t] = append(tr.preempt[t], preemption{kill: 1 + rng.Int32N(4), hold: 300 + rng.IntN(900)})
	}
	for range cfg.PendingPeriods {
		t := at()
		tr.lowUntil = append(tr.lowUntil, span{t, t + 1200 + rng.IntN(1200)})
	}
	tr.phi = func(t float64) float64 { return cfg.GNSStart + (cfg.GNSEnd-cfg.GNSStart)*t/float64(secs) }
	return tr
}

func (tr trace) capacity(cfg AutoscaleConfig, t int, withheld int32) int32 {
	c := cfg.Capacity
	for _, s := range tr.lowUntil {
		if t >= s.from && t < s.to {
			c = cfg.LowCapacity
		}
	}
	return max(c-withheld, 0)
}

// simState is what a controller sees of the job at a sync.
type simState struct {
	t                 int
	replicas, workers int32
	draining, pending int32
	pendingFor        time.Duration
	// steady is true when the job ran at workers, without a pause, for
	// the whole last sync period: its throughput reading is of that size.
	steady bool
	// sps is the throughput reading (noisy), phi the noise scale.
	sps, phi float64
}

// controller sets the replicas: start at the beginning, decide at every
// sync.
type controller interface {
	start() int32
	decide(s simState) int32
}

// simJob is one run: the job's pods and what they did.
type simJob struct {
	replicas, running   int32
	starting, draining  []int // when each becomes ready / leaves
	withheld            []span
	withheldCount       []int32
	pausedUntil         int
	pendingSince        int
	goodput, gpuSeconds float64
	workerSeconds       float64
	events              []scaleEvent
}

type scaleEvent struct {
	t  int
	up bool
}

func runSim(cfg AutoscaleConfig, tr trace, c controller) *simJob {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6e6f697365))
	j := &simJob{pendingSince: -1}
	j.replicas = c.start()
	secs, sync := int(cfg.Duration.Seconds()), int(cfg.SyncPeriod.Seconds())
	startup, reform, drain := int(cfg.StartupTime.Seconds()), int(cfg.ReformTime.Seconds()), int(cfg.DrainTime.Seconds())
	for t := range secs {
		j.preempt(t, tr, reform)
		withheld := int32(0)
		for i, s := range j.withheld {
			if t < s.to {
				withheld += j.withheldCount[i]
			}
		}
		j.place(t, tr.capacity(cfg, t, withheld), startup, reform)

		phi := tr.phi(float64(t))
		if t >= j.pausedUntil && j.running > 0 {
			j.goodput += cfg.throughput(j.running) * cfg.statEfficiency(j.running, phi)
		}
		j.gpuSeconds += float64(j.running) + float64(len(j.starting)+len(j.draining))
		j.workerSeconds += float64(j.running)

		if t%sync == sync-1 {
			s := simState{t: t, replicas: j.replicas, workers: j.running, draining: int32(len(j.draining)), pending: j.pending(), phi: phi}
			if s.pending > 0 {
				s.pendingFor = time.Duration(t-j.pendingSince) * time.Second
			}
			s.steady = j.running > 0 && t >= j.pausedUntil+sync
			if s.steady {
				s.sps = cfg.throughput(j.running) * (1 + cfg.Noise*rng.NormFloat64())
				if rng.Float64() < cfg.OutlierRate {
					s.sps *= 0.3
				}
			}
			if r := c.decide(s); r != j.replicas {
				j.events = append(j.events, scaleEvent{t, r > j.replicas})
				j.resize(t, r, drain, reform)
			}
		}
	}
	return j
}

func (c AutoscaleConfig) throughput(n int32) float64 {
	return float64(n) * c.RatePerWorker / (1 + c.CommCost*float64(n-1))
}

// statEfficiency is relative to one worker's batch, so one worker's
// samples are all useful.
func (c AutoscaleConfig) statEfficiency(n int32, phi float64) float64 {
	return (phi + c.BatchPerWorker) / (phi + float64(n)*c.BatchPerWorker)
}

// preempt kills the job's pods the trace preempts at t (workers first,
// then pods still starting) and withholds their GPUs; the pods are
// recreated and wait for room.
func (j *simJob) preempt(t int, tr trace, reform int) {
	for _, p := range tr.preempt[t] {
		kill := p.kill
		if k := min(kill, j.running); k > 0 {
			j.running -= k
			kill -= k
			j.reformed(t, reform)
		}
		for ; kill > 0 && len(j.starting) > 0; kill-- {
			j.starting = j.starting[1:]
		}
		j.withheld = append(j.withheld, span{t, t + p.hold})
		j.withheldCount = append(j.withheldCount, p.kill)
	}
}

// place starts pods while the cluster has room, and lets started ones
// join the job.
func (j *simJob) place(t int, capacity int32, startup, reform int) {
	held := j.running + int32(len(j.starting)+len(j.draining))
	for want := j.replicas - j.running - int32(len(j.starting)); want > 0 && held < capacity; want-- {
		j.starting = append(j.starting, t+startup)
		held++
	}
	joined := int32(0)
	j.starting = slices.DeleteFunc(j.starting, func(ready int) bool {
		if ready <= t {
			joined++
			return true
		}
		return false
	})
	if joined > 0 {
		j.running += joined
		j.reformed(t, reform)
	}
	j.draining = slices.DeleteFunc(j.draining, func(done int) bool { return done <= t })
	switch {
	case j.pending() == 0:
		j.pendingSince = -1
	case j.pendingSince < 0:
		j.pendingSince = t
	}
}

func (j *simJob) pending() int32 {
	return max(j.replicas-j.running-int32(len(j.starting)), 0)
}

// resize sets the replicas; a shrink drops pending pods first, then
// starting ones, then drains workers.
func (j *simJob) resize(t int, replicas int32, drain, reform int) {
	j.replicas = replicas
	excess := j.running + int32(len(j.starting)) - replicas
	for ; excess > 0 && len(j.starting) > 0; excess-- {
		j.starting = j.starting[:len(j.starting)-1]
	}
	if excess > 0 {
		j.running -= excess
		for range excess {
			j.draining = append(j.draining, t+drain)
		}
		j.reformed(t, reform)
	}
}

func (j *simJob) reformed(t, reform int) { j.pausedUntil = max(j.pausedUntil, t+reform) }

// reversals returns the most direction changes of events within any one
// window (both events of a change inside it), and all of them.
func reversals(events []scaleEvent, window time.Duration) (most, all int) {
	w := int(window.Seconds())
	var changes []span // from the first event of each change to the second
	for i := 1; i < len(events); i++ {
		if events[i].up != events[i-1].up {
			changes = append(changes, span{events[i-1].t, events[i].t})
		}
	}
	// The busiest window starts at the first event of some change.
	for _, c := range changes {
		n := 0
		for _, d := range changes {
			if d.from >= c.from && d.to < c.from+w {
				n++
			}
		}
		most = max(most, n)
	}
	return most, len(changes)
}

// ringsideController runs the policy as the controller does: it folds
// each steady reading into the history, decides, and keeps the
// recommendations and changes the behavior needs.
type ringsideController struct {
	cfg     AutoscaleConfig
	hist    []v1alpha1.WorldSizeThroughput
	recs    []autoscale.Recommendation
	changes []autoscale.Change
}

func (c *ringsideController) start() int32 { return c.cfg.Min }

func (c *ringsideController) decide(s simState) int32 {
	now := time.Unix(0, 0).UTC().Add(time.Duration(s.t) * time.Second)
	if s.steady {
		phi := s.phi
		c.hist = autoscale.Observe(c.hist, autoscale.Measurement{Time: now, WorldSize: s.workers, SamplesPerSec: s.sps, GNS: &phi, BatchPerWorker: c.cfg.BatchPerWorker})
	}
	in := autoscale.Input{
		Now: now,
		Spec: v1alpha1.ElasticScalerSpec{MinReplicas: c.cfg.Min, MaxReplicas: c.cfg.Max, Unit: c.cfg.Unit,
			TargetEfficiency: c.cfg.TargetEfficiency, PendingTimeoutSeconds: int32(c.cfg.PendingTimeout.Seconds())},
		Current: s.replicas, Workers: s.workers, Draining: s.draining, Pending: s.pending, PendingFor: s.pendingFor,
		HaveStatus: s.workers > 0, Throughput: c.hist, Recommendations: c.recs, Changes: c.changes,
	}
	d := autoscale.Decide(in)
	c.recs = append(c.recs, autoscale.Recommendation{Time: now, Replicas: d.Recommendation})
	if d.Desired != s.replicas {
		c.changes = append(c.changes, autoscale.Change{Time: now, From: s.replicas, To: d.Desired})
	}
	// Keep what the windows and policies can still look at.
	cutoff := now.Add(-time.Hour)
	c.recs = slices.DeleteFunc(c.recs, func(r autoscale.Recommendation) bool { return r.Time.Before(cutoff) })
	c.changes = slices.DeleteFunc(c.changes, func(ch autoscale.Change) bool { return ch.Time.Before(cutoff) })
	return d.Desired
}

// hpaCPUController is a HorizontalPodAutoscaler on CPU utilization:
// desired = ceil(replicas x utilization / target), at most doubling (or
// +4) per sync, its default scale-up policy. A training worker is busy
// whatever the job's size, so it grows to max. Like the
// HorizontalPodAutoscaler, it does not grow while pods are not ready
// (they count as idle).
type hpaCPUController struct{ cfg AutoscaleConfig }

func (c *hpaCPUController) start() int32 { return c.cfg.Min }

func (c *hpaCPUController) decide(s simState) int32 {
	if s.pending > 0 || s.workers < s.replicas {
		return s.replicas
	}
	want := int32(math.Ceil(float64(s.replicas) * c.cfg.CPUUtilization / c.cfg.CPUTarget))
	want = min(want, max(2*s.replicas, s.replicas+4))
	want = (want + c.cfg.Unit - 1) / c.cfg.Unit * c.cfg.Unit
	return max(c.cfg.Min, min(c.cfg.Max, want))
}

// fixedController keeps one size.
type fixedController struct{ n int32 }

func (c fixedController) start() int32 { return c.n }

func (c fixedController) decide(simState) int32 { return c.n }
