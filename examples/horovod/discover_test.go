// Package horovod_test checks the Horovod example's host discovery against
// horovodrun's documented contract, with real sidecars on a real embedded
// etcd. Horovod itself is not installable here (no Debian package), so
// its side of the contract is the parser below, which does what
// horovodrun's HostDiscoveryScript.find_available_hosts_and_slots does
// (horovod/runner/elastic/discovery.py): run the script through a shell,
// fail on a non-zero exit, take the set of the stripped output's lines,
// each "host:slots" (or "host", for --slots slots).
package horovod_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ringside/ringside/internal/localjob"
	"github.com/ringside/ringside/internal/testbin"
)

var ringsideBin string

func TestMain(m *testing.M) { os.Exit(testbin.WithRingside(m, &ringsideBin)) }

// discover runs the example's discovery script as horovodrun runs it, with
// ringside on PATH and the sidecar's socket in RINGSIDE_SOCKET, and parses
// its output as horovodrun does: host -> slots.
func discover(t *testing.T, socket string, defaultSlots int) map[string]int {
	t.Helper()
	script, err := filepath.Abs("discover-hosts.sh")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(script); err != nil || fi.Mode()&0o100 == 0 {
		t.Fatalf("%s must exist and be executable (horovodrun executes it): %v", script, err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(ringsideBin)+":"+os.Getenv("PATH"), "RINGSIDE_SOCKET="+socket)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("the discovery script failed (horovodrun: 'Failed to execute discovery script'): %v: %s", err, errOut.String())
	}
	hosts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		host, slots := line, defaultSlots
		if strings.Contains(line, ":") {
			parts := strings.Split(line, ":")
			if len(parts) != 2 { // Python's `host, slots = line.split(':')` raises
				t.Fatalf("line %q: horovodrun unpacks host:slots from exactly one colon", line)
			}
			n, err := strconv.Atoi(parts[1])
			if err != nil { // int(slots) raises
				t.Fatalf("line %q: slots are not an integer: %v", line, err)
			}
			host, slots = parts[0], n
		}
		hosts[host] = slots
	}
	return hosts
}

// awaitWorld waits until w's sidecar holds a generation of world ranks.
func awaitWorld(ctx context.Context, t *testing.T, w *localjob.Worker, world int) {
	t.Helper()
	var after int64
	for {
		r, err := w.API.Rendezvous(ctx, after, 5*time.Second)
		if err != nil {
			t.Fatalf("waiting for a generation of %d ranks: %v", world, err)
		}
		if r == nil {
			continue
		}
		if r.WorldSize == world {
			return
		}
		after = r.Generation
	}
}

// The hosts horovodrun discovers follow the job's generations: every
// member with its slots, a killed member gone, a new member added.
func TestHorovodDiscoversTheGenerationsMembers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	job, err := localjob.Start(ctx, localjob.Config{Ringside: ringsideBin, Job: "hvd", Dir: t.TempDir(),
		SidecarArgs: []string{"--slots", "2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	var ws []*localjob.Worker
	for range 3 {
		w, err := job.AddWorker(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	want := func(ws ...*localjob.Worker) map[string]int {
		m := map[string]int{}
		for _, w := range ws {
			m[w.Addr] = 2
		}
		return m
	}
	awaitWorld(ctx, t, ws[0], 6)
	if diff := cmp.Diff(want(ws...), discover(t, ws[0].Socket, 1)); diff != "" {
		t.Fatalf("hosts of 3 members (-want +horovodrun's view):\n%s", diff)
	}

	job.Kill(ws[2])
	awaitWorld(ctx, t, ws[0], 4)
	if diff := cmp.Diff(want(ws[0], ws[1]), discover(t, ws[0].Socket, 1)); diff != "" {
		t.Fatalf("after a kill (-want +horovodrun's view):\n%s", diff)
	}

	w3, err := job.AddWorker(ctx)
	if err != nil {
		t.Fatal(err)
	}
	awaitWorld(ctx, t, ws[1], 6)
	if diff := cmp.Diff(want(ws[0], ws[1], w3), discover(t, ws[1].Socket, 1)); diff != "" {
		t.Fatalf("after a join (-want +horovodrun's view):\n%s", diff)
	}
}
