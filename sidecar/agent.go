package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringside/ringside/telemetry"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/etcdconn"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/netopt"
	"github.com/ringside/ringside/sidecar/footprint"
	"github.com/ringside/ringside/sidecar/gossip"
	"github.com/ringside/ringside/sidecar/preempt"
	"github.com/ringside/ringside/sidecar/sockreset"
	"github.com/ringside/ringside/trainer/api"
)

// Agent is a running sidecar.
type Agent struct {
	cfg       Config
	probeAddr atomic.Value // string: where the probe server listens, once it does
	base      *slog.Logger // without the agent's attributes, for packages that add their own
	log       *slog.Logger
	metrics   *metrics
	events    *broadcaster
	nccl      map[string]string

	client *clientv3.Client
	job    *coordinator.Job
	member *coordinator.Member
	gossip *gossip.Gossip
	detect *detector

	drainCh    chan string
	reloadKeys chan struct{} // capacity 1: read the gossip key file now
	started    chan struct{}
	// finished: the trainer's command exited 0 (restart mode, POST
	// /v1/finish); a finishing job commits no generation to drain into.
	finished atomic.Bool
	// stopCtx ends when the agent shuts down (stop): the servers and
	// the trainer's long polls end with it.
	stopCtx context.Context
	stop    context.CancelFunc

	mu       sync.Mutex
	gen      *record.Generation
	changed  chan struct{} // closed and replaced when gen changes
	firstGen int64         // the first generation this process trained in (0: none yet)
	draining *api.Event
	seeded   map[string]string // member id -> the gossip address joined
	lag      lagMeter
	beats    heartbeats
	beatCh   chan struct{}      // capacity 1: a heartbeat arrived since the last flush
	stepped  chan time.Duration // capacity 1: a step, and how long a pause is a stall (stall.go)
	held     atomic.Bool        // the trainer has made no step for its stall limit (stall.go)

	apiToken string // the API token (apiguard.go); "" without a token file

	presence *presence // whether the trainer is attached (trainer.go)
	// stateMu orders the state changes that follow the trainer with the
	// drain's; leaving, once set, leaves the member's state to the drain.
	stateMu sync.Mutex
	leaving atomic.Bool

	wg sync.WaitGroup
}

// New checks cfg and prepares an agent; Run starts it.
func New(cfg Config, logger *slog.Logger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sidecar config: %w", err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	a := &Agent{
		cfg:        cfg,
		base:       logger,
		log:        logger.With("job", cfg.Job.Job, "namespace", cfg.Job.Namespace, "member", cfg.MemberID),
		events:     newBroadcaster(),
		drainCh:    make(chan string, 1),
		reloadKeys: make(chan struct{}, 1),
		started:    make(chan struct{}),
		changed:    make(chan struct{}),
		seeded:     make(map[string]string),
		presence:   newPresence(cfg.TrainerTimeout, cfg.Slots),
		beatCh:     make(chan struct{}, 1),
		stepped:    make(chan time.Duration, 1),
	}
	a.stopCtx, a.stop = context.WithCancel(context.Background())
	a.metrics = newMetrics(a.gossipMembers, a.gossipSuspects)
	a.detect = newDetector(cfg.MemberID, cfg.Advertise, a, a.metrics, realClock{}, a.log)
	return a, nil
}

// Run joins the job and serves the trainer until ctx ends (SIGTERM), a
// trainer asks to leave, or the node is being terminated; then it drains:
// it marks itself draining, tells the trainer, waits (up to the grace
// period) for the generation without it, and leaves. It returns nil after
// a clean drain.
func (a *Agent) Run(ctx context.Context) (err error) {
	// Startup is bounded by ctx; the drain after it must not be.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer a.wg.Wait()
	defer cancel()

	if err := a.start(ctx, runCtx); err != nil {
		a.shutdown()
		return err
	}
	defer a.shutdown()
	close(a.started)
	a.log.Info("sidecar running", "api", a.cfg.Socket, "gossip", a.gossip.LocalAddr())
	released := !a.cfg.Footprint.ReleaseStartupPages
	var again <-chan time.Time // the second release
	for {
		select {
		case <-again:
			// The first seconds in a generation are start-up too: gossip
			// syncs with every peer, the watches open, the first checks
			// run. Pages only they touched go now.
			again = nil
			a.releaseStartupPages()
		case g, open := <-a.member.Generations():
			if !open {
				if err := a.member.Err(); err != nil {
					return fmt.Errorf("membership stopped: %w", err)
				}
				return errors.New("membership stopped")
			}
			a.setGeneration(runCtx, g)
			a.seedGossip(runCtx, g)
			if !released {
				// Start-up is over: the member is in a generation and
				// gossips with its peers.
				released = true
				a.releaseStartupPages()
				t := time.NewTimer(secondRelease + rand.N(secondReleaseSpread))
				defer t.Stop()
				again = t.C
			}
		case reason := <-a.drainCh:
			return a.drain(runCtx, reason)
		case <-ctx.Done():
			return a.drain(runCtx, "SIGTERM")
		}
	}
}

