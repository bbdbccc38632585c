package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// ErrClosed is returned by the methods of a Gossip that has been closed.
var ErrClosed = errors.New("gossip: closed")

// leaveWaitCap bounds (a duration) how long Leave waits for memberlist's
// leave message to go out when ctx has no deadline.
const leaveWaitCap = 5 * time.Second

// noticeWaitIntervals bounds how long Leave waits for its leave notice to be
// delivered, in gossip intervals; on a pod network it takes a millisecond or
// two.
const noticeWaitIntervals = 20

// Gossip is this sidecar's membership in its job's gossip. It is safe for
// concurrent use.
type Gossip struct {
	cfg Config
	log *slog.Logger
	ml  *memberlist.Memberlist
	dlg *delegate
	// keyring is memberlist's, nil in plain text; it locks itself.
	keyring *memberlist.Keyring
	events  *dispatcher
	tr      *transport

	wmu      sync.Mutex // guards watching
	watching map[string]*watch

	// life makes memberlist's Leave and Shutdown exclusive: a Leave after
	// Shutdown panics.
	life   sync.Mutex
	closed bool
	// wg counts the calls into memberlist made for Join and Leave, which
	// know no context: a caller whose ctx ends returns at once and Close
	// waits for the call, which memberlist's own timeouts bound.
	wg sync.WaitGroup
}

// Start binds this member's gossip listeners and starts probing; the member
// is alone until Join. events receives the verdicts about other members until
// Close. ctx bounds the start only.
func Start(ctx context.Context, cfg Config, events Events) (*Gossip, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("gossip: start: %w", err)
	}
	if events == nil {
		return nil, errors.New("gossip: start: events is nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	var err error
	disp := newDispatcher(events)
	dlg := newDelegate(cfg.Name, cfg.RetransmitMult, disp, cfg.suspectHook)
	dlg.onInvalid = cfg.OnInvalidMessage
	mc := memberlistConfig(cfg)
	if len(cfg.Keys) > 0 {
		// memberlist's defaults verify both ways once there is a keyring:
		// nothing unencrypted is sent or taken.
		if mc.Keyring, err = memberlist.NewKeyring(cloneKeys(cfg.Keys[1:]), bytes.Clone(cfg.Keys[0])); err != nil {
			disp.close()
			return nil, fmt.Errorf("gossip: start %s: keyring: %w", cfg.Name, err)
		}
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	mc.Logger = newLogAdapter(logger, dlg.suspect)
	mc.Events, mc.Delegate, mc.Ping, mc.Alive = dlg, dlg, dlg, dlg
	tr, err := listen(cfg.BindAddr, cfg.BindPort, logger)
	if err != nil {
		disp.close()
		return nil, fmt.Errorf("gossip: start %s: %w", cfg.Name, err)
	}
	mc.Transport = tr
	if mc.AdvertiseAddr, err = advertiseIP(cfg); err != nil {
		tr.Shutdown()
		disp.close()
		return nil, fmt.Errorf("gossip: start %s: %w", cfg.Name, err)
	}
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = tr.port()
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		tr.Shutdown()
		disp.close()
		return nil, fmt.Errorf("gossip: start %s on %s:%d: %w", cfg.Name, cfg.BindAddr, cfg.BindPort, err)
	}
	return &Gossip{cfg: cfg, log: logger, ml: ml, dlg: dlg, keyring: mc.Keyring, events: disp, tr: tr, watching: map[string]*watch{}}, nil
}

// advertiseIP is the address other members reach this one at: the
// configured one, else the bound one, else (bound to every interface) the
// host's first private address, as memberlist picks it.
func advertiseIP(cfg Config) (string, error) {
	if cfg.AdvertiseAddr != "" {
		return cfg.AdvertiseAddr, nil
	}
	if ip := net.ParseIP(cfg.BindAddr); ip != nil && !ip.IsUnspecified() {
		return cfg.BindAddr, nil
	}
	ip, err := sockaddr.GetPrivateIP()
	if err != nil {
		return "", fmt.Errorf("find a private address to advertise: %w", err)
	}
	if ip == "" {
		return "", errors.New("no private address to advertise: set the advertise address")
	}
	return ip, nil
}

// memberlistConfig maps cfg onto memberlist's LAN defaults.
func memberlistConfig(cfg Config) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.Label = cfg.Label
	mc.BindAddr, mc.BindPort = cfg.BindAddr, cfg.BindPort
	mc.AdvertiseAddr, mc.AdvertisePort = cfg.AdvertiseAddr, cfg.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = cfg.BindPort
	}
	mc.ProbeInterval, mc.ProbeTimeout = cfg.ProbeInterval, cfg.ProbeTimeout
	mc.IndirectChecks = cfg.IndirectChecks
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = cfg.SuspicionMult, cfg.SuspicionMaxTimeoutMult
	mc.GossipInterval, mc.GossipNodes = cfg.GossipInterval, cfg.GossipNodes
	mc.RetransmitMult = cfg.RetransmitMult
	mc.PushPullInterval = cfg.PushPullInterval
	mc.GossipToTheDeadTime = cfg.GossipToTheDeadTime
	mc.DeadNodeReclaimTime = cfg.DeadNodeReclaimTime
	mc.TCPTimeout = cfg.StreamTimeout
	mc.EnableCompression = cfg.Compress
	return mc
}

