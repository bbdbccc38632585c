// Package demo runs ringside's end-to-end demonstration: an embedded etcd,
// several members, a crash, a scale-up and a drain, printed as they happen.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/etcdlocal"
)

// Config tunes the demo.
type Config struct {
	Workers int
	TTL     time.Duration
	Settle  time.Duration
}

// DefaultConfig is what `ringside demo` runs.
func DefaultConfig() Config {
	d := coordinator.DefaultConfig("", "")
	return Config{Workers: 4, TTL: d.TTL, Settle: d.Settle}
}

type run struct {
	w     io.Writer
	start time.Time
	job   *coordinator.Job
	gens  <-chan *coordinator.Generation
	ms    map[string]*coordinator.Member
}

func (r *run) say(format string, args ...any) {
	fmt.Fprintf(r.w, "[%6.2fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// Run plays the demo and writes it to w. It returns nil when every step
// produced the generation it should.
func Run(ctx context.Context, w io.Writer, cfg Config) error {
	r := &run{w: w, start: time.Now(), ms: map[string]*coordinator.Member{}}
	dir, err := os.MkdirTemp("", "ringside-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := etcdlocal.Start(ctx, etcdlocal.EphemeralConfig(dir))
	if err != nil {
		return err
	}
	defer srv.Close()
	r.say("embedded etcd serving at %s", strings.Join(srv.Endpoints(), ","))
	client, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer client.Close()

	jcfg := coordinator.DefaultConfig("default", "demo")
	jcfg.TTL, jcfg.Settle = cfg.TTL, cfg.Settle
	jcfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if r.job, err = coordinator.NewJob(client, jcfg); err != nil {
		return err
	}
	defer r.job.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.gens = r.job.Watch(wctx)
	defer func() {
		for _, m := range r.ms {
			m.Close()
		}
	}()

	var ids []string
	for i := range cfg.Workers {
		ids = append(ids, fmt.Sprintf("w%d", i))
	}
	r.say("%d workers join (settle window %s batches them into one generation)", cfg.Workers, cfg.Settle)
	t0 := time.Now()
	for _, id := range ids {
		if err := r.join(ctx, id); err != nil {
			return err
		}
	}
	g, err := r.await(ctx, func(g *coordinator.Generation) bool { return len(g.Members) == cfg.Workers })
	if err != nil {
		return err
	}
	formed := time.Since(t0)

	victim := g.Members[len(g.Members)/2].ID
	r.say("%s crashes (no revoke: its %s lease runs out; the sidecar's gossip makes this ~1s)", victim, cfg.TTL)
	t0 = time.Now()
	r.ms[victim].Close()
	delete(r.ms, victim)
	if _, err := r.await(ctx, func(g *coordinator.Generation) bool { _, in := g.Member(victim); return !in }); err != nil {
		return err
	}
	crash := time.Since(t0)

	r.say("two workers join")
	t0 = time.Now()
	newIDs := []string{fmt.Sprintf("w%d", cfg.Workers), fmt.Sprintf("w%d", cfg.Workers+1)}
	for _, id := range newIDs {
		if err := r.join(ctx, id); err != nil {
			return err
		}
	}
	if _, err := r.await(ctx, func(g *coordinator.Generation) bool {
		_, a := g.Member(newIDs[0])
		_, b := g.Member(newIDs[1])
		return a && b
	}); err != nil {
		return err
	}
	scale := time.Since(t0)

	drained := ids[0]
	r.say("%s is preempted: it drains, the ring goes on without it, then it leaves", drained)
	t0 = time.Now()
	if err := r.ms[drained].SetState(ctx, coordinator.StateDraining); err != nil {
		return err
	}
	g, err = r.await(ctx, func(g *coordinator.Generation) bool { _, in := g.Member(drained); return !in })
	if err != nil {
		return err
	}
	drain := time.Since(t0)
	if err := r.ms[drained].Leave(ctx); err != nil {
		return err
	}
	delete(r.ms, drained)

	fmt.Fprintf(w, "\nsummary: %d generations, final world size %d\n", g.Number, g.WorldSize)
	fmt.Fprintf(w, "  formed %d workers   %6.2fs (settle window %s)\n", cfg.Workers, formed.Seconds(), cfg.Settle)
	fmt.Fprintf(w, "  crash to new ring   %6.2fs (lease expiry; gossip in the sidecar cuts this)\n", crash.Seconds())
	fmt.Fprintf(w, "  scale-up by two     %6.2fs\n", scale.Seconds())
	fmt.Fprintf(w, "  drain to new ring   %6.2fs\n", drain.Seconds())
	return nil
}

func (r *run) join(ctx context.Context, id string) error {
	// Odd and even workers sit in two racks, so the ring groups them.
	rack := "rack-a"
	if id[len(id)-1]%2 == 1 {
		rack = "rack-b"
	}
	m, err := r.job.Join(ctx, coordinator.MemberInfo{
		ID: id, Addr: "127.0.0.1", Slots: 1, Topology: []string{"zone-1", rack},
	})
	if err != nil {
		return err
	}
	r.ms[id] = m
	return nil
}

// await prints generations until one satisfies ok.
func (r *run) await(ctx context.Context, ok func(*coordinator.Generation) bool) (*coordinator.Generation, error) {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case g := <-r.gens:
			r.printGeneration(g)
			if ok(g) {
				return g, nil
			}
		case <-timeout:
			return nil, fmt.Errorf("the expected generation did not come within 30s")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (r *run) printGeneration(g *coordinator.Generation) {
	var ring []string
	for _, m := range g.Members {
		ring = append(ring, fmt.Sprintf("%s(r%d)", m.ID, m.Rank))
	}
	state := ""
	if g.Paused {
		state = " PAUSED"
	}
	r.say("generation %d%s: world %d, ring %s, master %s:%d, leader %s (%s)",
		g.Number, state, g.WorldSize, strings.Join(ring, " -> "), g.MasterAddr, g.MasterPort, g.Leader, g.Reason)
}
