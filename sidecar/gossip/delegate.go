package gossip

import (
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringside/ringside/coordinator/record"
)

// leaveNoticeTTL is how long (a duration) a member's notice that it is
// leaving makes its disappearance count as a departure, not a death. A
// leaver gossips the notice and leaves right after; a member that announced
// and then lingered and died is a death again.
const leaveNoticeTTL = 10 * time.Second

// leaveNoticeTag opens the one application message this package gossips:
// the tag, then the name of the member that is leaving on purpose.
const leaveNoticeTag byte = 1

// delegate receives memberlist's callbacks. memberlist calls the event and
// alive callbacks with its node lock held, so none of them may call back into
// memberlist; they update this state and queue events.
type delegate struct {
	self        string
	events      *dispatcher
	queue       *memberlist.TransmitLimitedQueue
	suspectHook func(name string)
	onInvalid   func() // a message this package cannot take arrived
	now         func() time.Time

	mu       sync.Mutex
	alive    map[string]peer      // members not dead or gone, self included
	leaving  map[string]time.Time // members that announced a graceful leave, and when we heard
	suspects map[string]bool      // members our own probes found unresponsive, not since cleared
	known    map[string]peer      // where each member was last seen, dead ones included
}

var (
	_ memberlist.EventDelegate = (*delegate)(nil)
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.PingDelegate  = (*delegate)(nil)
	_ memberlist.AliveDelegate = (*delegate)(nil)
)

func newDelegate(self string, retransmitMult int, events *dispatcher, suspectHook func(string)) *delegate {
	d := &delegate{
		self:        self,
		events:      events,
		suspectHook: suspectHook,
		now:         time.Now,
		alive:       map[string]peer{},
		leaving:     map[string]time.Time{},
		suspects:    map[string]bool{},
		known:       map[string]peer{},
	}
	d.queue = &memberlist.TransmitLimitedQueue{NumNodes: d.numAlive, RetransmitMult: retransmitMult}
	return d
}

func (d *delegate) numAlive() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.alive)
}

// peer is where a live member is reached: a copy, since memberlist updates
// its Node structs under a lock this package cannot take.
type peer struct {
	addr net.IP
	port uint16
}

// NotifyJoin is memberlist's: a member joined or came back.
func (d *delegate) NotifyJoin(n *memberlist.Node) {
	d.mu.Lock()
	p := peer{addr: cloneIP(n.Addr), port: n.Port}
	d.alive[n.Name], d.known[n.Name] = p, p
	delete(d.leaving, n.Name)
	suspected := d.suspects[n.Name]
	delete(d.suspects, n.Name)
	d.mu.Unlock()
	if n.Name != d.self {
		if suspected {
			d.events.push(event{kind: memberAnswered, name: n.Name})
		}
		d.events.push(event{kind: memberJoined, name: n.Name, addr: cloneIP(n.Addr)})
	}
}

// NotifyLeave is memberlist's: a member was declared dead or left. The Node
// does not say which (its State field is never set), so a departure is told
// from a death by the member's leave notice.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	d.mu.Lock()
	delete(d.alive, n.Name)
	delete(d.suspects, n.Name)
	heard, announced := d.leaving[n.Name]
	delete(d.leaving, n.Name)
	now := d.now()
	d.mu.Unlock()
	if n.Name == d.self {
		return
	}
	kind := memberDead
	if announced && now.Sub(heard) < leaveNoticeTTL {
		kind = memberLeft
	}
	d.events.push(event{kind: kind, name: n.Name, addr: cloneIP(n.Addr)})
}

// NotifyUpdate is memberlist's: a member's metadata or address changed.
func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	d.mu.Lock()
	if _, ok := d.alive[n.Name]; ok {
		p := peer{addr: cloneIP(n.Addr), port: n.Port}
		d.alive[n.Name], d.known[n.Name] = p, p
	}
	d.mu.Unlock()
}

// others returns the live members but this one, as memberlist Nodes that
// belong to the caller.
func (d *delegate) others() []*memberlist.Node {
	d.mu.Lock()
	defer d.mu.Unlock()
	nodes := make([]*memberlist.Node, 0, len(d.alive))
	for name, p := range d.alive {
		if name != d.self {
			nodes = append(nodes, &memberlist.Node{Name: name, Addr: p.addr, Port: p.port})
		}
	}
	return nodes
}

// NodeMeta is memberlist's: this member publishes no metadata.
func (d *delegate) NodeMeta(int) []byte { return nil }

