package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runRoot runs ringside with args in this process, through the root
// command as main does, and returns what it printed and its error.
func runRoot(ctx context.Context, args ...string) (string, error) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// etcdTrap listens where the commands are told etcd is, and reports
// whether any of them connected: a refused input must reach nothing.
type etcdTrap struct{ l net.Listener }

func newEtcdTrap(t *testing.T) *etcdTrap {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &etcdTrap{l}
}

func (e *etcdTrap) url() string { return "http://" + e.l.Addr().String() }

// connected reports a connection made so far, without waiting for one.
func (e *etcdTrap) connected(t *testing.T) bool {
	if err := e.l.(*net.TCPListener).SetDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	c, err := e.l.Accept()
	if err == nil {
		c.Close()
		return true
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatal(err)
	}
	return false
}

func TestEverySubcommandRefusesBadInputNamingTheFlag(t *testing.T) {
	trap := newEtcdTrap(t)
	dir := t.TempDir()
	badJSON := filepath.Join(dir, "cluster.json")
	if err := os.WriteFile(badJSON, []byte(`[{"id": "w0", "topology": `), 0o600); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "none.sock")
	// A sidecar that would start but for the one bad input of each case.
	sidecar := []string{"sidecar", "--job", "llama", "--member-id", "w0", "--advertise", "127.0.0.1",
		"--socket", filepath.Join(dir, "w0.sock"), "--insecure-trusted-network", "--node-watch=false",
		"--etcd-endpoints", trap.url()}
	etcd := []string{"--etcd-endpoints", trap.url()}
	cat := func(a []string, b ...string) []string { return append(append([]string{}, a...), b...) }
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"an unknown flag", []string{"status", "--jobs", "x"}, "unknown flag: --jobs"},
		{"a bad log level", []string{"--log-level", "loud", "status", "--job", "x"}, `--log-level "loud"`},

		{"sidecar without a job", cat(sidecar, "--job", ""), "--job is required (or env RINGSIDE_JOB)"},
		{"sidecar with a slash in the job", cat(sidecar, "--job", "team/llama"), `--job: job "team/llama" contains '/'`},
		{"sidecar with a slash in the namespace", cat(sidecar, "--namespace", "a/b"), `--namespace: namespace "a/b" contains '/'`},
		{"sidecar with a job too long", cat(sidecar, "--job", strings.Repeat("j", 64)), "--job: job"},
		{"sidecar without a member id", cat(sidecar, "--member-id", ""), "--member-id is empty: set it, or POD_NAME"},
		{"sidecar without an address", cat(sidecar, "--advertise", ""), "--advertise is empty: set it, or POD_IP"},
		{"sidecar with a bad address", cat(sidecar, "--advertise", "not an address"), "--advertise"},
		{"sidecar with no slots", cat(sidecar, "--slots", "0"), "--slots must be 1-"},
		{"sidecar with a fractional TTL", cat(sidecar, "--ttl", "1500ms"), "--ttl must be a whole number of seconds"},
		{"sidecar with a bad duration", cat(sidecar, "--grace", "soon"), `invalid argument "soon" for "--grace"`},
		{"sidecar with a negative grace", cat(sidecar, "--grace", "-1s"), "--grace must be positive"},
		{"sidecar with max below min", cat(sidecar, "--min", "4", "--max", "2"), "--max 2 is below the min 4"},
		{"sidecar expecting fewer than min", cat(sidecar, "--min", "4", "--expected-size", "2"), "--expected-size 2 is below the min world size 4"},
		{"sidecar expecting more than max", cat(sidecar, "--max", "4", "--expected-size", "8"), "--expected-size 8 is above the max world size 4"},
		{"sidecar with a negative expected size", cat(sidecar, "--expected-size", "-1"), "--expected-size must not be negative"},
		{"sidecar with a negative start window", cat(sidecar, "--start-window", "-1s"), "--start-window must not be negative, got -1s"},
		{"sidecar with a negative restart settle", cat(sidecar, "--restart-settle", "-1s"), "--restart-settle must not be negative, got -1s"},
		{"sidecar with a gossip port out of range", cat(sidecar, "--gossip-port", "70000"), "--gossip-port must be 0-65535"},
		{"sidecar with a bad etcd endpoint", cat(sidecar, "--etcd-endpoints", "etcd:2379"), `--etcd-endpoints "etcd:2379" is not http(s)://host:port`},
		{"sidecar with a certificate and no key", cat(sidecar, "--etcd-cert", "c.crt"), "--etcd-key is missing"},
		{"sidecar without a gossip key", cat(sidecar, "--insecure-trusted-network=false"), "--gossip-key-file"},
		{"sidecar with bad node labels", cat(sidecar, "--node-labels", "zone"), `--node-labels: "zone" is not key=value`},
		{"sidecar with an argument", cat(sidecar, "extra"), `unknown command "extra"`},

		{"exec without a command", []string{"exec", "--socket", socket}, "no command given"},
		{"exec with a negative wait", []string{"exec", "--socket", socket, "--socket-wait", "-1s", "--", "true"}, "--socket-wait must not be negative"},
		{"exec with slots in restart mode", []string{"exec", "--socket", socket, "--slots", "2", "--", "true"}, "--slots and --restart-backoff are for --live"},
		{"exec with negative slots", []string{"exec", "--live", "--socket", socket, "--slots", "-1", "--", "true"}, "--slots must be zero"},
		{"exec preloading in live mode", []string{"exec", "--live", "--socket", socket, "--preload", "torch", "--", "true"}, "--preload: "},
		{"exec with negative restarts", []string{"exec", "--socket", socket, "--max-restarts", "-1", "--", "true"}, "--max-restarts must be zero or more"},
		{"exec with a restart budget past its bound", []string{"exec", "--socket", socket, "--max-restarts", "1000001", "--", "true"}, "--max-restarts must be zero or more, at most 1000000, got 1000001"},
		{"exec with a negative crash loop", []string{"exec", "--socket", socket, "--crash-loop", "-2", "--", "true"}, "--crash-loop must be zero (never) or more"},
		{"exec with a negative first-step time", []string{"exec", "--socket", socket, "--first-step-time", "-1s", "--", "true"}, "--first-step-time must not be negative"},
		{"exec counting crash loops in live mode", []string{"exec", "--live", "--socket", socket, "--crash-loop", "2", "--", "true"}, "--crash-loop and --first-step-time are for restart mode"},
		{"exec with a bad duration", []string{"exec", "--socket", socket, "--stop-timeout", "10", "--", "true"}, `invalid argument "10" for "--stop-timeout"`},
		{"exec without a sidecar", []string{"exec", "--socket", socket, "--socket-wait", "1ms", "--", "true"}, "--socket-wait (env RINGSIDE_SOCKET_WAIT)"},

		{"discover-hosts with an argument", []string{"discover-hosts", "extra"}, `unknown command "extra"`},
		{"discover-hosts without a sidecar", []string{"discover-hosts", "--socket", socket}, socket},

		{"status without a job", cat([]string{"status", "--once"}, etcd...), "--job is required"},
		{"status with a slash in the job", cat([]string{"status", "--job", "a/b"}, etcd...), `--job: job "a/b"`},
		{"status with a zero interval", cat([]string{"status", "--job", "x", "--interval", "0s"}, etcd...), "--interval must be positive"},
		{"status with no endpoints", []string{"status", "--job", "x", "--etcd-endpoints", ""}, "--etcd-endpoints are empty"},
		{"status with a user and no password", cat([]string{"status", "--job", "x", "--etcd-user", "u"}, etcd...), "--etcd-password-file"},

		{"etcd auth setup with a slash in the job", cat([]string{"etcd", "auth", "setup", "--job", "a/b"}, etcd...), `--job: job "a/b"`},
		{"etcd auth setup without a job", cat([]string{"etcd", "auth", "setup"}, etcd...), "--job is required"},
		{"etcd auth setup with a zero timeout", cat([]string{"etcd", "auth", "setup", "--job", "x", "--timeout", "0s"}, etcd...), "--timeout must be positive"},
		{"etcd with a zero start timeout", []string{"etcd", "--data-dir", filepath.Join(dir, "etcd"), "--start-timeout", "0s"}, "--start-timeout must be positive"},
		{"etcd with a bad duration", []string{"etcd", "--start-timeout", "long"}, `invalid argument "long" for "--start-timeout"`},

		{"controller with no workers", cat([]string{"controller", "--workers", "0"}, etcd...), "--workers must be at least 1"},
		{"controller with a bad etcd endpoint", []string{"controller", "--etcd-endpoints", "ftp://etcd:2379"}, "--etcd-endpoints"},

		{"webhook without a certificate", []string{"webhook", "--sidecar-image", "x"}, "--tls-cert-file and --tls-key-file are required"},
		{"webhook with a bad pull policy", []string{"webhook", "--tls-cert-file", "a", "--tls-key-file", "b", "--sidecar-image-pull-policy", "Sometimes"}, `--sidecar-image-pull-policy "Sometimes"`},
		{"webhook with a bad quantity", []string{"webhook", "--tls-cert-file", "a", "--tls-key-file", "b", "--sidecar-cpu-request", "lots"}, `--sidecar-cpu-request "lots"`},

		{"netopt env with a traffic class out of range", []string{"netopt", "env", "--ib-tc", "300"}, "--ib-tc must be 0-255"},
		{"netopt env with a bad format", []string{"netopt", "env", "--format", "yaml"}, "--format must be"},
		{"netopt plan without a cluster", []string{"netopt", "plan"}, `"cluster" not set`},
		{"netopt plan with a broken cluster file", []string{"netopt", "plan", "--cluster", badJSON}, "cluster file " + badJSON},
		{"netopt plan with a zero buffer", []string{"netopt", "plan", "--cluster", badJSON, "--bytes", "0"}, "--bytes"},
		{"netopt gen-cluster with a bad number", []string{"netopt", "gen-cluster", "--members", "many"}, `invalid argument "many" for "--members"`},

		{"gossip-key with an argument", []string{"gossip-key", "extra"}, `unknown command "extra"`},
		{"bench rendezvous with an unknown flag", []string{"bench", "rendezvous", "--bogus"}, "unknown flag: --bogus"},
		{"bench detect with one member", []string{"bench", "detect", "--members", "1"}, "--members 1: want 2 to 256"},
		{"bench detect with too many members", []string{"bench", "detect", "--members", "1000"}, "--members 1000: want 2 to 256"},
		{"bench detect with a negative node size", []string{"bench", "detect", "--node-size", "-1"}, "--node-size -1: want 0"},
		{"bench detect with no runs", []string{"bench", "detect", "--runs", "0"}, "--runs 0: want 1 to 1000"},
		{"bench partition with too few members", []string{"bench", "partition", "--members", "2"}, "--members 2 is out of range: use 4-32"},
		{"bench partition with an unknown case", []string{"bench", "partition", "--cases", "split,flood"}, `--cases: unknown case "flood"`},
		{"bench partition with loss as a percentage", []string{"bench", "partition", "--loss", "5"}, "--loss 5 is out of range"},
		{"bench recovery with an unknown fault", []string{"bench", "recovery", "--fault", "nope"}, "--fault: fault \"nope\": want kill, stop or trainer"},
		{"bench recovery freezing restart mode", []string{"bench", "recovery", "--trainer", "pytorch", "--mode", "restart", "--fault", "stop"}, "--fault: fault stop freezes"},
		{"demo with a bad duration", []string{"demo", "--step-time", "fast"}, `invalid argument "fast" for "--step-time"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runRoot(context.Background(), tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ringside %s: err = %v, want one with %q", strings.Join(tt.args, " "), err, tt.want)
			}
			if trap.connected(t) {
				t.Fatalf("ringside %s reached etcd before refusing its input", strings.Join(tt.args, " "))
			}
			if _, err := os.Stat(filepath.Join(dir, "w0.sock")); err == nil {
				t.Fatalf("ringside %s opened the trainer API socket before refusing its input", strings.Join(tt.args, " "))
			}
		})
	}
}

func TestFlagsComeFromTheEnvironmentAndSayWhich(t *testing.T) {
	t.Setenv("RINGSIDE_JOB", "team/llama")
	_, err := runRoot(context.Background(), "status", "--once")
	if err == nil || !strings.Contains(err.Error(), `--job: job "team/llama"`) {
		t.Fatalf("err = %v, want the job from RINGSIDE_JOB refused", err)
	}
	t.Setenv("RINGSIDE_INTERVAL", "often")
	_, err = runRoot(context.Background(), "status", "--job", "x")
	if err == nil || !strings.Contains(err.Error(), `RINGSIDE_INTERVAL="often" (for --interval)`) {
		t.Fatalf("err = %v, want the variable and its flag named", err)
	}
}

func TestHelpNamesEachFlagsVariableAndDefault(t *testing.T) {
	out, err := runRoot(context.Background(), "exec", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--socket-wait duration", "(env RINGSIDE_SOCKET_WAIT) (default 1m0s)",
		"(env RINGSIDE_SOCKET) (default \"/var/run/ringside/ringside.sock\")",
		"(env RINGSIDE_RUN_ID, then RINGSIDE_JOB)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exec --help lacks %q:\n%s", want, out)
		}
	}
}
