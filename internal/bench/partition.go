package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ringside/ringside/etcdserver"
	"github.com/ringside/ringside/internal/localjob"
	"github.com/ringside/ringside/internal/loopback"
	"github.com/ringside/ringside/internal/netsplit"
)

// The partition cases, by the name --cases takes.
const (
	CaseSplit  = "split"  // the job split in a majority and a minority
	CaseAlone  = "alone"  // one member cut off from everything
	CaseOneWay = "oneway" // nobody hears one member; it hears everyone
	CaseLoss   = "loss"   // random packet loss on every member's link
)

// PartitionCases are the cases `bench partition` runs by default, in order.
var PartitionCases = []string{CaseSplit, CaseAlone, CaseOneWay, CaseLoss}

// The promises a partition case is held to.
const (
	// ResumeWithin: the side that keeps etcd and a majority trains again
	// (every member of it completed a step in a generation without the
	// far side) this soon after the cut.
	ResumeWithin = time.Second
	// RejoinWithin: every member trains in one generation again this soon
	// after the heal.
	RejoinWithin = 2 * time.Second
)

// jitterNote says in every result how the loss case's jitter is made.
func jitterNote(max time.Duration) string {
	if max == 0 {
		return "none"
	}
	return fmt.Sprintf("each packet a member receives is held for a time drawn uniformly from [0, %s] (a netfilter queue in user space, as tc netem would delay it), after the loss", max)
}

// PartitionConfig sizes the partition benchmark.
type PartitionConfig struct {
	TrainerSpec
	// Ringside runs the sidecars (empty: this executable).
	Ringside string
	Members  int
	// Cases are run one after another on one job.
	Cases []string
	// Cut is how long the split, alone and oneway cases last.
	Cut time.Duration
	// Loss is the probability a packet is lost in the loss case, which
	// lasts LossFor; Jitter is the most a packet that is not lost is
	// delayed then (0: none).
	Loss    float64
	Jitter  time.Duration
	LossFor time.Duration
	Settle  time.Duration
	Timeout time.Duration
}

// The bounds of PartitionConfig.
const (
	MinPartitionMembers = 4
	MaxPartitionMembers = 32
)

// DefaultPartitionConfig is what `ringside bench partition` runs.
func DefaultPartitionConfig() PartitionConfig {
	return PartitionConfig{TrainerSpec: TrainerSpec{Trainer: "go", Mode: "live", StepTime: 50 * time.Millisecond},
		Members: 8, Cases: PartitionCases, Cut: 10 * time.Second, Loss: 0.05, Jitter: 50 * time.Millisecond, LossFor: time.Minute,
		Settle: 500 * time.Millisecond, Timeout: 10 * time.Minute}
}

// Validate names the first setting out of range.
func (c PartitionConfig) Validate() error {
	var errs []error
	if c.Members < MinPartitionMembers || c.Members > MaxPartitionMembers {
		errs = append(errs, fmt.Errorf("--members %d is out of range: use %d-%d", c.Members, MinPartitionMembers, MaxPartitionMembers))
	}
	if len(c.Cases) == 0 {
		errs = append(errs, fmt.Errorf("--cases is empty: name one or more of %s", strings.Join(PartitionCases, ",")))
	}
	for _, name := range c.Cases {
		if !slices.Contains(PartitionCases, name) {
			errs = append(errs, fmt.Errorf("--cases: unknown case %q: use %s", name, strings.Join(PartitionCases, ",")))
		}
	}
	if c.Cut < time.Second {
		errs = append(errs, fmt.Errorf("--cut %s is too short to see the job re-form: use 1s or more", c.Cut))
	}
	if c.Loss <= 0 || c.Loss >= 0.5 {
		errs = append(errs, fmt.Errorf("--loss %g is out of range: use a fraction above 0 and below 0.5 (0.05 is 5%%)", c.Loss))
	}
	if c.Jitter < 0 || c.Jitter > time.Second {
		errs = append(errs, fmt.Errorf("--jitter %s is out of range: use 0 (none) to 1s", c.Jitter))
	}
	if c.LossFor < time.Second {
		errs = append(errs, fmt.Errorf("--loss-for %s is too short: use 1s or more", c.LossFor))
	}
	if c.Trainer != "go" {
		errs = append(errs, fmt.Errorf("--trainer %q: the partition benchmark runs the go ring trainer", c.Trainer))
	}
	return errors.Join(errs...)
}