// start joins the job; blocking steps give up when ctx ends (SIGTERM
// during start), background work lives until runCtx ends.
func (a *Agent) start(ctx, runCtx context.Context) error {
	cfg := a.cfg
	ncfg := netopt.DefaultConfig()
	ncfg.SysfsRoot = cfg.SysfsRoot
	settings, err := netopt.Tune(ctx, ncfg)
	if err != nil {
		a.log.Warn("netopt could not read the node's topology; NCCL settings left to NCCL", "err", err)
	} else {
		a.nccl = settings.Map()
		for _, w := range settings.Warnings {
			a.log.Warn("netopt", "warning", fmt.Sprint(w))
		}
		if cfg.NCCLConfFile != "" {
			if err := writeNCCLConf(cfg.NCCLConfFile, settings); err != nil {
				return err
			}
		}
	}
	topology := cfg.Topology
	if len(topology) == 0 && len(cfg.NodeLabels) > 0 {
		topology = netopt.TopologyFromLabels(cfg.NodeLabels, nil)
	}

	if a.client, err = etcdconn.New(cfg.Etcd, coordinator.DialOptions()...); err != nil {
		return err
	}
	jcfg := cfg.Job
	if jcfg.Orderer == nil {
		jcfg.Orderer = netopt.NewOrderer()
	}
	jcfg.Logger = a.base
	jcfg.OnError = func(op string, _ error) { a.metrics.etcdErrors.WithLabelValues(op).Inc() }
	jcfg.OnBadValue = func(kind string) { a.metrics.invalidRecords.WithLabelValues(kind).Inc() }
	jcfg.LocalLag = a.lag.recent
	jcfg.Waiting = a.held.Load
	// Votes and the leader's holds come only after Join, below: gossip
	// runs by then.
	jcfg.Exited = func(ctx context.Context, id string) bool { return a.gossip.Gone(ctx, id) }
	if a.job, err = coordinator.NewJob(a.client, jcfg); err != nil {
		return err
	}
	gcfg, err := cfg.gossipConfig()
	if err != nil {
		return err
	}
	gcfg.Logger = a.log
	gcfg.OnInvalidMessage = func() { a.metrics.invalidRecords.WithLabelValues("gossip").Inc() }
	if a.gossip, err = gossip.Start(runCtx, gcfg, a.detect); err != nil {
		return fmt.Errorf("start gossip: %w", err)
	}
	if len(gcfg.Keys) == 0 {
		a.log.Warn("gossip is not encrypted (--insecure-trusted-network): every host that reaches the gossip port can evict members and join the job")
	} else {
		a.log.Info("gossip encrypted", "keys", len(gcfg.Keys), "primary", gossip.Fingerprint(gcfg.Keys[0]))
	}
	if cfg.GossipKeyFile != "" {
		a.wg.Go(func() { a.watchGossipKeys(runCtx) })
	}
	if cfg.InstallTo != "" {
		if err := installBinary(cfg.InstallTo); err != nil {
			return err
		}
	}
	if err := a.serveAPI(); err != nil {
		return err
	}
	a.member, err = a.job.Join(ctx, record.MemberInfo{
		ID: cfg.MemberID, Addr: cfg.Advertise, Node: cfg.Node, Topology: topology,
		Slots: cfg.Slots, GossipAddr: a.gossip.LocalAddr(), State: a.initialState(),
	})
	if errors.Is(err, coordinator.ErrDuplicateMember) {
		return fmt.Errorf("another live sidecar is registered as member %q: give every pod its own --member-id (default POD_NAME): %w", cfg.MemberID, err)
	}
	if errors.Is(err, coordinator.ErrAccessDenied) {
		return fmt.Errorf("etcd (%v) denies this sidecar access to job %s's keys under %s: give it the job's etcd user (--etcd-user, or a client certificate whose common name is the user), created by `ringside etcd auth setup --namespace %s --job %s`: %w",
			cfg.Etcd, cfg.Job.Job, cfg.Job.Prefix(), cfg.Job.Namespace, cfg.Job.Job, err)
	}
	if err != nil {
		return err
	}
	a.seedGossip(ctx, nil)
	deps := detectorDeps{Probes: a.gossip, View: a.gossip, Votes: a.member, Roster: a.job}
	if cfg.SocketReset {
		deps.Resets = sockreset.New(a.log)
	}
	a.detect.Start(runCtx, deps)
	a.wg.Go(a.detect.Wait)
	a.wg.Go(func() { a.flushHeartbeats(runCtx) })
	a.wg.Go(func() { a.watchStalls(runCtx) })
	a.wg.Go(func() { a.lag.run(runCtx) })
	a.wg.Go(func() { a.followTrainer(runCtx) })
	a.metrics.straggler.WithLabelValues(cfg.MemberID).Set(0)
	a.wg.Go(func() { a.member.FollowStraggler(runCtx, a.straggling) })
	if cfg.NodeWatch && cfg.Node != "" {
		a.watchNode(runCtx)
	}
	a.wg.Go(func() {
		// Validated with the config: the watch returns only at a notice
		// or when the agent stops.
		_ = preempt.WatchNotice(runCtx, cfg.PreemptionNotice, a.requestDrain)
	})
	return nil
}

