package sidecar_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/internal/loopback"
	"github.com/ringside/ringside/internal/testbin"
	"github.com/ringside/ringside/sidecar/sidecartest"
	"github.com/ringside/ringside/trainer/api"
)

// sidecarProc is a `ringside sidecar` process.
type sidecarProc struct {
	id   string
	cmd  *exec.Cmd
	api  *apiClient
	out  *testbin.Buffer
	done chan error
}

// loopbackBlock is this test process's block of loopback addresses: other
// test packages run jobs at the same time.
var loopbackBlock = sync.OnceValues(loopback.Acquire)

// startSidecar runs a sidecar process; each gets its own loopback address,
// as pods get their own IPs.
func startSidecar(t *testing.T, endpoints []string, n int, extra ...string) *sidecarProc {
	t.Helper()
	addrs, err := loopbackBlock()
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("w%d", n)
	socket := filepath.Join(t.TempDir(), id+".sock")
	args := append([]string{"sidecar",
		"--job", "proc", "--etcd-endpoints", endpoints[0],
		"--member-id", id, "--advertise", addrs.Addr(n),
		"--socket", socket, "--gossip-port", "0", "--gossip-key-file", gossipKeyFile(t, endpoints, "proc"),
		"--settle", "100ms", "--node-watch=false", "--sysfs-root", t.TempDir(),
		"--log-format", "json",
	}, extra...)
	p := &sidecarProc{id: id, cmd: exec.Command(ringsideBin, args...), out: &testbin.Buffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("--- %s output:\n%s", id, p.out.String())
		}
	})
	p.api = newAPIClient(t, socket)
	return p
}

// gossipKeyFile writes job's gossip key (one per job and etcd) into a key
// file of the test's.
func gossipKeyFile(t *testing.T, endpoints []string, job string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(path, []byte(sidecartest.GossipKey(t, endpoints, job)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitReady waits until the process serves its API.
func (p *sidecarProc) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			t.Fatalf("%s exited at start: %v\n%s", p.id, err, p.out.String())
		default:
		}
		if resp, err := p.api.http.Get("http://sidecar/v1/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond) // the socket appears once the process has joined
	}
	t.Fatalf("%s not ready within 30s:\n%s", p.id, p.out.String())
}

// startFour starts four sidecar processes with a 60 s lease TTL, so only
// gossip and votes can explain a quick eviction, and returns them with the
// generation that holds all four.
func startFour(t *testing.T, endpoints []string) ([]*sidecarProc, *api.Rendezvous) {
	t.Helper()
	var ps []*sidecarProc
	for n := range 4 {
		p := startSidecar(t, endpoints, n, "--ttl", "60s")
		p.waitReady(t)
		ps = append(ps, p)
	}
	return ps, ps[1].api.awaitRendezvous("all four", func(r *api.Rendezvous) bool { return r.WorldSize == 4 })
}

// TestSidecarProcessesSurviveKillAndDrain runs four sidecar processes with
// a 60 s lease TTL, so only gossip can explain a quick eviction: the
// leader's process is SIGKILLed, then another is SIGTERMed and drains.
func TestSidecarProcessesSurviveKillAndDrain(t *testing.T) {
	srv := etcdtest.Start(t)
	ps, all := startFour(t, srv.Endpoints())
	leader := all.Members[0].ID // w0 joined first and leads
	victim := ps[0]
	if victim.id != leader {
		t.Logf("leader is %s", leader)
	}
	events := ps[1].api.events()

	victim.cmd.Process.Kill()
	dead := events.await(t, "gossip declares the killed member dead", func(e api.Event) bool {
		return e.Type == api.EventMemberDead && e.Member == victim.id
	})
	r := ps[1].api.awaitRendezvous("generation without the killed member", func(r *api.Rendezvous) bool {
		return !has(r, victim.id)
	})
	if r.WorldSize != 3 {
		t.Fatalf("world size %d after the kill, want 3", r.WorldSize)
	}
	t.Logf("kill -9 of %s: dead at %s, generation %d without it", victim.id, dead.Time.Format(time.StampMilli), r.Generation)

	drained := ps[3]
	drainEvents := drained.api.events()
	drained.cmd.Process.Signal(syscall.SIGTERM)
	drainEvents.await(t, "drain event", func(e api.Event) bool { return e.Type == api.EventDrain && e.Reason == "SIGTERM" })
	r = ps[1].api.awaitRendezvous("generation without the drained member", func(r *api.Rendezvous) bool {
		return !has(r, drained.id)
	})
	if r.WorldSize != 2 {
		t.Fatalf("world size %d after the drain, want 2", r.WorldSize)
	}
	select {
	case err := <-drained.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) || err != nil {
			t.Fatalf("drained sidecar exited with %v, want 0", err)
		}
		drained.done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("drained sidecar did not exit")
	}
}

