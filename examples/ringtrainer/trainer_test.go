package main

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startWorkers starts n workers and waits until every trainer completed
// three steps at world size n; it returns each one's read position.
func startWorkers(t *testing.T, c *cluster, n int) ([]*worker, []int) {
	t.Helper()
	ws := make([]*worker, n)
	for i := range ws {
		ws[i] = c.start(i)
	}
	pos := make([]int, n)
	for i, w := range ws {
		w.awaitSteps(t, &pos[i], 3, n)
	}
	return ws, pos
}

func TestThreeTrainersAllReduceWithCorrectSums(t *testing.T) {
	c := newCluster(t)
	ws, pos := startWorkers(t, c, 3)
	for i, w := range ws {
		w.awaitSteps(t, &pos[i], 3, 3)
	}

	// The ranks agreed on the step to go on from when the ring formed.
	var first []outLine
	ranks := map[int]bool{}
	for _, w := range ws {
		w.checkOutput(t)
		l := w.steps()[w.firstAtWorld(3)]
		first = append(first, l)
		ranks[l.Rank] = true
	}
	for _, l := range first[1:] {
		if l.Step != first[0].Step || l.Generation != first[0].Generation {
			t.Errorf("first steps at world size 3 differ: %+v and %+v", first[0], l)
		}
	}
	if len(ranks) != 3 {
		t.Errorf("ranks %v at world size 3, want 0, 1 and 2", ranks)
	}
}

// TestSurvivorsRetrainAfterKill SIGKILLs the first worker (the sidecar
// leader and rank 0 of the first generation) in the middle of training.
func TestSurvivorsRetrainAfterKill(t *testing.T) {
	c := newCluster(t)
	ws, pos := startWorkers(t, c, 3)
	victim, survivors := ws[0], ws[1:]
	victim.trainer.cmd.Process.Kill()
	victim.sidecar.cmd.Process.Kill()

	for i, w := range survivors {
		w.await(t, &pos[i+1], "a ring at world size 2", func(l outLine) bool { return l.Event == "ring" && l.World == 2 })
		w.awaitSteps(t, &pos[i+1], 3, 2)
	}
	for _, w := range survivors {
		w.checkOutput(t)
	}
}

// TestSurvivorsRetrainAfterTrainerKill SIGKILLs only a worker's trainer,
// as an OOM kill or a CUDA error ends a training container while its
// sidecar lives on: the member leaves the ring at once, and the restarted
// trainer brings it back.
func TestSurvivorsRetrainAfterTrainerKill(t *testing.T) {
	c := newCluster(t)
	ws, pos := startWorkers(t, c, 3)
	victim, survivors := ws[1], []*worker{ws[0], ws[2]}
	spos := []*int{&pos[0], &pos[2]}
	killed := time.Now()
	victim.trainer.cmd.Process.Kill()
	<-victim.trainer.done
	for i, w := range survivors {
		w.awaitSteps(t, spos[i], 1, 2)
		t.Logf("%s: a step at world size 2 %s after the kill of %s's trainer", w.id, time.Since(killed).Round(time.Millisecond), victim.id)
	}

	back := time.Now()
	c.restartTrainer(victim)
	for i, w := range survivors {
		w.awaitSteps(t, spos[i], 1, 3)
		t.Logf("%s: a step at world size 3 %s after %s's trainer restarted", w.id, time.Since(back).Round(time.Millisecond), victim.id)
	}
	victim.awaitSteps(t, &pos[1], 1, 3)
	for _, w := range survivors {
		w.checkOutput(t)
	}
}

// TestDrainedTrainerExitsAndNoStepIsLost SIGTERMs a worker's sidecar: its
// trainer stops stepping and exits 0 once the generation without it is
// committed, and the others go on at world size 2 from the next step.
func TestDrainedTrainerExitsAndNoStepIsLost(t *testing.T) {
	c := newCluster(t)
	ws, pos := startWorkers(t, c, 3)
	drained, survivors := ws[1], []*worker{ws[0], ws[2]}
	drained.sidecar.cmd.Process.Signal(syscall.SIGTERM)

	if code := drained.trainer.awaitExit(t); code != 0 {
		t.Fatalf("drained trainer exited with %d, want 0", code)
	}
	for _, l := range drained.steps()[drained.firstAtWorld(3):] {
		if l.World != 3 {
			t.Errorf("drained trainer stepped at world size %d after the ring of 3: %+v", l.World, l)
		}
	}
	for i, w := range survivors {
		p := &pos[2*i]
		w.await(t, p, "a ring at world size 2", func(l outLine) bool { return l.Event == "ring" && l.World == 2 })
		w.awaitSteps(t, p, 3, 2)
	}

	for _, w := range survivors {
		w.checkOutput(t)
		w.checkNoStepLost(t, 3)
	}
}

