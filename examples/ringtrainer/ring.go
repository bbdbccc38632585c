package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/trainer/api"
)

// ring is this rank's place in one generation's ring: it receives from its
// left neighbour (rank-1) and sends to its right one (rank+1).
type ring struct {
	generation  int64
	rank, world int
	// left and right are nil when world is 1.
	left, right         net.Conn
	leftPeer, rightPeer peer

	sendBuf, recvBuf []byte
	closeOnce        sync.Once

	mu     sync.Mutex
	broken *peerError // the first link that failed
}

// peer is a neighbour: its rank, its member (what a failure report names)
// and its data address.
type peer struct {
	rank   int
	member string
	addr   string
}

func (p peer) String() string {
	return fmt.Sprintf("rank %d (member %s at %s)", p.rank, p.member, p.addr)
}

// peerError is a ring link that broke while ctx was still live: the
// neighbour died, hung up, or reset the connection.
type peerError struct {
	peer peer
	op   string
	err  error
}

func (e *peerError) Error() string { return fmt.Sprintf("%s %s: %v", e.op, e.peer, e.err) }
func (e *peerError) Unwrap() error { return e.err }

// locate finds the member holding global rank and the rank's slot in it.
func locate(members []record.RankedMember, rank int) (record.RankedMember, int, bool) {
	for _, m := range members {
		if rank >= m.Rank && rank < m.Rank+m.Slots {
			return m, rank - m.Rank, true
		}
	}
	return record.RankedMember{}, 0, false
}

// peerAt is the neighbour at global rank, listening at its member's
// address on port base+slot.
func peerAt(r *api.Rendezvous, rank, base int) (peer, error) {
	m, slot, ok := locate(r.Members, rank)
	if !ok {
		return peer{}, fmt.Errorf("generation %d lists no member holding rank %d of %d", r.Generation, rank, r.WorldSize)
	}
	return peer{rank: rank, member: m.ID, addr: net.JoinHostPort(m.Addr, strconv.Itoa(base+slot))}, nil
}

// formRing links this rank with its neighbours for r's generation: it
// dials the right one and accepts the left one at the same time (every
// rank does both, so doing them in turn would deadlock). It blocks until
// both links stand or ctx ends.
func (t *trainer) formRing(ctx context.Context, r *api.Rendezvous) (*ring, error) {
	rank, world := r.Rank+t.cfg.LocalRank, r.WorldSize
	rg := &ring{generation: r.Generation, rank: rank, world: world}
	if world == 1 {
		return rg, nil
	}
	self, err := peerAt(r, rank, t.cfg.Port)
	if err != nil {
		return nil, err
	}
	if rg.leftPeer, err = peerAt(r, (rank-1+world)%world, t.cfg.Port); err != nil {
		return nil, err
	}
	if rg.rightPeer, err = peerAt(r, (rank+1)%world, t.cfg.Port); err != nil {
		return nil, err
	}
	ln, err := t.listen(self.addr)
	if err != nil {
		return nil, err
	}

	h := hello{Magic: helloMagic, Generation: r.Generation, Rank: int64(rank), Vector: int64(t.cfg.Vector)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type dialed struct {
		conn net.Conn
		err  error
	}
	right := make(chan dialed, 1)
	go func() {
		conn, err := dialRight(ctx, rg.rightPeer.addr, rg.rightPeer.rank, h)
		if err != nil {
			cancel()
		}
		right <- dialed{conn, err}
	}()
	left, lerr := ln.acceptLeft(ctx, h, rg.leftPeer.rank)
	if lerr != nil {
		cancel()
	}
	d := <-right
	if lerr != nil || d.err != nil {
		for _, c := range []net.Conn{left, d.conn} {
			if c != nil {
				c.Close()
			}
		}
		return nil, firstCause(lerr, d.err)
	}
	rg.left, rg.right = left, d.conn
	return rg, nil
}

// firstCause prefers an error that is not the cancellation it caused.
func firstCause(errs ...error) error {
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return errors.Join(errs...)
}

// broke records e, if it is the first failure, and closes the ring: one
// broken link makes the ring useless, and closing the other link keeps a
// send or receive on it from blocking the step.
func (rg *ring) broke(e *peerError) {
	rg.mu.Lock()
	if rg.broken == nil {
		rg.broken = e
	}
	rg.mu.Unlock()
	rg.close()
}

// cause is the first failure broke recorded.
func (rg *ring) cause() error {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if rg.broken == nil {
		return nil
	}
	return rg.broken
}

// close ends the ring's links at once: deadlines in the past make blocked
// reads and writes return before the sockets close.
func (rg *ring) close() {
	rg.closeOnce.Do(func() {
		for _, c := range []net.Conn{rg.left, rg.right} {
			if c != nil {
				c.SetDeadline(time.Now())
				c.Close()
			}
		}
	})
}
