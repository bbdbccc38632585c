package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringside/ringside/netopt"
)

// runNetopt runs `ringside netopt args...` and returns stdout, stderr and
// the error.
func runNetopt(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	cmd := newNetoptCmd()
	var out, errOut bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// The figures are netopt's (see its plan tests); here: gen-cluster's file
// reaches plan through stdin, and --json and --with-order are wired.
func TestNetoptPlanJSONIsOneLineOfTheSummary(t *testing.T) {
	cluster, _, err := runNetopt(t, "", "gen-cluster", "--members", "512", "--levels", "3", "--fanout", "8", "--seed", "2")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args      []string
		withOrder bool
	}{
		{[]string{"plan", "--cluster", "-", "--json"}, false},
		{[]string{"plan", "--cluster", "-", "--json", "--with-order"}, true},
	} {
		out, _, err := runNetopt(t, cluster, tt.args...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(out, "\n") != 1 {
			t.Fatalf("%q: want one line, got %q", tt.args, out)
		}
		var r netopt.PlanSummary
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if r.Members != 512 || len(r.Levels) != 3 || (len(r.Order) == 512) != tt.withOrder {
			t.Errorf("%q: %d members, %d levels, %d ids in order", tt.args, r.Members, len(r.Levels), len(r.Order))
		}
	}
}

func TestNetoptRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	dup := filepath.Join(dir, "dup.json")
	if err := os.WriteFile(dup, []byte(`[{"id":"w0","topology":["r1"],"slots":8},{"id":"w0","topology":["r2"],"slots":8}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"plan without a cluster", []string{"plan"}, `required flag(s) "cluster" not set`},
		{"plan of a missing file", []string{"plan", "--cluster", filepath.Join(dir, "absent.json")}, "open cluster file: open " + filepath.Join(dir, "absent.json") + ": no such file or directory"},
		{"plan with a duplicate id", []string{"plan", "--cluster", dup}, "cluster file " + dup + `: member 1 (id "w0"): id repeats member 0`},
		{"plan with a zero buffer", []string{"plan", "--cluster", dup, "--bytes", "0"}, "--bytes: cost model: bytes must be positive, got 0"},
		{"env in an unknown format", []string{"env", "--format", "yaml", "--ib-tc", "300"}, "--format must be env, conf or xml, got \"yaml\"\n--ib-tc must be 0-255 (or -1 to leave it unset), got 300"},
		{"env with an unknown fabric", []string{"env", "--fabric", "torus"}, `--fabric must be auto, rail or flat, got "torus"`},
		{"env with a service level above 15", []string{"env", "--ib-sl", "16", "--ib-tc", "-1"}, "--ib-sl must be 0-15 (or -1 to leave it unset), got 16"},
		{"env without a sysfs root", []string{"env", "--sysfs-root", ""}, "--sysfs-root is empty"},
		{"detect without sysfs", []string{"detect", "--sysfs-root", filepath.Join(dir, "nosys")}, "detect: read sysfs root: open " + filepath.Join(dir, "nosys") + ": no such file or directory"},
		{"gen-cluster with no levels", []string{"gen-cluster", "--levels", "0"}, "gen-cluster: levels must be at least 1, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runNetopt(t, "", tt.args...)
			if err == nil || err.Error() != tt.want {
				t.Errorf("got error %v\nwant %q", err, tt.want)
			}
		})
	}
}

func TestNetoptEnvReadsTheGivenSysfsRoot(t *testing.T) {
	sys := t.TempDir()
	mk := func(rel, content string) {
		p := filepath.Join(sys, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("devices/pci0000:00/0000:00:03.0/vendor", "0x8086")
	mk("devices/pci0000:00/0000:00:03.0/class", "0x020000")
	mk("devices/pci0000:00/0000:00:03.0/net/ens3/operstate", "up")
	mk("devices/pci0000:00/0000:00:03.0/net/ens3/type", "1")
	mk("devices/virtual/net/lo/operstate", "unknown")
	mk("devices/virtual/net/lo/type", "772")
	for _, l := range [][2]string{
		{"devices/pci0000:00/0000:00:03.0/net/ens3/device", "../../../0000:00:03.0"},
		{"class/net/ens3", "../../devices/pci0000:00/0000:00:03.0/net/ens3"},
		{"class/net/lo", "../../devices/virtual/net/lo"},
	} {
		p := filepath.Join(sys, l[0])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l[1], p); err != nil {
			t.Fatal(err)
		}
	}
	out, stderr, err := runNetopt(t, "", "env", "--sysfs-root", sys, "--dev-root", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\nNCCL_SOCKET_IFNAME==ens3\n") {
		t.Errorf("env output:\n%s", out)
	}
	if stderr != "warning: no RDMA device found: NCCL uses TCP sockets (NCCL_SOCKET_IFNAME)\n" {
		t.Errorf("stderr: %q", stderr)
	}
	out, _, err = runNetopt(t, "", "detect", "--json", "--sysfs-root", sys)
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Interfaces []struct {
			Name    string `json:"name"`
			PCIAddr string `json:"pci_addr"`
		} `json:"interfaces"`
	}
	if err := json.Unmarshal([]byte(out), &h); err != nil || len(h.Interfaces) != 2 || h.Interfaces[0].PCIAddr != "0000:00:03.0" {
		t.Errorf("detect --json: %v\n%s", err, out)
	}
}