// TestTrainerSIGTERMDrainsItsMember: a trainer told to stop asks its
// sidecar to drain the member, exits 0 once left out, and the sidecar
// leaves the job and exits 0 too.
func TestTrainerSIGTERMDrainsItsMember(t *testing.T) {
	c := newCluster(t)
	ws, pos := startWorkers(t, c, 3)
	stopped, survivors := ws[2], ws[:2]
	stopped.trainer.cmd.Process.Signal(syscall.SIGTERM)

	if code := stopped.trainer.awaitExit(t); code != 0 {
		t.Fatalf("stopped trainer exited with %d, want 0", code)
	}
	if code := stopped.sidecar.awaitExit(t); code != 0 {
		t.Fatalf("its sidecar exited with %d, want 0", code)
	}
	for i, w := range survivors {
		w.await(t, &pos[i], "a ring at world size 2", func(l outLine) bool { return l.Event == "ring" && l.World == 2 })
		w.awaitSteps(t, &pos[i], 3, 2)
	}
	for _, w := range survivors {
		w.checkOutput(t)
		w.checkNoStepLost(t, 3)
	}
}

func TestSingleTrainerStopsAtSteps(t *testing.T) {
	c := newCluster(t)
	w := c.start(0, "--steps", "5")
	if code := w.trainer.awaitExit(t); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	w.checkOutput(t)
	lines, _ := w.out.snapshot()
	if len(lines) == 0 || lines[0].Event != "ring" || lines[0].World != 1 || lines[0].Rank != 0 {
		t.Fatalf("first line %+v, want a ring of world size 1", lines)
	}
	steps := w.steps()
	if len(steps) != 5 || steps[0].Step != 1 || steps[4].Step != 5 {
		t.Errorf("steps %+v, want 1 to 5", steps)
	}
}

func TestTrainerWithoutItsSidecarExitsThree(t *testing.T) {
	c := newCluster(t)
	w := c.start(0, "--connect-timeout", "1s")
	var pos int
	w.awaitSteps(t, &pos, 3, 1)
	w.sidecar.cmd.Process.Kill()
	if code := w.trainer.awaitExit(t); code != exitNoSidecar {
		t.Fatalf("exit code %d, want %d", code, exitNoSidecar)
	}
	if !strings.Contains(w.trainer.stderr.String(), "lost the sidecar") {
		t.Errorf("stderr does not say the sidecar was lost:\n%s", w.trainer.stderr.String())
	}
	w.checkOutput(t)
}

func TestLocalRankBeyondTheSlotsExitsTwo(t *testing.T) {
	c := newCluster(t)
	w := c.start(0, "--local-rank", "1")
	if code := w.trainer.awaitExit(t); code != exitUsage {
		t.Fatalf("exit code %d, want %d", code, exitUsage)
	}
	if !strings.Contains(w.trainer.stderr.String(), "--slots") {
		t.Errorf("stderr does not point at the sidecar's --slots:\n%s", w.trainer.stderr.String())
	}
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		mentions string
	}{
		{"a bad flag value exits 2", []string{"--vector", "0"}, exitUsage, "--vector"},
		{"an unknown flag exits 2", []string{"--nope"}, exitUsage, "nope"},
		{"a sidecar that is not there exits 3", []string{"--socket", "/nonexistent/ringside.sock", "--connect-timeout", "200ms"}, exitNoSidecar, "--socket"},
		{"help exits 0", []string{"--help"}, exitOK, "-local-rank"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(trainerBin, tt.args...)
			cmd.Env = cleanEnv()
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != tt.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tt.code, out)
			}
			if !strings.Contains(string(out), tt.mentions) {
				t.Errorf("output does not mention %q:\n%s", tt.mentions, out)
			}
		})
	}
}
