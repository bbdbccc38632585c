package netopt

import (
	"slices"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/record"
)

// Orderer places members in the all-reduce ring so that every topology
// domain (zone, block, rack, host, ...) is one contiguous run: the ring then
// crosses each domain boundary the minimum number of times, once in and
// once out. It implements coordinator.RingOrderer.
//
// A member's path is its Topology, with its Node appended as the narrowest
// level when the topology does not already end with it, so members sharing
// a node always sit side by side.
//
// Survivors keep their relative order. Each newcomer, in join order, goes
// at the end of the deepest domain it shares with the members placed before
// it; a domain no one was in yet goes at the end of its parent. That keeps
// every domain contiguous if it was, and with no survivors makes all of
// them contiguous, in O(n * depth). If the survivors' order is not
// contiguous to begin with (it was not made here), each newcomer is instead
// inserted at the gap that adds the fewest crossings at the broadest level,
// which takes O(n * depth) per newcomer.
type Orderer struct{}

var _ coordinator.RingOrderer = (*Orderer)(nil)

// NewOrderer returns the topology-aware ring orderer.
func NewOrderer() *Orderer { return &Orderer{} }

// Order returns survivors and newcomers, each exactly once, survivors in
// their given relative order.
func (o *Orderer) Order(survivors, newcomers []record.MemberInfo) []record.MemberInfo {
	root := &domain{}
	for _, m := range survivors {
		if !root.add(m, memberPath(m), true) {
			return insertByCost(survivors, newcomers)
		}
	}
	for _, m := range newcomers {
		root.add(m, memberPath(m), false)
	}
	return root.appendTo(make([]record.MemberInfo, 0, len(survivors)+len(newcomers)))
}

// memberPath returns m's topology with its node appended as the narrowest
// level when the topology does not already end with it.
func memberPath(m record.MemberInfo) []string {
	t := m.Topology
	if m.Node == "" || (len(t) > 0 && t[len(t)-1] == m.Node) {
		return t
	}
	return append(slices.Clip(t), m.Node)
}

// domain is one node of the topology tree. Its children keep the order in
// which the ring first entered them; members whose path ends at a domain
// sit in a pseudo-child (here) so that they keep their place among the
// sub-domains.
type domain struct {
	children []*domain
	byName   map[string]*domain
	here     *domain
	members  []record.MemberInfo // only in a here pseudo-child

	current *domain // the child the ring is in
	left    bool    // the ring has entered this domain and left it
}

// add places m under its path. With check it also reports whether the ring
// so far still keeps every domain contiguous: false when m re-enters a
// domain the ring already left.
func (d *domain) add(m record.MemberInfo, path []string, check bool) bool {
	for _, name := range path {
		c := d.byName[name]
		if c == nil {
			c = &domain{}
			if d.byName == nil {
				d.byName = make(map[string]*domain)
			}
			d.byName[name] = c
			d.children = append(d.children, c)
		}
		if check && !d.enter(c) {
			return false
		}
		d = c
	}
	if d.here == nil {
		d.here = &domain{}
		d.children = append(d.children, d.here)
	}
	if check && !d.enter(d.here) {
		return false
	}
	d.here.members = append(d.here.members, m)
	return true
}

// enter moves the ring into child c and reports whether c is still open.
func (d *domain) enter(c *domain) bool {
	if d.current == c {
		return true
	}
	if c.left {
		return false
	}
	if d.current != nil {
		d.current.left = true
	}
	d.current = c
	return true
}

// appendTo appends the members of d depth first.
func (d *domain) appendTo(out []record.MemberInfo) []record.MemberInfo {
	out = append(out, d.members...)
	for _, c := range d.children {
		out = c.appendTo(out)
	}
	return out
}