// serveAPI listens on the socket (and the optional TCP address).
func (a *Agent) serveAPI() error {
	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			l.Close()
		}
	}
	if a.cfg.Socket != "" {
		l, err := a.listenSocket(a.cfg.Socket)
		if err != nil {
			return err
		}
		listeners = append(listeners, l)
	}
	if a.cfg.HTTPAddr != "" {
		l, err := net.Listen("tcp", a.cfg.HTTPAddr)
		if err != nil {
			closeAll()
			return fmt.Errorf("API address: %w", err)
		}
		listeners = append(listeners, l)
	}
	// After the socket: its directory has its mode by now.
	if path := a.cfg.tokenPath(); path != "" {
		err := os.MkdirAll(filepath.Dir(path), socketDirMode)
		if err == nil {
			a.apiToken, err = writeToken(path)
		}
		if err != nil {
			closeAll()
			return fmt.Errorf("API token: %w", err)
		}
	}
	var probes net.Listener
	if a.cfg.ProbeAddr != "" {
		l, err := net.Listen("tcp", a.cfg.ProbeAddr)
		if err != nil {
			closeAll()
			return fmt.Errorf("probe address: %w", err)
		}
		probes = l
		a.probeAddr.Store(l.Addr().String())
	}
	a.serve(&http.Server{Handler: a.handler(), ReadHeaderTimeout: 10 * time.Second, ConnContext: connContext}, "API", listeners...)
	if probes != nil {
		a.serve(&http.Server{Handler: a.probeHandler(), ReadHeaderTimeout: 10 * time.Second}, "probe", probes)
	}
	return nil
}

// serve runs srv on listeners until the agent stops.
func (a *Agent) serve(srv *http.Server, name string, listeners ...net.Listener) {
	a.wg.Go(func() {
		if err := telemetry.Serve(a.stopCtx, srv, listeners...); err != nil {
			a.log.Error(name+" server stopped", "err", err)
		}
	})
}

// shutdown releases everything start acquired, in reverse order.
func (a *Agent) shutdown() {
	a.stop()
	a.events.closeAll()
	if a.member != nil {
		a.member.Close() // after a drain it has left already; this is a no-op
	}
	if a.gossip != nil {
		a.gossip.Close()
	}
	if a.job != nil {
		a.job.Close()
	}
	if a.client != nil {
		a.client.Close()
	}
	if a.cfg.Socket != "" {
		os.Remove(a.cfg.Socket)
	}
	if a.apiToken != "" {
		os.Remove(a.cfg.tokenPath()) // it opens nothing once the sidecar is gone
	}
}

// Started is closed once the agent has joined the job and serves its API.
func (a *Agent) Started() <-chan struct{} { return a.started }

// generation returns the newest generation and a channel closed when a
// newer one arrives.
func (a *Agent) generation() (*record.Generation, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gen, a.changed
}

