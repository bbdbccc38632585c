package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/progress"
	"github.com/ringside/ringside/netopt"
)

// RendezvousConfig sizes the rendezvous benchmark.
type RendezvousConfig struct {
	Members int
	Settle  time.Duration
	TTL     time.Duration
	// Clients is how many etcd clients the members share (one Job each).
	Clients int
	// Parallel bounds concurrent joins.
	Parallel int
	// NoFsync runs etcd without fsync.
	NoFsync bool
	// Timeout bounds the whole run.
	Timeout time.Duration
}

// DefaultRendezvousConfig returns the configuration the targets are
// measured with.
func DefaultRendezvousConfig() RendezvousConfig {
	return RendezvousConfig{
		Members:  1000,
		Settle:   coordinator.DefaultConfig("", "").Settle,
		TTL:      coordinator.DefaultConfig("", "").TTL,
		Clients:  4,
		Parallel: 64,
		Timeout:  10 * time.Minute,
	}
}

// RendezvousResult is one run of the rendezvous benchmark.
type RendezvousResult struct {
	Bench   string  `json:"bench"`
	Members int     `json:"members"`
	SettleS float64 `json:"settle_s"`
	// JoinToCommitS is from the last member's join to every member holding
	// the generation with all of them, the settle window included.
	JoinToCommitS float64 `json:"join_to_commit_s"`
	EtcdTxns      int64   `json:"etcd_txns"`
	EtcdPuts      int64   `json:"etcd_puts"`
	Generations   int64   `json:"generations"`
	// JoinS is how long all the joins took.
	JoinS float64 `json:"join_s"`
}

// Rendezvous joins cfg.Members in-process members to a job on an embedded
// etcd and measures how long after the last join every member holds the
// generation that includes all of them. Progress goes to progress.
func Rendezvous(ctx context.Context, cfg RendezvousConfig, progress io.Writer) (RendezvousResult, error) {
	if cfg.Members < 1 || cfg.Clients < 1 || cfg.Parallel < 1 {
		return RendezvousResult{}, errors.New("members, clients and parallel must be at least 1")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	srv, stopEtcd, err := startEtcd(ctx, cfg.NoFsync)
	if err != nil {
		return RendezvousResult{}, err
	}
	defer stopEtcd()

	jcfg := coordinator.DefaultConfig("bench", "rendezvous")
	jcfg.Settle, jcfg.TTL = cfg.Settle, cfg.TTL
	jcfg.MaxSettle = max(jcfg.MaxSettle, cfg.Settle)
	jcfg.Orderer = netopt.NewOrderer() // the orderer the sidecar runs
	jcfg.Logger = slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var jobs []*coordinator.Job
	for range cfg.Clients {
		c, err := newClient(srv)
		if err != nil {
			return RendezvousResult{}, err
		}
		defer c.Close()
		j, err := coordinator.NewJob(c, jcfg)
		if err != nil {
			return RendezvousResult{}, err
		}
		defer j.Close()
		jobs = append(jobs, j)
	}

	putsBefore, txnsBefore := etcdCounter("etcd_mvcc_put_total"), etcdCounter("etcd_mvcc_txn_total")
	start := time.Now()
	var (
		lastJoin  atomic.Int64 // unix nanos
		lastHeld  atomic.Int64
		joined    atomic.Int64
		watchers  sync.WaitGroup
		full      = make(chan struct{}, cfg.Members) // a member holds the generation with all
		mu        sync.Mutex
		members   []*coordinator.Member
		joinErr   error
		sem       = make(chan struct{}, cfg.Parallel)
		joinGroup sync.WaitGroup
	)
	defer func() {
		for _, m := range members {
			m.Close() // closes its Generations, which ends its watcher
		}
		watchers.Wait()
	}()
	stopProgress := reportProgress(progress, "joined", cfg.Members, &joined)
	for i := range cfg.Members {
		sem <- struct{}{}
		joinGroup.Add(1)
		go func() {
			defer func() { <-sem; joinGroup.Done() }()
			info := record.MemberInfo{ID: fmt.Sprintf("m%05d", i), Addr: "127.0.0.1", Slots: 1}
			m, err := jobs[i%len(jobs)].Join(ctx, info)
			if err != nil {
				mu.Lock()
				joinErr = errors.Join(joinErr, err)
				mu.Unlock()
				return
			}
			storeMax(&lastJoin, time.Now().UnixNano())
			joined.Add(1)
			mu.Lock()
			members = append(members, m)
			mu.Unlock()
			watchers.Go(func() {
				for g := range m.Generations() {
					if len(g.Members) == cfg.Members {
						storeMax(&lastHeld, time.Now().UnixNano())
						full <- struct{}{}
						return
					}
				}
			})
		}()
	}
	joinGroup.Wait()
	stopProgress()
	if joinErr != nil {
		return RendezvousResult{}, fmt.Errorf("joins failed: %w", joinErr)
	}
	joinDone := time.Now()
	fmt.Fprintf(progress, "all %d joined in %.2fs; waiting for the generation with all of them\n", cfg.Members, joinDone.Sub(start).Seconds())
	for range cfg.Members {
		select {
		case <-full:
		case <-ctx.Done():
			return RendezvousResult{}, fmt.Errorf("no generation with all %d members before the timeout: %w", cfg.Members, ctx.Err())
		}
	}
	res := RendezvousResult{
		Bench:         "rendezvous",
		Members:       cfg.Members,
		SettleS:       cfg.Settle.Seconds(),
		JoinToCommitS: time.Duration(lastHeld.Load() - lastJoin.Load()).Seconds(),
		EtcdPuts:      int64(etcdCounter("etcd_mvcc_put_total") - putsBefore),
		EtcdTxns:      int64(etcdCounter("etcd_mvcc_txn_total") - txnsBefore),
		JoinS:         joinDone.Sub(start).Seconds(),
	}
	if g := jobs[0].Generation(); g != nil {
		res.Generations = g.Number
	}
	return res, nil
}

func storeMax(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// reportProgress prints "what n/total" every second until stopped.
func reportProgress(w io.Writer, what string, total int, n *atomic.Int64) (stop func()) {
	return progress.Every(time.Second, func() {
		fmt.Fprintf(w, "%s %d/%d\n", what, n.Load(), total)
	})
}
