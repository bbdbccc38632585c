// Package golden compares a test's output with a file checked into the
// package's testdata, and rewrites the file when the test runs with
// -update: `go test ./PKG -update`, then review the diff before committing.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files from the current output")

// Updating reports whether the test runs with -update.
func Updating() bool { return *update }

// Check compares got with the file at path, or writes got there under
// -update (creating its directory).
func Check(t testing.TB, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it if the change is meant):\n%s", path, diff)
	}
}