// setGeneration makes g the agent's generation and has the detector
// hand it to the trainer, around the deaths it confirms.
func (a *Agent) setGeneration(ctx context.Context, g *record.Generation) {
	a.mu.Lock()
	a.gen = g
	if _, in := g.Member(a.cfg.MemberID); in && a.firstGen == 0 {
		a.firstGen = g.Number
	}
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()

	a.metrics.generation.Set(float64(g.Number))
	a.metrics.worldSize.Set(float64(g.WorldSize))
	a.metrics.restarts.Set(float64(g.Restarts))
	a.metrics.stopped.Set(boolFloat(g.Stop != nil))
	a.metrics.members.WithLabelValues(string(record.StateActive)).Set(float64(len(g.Members)))
	a.metrics.members.WithLabelValues(string(record.StateStandby)).Set(float64(len(g.Standby)))
	leader := 0.0
	if a.member.IsLeader() {
		leader = 1
	}
	a.metrics.leader.Set(leader)
	a.detect.SetGeneration(ctx, g)
}

// handOver tells the trainer of generation g, and that the job stopped
// when g stops it.
func (a *Agent) handOver(g *record.Generation) {
	r := api.NewRendezvous(g, a.cfg.MemberID, a.nccl)
	a.events.publish(api.Event{Type: api.EventGeneration, Time: time.Now(), Generation: r})
	a.log.Info("generation", "generation", g.Number, "world_size", g.WorldSize, "state", r.State,
		"rank", r.Rank, "reason", g.Reason)
	if e, ok := stopEvent(g); ok {
		a.events.publish(e)
		a.log.Error("trainer crashes stopped the job: no trainer starts again until its pods are replaced",
			"generation", g.Number, "why", g.Stop.Message, "exit_code", g.Stop.ExitCode, "restarts", g.Restarts)
	}
}

// stopEvent is the event of the job's stop, if g stopped it.
func stopEvent(g *record.Generation) (api.Event, bool) {
	if g.Stop == nil {
		return api.Event{}, false
	}
	code := g.Stop.ExitCode
	return api.Event{Type: api.EventJobStopped, Time: time.Now(), Reason: g.Stop.Message, ExitCode: &code}, true
}

// publish tells the trainer, on every event stream, of e.
func (a *Agent) publish(e api.Event) { a.events.publish(e) }

// initialEvents is what a new event stream starts with.
func (a *Agent) initialEvents() []api.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []api.Event
	if a.gen != nil {
		out = append(out, api.Event{Type: api.EventGeneration, Time: time.Now(), Generation: api.NewRendezvous(a.gen, a.cfg.MemberID, a.nccl)})
		if e, ok := stopEvent(a.gen); ok {
			out = append(out, e)
		}
	}
	if a.draining != nil {
		out = append(out, *a.draining)
	}
	return out
}

// requestDrain starts a drain once; later requests are ignored. From now
// on the trainer's presence no longer changes the member's state: a
// trainer that asked to leave and exits is not "gone" but done.
func (a *Agent) requestDrain(reason string) {
	a.leaving.Store(true)
	select {
	case a.drainCh <- reason:
	default:
	}
}

// drain tells the trainer, leaves the next generation, and leaves the job
// once that generation is committed or the grace period is over.
func (a *Agent) drain(ctx context.Context, reason string) error {
	start := time.Now()
	deadline := a.announceDrain(reason)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	a.leaving.Store(true)
	a.stateMu.Lock() // waits out a change for the trainer in flight, so draining is stored last
	a.stateMu.Unlock()
	marked := a.member.SetState(dctx, record.StateDraining)
	if marked != nil {
		a.log.Warn("could not mark this member draining; leaving at once", "err", marked)
	} else {
		a.awaitExclusion(dctx)
	}
	took := time.Since(start)
	// Each step below has a bound of its own: a gossip leave that no peer
	// acknowledges (they all drain with this member, as when a queue
	// suspends the job) must not spend the time of the lease's revocation,
	// whose keys would otherwise stand until their TTL.
	if marked == nil {
		a.bounded(ctx, func(ctx context.Context) error { a.recordDrain(ctx, took); return nil })
	}
	if err := a.bounded(ctx, a.gossip.Leave); err != nil {
		a.log.Warn("gossip leave", "err", err)
	}
	if err := a.bounded(ctx, a.member.Leave); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}

// leaveTimeout bounds each step of leaving the job after a drain.
const leaveTimeout = 2 * time.Second

