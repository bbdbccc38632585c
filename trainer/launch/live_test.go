package launch_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/sidecartest"
	"github.com/ringside/ringside/trainer/launch"
)

// startLive runs script in live mode with slots processes; no sidecar is
// needed once the slots are given.
func startLive(t *testing.T, slots, maxRestarts int, script string) *execRun {
	t.Helper()
	return startRun(t, launch.RunLive, t.TempDir()+"/none.sock", maxRestarts, script, func(c *launch.Config) {
		c.Slots = slots
		c.RestartBackoff, c.MaxRestartBackoff = 10*time.Millisecond, 20*time.Millisecond
	})
}

func TestLiveRestartsACrashedSlotProcessAlone(t *testing.T) {
	// Slot 1 crashes on its first run; every start prints its pid.
	e := startLive(t, 2, 1, `trap 'exit 0' TERM; echo "start $LOCAL_RANK of $LOCAL_WORLD_SIZE restart $TORCHELASTIC_RESTART_COUNT"; `+
		`if [ "$LOCAL_RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 3; fi; echo "up $LOCAL_RANK"; `+loop)
	starts := map[string]int{}
	for up := 0; up < 2; {
		l := e.await(t, "")
		switch {
		case strings.HasPrefix(l, "start"):
			starts[l]++
		case strings.HasPrefix(l, "up"):
			up++
		}
	}
	want := map[string]int{"start 0 of 2 restart 0": 1, "start 1 of 2 restart 0": 1, "start 1 of 2 restart 1": 1}
	for l, n := range want {
		if starts[l] != n {
			t.Errorf("%q printed %d times, want %d (all starts: %v)", l, starts[l], n, starts)
		}
	}
	if len(starts) != len(want) {
		t.Errorf("starts %v, want only %v: slot 0 is never restarted", starts, want)
	}
	e.signals <- syscall.SIGTERM
	if code := e.wait(t); code != 0 {
		t.Fatalf("exit code %d, want 0: every process exited 0 on SIGTERM", code)
	}
}

func TestLiveForwardsSignalsToEverySlot(t *testing.T) {
	e := startLive(t, 2, 0, `trap 'echo "usr1 $LOCAL_RANK"' USR1; trap 'exit 7' TERM; echo "ready $LOCAL_RANK"; `+loop)
	e.await(t, "ready")
	e.await(t, "ready")
	e.signals <- syscall.SIGUSR1
	got := map[string]bool{e.await(t, "usr1"): true, e.await(t, "usr1"): true}
	if !got["usr1 0"] || !got["usr1 1"] {
		t.Fatalf("SIGUSR1 reached %v, want both slots", got)
	}
	e.signals <- syscall.SIGTERM
	if code := e.wait(t); code != 7 {
		t.Fatalf("exit code %d, want the processes' 7 (a terminated process is not restarted)", code)
	}
}

func TestLiveExitCodes(t *testing.T) {
	tests := []struct {
		name        string
		maxRestarts int
		script      string
		want        int
	}{
		{"every slot process finished: 0, none restarted", 0, `exit 0`, 0},
		{"one slot finished, the other's failures spent: the failure's code", 2,
			`if [ "$LOCAL_RANK" = 0 ]; then exit 0; fi; exit 5`, 5},
		{"a slot failing past its restarts stops the others: the failure's code", 1,
			`trap 'exit 0' TERM; if [ "$LOCAL_RANK" = 1 ]; then exit 4; fi; ` + loop, 4},
		{"slots that fail once each and then finish: 0", 2,
			`if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 6; fi; exit 0`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startLive(t, 2, tt.maxRestarts, tt.script)
			if code := e.wait(t); code != tt.want {
				t.Fatalf("exit code %d, want %d", code, tt.want)
			}
		})
	}
}

func TestLiveTakesTheSlotsFromTheSidecar(t *testing.T) {
	srv := etcdtest.Start(t)
	w0 := sidecartest.Start(t, srv.Endpoints(), "live", "w0", func(c *sidecar.Config) { c.Slots = 3 })
	e := startRun(t, launch.RunLive, w0.Socket, 0, `echo "slot $LOCAL_RANK of $LOCAL_WORLD_SIZE at $RINGSIDE_SOCKET rank ${RANK:-unset} of ${WORLD_SIZE:-unset}"`)
	seen := map[string]bool{}
	for range 3 {
		seen[e.await(t, "slot")] = true
	}
	for k := range 3 {
		if l := "slot " + string(rune('0'+k)) + " of 3 at " + w0.Socket + " rank " + string(rune('0'+k)) + " of 3"; !seen[l] {
			t.Errorf("no %q in %v", l, seen)
		}
	}
	if code := e.wait(t); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
}

func TestLiveStoppedWhileWaitingForTheSlotsExitsWithTheSignal(t *testing.T) {
	e := startRun(t, launch.RunLive, t.TempDir()+"/none.sock", 0, "echo never")
	e.signals <- syscall.SIGTERM
	if code := e.wait(t); code != 128+15 {
		t.Fatalf("exit code %d, want 143 (SIGTERM before any process started)", code)
	}
}

func TestLiveFailsClearlyWhenTheCommandCannotStart(t *testing.T) {
	cfg := launch.DefaultConfig()
	cfg.Slots, cfg.Command = 2, []string{t.TempDir() + "/no-such-trainer"}
	code, err := launch.RunLive(context.Background(), cfg)
	if code == 0 || err == nil || !strings.Contains(err.Error(), "no-such-trainer") {
		t.Fatalf("RunLive = %d, %v; want a non-zero code and an error naming the command", code, err)
	}
}