// NotifyMsg is memberlist's: a gossiped application message arrived. A leave
// notice about a live member, heard for the first time, is passed on, so it
// spreads like memberlist's own broadcasts and then dies out.
func (d *delegate) NotifyMsg(msg []byte) {
	name, ok := decodeLeaveNotice(msg)
	if !ok {
		if d.onInvalid != nil {
			d.onInvalid()
		}
		return
	}
	if name == d.self {
		return
	}
	d.mu.Lock()
	now := d.now()
	for n, heard := range d.leaving {
		if now.Sub(heard) >= leaveNoticeTTL {
			delete(d.leaving, n)
		}
	}
	_, seen := d.leaving[name]
	_, live := d.alive[name]
	fresh := !seen && live
	if fresh {
		d.leaving[name] = now
	}
	d.mu.Unlock()
	if fresh {
		d.queue.QueueBroadcast(newLeaveNotice(name))
	}
}

// GetBroadcasts is memberlist's: leave notices ride on its packets.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.queue.GetBroadcasts(overhead, limit)
}

// LocalState is memberlist's: there is no application state to sync.
func (d *delegate) LocalState(bool) []byte { return nil }

// MergeRemoteState is memberlist's: there is no application state to sync.
func (d *delegate) MergeRemoteState([]byte, bool) {}

// AckPayload is memberlist's: acks carry nothing extra.
func (d *delegate) AckPayload() []byte { return nil }

// NotifyPingComplete is memberlist's: our probe of other was answered, so
// our probes no longer find it unresponsive.
func (d *delegate) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	d.clearSuspect(other.Name)
}

// NotifyAlive is memberlist's: a message says peer is alive, as a refutation
// of a suspicion does. It never rejects a member.
func (d *delegate) NotifyAlive(peer *memberlist.Node) error {
	d.clearSuspect(peer.Name)
	return nil
}

// suspect records that this member's own probe found name unresponsive.
func (d *delegate) suspect(name string) {
	d.mu.Lock()
	p, live := d.alive[name]
	live = live && name != d.self
	if live {
		d.suspects[name] = true
	}
	d.mu.Unlock()
	if !live {
		return
	}
	d.events.push(event{kind: memberSuspect, name: name, addr: p.addr})
	if d.suspectHook != nil {
		d.suspectHook(name)
	}
}

// clearSuspect records that name answered or was heard alive; it runs on
// every completed probe, so it only queues an event for a suspect.
func (d *delegate) clearSuspect(name string) {
	d.mu.Lock()
	suspected := d.suspects[name]
	delete(d.suspects, name)
	d.mu.Unlock()
	if suspected {
		d.events.push(event{kind: memberAnswered, name: name})
	}
}

func (d *delegate) isAlive(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.alive[name]
	return ok
}

// lastSeen returns where name was last seen alive.
func (d *delegate) lastSeen(name string) (peer, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.known[name]
	return p, ok
}

func (d *delegate) numSuspects() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.suspects)
}

// leaveNotice is the broadcast of "name is leaving on purpose".
type leaveNotice struct {
	name string
	msg  []byte
}

var _ memberlist.NamedBroadcast = (*leaveNotice)(nil)

func newLeaveNotice(name string) *leaveNotice {
	return &leaveNotice{name: name, msg: append([]byte{leaveNoticeTag}, name...)}
}

// Name makes a newer notice for the same member replace an older one.
func (b *leaveNotice) Name() string { return "leave/" + b.name }

// Invalidates is memberlist's; see Name.
func (b *leaveNotice) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*leaveNotice)
	return ok && o.name == b.name
}

// Message is memberlist's.
func (b *leaveNotice) Message() []byte { return b.msg }

// Finished is memberlist's: the notice was sent as often as it will be, or
// replaced. Nobody waits for that.
func (b *leaveNotice) Finished() {}

// decodeLeaveNotice decodes a gossiped application message: a leave
// notice naming a valid member id, or nothing this package takes.
func decodeLeaveNotice(msg []byte) (string, bool) {
	if len(msg) < 2 || msg[0] != leaveNoticeTag || len(msg)-1 > record.MaxIDLen {
		return "", false
	}
	name := string(msg[1:])
	if record.ValidateID(name) != nil {
		return "", false
	}
	return name, true
}

func cloneIP(ip net.IP) net.IP { return append(net.IP(nil), ip...) }
