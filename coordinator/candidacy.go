package coordinator

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ringside/ringside/coordinator/record"
)

// A candidacy decides whether this member campaigns, so that about
// Config.Candidates members do whoever dies. Keeping the election to a few
// candidates keeps each campaign O(candidates): etcd sorts the whole
// election prefix to find a candidate's predecessor.
//
// The rule orders every member by the latest generation: its leader, then
// its ring in order, then its standby members, then anyone else in the
// order their campaigns started (a member not campaigning comes last). The
// first Candidates of that order (the leader and the head of the ring) are
// the designated candidates and always campaign. Any other member campaigns
// while fewer than Candidates members ahead of it campaign or are expected
// to, and withdraws once that many do again. A member is expected to
// campaign when it is named in the generation and still registered: a
// survivor that has not yet put its key counts already, so when several
// candidates die at once just as many stand in, the first survivors in
// ring order, instead of every member at once.
//
// The leader is never asked: it withdraws only when its term ends (session
// lost, a watch failed, a commit fenced off), never because a generation
// reordered the ring, and every generation it commits names it, so it stays
// designated. (Between its election and its first commit the latest
// generation is its predecessor's, which may not name it: it is not asked
// then either.)
type candidacy struct {
	m        *Member
	k        int
	prefix   string // the election prefix
	ownKey   string // the election key this session campaigns on
	members  string // the members prefix
	gens     chan *record.Generation
	keys     clientv3.WatchChan // the election prefix, from rev
	departed clientv3.WatchChan // deleted member keys, from rev
	cancel   context.CancelFunc

	gen      *record.Generation    // the latest generation
	cands    *candidates           // of gen
	campaign map[string]campaigner // by election key
	// registered says, for members named there, whether their member key
	// was there when last read; reset with every generation, so a member
	// that left and came back is read again.
	registered map[string]bool
}

type campaigner struct {
	id  string
	rev int64 // CreateRevision of the key: the order campaigns started in
}

// newCandidacy reads the election and starts following it, the members'
// departures and the generations, until close. A watch that fails makes
// every later call fail; the caller starts a new candidacy.
func (m *Member) newCandidacy(ctx context.Context, sess *concurrency.Session) (*candidacy, error) {
	cfg := m.job.cfg
	c := &candidacy{
		m:          m,
		k:          cfg.Candidates,
		prefix:     cfg.Prefix() + record.ElectionDir,
		members:    cfg.Prefix() + record.MembersDir,
		campaign:   make(map[string]campaigner),
		registered: make(map[string]bool),
		cands:      &candidates{},
	}
	c.ownKey = fmt.Sprintf("%s%x", c.prefix, sess.Lease())
	if c.k <= 0 {
		return c, nil // everyone campaigns: nothing to follow
	}
	resp, err := m.job.client.Get(ctx, c.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read candidates: %w", err)
	}
	for _, kv := range resp.Kvs {
		c.campaign[string(kv.Key)] = campaigner{id: string(kv.Value), rev: kv.CreateRevision}
	}
	wctx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	rev := resp.Header.Revision + 1
	c.keys = m.job.client.Watch(wctx, c.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
	c.departed = m.job.client.Watch(wctx, c.members, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithFilterPut())
	c.gens = m.job.subscribe()
	select {
	case g := <-c.gens: // the generation held now, if any: decide on it
		c.setGeneration(g)
	default:
	}
	return c, nil
}

func (c *candidacy) close() {
	if c.cancel != nil {
		c.cancel()
		c.m.job.unsubscribe(c.gens)
	}
}

// await returns once this member should campaign.
func (c *candidacy) await(ctx context.Context) error {
	for {
		need, err := c.needed(ctx)
		if err != nil || need {
			return err
		}
		if err := c.next(ctx); err != nil {
			return err
		}
	}
}

// awaitSurplus returns nil once this member, campaigning, is no longer
// needed.
func (c *candidacy) awaitSurplus(ctx context.Context) error {
	for {
		need, err := c.needed(ctx)
		if err != nil {
			return err
		}
		if !need {
			return nil
		}
		if err := c.next(ctx); err != nil {
			return err
		}
	}
}

// next applies the next change to the election, the members or the
// generation.
func (c *candidacy) next(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case g := <-c.gens:
		c.setGeneration(g)
	case wr, ok := <-c.keys:
		if !ok || wr.Err() != nil {
			return fmt.Errorf("watch candidates: %v", wr.Err())
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				delete(c.campaign, string(ev.Kv.Key))
			} else {
				c.campaign[string(ev.Kv.Key)] = campaigner{id: string(ev.Kv.Value), rev: ev.Kv.CreateRevision}
			}
		}
	case wr, ok := <-c.departed:
		if !ok || wr.Err() != nil {
			return fmt.Errorf("watch departures: %v", wr.Err())
		}
		for _, ev := range wr.Events {
			c.registered[strings.TrimPrefix(string(ev.Kv.Key), c.members)] = false
		}
	}
	return nil
}

func (c *candidacy) setGeneration(g *record.Generation) {
	c.gen, c.cands = g, c.m.job.candidatesOf(g)
	clear(c.registered)
}

// needed applies the rule (see candidacy) to what is known, reading the
// registration of named members only when the answer depends on it.
func (c *candidacy) needed(ctx context.Context) (bool, error) {
	if c.k <= 0 {
		return true, nil
	}
	pos, named := c.cands.rank[c.m.id]
	if named && pos < c.cands.designated {
		return true, nil
	}
	for {
		n, unread := c.ahead(pos, named)
		if n < c.k {
			return true, nil
		}
		if len(unread) == 0 {
			return false, nil
		}
		if err := c.readRegistered(ctx, unread); err != nil {
			return false, err
		}
	}
}