// Join contacts the members at addrs (host:port, as other members' LocalAddr
// returned) and syncs state with each, which makes this member known to the
// whole job. It returns how many it reached; the error is non-nil only when
// none was (a wrong key or label reaches none). An empty addrs is not an
// error: the job's first member has no one to join. Join blocks until every
// address answered or timed out (Config.StreamTimeout each) or ctx is done.
func (g *Gossip) Join(ctx context.Context, addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, nil
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	if !g.track() {
		return 0, ErrClosed
	}
	go func() {
		defer g.wg.Done()
		n, err := g.ml.Join(addrs)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return r.n, fmt.Errorf("gossip: join %d seeds: %w", len(addrs), r.err)
		}
		return r.n, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("gossip: join: %w", ctx.Err())
	}
}

// track counts a call into memberlist that Close must wait for; false if
// closed.
func (g *Gossip) track() bool {
	g.life.Lock()
	defer g.life.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

// Members returns how many members, this one included, gossip does not
// consider dead or gone. Suspects count: they are alive until declared dead.
func (g *Gossip) Members() int {
	return g.ml.NumMembers()
}

// Suspects returns how many other members this member's own probes found
// unresponsive and that have since neither answered, been declared alive
// again, nor been declared dead or gone.
//
// It is this member's view only. memberlist does not expose the suspect state
// it keeps per member (its Node.State field is never set and no callback
// fires on suspicion), so a suspicion this member only heard of by gossip is
// not counted; the sum over all members counts each suspicion at least once.
// It is read from memberlist's "Failed UDP ping: NAME (timeout reached)"
// log line, which the tests check is still there.
func (g *Gossip) Suspects() int {
	return g.dlg.numSuspects()
}

// Alive reports whether this member's gossip holds name alive (suspects
// included).
func (g *Gossip) Alive(name string) bool { return g.dlg.isAlive(name) }

// Rejoin joins name again at the address it was last seen at: a member
// declared dead that still answers (after a partition healed) is probed
// again only once it is back in this member's gossip.
func (g *Gossip) Rejoin(ctx context.Context, name string) error {
	p, ok := g.dlg.lastSeen(name)
	if !ok {
		return fmt.Errorf("gossip: rejoin %s: never seen", name)
	}
	_, err := g.Join(ctx, []string{net.JoinHostPort(p.addr.String(), fmt.Sprint(p.port))})
	return err
}

// Status is what a Check found.
type Status int

const (
	// Silent: no answer within ProbeTimeout. The member may be dead, or
	// stopped, or cut off from us.
	Silent Status = iota
	// Answered: it acked the ping.
	Answered
	// Gone: its gossip port refused a TCP connection, so no process
	// listens there: it is dead for certain (a stopped process's port
	// still accepts; the kernel answers for it).
	Gone
	// Unreachable: no answer, and its gossip port did not even complete
	// a TCP handshake within ProbeTimeout: its node, or the network to
	// it, is down or cut off. A process that is only stalled (starved of
	// CPU, stopped) has its kernel complete handshakes for it, so a stall
	// that many members share never looks like this.
	Unreachable
)

func (s Status) String() string {
	switch s {
	case Silent:
		return "silent"
	case Answered:
		return "answered"
	case Gone:
		return "gone"
	case Unreachable:
		return "unreachable"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// CheckTimeout is how long a Check waits for an answer now: ProbeTimeout
// stretched by this member's local health, as memberlist stretches its
// own probes (Lifeguard):
//
//	CheckTimeout = ProbeTimeout * (1 + health score)
//
// The score (0 to 7) rises each time one of this member's probes fails
// while the members it asked to probe too did not even send their nacks
// in time, and each time it has to refute a suspicion about itself; each
// probe that goes well lowers it. A member that cannot keep time (its
// process starved of CPU) then waits longer before it finds another
// silent, rather than blaming its own slowness on it.
func (g *Gossip) CheckTimeout() time.Duration {
	return g.cfg.ProbeTimeout * time.Duration(1+g.ml.GetHealthScore())
}

// Check pings member name, at the address it was last seen alive, and
// meanwhile dials its gossip port: it returns Gone as soon as the dial is
// refused, Unreachable as soon as a ping went unanswered and the dial got
// no handshake either, else whether a ping was answered within
// CheckTimeout (one ping per ProbeTimeout, memberlist's own ping timeout). It is a second
// opinion on another member's suspicion, independent of the probe
// schedule; a member never seen yet is an error.
func (g *Gossip) Check(ctx context.Context, name string) (Status, error) {
	pings := 1 + g.ml.GetHealthScore()
	for range pings - 1 {
		// Unreachable ends it too: the handshake's time-out came on
		// time, so this member kept time; no second ping is needed.
		if st, err := g.check(ctx, name); err != nil || st != Silent {
			return st, err
		}
	}
	return g.check(ctx, name)
}

// check pings name once, dialing its port meanwhile (see Check).
func (g *Gossip) check(ctx context.Context, name string) (Status, error) {
	p, ok := g.dlg.lastSeen(name)
	if !ok {
		return Silent, fmt.Errorf("gossip: check %s: never seen", name)
	}
	if !g.track() {
		return Silent, ErrClosed
	}
	type result struct {
		st  Status
		err error
	}
	ping := make(chan result, 1)
	go func() {
		defer g.wg.Done()
		_, err := g.ml.Ping(name, &net.UDPAddr{IP: p.addr, Port: int(p.port)})
		var none memberlist.NoPingResponseError
		switch {
		case err == nil:
			ping <- result{Answered, nil}
		case errors.As(err, &none):
			ping <- result{Silent, nil}
		default:
			ping <- result{Silent, fmt.Errorf("gossip: check %s: %w", name, err)}
		}
	}()
	dctx, cancel := context.WithTimeout(ctx, g.cfg.ProbeTimeout)
	defer cancel()
	handshake := make(chan dialResult, 1)
	go func() { handshake <- g.dial(dctx, p) }()
	shook := dialUnknown
	var refused <-chan struct{} // closed when a later dial is refused
	for {
		select {
		case r := <-ping:
			if r.err != nil || r.st != Silent {
				return r.st, r.err
			}
			// Silent: the process, or the path to its node? The dial
			// ends within ProbeTimeout of its start.
			if handshake != nil {
				select {
				case shook = <-handshake:
				case <-ctx.Done():
					return Silent, ctx.Err()
				}
			}
			select {
			case <-refused:
				return Gone, nil
			default:
			}
			switch shook {
			case dialRefused:
				return Gone, nil
			case dialNoAnswer:
				return Unreachable, nil
			}
			return Silent, nil
		case shook = <-handshake:
			if shook == dialRefused {
				return Gone, nil
			}
			handshake = nil // the ping decides, unless a later dial is refused
			if shook == dialAccepted {
				refused = g.redial(dctx, p)
			}
		case <-refused:
			return Gone, nil
		case <-ctx.Done():
			return Silent, ctx.Err()
		}
	}
}

// redial dials p again at growing intervals until ctx ends, and closes
// the channel it returns once a dial is refused. A process that is being
// killed closes its sockets one at a time: the watch connection a watcher
// sees close may go first, and for a moment after it the gossip port
// still completes handshakes, so the check's first dial is accepted and
// its ping, never answered, would take the whole probe timeout (and
// cast a silent vote, not a gone one).
func (g *Gossip) redial(ctx context.Context, p peer) <-chan struct{} {
	refused := make(chan struct{})
	go func() {
		for wait := redialFirst; ; wait *= 2 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if g.dial(ctx, p) == dialRefused {
				close(refused)
				return
			}
		}
	}()
	return refused
}

// redialFirst is redial's first interval: a dying process's sockets close
// within milliseconds of each other.
const redialFirst = 5 * time.Millisecond

// Gone reports whether name's gossip port refuses a TCP connection
// within ProbeTimeout/4 (a refusal takes one round trip): the quick test a
// vote makes before it is cast, so a dead process's eviction need not
// wait out the refute window.
func (g *Gossip) Gone(ctx context.Context, name string) bool {
	p, ok := g.dlg.lastSeen(name)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.ProbeTimeout/4)
	defer cancel()
	return g.refused(ctx, p)
}

// dialResult is what dialing a peer's gossip port found.
type dialResult int

const (
	// dialUnknown: the dial failed for a reason that says nothing of
	// the peer (this sidecar out of file descriptors, a dial that came
	// back late because this sidecar stalled).
	dialUnknown dialResult = iota
	dialAccepted
	dialRefused
	// dialNoAnswer: no handshake within the dial's deadline, which came
	// on time: nothing answered for the peer's node.
	dialNoAnswer
)

// refused dials p's gossip port and reports whether the connection was
// refused.
func (g *Gossip) refused(ctx context.Context, p peer) bool { return g.dial(ctx, p) == dialRefused }

// dial connects to p's gossip port from the address this member
// advertises, until ctx's deadline. A connection that is accepted is
// closed before it carries a byte, which memberlist takes quietly.
func (g *Gossip) dial(ctx context.Context, p peer) dialResult {
	d := g.tr.dialer()
	start := time.Now()
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.addr.String(), fmt.Sprint(p.port)))
	if err == nil {
		conn.Close()
		return dialAccepted
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return dialRefused
	}
	// A time-out counts as no answer only if it came on time: a sidecar
	// that stalled past its deadline cannot tell whether the handshake
	// completed meanwhile.
	deadline, ok := ctx.Deadline()
	late := !ok || time.Since(start) > 2*deadline.Sub(start)
	var ne net.Error
	timedOut := errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	if (timedOut && !late) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return dialNoAnswer
	}
	return dialUnknown
}

