package localjob

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A process's stderr reaches its log file through a copy in this process:
// the file must stay open until the process ended, or every line a
// sidecar logs after its start is lost.
func TestSpawnKeepsEveryLineOfStderrInTheLog(t *testing.T) {
	j := &Job{cfg: Config{Dir: t.TempDir()}, closing: make(chan struct{})}
	// The line comes after spawn returned: the shell sleeps first.
	p, err := j.spawn("w0.sidecar", exec.Command("/bin/sh", "-c", "sleep 0.2; echo late line >&2"), "")
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	j.wg.Wait()
	b, err := os.ReadFile(filepath.Join(j.cfg.Dir, "w0.sidecar.log"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "late line\n" {
		t.Fatalf("log holds %q, want the line the process wrote after its start", b)
	}
}
