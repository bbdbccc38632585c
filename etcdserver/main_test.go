package etcdserver_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines, except the pooled connections
// between the members of a cluster: etcd's peer transport (rafthttp)
// leaves its http.Transport's kept-alive connections to the idle timeout
// after Close, on both ends, so they outlive a test that stopped every
// member by a few seconds.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	)
}