// TestThreeNeighboursKilledAtOnceAreAllEvicted kills three members next
// to each other in the ring (a node's pods lost together). Each member
// watches the two before it, so the first victim loses both its watchers
// with the others and nobody's watch fires for it: the sweep after the
// others' confirmed deaths finds it. A 60 s TTL leaves only votes to
// evict them.
func TestThreeNeighboursKilledAtOnceAreAllEvicted(t *testing.T) {
	srv := etcdtest.Start(t)
	byID := map[string]*sidecarProc{}
	var ps []*sidecarProc
	for n := range 6 {
		p := startSidecar(t, srv.Endpoints(), n, "--ttl", "60s")
		p.waitReady(t)
		ps = append(ps, p)
		byID[p.id] = p
	}
	all := ps[0].api.awaitRendezvous("all six", func(r *api.Rendezvous) bool { return r.WorldSize == 6 })
	ring := ids(all)
	victims := []*sidecarProc{byID[ring[1]], byID[ring[2]], byID[ring[3]]}
	t.Logf("ring %v: killing %s, %s and %s", ring, ring[1], ring[2], ring[3])
	for _, v := range victims {
		v.cmd.Process.Kill()
	}
	r := byID[ring[0]].api.awaitRendezvous("a generation without the three", func(r *api.Rendezvous) bool {
		return !has(r, ring[1]) && !has(r, ring[2]) && !has(r, ring[3])
	})
	if r.WorldSize != 3 {
		t.Fatalf("world size %d, want 3", r.WorldSize)
	}
	// ring[1]'s watchers died with it: a survivor must have found it
	// itself (a sweep after a confirmed death, a failed gossip probe, or
	// the watch it took on in the ring without the others), not only
	// echoed another's vote.
	out := byID[ring[0]].out.String() + byID[ring[4]].out.String() + byID[ring[5]].out.String()
	found := regexp.MustCompile(`"suspect":"` + ring[1] + `","why":"(a sweep after|gossip probe failed|gossip declared it dead|its watch connection closed)`)
	if !found.MatchString(out) {
		t.Errorf("no survivor found %s itself, whose watchers died with it", ring[1])
	}
}

// TestLostGenerationKeyThenLeaderKilled: the generation key is lost (by
// hand, or in a restore), then the leader's process is SIGKILLed. With a
// 60 s TTL only votes can evict it: the next leader must commit the ring
// without it at once, and every survivor must train in that ring.
func TestLostGenerationKeyThenLeaderKilled(t *testing.T) {
	srv := etcdtest.Start(t)
	ps, all := startFour(t, srv.Endpoints())
	client := etcdtest.Client(t, srv)
	key := "/ringside/default/proc/" + record.GenerationKey
	resp, err := client.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the generation: %v (%d keys)", err, len(resp.Kvs))
	}
	gen, err := record.DecodeGeneration(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	var victim *sidecarProc
	for _, p := range ps {
		if p.id == gen.Leader {
			victim = p
		}
	}
	if victim == nil {
		t.Fatalf("leader %q is none of the sidecars", gen.Leader)
	}
	victim.cmd.Process.Kill()
	for _, p := range ps {
		if p == victim {
			continue
		}
		r := p.api.awaitRendezvous(p.id+"'s ring without the killed leader", func(r *api.Rendezvous) bool {
			return r.Generation > all.Generation && !has(r, victim.id)
		})
		if r.WorldSize != 3 {
			t.Fatalf("%s: world size %d, want 3", p.id, r.WorldSize)
		}
	}
}

// TestAStalledTrainerHasItsSilentNeighbourEvicted: a trainer steps at a
// steady pace, then its collective waits on a SIGSTOPped peer: its
// sidecar sees the steps stop and checks its ring neighbours at once, and
// the silent one is evicted (a 60 s TTL leaves only votes to do it).
func TestAStalledTrainerHasItsSilentNeighbourEvicted(t *testing.T) {
	srv := etcdtest.Start(t)
	ps, all := startFour(t, srv.Endpoints())
	byID := map[string]*sidecarProc{}
	for _, p := range ps {
		byID[p.id] = p
	}
	ring := ids(all)
	trainer, victim := byID[ring[0]], byID[ring[1]]
	for step := 1; step <= 16; step++ {
		body := fmt.Sprintf(`{"step":%d,"samples":%d,"step_time_s":0.02,"generation":%d}`, step, 8*step, all.Generation)
		if resp, b := trainer.api.do("POST", "/v1/heartbeat", body); resp.StatusCode/100 != 2 {
			t.Fatalf("heartbeat: %d %s", resp.StatusCode, b)
		}
	}
	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.cmd.Process.Signal(syscall.SIGCONT) })
	trainer.api.awaitRendezvous("a generation without "+victim.id, func(r *api.Rendezvous) bool { return !has(r, victim.id) })
	if !strings.Contains(trainer.out.String(), `"msg":"the trainer stalled: checking its ring neighbours"`) {
		t.Errorf("%s's sidecar never saw its trainer stall", trainer.id)
	}
}
