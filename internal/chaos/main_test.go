package chaos

import (
	"os"
	"testing"

	"github.com/ringside/ringside/internal/testbin"
)

// ringside and ringtrainer are the binary the run test starts, built
// once for the package.
var ringside string

func TestMain(m *testing.M) {
	os.Exit(testbin.WithRingside(m, &ringside))
}