// PartitionCase is what one case did to the job.
type PartitionCase struct {
	Case string `json:"case"`
	// Cut are the members cut off (the minority, the member alone, the
	// member nobody hears); empty in the loss case.
	Cut       []string `json:"cut,omitempty"`
	DurationS float64  `json:"duration_s"`
	// ResumeS is from the cut until every member of the side that keeps
	// etcd and a majority completed a step without the cut members.
	ResumeS float64 `json:"resume_s,omitempty"`
	// RejoinS is from the heal until every member completed a step in
	// one generation again.
	RejoinS float64 `json:"rejoin_s"`
	// The split checks: steps completed in two generations (two sides
	// training, or a committed step lost and redone), generations whose
	// members disagree, steps the cut side completed in a generation of
	// its own during the cut.
	StepsInTwoGenerations   int `json:"steps_in_two_generations"`
	GenerationDisagreements int `json:"generation_disagreements"`
	CutSideSteps            int `json:"cut_side_steps"`
	// Under loss alone: votes against members and generations that left
	// one out, all of them false.
	FalseSuspicions int `json:"false_suspicions"`
	FalseEvictions  int `json:"false_evictions"`
	// Steps is how many steps the job completed in the case.
	Steps int64 `json:"steps"`
	// Broken lists the promises the case broke, each with its evidence.
	Broken []string `json:"broken,omitempty"`
}

// PartitionResult is one run of the partition benchmark.
type PartitionResult struct {
	Bench        string          `json:"bench"`
	Members      int             `json:"members"`
	Loss         float64         `json:"loss"`
	Jitter       string          `json:"jitter"`
	ResumeBoundS float64         `json:"resume_bound_s"`
	RejoinBoundS float64         `json:"rejoin_bound_s"`
	Cases        []PartitionCase `json:"cases"`
	PromisesKept bool            `json:"promises_kept"`
}

// Summary gives each case's figures and what broke.
func (r PartitionResult) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d members; jitter %s", r.Members, r.Jitter)
	for _, c := range r.Cases {
		fmt.Fprintf(&b, "\n  %-7s cut %v for %.0fs: resumed %.3fs, rejoined %.3fs after the heal; %d steps in two generations, %d disagreements, %d cut-side steps, %d false suspicions, %d false evictions",
			c.Case, c.Cut, c.DurationS, c.ResumeS, c.RejoinS, c.StepsInTwoGenerations, c.GenerationDisagreements, c.CutSideSteps, c.FalseSuspicions, c.FalseEvictions)
		for _, why := range c.Broken {
			fmt.Fprintf(&b, "\n    broken: %s", why)
		}
	}
	if r.PromisesKept {
		b.WriteString("\nevery promise kept")
	}
	return b.String()
}

// ErrPromiseBroken is returned, with the result, when a case broke a
// promise.
var ErrPromiseBroken = errors.New("partition: a promise was broken")