// LocalAddr returns the host:port the other members reach this one at: the
// advertised address and the port actually bound. Publish it for Join.
func (g *Gossip) LocalAddr() string {
	return g.ml.LocalNode().Address()
}

// Leave tells the others that this member is going on purpose, so they report
// it through LeaveEvents.MemberLeft and not as a death, then stops answering
// as a member; call Close after it. It first sends a leave notice to every
// member and waits until it is written to each (at most 20 gossip
// intervals), then gossips memberlist's leave message and waits until that
// has gone out. ctx bounds both waits; without a deadline the second is
// capped at 5 s. A member that misses the notice (it was unreachable, or the
// notice was overtaken) reports the leaver as dead.
func (g *Gossip) Leave(ctx context.Context) error {
	if err := g.announceLeave(ctx); err != nil {
		return err
	}
	timeout := leaveWaitCap
	if deadline, ok := ctx.Deadline(); ok {
		timeout = time.Until(deadline)
	}
	if timeout <= 0 {
		return fmt.Errorf("gossip: leave: %w", context.DeadlineExceeded)
	}
	done := make(chan error, 1)
	if !g.track() {
		return ErrClosed
	}
	go func() {
		defer g.wg.Done()
		g.life.Lock()
		defer g.life.Unlock()
		if g.closed {
			done <- ErrClosed
			return
		}
		done <- g.ml.Leave(timeout)
	}()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, ErrClosed) {
			return fmt.Errorf("gossip: leave: %w", err)
		}
		return err
	case <-ctx.Done():
		return fmt.Errorf("gossip: leave: %w", ctx.Err())
	}
}

