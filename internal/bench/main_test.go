package bench

import (
	"os"
	"testing"

	"github.com/ringside/ringside/internal/testbin"
)

// ringside is the binary the multi-process benchmarks' tests run, built
// once for the package.
var ringside string

func TestMain(m *testing.M) { os.Exit(testbin.WithRingside(m, &ringside)) }