// Partition runs a job of Members workers (a sidecar and a ring trainer
// each), every worker in a network namespace of its own, etcd on the
// bridge that joins them, and plays each case on it: it cuts the network,
// holds the cut, heals it, and checks the promises on every step line
// throughout. It needs root (netsplit.Available).
func Partition(ctx context.Context, cfg PartitionConfig, progress io.Writer) (PartitionResult, error) {
	res := PartitionResult{Bench: "partition", Members: cfg.Members, Loss: cfg.Loss, Jitter: jitterNote(cfg.Jitter),
		ResumeBoundS: ResumeWithin.Seconds(), RejoinBoundS: RejoinWithin.Seconds()}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if err := netsplit.Available(); err != nil {
		return res, fmt.Errorf("bench partition: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	// The loopback block is this machine's unique number for the run: it
	// names the subnet and every namespace and link.
	block, err := loopback.Acquire()
	if err != nil {
		return res, err
	}
	defer block.Release()
	nt, err := netsplit.Create(ctx, fmt.Sprintf("rsp%d-", block.Number()), block.Number(), cfg.Members)
	if err != nil {
		return res, err
	}
	defer func() {
		if err := nt.Close(); err != nil {
			fmt.Fprintf(progress, "cleaning up the namespaces: %v\n", err)
		}
	}()
	dir, cleanup, err := jobDir(cfg.LogDir, "partition")
	if err != nil {
		return res, err
	}
	defer cleanup()
	ecfg := etcdserver.EphemeralConfig(filepath.Join(dir, "etcd"))
	ecfg.ClientURL = "http://" + nt.BridgeAddr() + ":0"
	srv, err := etcdserver.Start(ctx, ecfg)
	if err != nil {
		return res, err
	}
	defer srv.Close()

	spec := cfg.TrainerSpec
	spec.LogDir = dir
	job, track, _, stop, err := spec.startTraining(ctx, "partition", cfg.Members, cfg.Settle, progress, func(c *localjob.Config) {
		c.Ringside, c.Endpoints = cfg.Ringside, srv.Endpoints()
		c.Place = func(n int) (string, []string) { return nt.Addr(n), nt.Exec(n) }
	})
	if err != nil {
		return res, err
	}
	defer stop()
	p := &partitionRun{cfg: cfg, nt: nt, job: job, track: track, endpoints: srv.Endpoints(), progress: progress, ledger: newLedger()}
	track.Observe(p.observe)
	res.PromisesKept = true
	for _, name := range cfg.Cases {
		c, err := p.play(ctx, name)
		if err != nil {
			return res, fmt.Errorf("case %s: %w", name, err)
		}
		res.Cases = append(res.Cases, c)
		res.PromisesKept = res.PromisesKept && len(c.Broken) == 0
	}
	if !res.PromisesKept {
		return res, ErrPromiseBroken
	}
	return res, nil
}

// partitionRun is the job the cases play on.
type partitionRun struct {
	cfg       PartitionConfig
	nt        *netsplit.Net
	job       *localjob.Job
	track     *localjob.Tracker
	endpoints []string
	progress  io.Writer
	ledger    *ledger

	// During a cut: who is cut off, from when, the generation they were
	// in, and the steps they completed in a newer one.
	cut      map[string]bool
	cutAt    time.Time
	cutGen   int64
	cutSteps int
	// resumed is, per member, its first step at sideWorld (the members
	// not cut off) in a generation newer than the cut's.
	resumed   map[string]localjob.Line
	sideWorld int
}

func (p *partitionRun) observe(l localjob.Line) {
	p.ledger.add(l)
	if p.cut == nil || l.Generation <= p.cutGen || !l.Time().After(p.cutAt) {
		return
	}
	if p.cut[l.Worker] {
		p.cutSteps++
	}
	if _, ok := p.resumed[l.Worker]; !ok && l.World == p.sideWorld {
		p.resumed[l.Worker] = l
	}
}

// index is worker id's member number (w3: 3).
func index(id string) int {
	var n int
	fmt.Sscanf(id, "w%d", &n) //nolint:errcheck // ids are the job's own
	return n
}

// play runs one case: cut, hold, heal, check.
func (p *partitionRun) play(ctx context.Context, name string) (PartitionCase, error) {
	c := PartitionCase{Case: name, DurationS: p.cfg.Cut.Seconds()}
	ids := slices.SortedFunc(func(yield func(string) bool) {
		for id := range p.job.Workers() {
			if !yield(id) {
				return
			}
		}
	}, func(a, b string) int { return index(a) - index(b) })
	n := len(ids)
	var cut []string
	switch name {
	case CaseSplit:
		// The minority holds the lowest ids, which lead: the majority
		// has to take over the lead as well.
		cut = ids[:(n-1)/2]
	case CaseAlone:
		cut = ids[n/2 : n/2+1]
	case CaseOneWay:
		cut = ids[n-1:]
	case CaseLoss:
		c.DurationS = p.cfg.LossFor.Seconds()
	}
	c.Cut = cut
	twice0, disagree0 := len(p.ledger.twice), len(p.ledger.disagree)
	step0 := p.track.Top()
	var al *alarms
	if name == CaseLoss {
		var err error
		if al, err = watchAlarms(ctx, p.endpoints, sidecarNamespace, "partition", p.progress); err != nil {
			return c, err
		}
	}

	p.cut, p.cutAt, p.cutGen, p.cutSteps, p.resumed = map[string]bool{}, time.Now(), p.track.Generation(), 0, map[string]localjob.Line{}
	for _, id := range cut {
		p.cut[id] = true
	}
	p.sideWorld = n - len(cut)
	if name == CaseLoss && p.cfg.Jitter > 0 {
		stop, err := p.nt.Jitter(ctx, p.cfg.Jitter)
		if err != nil {
			return c, err
		}
		defer func() {
			if err := stop(); err != nil {
				fmt.Fprintf(p.progress, "stopping the jitter: %v\n", err)
			}
		}()
	}
	if err := p.apply(ctx, name, cut, ids); err != nil {
		return c, err
	}
	t0 := p.cutAt
	fmt.Fprintf(p.progress, "%s: cut %v at generation %d\n", name, cut, p.cutGen)
	end := t0.Add(time.Duration(c.DurationS * float64(time.Second)))
	if len(cut) > 0 {
		resumed, err := p.track.Await(ctx, end, func() bool { return p.sideTrains(ids) })
		if err != nil {
			return c, err
		}
		if resumed {
			c.ResumeS = p.sideTrainedAt().Sub(t0).Seconds()
			fmt.Fprintf(p.progress, "%s: the majority trains again after %.3fs\n", name, c.ResumeS)
		} else {
			c.Broken = append(c.Broken, fmt.Sprintf("the side with etcd and a majority did not train without %v during the %.0fs cut", cut, c.DurationS))
		}
	}
	if err := p.track.Until(ctx, end); err != nil {
		return c, err
	}
	if err := p.nt.Heal(ctx); err != nil {
		return c, err
	}
	t1 := time.Now()
	p.cut = nil
	c.CutSideSteps = p.cutSteps
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	back, err := p.track.AllStepAt(wctx, n, t1)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return c, err
		}
		c.Broken = append(c.Broken, fmt.Sprintf("the job did not train at world size %d within 30s of the heal: %v", n, err))
	} else {
		c.RejoinS = back.Sub(t1).Seconds()
		fmt.Fprintf(p.progress, "%s: healed; every member trains together again after %.3fs\n", name, c.RejoinS)
	}
	if al != nil {
		c.FalseSuspicions, c.FalseEvictions = al.stop()
	}
	c.Steps = p.track.Top() - step0
	c.StepsInTwoGenerations = len(p.ledger.twice) - twice0
	c.GenerationDisagreements = len(p.ledger.disagree) - disagree0
	c.Broken = append(c.Broken, p.broken(c, p.ledger.twice[twice0:], p.ledger.disagree[disagree0:])...)
	return c, nil
}

