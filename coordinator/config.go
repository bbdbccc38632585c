package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ringside/ringside/coordinator/record"
)

// Policy bounds the world size (total slots) of a generation.
type Policy struct {
	// Min is the smallest world size that trains; below it the generation
	// is paused.
	Min int
	// Max is the largest world size; members beyond it are standby. 0 means
	// no limit.
	Max int
	// Unit: the world size is a multiple of Unit (for example the number of
	// GPUs a model-parallel group spans).
	Unit int
}

// Config describes a job and how its members behave.
type Config struct {
	// Namespace and Job name the job; its keys live under
	// /ringside/<Namespace>/<Job>/.
	Namespace, Job string
	// TTL of each member's session lease: how long a crashed member that
	// nobody revokes stays in the ring. Gossip revokes faster.
	TTL time.Duration
	// RefuteWindow is how long a quorum of votes against a member must
	// stand before it is evicted: the time it has to refute them (see
	// Member.Suspect). A live member answers within its etcd round trip.
	RefuteWindow time.Duration
	// CorrelatedRefuteWindow replaces RefuteWindow when, at its end,
	// silent votes also stand against another member: several members
	// falling silent together is more often one stall they share (a
	// machine or node hiccup, a network blip) than independent deaths,
	// and evicting them all would cost the job more than waiting. Votes
	// that found a process gone do not count. It grows by one more
	// window for every CorrelatedStep more members silent together, up
	// to the TTL (see CorrelatedWait). It does not apply when every vote
	// found the member's node unreachable (SuspectUnreachable: no TCP
	// handshake, which a stalled process's kernel still completes): a lost
	// node or a partition, which the side that keeps etcd should not wait
	// out.
	CorrelatedRefuteWindow time.Duration
	// IdleRefuteWindow replaces RefuteWindow for a quorum of silent votes
	// none of whose voters' trainers was held up (record.Vote.Waiting):
	// no collective waits on the suspect, so its silence costs the job
	// nothing yet, while its eviction would cost every rank a
	// re-formation. A sidecar starved of CPU for a second (128 sidecars
	// on two busy cores) keeps its place; a frozen one still holds up
	// the trainers of its neighbours at their next collective, and their
	// votes then evict it after RefuteWindow. Members whose trainers
	// report no steps (restart mode, Horovod) always wait this long, or
	// until the frozen member's lease expires and ExpiryGrace ends (silent
	// votes that hold up no trainer do not end the grace). A window
	// shorter than RefuteWindow counts as RefuteWindow.
	IdleRefuteWindow time.Duration
	// ExpiryGrace is how long the leader keeps in the ring a member of the
	// generation whose key vanished without an eviction or a leave: its
	// lease expired, most often because etcd was frozen or unreachable
	// for longer than the TTL, and the member registers again as soon as
	// etcd answers. A member that re-registers within it costs the job no
	// generation; one that does not leaves the ring when it ends. Evicted
	// (confirmed dead) and departing members leave at once.
	ExpiryGrace time.Duration
	// Settle is how long the leader batches joins before committing them,
	// measured from the last join; departures are committed at once.
	Settle time.Duration
	// MaxSettle caps the batching under a steady stream of joins.
	MaxSettle time.Duration
	// RestartSettle replaces Settle (and MaxSettle, when longer) while a
	// member's trainer runs in restart mode (record.MemberInfo.RestartMode),
	// where every new generation restarts every process of the job: a
	// formation there costs each rank a restart and the steps since its
	// last checkpoint, while waiting costs only the newcomers' time, as
	// the ring trains on meanwhile. Departures are still committed at once.
	RestartSettle time.Duration
	// ExpectedSize is the world size the job starts with (0: not set).
	// Until the job's first generation the leader waits for it, as
	// torchrun's rendezvous waits for its max nodes: the first generation
	// forms once the active members hold ExpectedSize slots, or once
	// StartWindow has passed since they first held Policy.Min (start.go).
	// One formation at start, not one per member arriving, matters in
	// restart mode, where each formation restarts every process.
	ExpectedSize int
	// StartWindow is how long the start waits for ExpectedSize once
	// Policy.Min is in, torchrun's last call. 0: no wait, the first
	// generation forms as without ExpectedSize.
	StartWindow time.Duration
	Policy      Policy
	// MasterPort is the first of MasterPortRange ports the rank-0 member
	// serves the process-group store on. The port rotates with the
	// generation so a new group never races the old store's socket.
	MasterPort, MasterPortRange int
	// Candidates is how many members campaign for leadership at a time:
	// the leader and the head of the ring, and while some of those are
	// gone, as many of the next members (see candidacy). 0 means every
	// member campaigns.
	Candidates int
	// Straggler is how the leader finds and handles members that compute
	// slower than the job (straggler.go).
	Straggler StragglerConfig
	// Orderer places newcomers in the ring (the sidecar sets
	// netopt.Orderer); nil appends them, in join order, after the
	// survivors.
	Orderer RingOrderer
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// OnError, if set, is told of every failed etcd operation (op names
	// it); the package retries on its own, this is for metrics.
	OnError func(op string, err error)
	// OnBadValue, if set, is told of every malformed value found under the
	// job's prefix (ignored, and logged), by kind (record.KindOf): for
	// metrics.
	OnBadValue func(kind string)
	// LocalLag, if set, says how long this process recently went
	// unscheduled (sidecar's lag meter: how late its own timers fired).
	// A silent member's votes stand that long twice more before they
	// evict it (see RefuteWait; unreachable ones do not wait for it): a voter on a host where processes go
	// unscheduled that long cannot tell a silent peer from a descheduled
	// one, and the suspect's refutation needs a turn on its CPU and the
	// voter another to see it. Lifeguard's local health, in time.
	LocalLag func() time.Duration
	// Waiting, if set, says whether this member's trainer is held up now:
	// it has made no step for its stall limit (the sidecar's stall watch).
	// Each vote records it (record.Vote.Waiting). Unset, every vote counts
	// as held up: a silent quorum waits RefuteWindow.
	Waiting func() bool
	// Exited, if set, says whether member id's process is gone for
	// certain: its gossip port refuses a connection. A quorum of silent
	// votes asks it every RefuteWindow while it waits, and evicts at once
	// when it says so. A process the kernel is still tearing down looks
	// frozen, not gone: on a crowded host, a killed sidecar's sockets
	// stayed open for up to 2 s after its SIGKILL, until its address space
	// was unmapped.
	Exited func(ctx context.Context, id string) bool

	hooks *testHooks
}

