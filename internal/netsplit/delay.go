package netsplit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/florianl/go-nfqueue"
	"github.com/mdlayher/netlink"
)

// delayQueue is the netfilter queue a member's Delay rule sends packets
// to; queues are per namespace, so every member uses the same number.
const delayQueue = 7

// Delay sends every packet member i receives to the delayer (Net.Jitter),
// which holds it for a random time before it goes on. It comes after Lose:
// a lost packet is not held first.
func (r Rules) Delay(i int) {
	r[i] = append(r[i], fmt.Sprintf("-A INPUT -i eth0 -j NFQUEUE --queue-num %d --queue-bypass", delayQueue))
}

// Jitter holds every packet that a Delay rule queues in a member's
// namespace for a time drawn uniformly from [0, max], then lets it go on:
// jitter, with the reordering it brings, as `tc netem delay` does it, in
// user space (netfilter's queue) for kernels without sch_netem. Each packet
// is held on its own, so a packet may overtake one sent before it. It
// serves every member until stop is called or ctx ends; start it before
// the rules are applied (a queue without a listener lets packets through:
// --queue-bypass).
func (nt *Net) Jitter(ctx context.Context, max time.Duration) (stop func() error, err error) {
	if max <= 0 {
		return nil, fmt.Errorf("netsplit: jitter %s: want a positive time", max)
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		queues []*nfqueue.Nfqueue
		timers sync.WaitGroup
	)
	stop = func() error {
		cancel()
		var errs []error
		for _, q := range queues {
			errs = append(errs, q.Close())
		}
		timers.Wait()
		return errors.Join(errs...)
	}
	for i := range nt.n {
		q, err := nt.openQueue(i)
		if err != nil {
			stop() //nolint:errcheck // the open error says more
			return nil, err
		}
		queues = append(queues, q)
		hold := func(a nfqueue.Attribute) int {
			if a.PacketID == nil {
				return 0
			}
			id := *a.PacketID
			timers.Add(1)
			time.AfterFunc(rand.N(max+1), func() {
				defer timers.Done()
				if ctx.Err() == nil {
					q.SetVerdict(id, nfqueue.NfAccept) //nolint:errcheck // a closed queue lets its packets go
				}
			})
			return 0
		}
		// A full socket buffer or a read timeout is no reason to stop;
		// only stop is.
		keepOn := func(error) int {
			if ctx.Err() != nil {
				return 1
			}
			return 0
		}
		if err := q.RegisterWithErrorFunc(ctx, hold, keepOn); err != nil {
			stop() //nolint:errcheck // the register error says more
			return nil, fmt.Errorf("netsplit: listen to member %d's queue: %w", i, err)
		}
	}
	return stop, nil
}

// openQueue opens the Delay queue in member i's namespace.
func (nt *Net) openQueue(i int) (*nfqueue.Nfqueue, error) {
	ns, err := os.Open(nt.NamespacePath(i))
	if err != nil {
		return nil, fmt.Errorf("netsplit: member %d's namespace: %w", i, err)
	}
	defer ns.Close()
	q, err := nfqueue.Open(&nfqueue.Config{
		NetNS:        int(ns.Fd()),
		NfQueue:      delayQueue,
		MaxQueueLen:  1 << 14,
		Copymode:     nfqueue.NfQnlCopyMeta,
		MaxPacketLen: 0,
		WriteTimeout: time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("netsplit: open a netfilter queue in member %d's namespace: %w", i, err)
	}
	if err := q.SetOption(netlink.NoENOBUFS, true); err != nil {
		q.Close()
		return nil, fmt.Errorf("netsplit: member %d's queue: %w", i, err)
	}
	return q, nil
}
