package sidecar_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/gossip"
	"github.com/ringside/ringside/sidecar/sidecartest"
)

func TestSidecarWithoutAGossipKeyExitsSayingHowToGiveOne(t *testing.T) {
	cmd := exec.Command(ringsideBin, "sidecar", "--job", "nokey", "--etcd-endpoints", "http://127.0.0.1:1",
		"--member-id", "w0", "--advertise", "127.0.0.2", "--socket", filepath.Join(t.TempDir(), "w0.sock"),
		"--gossip-port", "0", "--node-watch=false")
	cmd.Env = withoutRingsideEnv()
	out, err := cmd.CombinedOutput()
	if _, exited := err.(*exec.ExitError); !exited {
		t.Fatalf("sidecar without a gossip key: %v, want a non-zero exit\n%s", err, out)
	}
	for _, advice := range []string{"--gossip-key-file", "RINGSIDE_GOSSIP_KEY", "ringside gossip-key", "--insecure-trusted-network"} {
		if !bytes.Contains(out, []byte(advice)) {
			t.Errorf("the error does not name %s:\n%s", advice, out)
		}
	}
}

// withoutRingsideEnv is the environment without RINGSIDE_ variables, which
// would set flags.
func withoutRingsideEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RINGSIDE_") {
			env = append(env, kv)
		}
	}
	return env
}

func TestGossipKeyPrintsANewKeyEachTime(t *testing.T) {
	var keys []string
	for range 2 {
		out, err := exec.Command(ringsideBin, "gossip-key").Output()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, strings.TrimSpace(string(out)))
	}
	parsed, err := gossip.ParseKeys([]byte(keys[0] + "\n" + keys[1] + "\n"))
	if err != nil || len(parsed) != 2 || len(parsed[0]) != gossip.KeySize {
		t.Fatalf("gossip-key printed %q: %d keys, %v; want two distinct %d byte keys", keys, len(parsed), err, gossip.KeySize)
	}
}

// TestSidecarWithAWrongGossipKeyNeverJoinsThePool: both sidecars register
// in etcd and hold the generation, but gossip does not take in the one
// whose key is wrong, and it takes in nobody, while the reconciliation that
// rejoins a healed member (every 2 s) runs twice.
func TestSidecarWithAWrongGossipKeyNeverJoinsThePool(t *testing.T) {
	srv := etcdtest.Start(t)
	w0 := sidecartest.Start(t, srv.Endpoints(), "keys", "w0")
	wrong, err := gossip.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	w1 := sidecartest.Start(t, srv.Endpoints(), "keys", "w1", func(c *sidecar.Config) { c.GossipKeys = []string{wrong} })
	eventually(t, "both registered", func() bool { return w0.GenerationNumber() > 0 && w1.GenerationNumber() > 0 })
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if n0, n1 := w0.GossipMembers(), w1.GossipMembers(); n0 != 1 || n1 != 1 {
			t.Fatalf("gossip members w0 %d, w1 %d: a wrong key joined the pool", n0, n1)
		}
		time.Sleep(100 * time.Millisecond) // watching for a join that must not happen
	}
	if ok, _ := w0.CheckGossip(context.Background(), "w1"); ok {
		t.Fatal("w0's ping of w1 (wrong key) was answered")
	}
}

// TestGossipKeyRotationThroughTheKeyFile rotates two sidecars' key files in
// the three rounds (add the new key second, move it first, drop the old
// one), each applied on SIGHUP's path: after every round both still reach
// each other over gossip, and the job never re-forms.
func TestGossipKeyRotationThroughTheKeyFile(t *testing.T) {
	srv := etcdtest.Start(t)
	oldKey, _ := gossip.NewKey()
	newKey, _ := gossip.NewKey()
	dir := t.TempDir()
	files := map[string]string{}
	write := func(id string, keys ...string) {
		t.Helper()
		if err := os.WriteFile(files[id], []byte("# primary first\n"+strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var agents []*sidecartest.Agent
	for _, id := range []string{"w0", "w1"} {
		files[id] = filepath.Join(dir, id+".key")
		write(id, oldKey)
		agents = append(agents, sidecartest.Start(t, srv.Endpoints(), "rotate", id, func(c *sidecar.Config) {
			c.GossipKeys, c.GossipKeyFile = nil, files[id]
			c.GossipKeyCheck = time.Hour // only the reload applies a change
		}))
	}
	// Both hold the generation that has both: one where w1 is still
	// excluded (its join not yet committed) would be followed by another.
	eventually(t, "both in one generation", func() bool {
		n0, size0 := agents[0].GenerationSize()
		n1, size1 := agents[1].GenerationSize()
		return agents[0].GossipMembers() == 2 && agents[1].GossipMembers() == 2 && n0 > 0 && n0 == n1 && size0 == 2 && size1 == 2
	})
	gen := agents[0].GenerationNumber()
	for _, round := range [][]string{{oldKey, newKey}, {newKey, oldKey}, {newKey}} {
		for i, a := range agents {
			id := fmt.Sprintf("w%d", i)
			write(id, round...)
			a.ReloadGossipKeys()
			eventually(t, id+" applies its keys", func() bool { return sameKeys(a.GossipKeys(), round) })
			for j, b := range agents {
				if j == i {
					continue
				}
				peer := fmt.Sprintf("w%d", j)
				if ok, err := a.CheckGossip(context.Background(), peer); !ok {
					t.Fatalf("round %d keys, %s cannot reach %s: %v", len(round), id, peer, err)
				}
				if ok, err := b.CheckGossip(context.Background(), id); !ok {
					t.Fatalf("round %d keys, %s cannot reach %s: %v", len(round), peer, id, err)
				}
			}
		}
	}
	for i, a := range agents {
		if n := a.GossipMembers(); n != 2 {
			t.Errorf("w%d holds %d gossip members after the rotation, want 2", i, n)
		}
		if g := a.GenerationNumber(); g != gen {
			t.Errorf("w%d is at generation %d after the rotation, want %d (no re-form)", i, g, gen)
		}
	}
	// A file that breaks mid-rotation changes nothing.
	if err := os.WriteFile(files["w0"], []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agents[0].ReloadGossipKeys()
	agents[0].ReloadGossipKeys()
	if !sameKeys(agents[0].GossipKeys(), []string{newKey}) {
		t.Fatal("a broken key file replaced the keys in use")
	}
}

func sameKeys(got [][]byte, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		b, _ := base64.StdEncoding.DecodeString(w)
		if i == 0 && !bytes.Equal(got[0], b) {
			return false
		}
		found := false
		for _, g := range got {
			found = found || bytes.Equal(g, b)
		}
		if !found {
			return false
		}
	}
	return true
}

// eventually polls cond (agent state has no event to wait on) for up
// to 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
