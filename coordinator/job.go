package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// Job is a handle on one job's key space. It follows the keys its members
// react to (keyspace.go) and fans each committed generation out to every
// member joined through it, so a process with many members (a benchmark, a
// test) decodes each generation once.
type Job struct {
	client *clientv3.Client
	cfg    Config
	log    *slog.Logger

	mu   sync.Mutex
	cur  *record.Generation
	subs map[chan *record.Generation]struct{}

	badValues atomic.Int64

	candsMu  sync.Mutex // guards the candidates of candsGen
	candsGen *record.Generation
	cands    *candidates

	keys  keyspace
	votes voteWatches

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewJob validates cfg and starts following the job's keys. Close stops
// it.
func NewJob(client *clientv3.Client, cfg Config) (*Job, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("job config: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &Job{
		client: client,
		cfg:    cfg,
		log:    cfg.logger().With("job", cfg.Job, "namespace", cfg.Namespace),
		subs:   make(map[chan *record.Generation]struct{}),
		keys:   newKeyspace(),
		votes:  voteWatches{ctx: ctx, running: make(map[string]context.CancelFunc)},
		cancel: cancel,
	}
	j.wg.Go(func() {
		j.watchKeys(ctx)
	})
	return j, nil
}

// Close stops the job's watches. Members joined through it must be closed or
// have left first.
func (j *Job) Close() {
	// Under the lock refollowVotes starts watches under: none starts
	// once Wait may have begun.
	j.votes.mu.Lock()
	j.cancel()
	j.votes.mu.Unlock()
	j.wg.Wait()
}

// Config returns the job's config.
func (j *Job) Config() Config { return j.cfg }

// Generation returns the newest committed generation seen, or nil.
func (j *Job) Generation() *record.Generation {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.cur
}

// BadValues counts malformed values found under the job's prefix (reported
// in the log and otherwise ignored).
func (j *Job) BadValues() int64 { return j.badValues.Load() }

// reportError passes an etcd error to Config.OnError.
func (j *Job) reportError(op string, err error) {
	if j.cfg.OnError != nil {
		j.cfg.OnError(op, err)
	}
}

func (j *Job) reportBad(key string, err error) {
	j.badValues.Add(1)
	kind := record.KindOf(key)
	j.log.Warn("ignoring malformed value", "key", key, "kind", kind, "err", err)
	if j.cfg.OnBadValue != nil {
		j.cfg.OnBadValue(kind)
	}
}

func (j *Job) genKey() string { return j.cfg.Prefix() + record.GenerationKey }

// subscribe returns a channel that always holds the newest generation not
// yet received (older undelivered ones are replaced).
func (j *Job) subscribe() chan *record.Generation {
	ch := make(chan *record.Generation, 1)
	j.mu.Lock()
	defer j.mu.Unlock()
	j.subs[ch] = struct{}{}
	if j.cur != nil {
		ch <- j.cur
	}
	return ch
}

func (j *Job) unsubscribe(ch chan *record.Generation) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.subs, ch)
}

func (j *Job) publish(g *record.Generation) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cur != nil && g.Number <= j.cur.Number {
		return
	}
	j.cur = g
	for ch := range j.subs {
		replace(ch, g)
	}
}

// replace puts g in ch, dropping an undelivered older value. Only the
// publisher sends, so the loop ends after at most one drop.
func replace(ch chan *record.Generation, g *record.Generation) {
	for {
		select {
		case ch <- g:
			return
		default:
			select {
			case <-ch:
			default:
			}
		}
	}
}

func (j *Job) accept(value []byte) {
	g, err := record.DecodeGeneration(value)
	if err != nil {
		j.reportBad(j.genKey(), err)
		return
	}
	j.publish(g)
	j.refollowVotes() // the ring may have changed
}

// newBackoff retries etcd operations from 50 ms up to 500 ms apart (each
// pause randomized by half either way), forever: the callers stop on
// their context. An attempt itself waits for a connection to etcd (the
// client's calls wait until it is ready, up to attemptTimeout), so the
// pause only adds to it; at 2 s a member cut off from etcd by a partition
// registered again up to 3 s after the heal, its last attempt having
// timed out just before (bench partition: the split rejoined 2.0 s after
// the heal).
func newBackoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = 500 * time.Millisecond
	b.MaxElapsedTime = 0
	return b
}

// Watch delivers committed generations, newest first (a slow reader skips
// stale ones), starting with the current one if any. The channel is closed
// when ctx ends.
func (j *Job) Watch(ctx context.Context) <-chan *record.Generation {
	in := j.subscribe()
	out := make(chan *record.Generation)
	j.wg.Go(func() {
		defer close(out)
		defer j.unsubscribe(in)
		for {
			select {
			case <-ctx.Done():
				return
			case g := <-in:
				select {
				case out <- g:
				case <-ctx.Done():
					return
				}
			}
		}
	})
	return out
}