// apply cuts the network for case name.
func (p *partitionRun) apply(ctx context.Context, name string, cut, ids []string) error {
	etcd := p.nt.BridgeAddr()
	var rest []string // the addresses of the members not cut
	for _, id := range ids {
		if !p.cut[id] {
			rest = append(rest, p.nt.Addr(index(id)))
		}
	}
	rules := netsplit.Rules{}
	for _, id := range cut {
		i := index(id)
		switch name {
		case CaseSplit, CaseAlone:
			// Both ways, from the other side and from etcd.
			rules.Deaf(i, append(rest, etcd)...)
			rules.Mute(i, append(rest, etcd)...)
		case CaseOneWay:
			// Its packets reach nobody, etcd included; it hears them all.
			rules.Mute(i, append(rest, etcd)...)
		}
	}
	if name == CaseLoss {
		for _, id := range ids {
			rules.Lose(index(id), p.cfg.Loss)
			if p.cfg.Jitter > 0 {
				rules.Delay(index(id))
			}
		}
	}
	return p.nt.Apply(ctx, rules)
}

// sideTrains reports whether every member not cut off completed a step
// without the cut members after the cut.
func (p *partitionRun) sideTrains(ids []string) bool {
	for _, id := range ids {
		if _, ok := p.resumed[id]; !p.cut[id] && !ok {
			return false
		}
	}
	return true
}

// sideTrainedAt is when the last member not cut off completed its first
// step without the cut members.
func (p *partitionRun) sideTrainedAt() time.Time {
	var latest time.Time
	for id, l := range p.resumed {
		if t := l.Time(); !p.cut[id] && t.After(latest) {
			latest = t
		}
	}
	return latest
}

// broken lists the promises case c broke.
func (p *partitionRun) broken(c PartitionCase, twice, disagree []string) []string {
	var out []string
	out = append(out, twice...)
	out = append(out, disagree...)
	if c.CutSideSteps > 0 {
		out = append(out, fmt.Sprintf("the cut side completed %d steps in a generation of its own", c.CutSideSteps))
	}
	if c.ResumeS > ResumeWithin.Seconds() {
		out = append(out, fmt.Sprintf("the majority trained again %.3fs after the cut, above %s", c.ResumeS, ResumeWithin))
	}
	if c.RejoinS > RejoinWithin.Seconds() {
		out = append(out, fmt.Sprintf("the job trained together again %.3fs after the heal, above %s", c.RejoinS, RejoinWithin))
	}
	if c.FalseEvictions > 0 {
		out = append(out, fmt.Sprintf("%d false evictions under packet loss alone", c.FalseEvictions))
	}
	if c.Case != CaseLoss || c.Steps > 0 {
		return out
	}
	return append(out, "the job made no step under packet loss")
}