// announceLeave sends this member's leave notice to every member it knows,
// each over its own TCP stream so that the notice is there before the leave
// message that follows, and gossips it too, for members it does not know yet.
// It waits until every stream is written, at most noticeWaitIntervals gossip
// intervals: a member that does not take it in that time is probably dead.
func (g *Gossip) announceLeave(ctx context.Context) error {
	notice := newLeaveNotice(g.cfg.Name)
	peers := g.dlg.others()
	sent := make(chan struct{}, len(peers))
	for _, p := range peers {
		if !g.track() {
			return ErrClosed
		}
		go func() {
			defer g.wg.Done()
			if err := g.ml.SendReliable(p, notice.msg); err != nil {
				g.log.Debug("leave notice not delivered", slog.String("to", p.Name), slog.Any("err", err))
			}
			sent <- struct{}{}
		}()
	}
	g.dlg.queue.QueueBroadcast(notice)
	limit := time.NewTimer(noticeWaitIntervals * g.cfg.GossipInterval)
	defer limit.Stop()
	for range peers {
		select {
		case <-sent:
		case <-limit.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("gossip: leave: %w", ctx.Err())
		}
	}
	return nil
}

// Close stops gossip at once, without telling anyone: to the others it looks
// like a death unless Leave came first. It waits for Join and Leave calls in
// progress (each bounded by its timeouts) and for a running event handler,
// and drops events not yet delivered. Safe to call more than once.
func (g *Gossip) Close() error {
	g.life.Lock()
	if g.closed {
		g.life.Unlock()
		return nil
	}
	g.closed = true
	err := g.ml.Shutdown()
	g.life.Unlock()
	g.stopWatches()
	g.wg.Wait()
	g.events.close()
	if err != nil {
		return fmt.Errorf("gossip: close: %w", err)
	}
	return nil
}

