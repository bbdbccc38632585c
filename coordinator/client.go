package coordinator

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// DialOptions are the gRPC options of an etcd client that members use
// (clientv3.Config.DialOptions). They bound the reconnect backoff to
// about a second: a restarted etcd restores every lease and gives it its
// TTL plus an election timeout (4 s with the defaults), and a member must
// reconnect within that window to keep its registration. With gRPC's own
// backoff (up to 120 s, 1.6x from 1 s) the client came back 6 s after a
// 7 s outage, and every member had to register again.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{
			BaseDelay:  100 * time.Millisecond,
			Multiplier: 1.6,
			Jitter:     0.2,
			MaxDelay:   time.Second,
		},
		// Long enough for a TLS handshake over a busy pod network; a
		// connect that takes longer is retried.
		MinConnectTimeout: attemptTimeout,
	})}
}
