package sockreset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
)

// ErrUnsupported means this process cannot destroy sockets here: it lacks
// CAP_NET_ADMIN, or the kernel lacks CONFIG_INET_DIAG_DESTROY, or the
// platform has no sock_diag. The returned error wraps it and says which.
var ErrUnsupported = errors.New("sockreset: destroying sockets is not possible here")

// Resetter destroys TCP connections to dead peers. It is safe for concurrent
// use.
type Resetter struct {
	log *slog.Logger
	// destroy aborts this namespace's TCP sockets whose remote address is
	// peer and returns how many it aborted. Tests replace it.
	destroy func(ctx context.Context, peer net.IP) (int, error)

	mu          sync.Mutex
	unsupported error // the first ErrUnsupported error; returned from then on
}

// New returns a Resetter that logs to logger (nil means slog.Default()).
func New(logger *slog.Logger) *Resetter {
	if logger == nil {
		logger = slog.Default()
	}
	return &Resetter{log: logger, destroy: destroyTCP}
}

// Reset destroys every TCP socket of this network namespace, IPv4 and IPv6
// (IPv4-mapped addresses included), whose remote address is peer, in any
// state but LISTEN and TIME_WAIT (which no process waits on), and returns how
// many it destroyed. Each destroyed socket's owner gets ECONNABORTED from its
// pending and next calls.
//
// When the process lacks the permission or the kernel the support, the error
// wraps ErrUnsupported; the first such call logs a warning, later calls
// return the same error at once without logging. Other errors (a socket that
// could not be destroyed, ctx done) are returned with the count so far.
func (r *Resetter) Reset(ctx context.Context, peer net.IP) (int, error) {
	if peer.To16() == nil || peer.IsUnspecified() {
		return 0, fmt.Errorf("sockreset: reset: %q is not a peer address", peer)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("sockreset: reset %s: %w", peer, err)
	}
	r.mu.Lock()
	unsupported := r.unsupported
	r.mu.Unlock()
	if unsupported != nil {
		return 0, unsupported
	}
	n, err := r.destroy(ctx, peer)
	if errors.Is(err, ErrUnsupported) {
		r.noteUnsupported(err)
	}
	return n, err
}

// noteUnsupported remembers the first ErrUnsupported and says so once.
func (r *Resetter) noteUnsupported(err error) {
	r.mu.Lock()
	first := r.unsupported == nil
	if first {
		r.unsupported = err
	}
	r.mu.Unlock()
	if first {
		r.log.Warn("cannot reset connections to dead peers; a trainer blocked on a silent peer will wait for its collective timeout",
			slog.Any("err", err))
	}
}
