// Package etcdtest starts a real embedded etcd for a test, on free loopback
// ports, and cleans it up when the test ends.
package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/ringside/ringside/etcdserver"
)

// Start runs an etcd server for tb and returns it. The server is closed
// when tb ends.
func Start(tb testing.TB) *etcdserver.Server {
	tb.Helper()
	return Restart(tb, etcdserver.EphemeralConfig(tb.TempDir()))
}

// Restart starts a server with cfg (typically the Config of one that was
// closed, to restart it on the same data and ports).
func Restart(tb testing.TB, cfg etcdserver.Config) *etcdserver.Server {
	tb.Helper()
	s, err := etcdserver.Start(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("start embedded etcd: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Client returns a client of s, closed when tb ends. opts are extra gRPC
// dial options (a coordinator's members use coordinator.DialOptions).
func Client(tb testing.TB, s *etcdserver.Server, opts ...grpc.DialOption) *clientv3.Client {
	tb.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   s.Endpoints(),
		DialTimeout: 5 * time.Second,
		DialOptions: opts,
		Logger:      nopLogger,
	})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}
