package coordinator

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
)

// DialOptions are the gRPC options of an etcd client that members use
// (clientv3.Config.DialOptions). They bound the reconnect backoff to
// half a second (a dial whose SYN is lost is retried by the kernel a
// second later anyway, so a member cut off by a partition reaches etcd
// within about a second of the heal): a restarted etcd restores every lease and gives it its
// TTL plus an election timeout (4 s with the defaults), and a member must
// reconnect within that window to keep its registration. With gRPC's own
// backoff (up to 120 s, 1.6x from 1 s) the client came back 6 s after a
// 7 s outage, and every member had to register again.
//
// Keep-alive pings give each connection to etcd a TCP user timeout
// (TCP_USER_TIMEOUT = keepalive Timeout, which gRPC sets whenever pings
// are on): a connection whose data goes unacknowledged that long is
// closed and dialed again within the backoff above. Without it a
// partition that silently drops packets leaves the connection open for
// TCP's retransmissions, whose intervals double (0.2 s, 0.4 s, ... 3.2 s
// after a 6 s cut): `ringside bench partition` saw members cut off for
// 5 s reach etcd again only 2 s after the heal, and so rejoin 3.5 s after
// it. Pings go every 10 s (gRPC's least; etcd accepts one per 5 s) and
// only while a call or a watch is open, which a member always has.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time:    10 * time.Second,
		Timeout: unackedTimeout,
	}), grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{
			BaseDelay:  100 * time.Millisecond,
			Multiplier: 1.6,
			Jitter:     0.2,
			MaxDelay:   500 * time.Millisecond,
		},
		// Long enough for a TLS handshake over a busy pod network; a
		// connect that takes longer is retried.
		MinConnectTimeout: attemptTimeout,
	})}
}

// unackedTimeout is how long data sent to etcd may go unacknowledged
// before the connection is given up. Acknowledgements come from etcd's
// kernel, not its process, so a busy etcd does not delay them; 5 %
// packet loss makes four losses in a row (three retransmissions, 1.4 s)
// a one-in-160,000 event per segment, and a closed connection costs only
// a reconnect (the lease's keep-alives go on over the new one).
const unackedTimeout = 1500 * time.Millisecond
