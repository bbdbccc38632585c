package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Config says how one sidecar takes part in its job's gossip. Start it from
// [DefaultConfig]: the zero value is not usable.
type Config struct {
	// Name identifies this member; unique within the job. The sidecar uses its
	// member id (the pod name), so events name the same member as etcd does.
	Name string

	// Label is stamped on every packet and stream (and authenticated when
	// SecretKey is set); traffic with another label is dropped. Set it to the
	// job's key so sidecars of two jobs never merge, even when a pod IP is
	// reused. At most 255 bytes. Empty disables the check.
	Label string

	// BindAddr and BindPort are where the UDP and TCP listeners bind (the same
	// port for both). BindPort 0 picks a free port; LocalAddr reports it.
	BindAddr string
	BindPort int

	// AdvertiseAddr and AdvertisePort are what the other members dial: the
	// pod IP. Empty and 0 mean the bound address (or, when bound to 0.0.0.0,
	// the first private address of the host) and the bound port.
	AdvertiseAddr string
	AdvertisePort int

	// Keys, when set, encrypt and authenticate all gossip (packets and
	// streams, the label included) with AES-GCM; 16, 24 or 32 bytes select
	// AES-128, -192 or -256. The first key encrypts what this member sends;
	// every key decrypts what it receives, so a job changes its key in
	// three steps without a member leaving the pool (see SetKeys). Members
	// that share no key cannot talk to each other, and a member with keys
	// drops every packet and stream that none of them decrypts: an
	// unencrypted one, or one forged without a key. Empty: gossip in plain
	// text, which the sidecar allows only on a network declared trusted.
	// See LoadKeys.
	Keys [][]byte

	// ProbeInterval is how often (a duration) this member probes one other
	// member, round robin. It sets the pace of failure detection: a failed
	// probe takes one interval, and the suspicion timeout is a multiple of it.
	ProbeInterval time.Duration

	// ProbeTimeout is how long (a duration) a direct UDP probe waits for its
	// ack before asking IndirectChecks other members to probe too. Set it
	// above the network's 99th percentile round trip; it must be shorter than
	// ProbeInterval, which bounds the indirect probes. memberlist stretches it
	// by this member's local health (Lifeguard), and so does a Check:
	//
	//	CheckTimeout = ProbeTimeout * (1 + health score)
	//
	// where the score (0-7) counts recent probes of this member that failed
	// without the expected nacks and suspicions it had to refute, less the
	// probes that went well: a member that cannot keep time waits longer.
	ProbeTimeout time.Duration

	// IndirectChecks is how many other members (a count) probe on our behalf
	// after a direct probe fails. Any single ack clears the target, so a lost
	// packet or one bad path does not make a live member suspect.
	IndirectChecks int

	// SuspicionMult scales how long a member stays suspect, and so may refute,
	// before it is declared dead (a multiplier):
	//
	//	SuspicionTimeout = SuspicionMult * max(1, log10(N)) * ProbeInterval
	//
	// With SuspicionMult <= 2 memberlist expects no confirmations and uses
	// exactly this timeout; with larger values it starts at
	// SuspicionMaxTimeoutMult times it and shortens it as SuspicionMult-2
	// other members confirm the suspicion.
	SuspicionMult int

	// SuspicionMaxTimeoutMult bounds the suspicion timeout when confirmations
	// are expected (SuspicionMult > 2), as a multiple of SuspicionTimeout.
	SuspicionMaxTimeoutMult int

	// GossipInterval is how often (a duration) pending broadcasts (suspect,
	// dead, alive, leave notices) are sent to GossipNodes random members, on
	// top of riding on probes. It sets how fast a verdict spreads.
	GossipInterval time.Duration

	// GossipNodes is how many random members (a count) each gossip round
	// sends to.
	GossipNodes int

	// RetransmitMult sets how many times (a multiplier) each broadcast is
	// sent: RetransmitMult * ceil(log10(N+1)).
	RetransmitMult int

	// PushPullInterval is how often (a duration) this member swaps its full
	// state with one random member over TCP, repairing anything gossip lost.
	// Zero disables it.
	PushPullInterval time.Duration

	// GossipToTheDeadTime is how long (a duration) gossip still reaches a
	// member declared dead, so that one wrongly declared dead hears it and
	// refutes.
	GossipToTheDeadTime time.Duration

	// DeadNodeReclaimTime is how long (a duration) after a member's death its
	// name may come back from another address. A rescheduled pod keeps its
	// name but gets a new IP; zero would refuse it forever.
	DeadNodeReclaimTime time.Duration

	// StreamTimeout bounds (a duration) each TCP exchange: a join, a
	// push/pull sync, a reliable message.
	StreamTimeout time.Duration

	// Compress compresses each packet and stream with LZW before sending it
	// (memberlist's EnableCompression); a packet that does not shrink goes
	// out as it was. Receivers decompress whatever arrives compressed,
	// whatever their own setting, so members that differ still talk.
	Compress bool

	// OnInvalidMessage, if set, is called for every application message a
	// member gossiped that this package cannot take (not a leave notice of
	// a valid member id): it is dropped, and this is for metrics.
	OnInvalidMessage func()

	// Logger receives memberlist's own log lines, at levels that match what
	// they mean (see newLogAdapter). Nil means slog.Default().
	Logger *slog.Logger

	// suspectHook, when set, is called each time this member's own probe
	// finds another member unresponsive. Tests use it.
	suspectHook func(name string)
}

