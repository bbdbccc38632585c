package netsplit

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// requireNamespaces skips a test where network namespaces cannot be made
// (not root, no ip or iptables-restore), except under CI=true, where it
// fails: CI must run it.
func requireNamespaces(t *testing.T) {
	t.Helper()
	err := Available()
	if err == nil {
		if out, lerr := exec.Command("ip", "netns", "list").CombinedOutput(); lerr != nil {
			err = &exec.Error{Name: "ip netns list: " + strings.TrimSpace(string(out)), Err: lerr}
		}
	}
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("network namespaces are needed under CI=true: %v", err)
	}
	t.Skipf("no network namespaces here: %v", err)
}

func output(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// A run that crashed leaves its namespaces and bridge behind; the next
// one with the same prefix sweeps them and starts clean, its rules come
// and go with Apply and Heal, and Close leaves nothing named after it.
func TestNetCreatesCutsAndRemovesEverything(t *testing.T) {
	requireNamespaces(t)
	ctx := context.Background()
	const prefix = "rspt-"
	crashed, err := Create(ctx, prefix, 250, 2)
	if err != nil {
		t.Fatal(err)
	}
	_ = crashed // never closed, as by a crash
	nt, err := Create(ctx, prefix, 250, 2)
	if err != nil {
		t.Fatalf("Create over a crashed run's leftovers: %v", err)
	}
	t.Cleanup(func() { Sweep(context.Background(), prefix) }) //nolint:errcheck // the test checks Close below

	rules := Rules{}
	rules.Deaf(0, nt.Addr(1))
	rules.Mute(0, nt.BridgeAddr())
	rules.Lose(1, 0.05)
	if err := nt.Apply(ctx, rules); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"-A INPUT -s " + nt.Addr(1) + "/32 -j DROP", "-m statistic --mode random --probability 0.04"} {
		if got := output(t, "ip", "netns", "exec", nt.Namespace(i), "iptables", "-S"); !strings.Contains(got, want) {
			t.Errorf("member %d's rules %q lack %q", i, got, want)
		}
	}
	if got := output(t, "ip", "netns", "exec", nt.Namespace(0), "iptables", "-S"); !strings.Contains(got, "-A OUTPUT -d "+nt.BridgeAddr()+"/32 -j DROP") {
		t.Errorf("member 0's rules %q lack the mute", got)
	}
	if err := nt.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if got := output(t, "ip", "netns", "exec", nt.Namespace(i), "iptables", "-S"); strings.Contains(got, "DROP") {
			t.Errorf("member %d keeps rules after the heal: %q", i, got)
		}
	}
	if err := nt.Close(); err != nil {
		t.Fatal(err)
	}
	if got := output(t, "ip", "netns", "list") + output(t, "ip", "-o", "link", "show"); strings.Contains(got, prefix) {
		t.Errorf("left behind after Close:\n%s", got)
	}
}

func TestCreateRefusesWhatCannotBeNamed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prefix    string
		subnet, n int
		want      string
	}{
		{"a subnet past 255", "rsp-", 256, 2, "subnet 256"},
		{"no members", "rsp-", 1, 0, "0 members"},
		{"a prefix too long for a link name", "ringside-partition-", 1, 2, "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Create(context.Background(), tc.prefix, tc.subnet, tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
