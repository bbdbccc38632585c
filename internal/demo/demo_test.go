package demo

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/testbin"
)

// TestDemoRunsToTheEnd runs the demo the way `make demo` does, with the
// real ringside and ringtrainer binaries built for the test.
func TestDemoRunsToTheEnd(t *testing.T) {
	dir := t.TempDir()
	for _, b := range [][2]string{{"ringside", testbin.Ringside}, {"ringtrainer", "github.com/ringside/ringside/examples/ringtrainer"}} {
		if _, err := testbin.Build(dir, b[0], b[1]); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // the demo gives up after 3
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "ringside"), "demo", "--step-time", "50ms", "--settle", "200ms")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{"4 workers train together", "kill -9 w", "survivors train at world size 3",
		"world size 5 after", "exited 0; 0 steps lost", "summary"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\x1b[2J") {
		t.Error("the demo redrew the screen although its output is not a terminal")
	}
}