// bounded runs f with ctx bounded by leaveTimeout.
func (a *Agent) bounded(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, leaveTimeout)
	defer cancel()
	return f(ctx)
}

// recordDrain observes took, the drain's duration, and appends it to the
// job's drains in etcd, where the controller reads it to size the
// workers' termination grace period. A failure is logged: the member
// leaves all the same.
func (a *Agent) recordDrain(ctx context.Context, took time.Duration) {
	a.metrics.drainDuration.Observe(took.Seconds())
	if err := a.member.RecordDrain(ctx, took); err != nil {
		a.log.Warn("could not record the drain's duration", "took", took, "err", err)
		return
	}
	a.log.Info("drained", "took", took)
}

// announceDrain tells the trainer, and every event stream opened later,
// that this member drains; it returns when the member leaves regardless.
func (a *Agent) announceDrain(reason string) time.Time {
	now := time.Now()
	deadline := now.Add(a.cfg.Grace)
	e := api.Event{Type: api.EventDrain, Time: now, Reason: reason, Deadline: &deadline}
	a.mu.Lock()
	a.draining = &e
	a.mu.Unlock()
	a.events.publish(e)
	a.log.Info("draining", "reason", reason, "grace", a.cfg.Grace)
	return deadline
}

// initialState is the state the member joins in.
func (a *Agent) initialState() record.State {
	if a.cfg.AwaitTrainer {
		return record.StatePending
	}
	return record.StateActive
}

// awaitExclusion waits for a generation without this member: the current
// one may already be (a pending or standby member that drains, or a job
// that trainer crashes stopped, where nobody trains and no generation
// follows), and a member whose trainer finished waits for none (its
// finishing job commits none).
func (a *Agent) awaitExclusion(ctx context.Context) {
	if a.finished.Load() {
		return
	}
	if g, _ := a.generation(); g != nil {
		if _, in := g.Member(a.cfg.MemberID); !in || g.Stop != nil {
			return
		}
	}
	for {
		select {
		case g, open := <-a.member.Generations():
			if !open {
				return
			}
			a.setGeneration(ctx, g)
			if _, in := g.Member(a.cfg.MemberID); !in || g.Stop != nil {
				a.log.Info("generation without this member committed; leaving", "generation", g.Number)
				return
			}
		case <-ctx.Done():
			a.log.Warn("grace period over before the generation without this member; leaving anyway")
			return
		}
	}
}

func (a *Agent) watchNode(ctx context.Context) {
	client, err := preempt.InClusterClient()
	if err != nil {
		a.log.Info("node taint watch off", "reason", err)
		return
	}
	pcfg := preempt.DefaultConfig(a.cfg.Node)
	pcfg.Taints = a.cfg.DrainTaints
	pcfg.Logger = a.log
	a.wg.Go(func() {
		err := preempt.Watch(ctx, client, pcfg, func(taint string) {
			a.requestDrain("node " + a.cfg.Node + " tainted " + taint)
		})
		if err != nil && ctx.Err() == nil {
			a.log.Warn("node taint watch stopped", "err", err)
		}
	})
}

func (a *Agent) gossipMembers() float64 {
	if a.gossip == nil {
		return 0
	}
	return float64(a.gossip.Members())
}

func (a *Agent) gossipSuspects() float64 {
	if a.gossip == nil {
		return 0
	}
	return float64(a.gossip.Suspects())
}

// secondRelease is when, after the first generation, start-up pages are
// released once more, plus a random part of secondReleaseSpread: the pages
// the sidecar still uses come back with a burst of page faults, which under
// load stalls it for a few hundred milliseconds, long enough to be
// suspected, and the sidecars of a job all started together.
const (
	secondRelease       = 15 * time.Second
	secondReleaseSpread = 30 * time.Second
)

// releaseStartupPages unmaps the executable's pages that starting up
// touched (see footprint.ReleaseStartupPages).
func (a *Agent) releaseStartupPages() {
	n, err := footprint.ReleaseStartupPages()
	if err != nil {
		a.log.Warn("could not release startup pages; the sidecar keeps them", "err", err)
		return
	}
	a.log.Debug("startup pages released", "mib", n/footprint.MiB)
}

// ProbeAddr returns the address the probe server listens on (the port
// bound, where the configured one was 0); empty until it listens, or
// without one.
func (a *Agent) ProbeAddr() string {
	addr, _ := a.probeAddr.Load().(string)
	return addr
}