// testHooks let tests stop the leader at exact points.
type testHooks struct {
	beforeCommit func(*record.Generation)
	afterCommit  func(g *record.Generation, committed bool, err error)
	beforeRefute func() // a member slow to refute
	// refuteWait: a voter whose vote completed a quorum against suspect
	// begins to wait out the refute window, counted from since.
	refuteWait func(suspect string, since time.Time)
	// startWaits: the leader holds back next, the first generation, for
	// the start window, which ends at end (zero: it has not opened).
	startWaits func(next *record.Generation, end time.Time)
}

// DefaultConfig returns the defaults for a job.
func DefaultConfig(namespace, job string) Config {
	return Config{
		Namespace: namespace,
		Job:       job,
		// 3 s: long enough to ride out an etcd leader election (~1 s),
		// short enough that a crash without gossip still heals quickly.
		TTL: 3 * time.Second,
		// 5 s: a client notices its lease is gone within the TTL and its
		// registration retries reach etcd within about 2 s of its return.
		ExpiryGrace: 5 * time.Second,
		// 150 ms: a hundred times an etcd round trip on a pod network,
		// and more than the 110 ms a live member of a chaos run took to
		// refute on two cores shared by 20 busy processes (at 50 ms it was
		// evicted). Only silent failures (a stopped process, a lost node,
		// a partition) wait it out: a vote that found the process gone
		// (its port refused a connection) skips it.
		RefuteWindow: 150 * time.Millisecond,
		// 1 s: twice the longest stall seen among sidecars of one machine
		// (`bench detect --members 32` with both cores busy and compilers
		// starting beside it: six sidecars answered nothing for 500 ms,
		// each a little after it unmapped its start-up pages, and two of
		// them were evicted at 150 ms).
		CorrelatedRefuteWindow: time.Second,
		// 8 s, the TTL and the expiry grace: a member frozen for real
		// has lost its lease by then and leaves when the grace ends, so
		// the window costs its eviction nothing; while a live sidecar
		// whose gossip alone stalls keeps its place that long. With 128
		// sidecars on two busy cores (`bench detect --members 128 --load
		// 2`), one answered no ping for 4.3 s while its etcd session
		// lived (its gossip waited on a page fault) and was evicted at a
		// 3 s window, and one stalled 2.8 s and was evicted at 2 s.
		IdleRefuteWindow: 8 * time.Second,
		// 500 ms: pods of a scale-up start within a few hundred ms of each
		// other; one generation for all of them beats one per pod.
		Settle:    500 * time.Millisecond,
		MaxSettle: 5 * time.Second,
		// 3 s: a formation in restart mode restarts every rank: from a
		// kill to the survivors training again took 1.6-1.8 s (p50, 4
		// workers, exec --preload torch, on 2 busy cores; 2.2 s at 8), and
		// each rank loses the steps since its last checkpoint, while a
		// join that waits costs only the newcomer. Two restarts' time
		// batches a second pod that arrives while the first one's restart
		// would still run (three workers started together attached 2 s
		// apart), and keeps a lone newcomer's wait under two restarts.
		RestartSettle: 3 * time.Second,
		// 30 s: pods started together by one workload attach within a few
		// seconds of each other (image pulls and scheduling aside), and a
		// job whose expected pods cannot all be placed should not wait
		// much longer to start without them.
		StartWindow: 30 * time.Second,
		Policy:      Policy{Min: 1, Max: 0, Unit: 1},
		// torchrun's default master port, and 16 ports to rotate through.
		MasterPort:      29500,
		MasterPortRange: 16,
		// 3: two successors already queued behind the leader, so losing
		// one or two still elects a leader at once.
		Candidates: 3,
		Straggler:  DefaultStragglerConfig(),
	}
}

