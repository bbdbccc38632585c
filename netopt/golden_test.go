package netopt

import (
	"path/filepath"
	"testing"

	"github.com/ringside/ringside/internal/golden"
)

// matchGolden compares got with testdata/name.golden, or rewrites the file
// under -update.
func matchGolden(t *testing.T, name, got string) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", name+".golden"), got)
}
