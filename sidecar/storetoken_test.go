package sidecar_test

import (
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/trainer/api"
)

// TestStoreTokenReachesTheRanksAndNothingElse: every generation carries a
// new store token, which each placed member's rendezvous hands to its
// trainer, and which is in none of the sidecars' logs (at debug), their
// metrics, or `ringside status` in either format.
func TestStoreTokenReachesTheRanksAndNothingElse(t *testing.T) {
	srv := etcdtest.Start(t)
	w0 := startSidecar(t, srv.Endpoints(), 0, "--log-level", "debug")
	w0.waitReady(t)
	first := w0.api.rendezvous(0)
	w1 := startSidecar(t, srv.Endpoints(), 1, "--log-level", "debug")
	w1.waitReady(t)
	both := w1.api.awaitRendezvous("both members", func(r *api.Rendezvous) bool { return r.WorldSize == 2 })
	tokens := []string{first.StoreToken, both.StoreToken}
	for _, tok := range tokens {
		if b, err := hex.DecodeString(tok); err != nil || len(b) != record.StoreTokenBytes {
			t.Fatalf("store token %q: want %d random bytes in hex", tok, record.StoreTokenBytes)
		}
	}
	if tokens[0] == tokens[1] {
		t.Fatal("two generations share a store token")
	}
	if r0 := w0.api.awaitRendezvous("w0 in the same generation", func(r *api.Rendezvous) bool { return r.Generation >= both.Generation }); r0.Generation == both.Generation && r0.StoreToken != both.StoreToken {
		t.Fatalf("w0 and w1 got different tokens for generation %d", both.Generation)
	}

	var outputs []string
	for _, p := range []*sidecarProc{w0, w1} {
		_, metrics := p.api.do("GET", "/metrics", "")
		outputs = append(outputs, p.id+" log:\n"+p.out.String(), p.id+" metrics:\n"+string(metrics))
	}
	for _, format := range [][]string{nil, {"--json"}} {
		args := append([]string{"status", "--job", "proc", "--etcd-endpoints", srv.Endpoints()[0], "--once"}, format...)
		out, err := exec.Command(ringsideBin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ringside %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(string(out), "w1") {
			t.Fatalf("ringside status shows no member:\n%s", out)
		}
		outputs = append(outputs, "status "+strings.Join(format, " ")+":\n"+string(out))
	}
	for _, out := range outputs {
		for _, tok := range tokens {
			if strings.Contains(out, tok) {
				t.Errorf("a store token appears in %s", out)
			}
		}
	}
}