// StragglerConfig says when the leader names a straggler: a member whose
// trainer's compute time per step (record.Status.ComputeTimeS) is above
// Factor times the median over the ring in at least 80 % of the last
// Window steps (straggler.go). Detection takes 80 % of Window steps plus
// up to one status interval (the sidecars' throttle on their status
// writes) after the member slowed down.
type StragglerConfig struct {
	// Factor is how much slower than the median a member computes to
	// count as slow; it is cleared once it is below halfway between 1 and
	// Factor in 80 % of the last Window steps. 1.3: a rank 30 % slower costs the whole
	// ring 30 % of its throughput (every rank waits for it), while the
	// compute times of healthy ranks of one job spread by a few percent
	// (0 false positives over a 10-minute run of 8 ring trainers on a
	// busy machine, `ringside bench straggler`).
	Factor float64
	// Window is the steps over which a member must be slow (80 % of them)
	// to be named, and back at pace to be cleared. 30: a garbage
	// collection, a checkpoint write or a data loader hiccup lasts a step
	// or a few; a throttled GPU or a noisy neighbour lasts.
	Window int64
	// MaxShare is the largest share of the ring's members named at once
	// (at least one): when many members are slow together, the cause is
	// shared (the network, the storage) and replacing members would not
	// help. 0.25.
	MaxShare float64
	// Action is what the leader's finding asks for: report (name it) or
	// replace (the member drains out of the ring, so that a new member can
	// take its place elsewhere), the latter only where the job stays at
	// or above its min world size without it.
	Action record.StragglerAction
}

// DefaultStragglerConfig returns the defaults documented on
// StragglerConfig.
func DefaultStragglerConfig() StragglerConfig {
	return StragglerConfig{Factor: 1.3, Window: 30, MaxShare: 0.25, Action: record.ActionReport}
}

// clearFactor is the threshold a named member returns under to be cleared.
func (c StragglerConfig) clearFactor() float64 { return 1 + (c.Factor-1)/2 }

// allowed is how many of n ring members may be named at once.
func (c StragglerConfig) allowed(n int) int { return max(1, int(c.MaxShare*float64(n))) }