// The sidecar acts on this member's own probes and watches, not on
// gossip's verdict: a process that exits closes its watches (see Watch)
// and is voted gone within a round trip; a direct probe unanswered for
// ProbeTimeout is a vote against a silent member, which other members'
// checks confirm (see the sidecar package). Gossip's own verdict, which the
// rest of this comment is about, still decides whom memberlist keeps
// probing.
//
// DefaultConfig returns the settings for one sidecar named name on a pod
// network, tuned so that a silently dead member (kill -9, SIGSTOP, a lost
// node) is declared dead by every survivor in about a second in jobs of up to
// 64 members, and a live member is never declared dead while the job idles.
//
// How long detection takes. memberlist (SWIM) finds a death in three steps:
//
//  1. Some survivor probes the dead member. Each member probes one member per
//     ProbeInterval, so about one probe per interval reaches any given member:
//     typically well under one ProbeInterval after the death.
//
//  2. That probe fails: ProbeTimeout for the direct ack, then indirect and
//     TCP probes until the end of the interval. One ProbeInterval.
//
//  3. The member stays suspect for the suspicion timeout, while the suspicion
//     spreads (so every survivor starts its own timer) and the member could
//     refute:
//
//     SuspicionTimeout = SuspicionMult * max(1, log10(N)) * ProbeInterval
//
//     (memberlist shortens it as confirmations arrive only when
//     SuspicionMult > 2). The first survivor whose timer fires gossips the
//     verdict, which reaches all within a few GossipIntervals.
//
// So detection on all survivors ~= a part of a ProbeInterval (the first
// probe) + ProbeInterval (the failed probe) + SuspicionTimeout + a few
// GossipIntervals. With the values below:
//
//	N      SuspicionTimeout   expected detection
//	<=10   400 ms             ~0.7-0.8 s
//	32     602 ms             ~0.9-1.1 s
//	64     722 ms             ~1.0-1.2 s
//
// BenchmarkDetect (all members in one process on loopback, on a 2-core
// machine shared with other work) measured medians of 0.75-0.78 s at N=8 and
// 0.91-1.09 s at N=32, in runs of 5 to 7 deaths. Over about 40 deaths at N=32
// a live member was declared dead once, by 4 of the 31 members, before it
// refuted; never at N=8. The design notes had 0.65 s at N=8 and 1.23 s at
// N=32.
//
// The price of speed is tolerance of stalls: a live member that cannot run
// for about SuspicionTimeout (a CPU-starved or throttled sidecar, a VM
// pause) cannot refute in time and is declared dead, which costs the whole
// job a new generation. A ProbeInterval of 150 ms gave medians of 0.62 s and
// 0.77 s in the same benchmark, and 130 ms 0.45 s and 0.76 s, but both
// declared live members dead at N=32 when other work loaded the machine
// (load 3-7 on 2 cores); 200 ms did not at that load, only under a heavier
// one (load 10). Thirty-two members in one process on two busy cores is a
// harsher test than one sidecar per pod, but trainers do starve their
// neighbours of CPU, so the default keeps the margin.
//
// Why these values:
//   - ProbeInterval 200 ms: the whole budget, and the stall tolerance, scale
//     with it (see above). Each member sends five probes a second: nothing
//     for a pod network, which answers in well under a millisecond.
//   - ProbeTimeout 100 ms: a hundred times a pod network's round trip, and
//     still leaves half the interval for the indirect and TCP probes.
//   - IndirectChecks 3: three independent paths must all fail before a live
//     member becomes suspect (memberlist's LAN default).
//   - SuspicionMult 2: the smallest value that still gives a wrongly
//     suspected member 400 ms or more to refute; the suspicion rides on every
//     probe sent to it and is gossiped every round, so a member that can run
//     at all (a CPU-throttled sidecar gets the CPU again within a 100 ms CFS
//     period) refutes in time. It also means no confirmations are awaited,
//     which would add SuspicionMaxTimeoutMult times the timeout on a small job.
//   - SuspicionMaxTimeoutMult 4: unused at SuspicionMult 2; bounds detection
//     at 4x should SuspicionMult be raised.
//   - GossipInterval 500 ms, GossipNodes 3: the sidecar does not wait for
//     gossip's verdict to spread (a death is confirmed by votes in etcd and
//     the generation reaches everyone through etcd), so rounds only carry
//     suspicions, refutations and joins; at 50 ms the idle rounds were 20
//     wake-ups a second, a third of an idle sidecar's CPU.
//   - RetransmitMult 4: each broadcast goes out 4 (N<10) to 8 (N<100) times,
//     enough that a lost UDP packet does not lose a verdict.
//   - PushPullInterval 15 s: the full-state repair is cheap at these sizes.
//   - GossipToTheDeadTime 15 s: a member that was only frozen hears it was
//     declared dead and comes back as a join, not as a split view.
//   - DeadNodeReclaimTime 2 s: a rescheduled pod with the same name and a new
//     IP joins again once its old self has been dead for 2 s.
//   - StreamTimeout 2 s: joins and syncs run between pods of one cluster;
//     a seed that does not answer in 2 s is skipped for the next.
//   - Compress off: probes, acks and gossip rounds carry tens to a few
//     hundred bytes, which LZW seldom shrinks, yet every attempt allocated
//     a fresh 16 KiB table. With it on, compression was 44% of an idle
//     sidecar's allocations at N=8 (1.6 MB/s in all, 0.63 MB/s without it)
//     and the reason its collector ran every 1.4 s. A push/pull of a
//     64-member state is a few KiB: nothing for a pod network.
func DefaultConfig(name string) Config {
	return Config{
		Name:                    name,
		BindAddr:                "0.0.0.0",
		BindPort:                7946,
		ProbeInterval:           200 * time.Millisecond,
		ProbeTimeout:            100 * time.Millisecond,
		IndirectChecks:          3,
		SuspicionMult:           2,
		SuspicionMaxTimeoutMult: 4,
		GossipInterval:          500 * time.Millisecond,
		GossipNodes:             3,
		RetransmitMult:          4,
		PushPullInterval:        15 * time.Second,
		GossipToTheDeadTime:     15 * time.Second,
		DeadNodeReclaimTime:     2 * time.Second,
		StreamTimeout:           2 * time.Second,
		Compress:                false,
	}
}