// SetKeys replaces the keyring: keys[0] encrypts from now on, every key
// decrypts, and the keys not in keys are dropped. It installs the new keys
// before it switches and removes the old ones last, so that a member is
// never without a key its peers use. A job rotates its key in three rounds,
// each applied to every member before the next starts:
//
//  1. add the new key after the current one (every member decrypts both);
//  2. put the new key first (every member encrypts with it, and still
//     decrypts what a member not yet switched sends);
//  3. remove the old key.
//
// A member started without keys cannot take any: plain text cannot be
// turned into encryption in place (its peers would drop it mid-way).
func (g *Gossip) SetKeys(keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("gossip: set keys: no key")
	}
	for i, k := range keys {
		if err := checkKeyLen(len(k)); err != nil {
			return fmt.Errorf("gossip: set keys: key %d: %w", i+1, err)
		}
	}
	kr := g.keyring
	if kr == nil {
		return errors.New("gossip: set keys: this member gossips in plain text; restart it with a key")
	}
	for _, k := range keys {
		if err := kr.AddKey(bytes.Clone(k)); err != nil {
			return fmt.Errorf("gossip: set keys: install: %w", err)
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return fmt.Errorf("gossip: set keys: use: %w", err)
	}
	for _, old := range kr.GetKeys() {
		if !containsKey(keys, old) {
			if err := kr.RemoveKey(old); err != nil {
				return fmt.Errorf("gossip: set keys: remove: %w", err)
			}
		}
	}
	return nil
}

// Keys returns the keyring, the primary key first; nil in plain text.
func (g *Gossip) Keys() [][]byte {
	if g.keyring == nil {
		return nil
	}
	return g.keyring.GetKeys()
}

func cloneKeys(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = bytes.Clone(k)
	}
	return out
}