// Validate reports every field out of its range.
func (c StragglerConfig) Validate() error {
	var errs []error
	bad := func(field, name, format string, args ...any) {
		errs = append(errs, record.BadField("Straggler."+field, name, format, args...))
	}
	if !(c.Factor > 1 && c.Factor <= 100) { // NaN fails both
		bad("Factor", "straggler factor", "must be above 1 (a member that slow against the median) and at most 100, got %g", c.Factor)
	}
	if c.Window < 1 || c.Window > 1_000_000 {
		bad("Window", "straggler window", "must be 1 to 1000000 steps, got %d", c.Window)
	}
	if !(c.MaxShare > 0 && c.MaxShare <= 1) {
		bad("MaxShare", "straggler max share", "must be above 0 and at most 1 (a share of the ring's members), got %g", c.MaxShare)
	}
	if _, err := record.ParseStragglerAction(string(c.Action)); err != nil {
		errs = append(errs, record.BadField("Straggler.Action", "straggler policy", "%q: want %s or %s", c.Action, record.ActionReport, record.ActionReplace))
	}
	return errors.Join(errs...)
}

// Prefix is the job's key prefix, ending in "/".
func (c Config) Prefix() string {
	return record.Prefix(c.Namespace, c.Job)
}

// Validate reports every problem with the config.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, name, format string, args ...any) {
		errs = append(errs, record.BadField(field, name, format, args...))
	}
	for _, n := range []struct{ field, what, v string }{{"Namespace", "namespace", c.Namespace}, {"Job", "job", c.Job}} {
		if err := record.ValidateName(n.what, n.v); err != nil {
			// ValidateName's text begins with the name in words.
			bad(n.field, n.what, "%s", strings.TrimPrefix(err.Error(), n.what+" "))
		}
	}
	if c.TTL < time.Second || c.TTL%time.Second != 0 {
		bad("TTL", "member lease TTL", "must be a whole number of seconds, at least 1s, got %s", c.TTL)
	}
	for _, d := range []struct {
		field, what string
		v           time.Duration
	}{
		{"Settle", "settle window", c.Settle},
		{"RestartSettle", "restart-mode settle window", c.RestartSettle},
		{"StartWindow", "start window", c.StartWindow},
		{"RefuteWindow", "refute window", c.RefuteWindow},
		{"CorrelatedRefuteWindow", "correlated refute window", c.CorrelatedRefuteWindow},
		{"IdleRefuteWindow", "idle refute window", c.IdleRefuteWindow},
		{"ExpiryGrace", "expiry grace", c.ExpiryGrace},
	} {
		if d.v < 0 {
			bad(d.field, d.what, "must not be negative, got %s", d.v)
		}
	}
	if c.MaxSettle < c.Settle {
		errs = append(errs, fmt.Errorf("max settle %s is shorter than the settle window %s", c.MaxSettle, c.Settle))
	}
	if c.Candidates < 0 {
		errs = append(errs, fmt.Errorf("candidates must not be negative, got %d", c.Candidates))
	}
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Straggler.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch p := c.Policy; {
	case c.ExpectedSize < 0:
		bad("ExpectedSize", "expected size", "must not be negative (0: not set), got %d", c.ExpectedSize)
	case c.ExpectedSize == 0:
	case c.ExpectedSize < p.Min:
		bad("ExpectedSize", "expected size", "%d is below the min world size %d", c.ExpectedSize, p.Min)
	case p.Max > 0 && c.ExpectedSize > p.Max:
		bad("ExpectedSize", "expected size", "%d is above the max world size %d", c.ExpectedSize, p.Max)
	}
	if c.MasterPort < 1 || c.MasterPortRange < 1 || c.MasterPort+c.MasterPortRange-1 > 65535 {
		bad("MasterPort", "master port range", "%d..%d is not within 1..65535", c.MasterPort, c.MasterPort+c.MasterPortRange-1)
	}
	return errors.Join(errs...)
}

// Validate reports what is wrong with a policy.
func (p Policy) Validate() error {
	var errs []error
	bad := func(field, name, format string, args ...any) {
		errs = append(errs, record.BadField(field, name, format, args...))
	}
	if p.Min < 1 {
		bad("Policy.Min", "min world size", "must be at least 1, got %d", p.Min)
	}
	if p.Unit < 1 {
		bad("Policy.Unit", "world size unit", "must be at least 1, got %d", p.Unit)
	}
	if p.Max != 0 && p.Max < p.Min {
		bad("Policy.Max", "max world size", "%d is below the min %d", p.Max, p.Min)
	}
	if p.Max != 0 && p.Unit > 0 && p.Max < p.Unit {
		bad("Policy.Max", "max world size", "%d is below the unit %d: no world size fits", p.Max, p.Unit)
	}
	return errors.Join(errs...)
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}
