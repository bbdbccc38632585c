package coordinator

import (
	"context"
	"fmt"

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
	m       *Member
	k       int
	prefix  string // the election prefix
	ownKey  string // the election key this session campaigns on
	gens    chan *record.Generation
	changed chan struct{} // the campaigns or registrations changed

	gen   *record.Generation // the latest generation
	cands *candidates        // of gen
}

type campaigner struct {
	id  string
	rev int64 // CreateRevision of the key: the order campaigns started in
}

// newCandidacy follows the election, the registrations (both kept by the
// job, keyspace.go) and the generations until close.
func (m *Member) newCandidacy(sess *concurrency.Session) *candidacy {
	cfg := m.job.cfg
	c := &candidacy{
		m:      m,
		k:      cfg.Candidates,
		prefix: cfg.Prefix() + record.ElectionDir,
		cands:  &candidates{},
	}
	c.ownKey = fmt.Sprintf("%s%x", c.prefix, sess.Lease())
	if c.k <= 0 {
		return c // everyone campaigns: nothing to follow
	}
	c.changed = m.job.watchChanges()
	c.gens = m.job.subscribe()
	select {
	case g := <-c.gens: // the generation held now, if any: decide on it
		c.setGeneration(g)
	default:
	}
	return c
}

func (c *candidacy) close() {
	if c.k > 0 {
		c.m.job.unwatchChanges(c.changed)
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

// next waits for the next change to the election, the registrations or
// the generation.
func (c *candidacy) next(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case g := <-c.gens:
		c.setGeneration(g)
	case <-c.changed:
	}
	return nil
}

func (c *candidacy) setGeneration(g *record.Generation) {
	c.gen, c.cands = g, c.m.job.candidatesOf(g)
}

// needed applies the rule (see candidacy) to what the job knows, once it
// has read the job's keys.
func (c *candidacy) needed(ctx context.Context) (bool, error) {
	if c.k <= 0 {
		return true, nil
	}
	pos, named := c.cands.rank[c.m.id]
	if named && pos < c.cands.designated {
		return true, nil
	}
	ks := &c.m.job.keys
	select {
	case <-ks.synced:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return c.ahead(ks, pos, named) < c.k, nil
}

// ahead counts, up to Candidates, the members ahead of this one that
// campaign or are expected to: the named ones before pos that campaign or
// are registered (all of them if this member is not named, and then the
// unnamed campaigners that started before it). ks.mu is held.
func (c *candidacy) ahead(ks *keyspace, pos int, named bool) int {
	campaigning := make(map[string]bool, len(ks.campaign))
	for _, cp := range ks.campaign {
		campaigning[cp.id] = true
	}
	before := c.cands.order
	if named {
		before = c.cands.order[:pos]
	}
	n := 0
	for _, id := range before {
		if n >= c.k {
			return n
		}
		if _, registered := ks.registered[id]; campaigning[id] || registered {
			n++
		}
	}
	if named {
		return n
	}
	own, campaigns := ks.campaign[c.ownKey]
	for key, cp := range ks.campaign {
		if _, isNamed := c.cands.rank[cp.id]; isNamed || key == c.ownKey || cp.id == c.m.id {
			continue
		}
		if !campaigns || cp.rev < own.rev {
			n++
		}
	}
	return n
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