// ahead counts, up to Candidates, the members ahead of this one that
// campaign or are expected to: the named ones before pos (all of them if
// this member is not named, and then the unnamed campaigners that started
// before it). A named member whose registration is unread counts; unread
// lists those, to be read before the count decides anything.
func (c *candidacy) ahead(pos int, named bool) (n int, unread []string) {
	campaigning := make(map[string]bool, len(c.campaign))
	for _, cp := range c.campaign {
		campaigning[cp.id] = true
	}
	before := c.cands.order
	if named {
		before = c.cands.order[:pos]
	}
	for _, id := range before {
		if n >= c.k {
			return n, unread
		}
		reg, read := c.registered[id]
		switch {
		case campaigning[id]:
			n++
		case !read:
			unread = append(unread, id)
			n++
		case reg:
			n++
		}
	}
	if named {
		return n, unread
	}
	own, campaigns := c.campaign[c.ownKey]
	for key, cp := range c.campaign {
		if _, isNamed := c.cands.rank[cp.id]; isNamed || key == c.ownKey || cp.id == c.m.id {
			continue
		}
		if !campaigns || cp.rev < own.rev {
			n++
		}
	}
	return n, unread
}

// readRegistered reads whether the members ids are registered. The
// process's members share the reads of a generation (Job.registered):
// after each generation every waiting member asks about the same first
// few. A departure after the shared read still reaches each candidacy
// through its own watch, which overrides the read.
func (c *candidacy) readRegistered(ctx context.Context, ids []string) error {
	regs, err := c.m.job.registered(ctx, c.gen, ids)
	if err != nil {
		return err
	}
	for i, reg := range regs {
		if _, seen := c.registered[ids[i]]; !seen {
			c.registered[ids[i]] = reg
		}
	}
	return nil
}

// regRead is one Txn reading whether members are registered: of and err
// are set before done closes.
type regRead struct {
	done chan struct{}
	of   map[string]bool
	err  error
}

// registered reports whether each of ids is registered. While g is the
// latest generation, the process's members share the reads: one reads the
// ids nobody asked about yet, in one Txn, and the others wait for it.
func (j *Job) registered(ctx context.Context, g *record.Generation, ids []string) ([]bool, error) {
	j.candsMu.Lock()
	shared := j.regs != nil && j.candsGen == g
	var mine *regRead
	var toRead []string
	reads := make([]*regRead, len(ids))
	for i, id := range ids {
		if r := j.regs[id]; shared && r != nil {
			reads[i] = r
			continue
		}
		if mine == nil {
			mine = &regRead{done: make(chan struct{}), of: make(map[string]bool)}
		}
		reads[i] = mine
		toRead = append(toRead, id)
		if shared {
			j.regs[id] = mine
		}
	}
	j.candsMu.Unlock()
	if mine != nil {
		regs, err := j.readRegistrations(ctx, toRead)
		for k, id := range toRead {
			if err == nil {
				mine.of[id] = regs[k]
			}
		}
		if mine.err = err; err != nil && shared {
			j.candsMu.Lock()
			for _, id := range toRead {
				if j.regs[id] == mine {
					delete(j.regs, id) // the next asker reads again
				}
			}
			j.candsMu.Unlock()
		}
		close(mine.done)
	}
	out := make([]bool, len(ids))
	for i, r := range reads {
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if r.err != nil {
			return nil, r.err
		}
		out[i] = r.of[ids[i]]
	}
	return out, nil
}

// readRegistrations reads whether the members ids are registered, in one
// Txn.
func (j *Job) readRegistrations(ctx context.Context, ids []string) ([]bool, error) {
	ops := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		ops[i] = clientv3.OpGet(j.cfg.Prefix()+record.MembersDir+id, clientv3.WithCountOnly())
	}
	resp, err := j.client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("read candidates' registrations: %w", err)
	}
	out := make([]bool, len(ids))
	for i, r := range resp.Responses {
		out[i] = r.GetResponseRange().Count > 0
	}
	return out, nil
}

// candidates is the order of the candidacy rule for the members named in
// a generation: its leader, its ring, its standby members, each once; the
// first designated of them always campaign. rank maps each named member to
// its place in order. It is shared, read-only, by a process's members.
type candidates struct {
	order      []string
	designated int
	rank       map[string]int
}

// candidatesOf returns g's candidates, building them once per generation
// for all the members of the process: each would otherwise spend O(ring)
// on every generation.
func (j *Job) candidatesOf(g *record.Generation) *candidates {
	j.candsMu.Lock()
	defer j.candsMu.Unlock()
	if j.cands == nil || j.candsGen != g {
		j.cands, j.candsGen = newCandidates(g, j.cfg.Candidates), g
		j.regs = make(map[string]*regRead)
	}
	return j.cands
}

func newCandidates(g *record.Generation, k int) *candidates {
	c := &candidates{}
	if g == nil {
		return c
	}
	c.order = make([]string, 0, 1+len(g.Members)+len(g.Standby))
	if g.Leader != "" {
		c.order = append(c.order, g.Leader)
	}
	for _, m := range g.Members {
		if m.ID != g.Leader {
			c.order = append(c.order, m.ID)
		}
	}
	c.designated = min(k, len(c.order))
	for _, id := range g.Standby {
		if id != g.Leader {
			c.order = append(c.order, id)
		}
	}
	c.rank = make(map[string]int, len(c.order))
	for i, id := range c.order {
		c.rank[id] = i
	}
	return c
}