// SuspicionTimeout returns how long a member of a job of the given size stays
// suspect before it is declared dead, when no confirmations shorten it:
// SuspicionMult * max(1, log10(members)) * ProbeInterval, computed the way
// memberlist computes it.
func (c Config) SuspicionTimeout(members int) time.Duration {
	scale := math.Max(1, math.Log10(math.Max(1, float64(members))))
	return time.Duration(c.SuspicionMult) * time.Duration(scale*1000) * c.ProbeInterval / 1000
}

// maxLabelLen is memberlist's limit on Label.
const maxLabelLen = 255

// validate reports every setting that memberlist would reject or that would
// break failure detection, so Start fails with one clear error.
func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Name == "" {
		bad("name is empty")
	}
	if len(c.Label) > maxLabelLen {
		bad("label is %d bytes, more than %d", len(c.Label), maxLabelLen)
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		bad("bind port %d is not in 0-65535", c.BindPort)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		bad("advertise port %d is not in 0-65535", c.AdvertisePort)
	}
	for i, k := range c.Keys {
		if err := checkKeyLen(len(k)); err != nil {
			bad("key %d: %w", i+1, err)
		}
	}
	if c.ProbeInterval <= 0 {
		bad("probe interval %v must be positive", c.ProbeInterval)
	}
	if c.ProbeTimeout <= 0 || c.ProbeTimeout >= c.ProbeInterval {
		bad("probe timeout %v must be positive and shorter than the probe interval %v", c.ProbeTimeout, c.ProbeInterval)
	}
	if c.IndirectChecks < 0 {
		bad("indirect checks %d must not be negative", c.IndirectChecks)
	}
	if c.SuspicionMult < 1 {
		bad("suspicion multiplier %d must be at least 1", c.SuspicionMult)
	}
	if c.SuspicionMaxTimeoutMult < 1 {
		bad("suspicion max timeout multiplier %d must be at least 1", c.SuspicionMaxTimeoutMult)
	}
	if c.GossipInterval <= 0 || c.GossipNodes < 1 {
		bad("gossip interval %v and gossip nodes %d must be positive", c.GossipInterval, c.GossipNodes)
	}
	if c.RetransmitMult < 1 {
		bad("retransmit multiplier %d must be at least 1", c.RetransmitMult)
	}
	if c.PushPullInterval < 0 || c.GossipToTheDeadTime < 0 || c.DeadNodeReclaimTime < 0 {
		bad("push/pull interval, gossip-to-the-dead time and dead node reclaim time must not be negative")
	}
	if c.StreamTimeout <= 0 {
		bad("stream timeout %v must be positive", c.StreamTimeout)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gossip: bad config: %w", err)
	}
	return nil
}
