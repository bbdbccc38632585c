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

// Every NodeSize workers run their sidecars from a copy of the executable
// of their own.
func TestEachNodeRunsItsOwnCopyOfTheExecutable(t *testing.T) {
	src := filepath.Join(t.TempDir(), "ringside")
	if err := os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	j := &Job{cfg: Config{Ringside: src, NodeSize: 2}}
	var bins []string
	for n := range 5 {
		bin, err := j.executable(n)
		if err != nil {
			t.Fatal(err)
		}
		bins = append(bins, bin)
	}
	if bins[0] != bins[1] || bins[2] != bins[3] || bins[0] == bins[2] || bins[2] == bins[4] || bins[0] == src {
		t.Fatalf("workers 0-4 run %q: want one copy per two workers, none the original", bins)
	}
	if st, err := os.Stat(bins[4]); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("node 2's copy: %v, %v; want an executable file", st, err)
	}
	if err := os.RemoveAll(j.copies); err != nil {
		t.Fatal(err)
	}
}
