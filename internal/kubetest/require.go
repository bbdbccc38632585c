package kubetest

import (
	"errors"
	"os"
	"testing"
)

// Require ends tb when err (from Start, podnet or the node agent) is not
// nil: a test skips when the machine lacks what it needs (ErrUnavailable)
// unless CI=true, where a missing dependency must fail, not skip.
func Require(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ErrUnavailable) && os.Getenv("CI") != "true" {
		tb.Skip(err)
	}
	tb.Fatal(err)
}
