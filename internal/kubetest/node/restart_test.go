package node_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// failsOnce exits with code on its first run and 0 on the next: the
// emptyDir outlives a container's restart, as on a node.
func failsOnce(name string, code string) corev1.Container {
	c := shell(name, `if [ -e /scratch/`+name+` ]; then echo second run; exit 0; fi; touch /scratch/`+name+`; echo first run; exit `+code)
	c.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	return c
}

func withScratch(p *corev1.Pod) *corev1.Pod {
	p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	return p
}

func containerStatus(t *testing.T, p *corev1.Pod, name string) corev1.ContainerStatus {
	t.Helper()
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if cs.Name == name {
			return cs
		}
	}
	t.Fatalf("pod %s has no status of container %q", p.Name, name)
	return corev1.ContainerStatus{}
}

// runToEnd creates p, waits until it has finished and checks its phase.
func runToEnd(t *testing.T, c *cluster, p *corev1.Pod, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	createPod(t, c, p)
	got := waitPod(t, c, p.Namespace, p.Name, time.Minute, "finished", finished)
	if got.Status.Phase != phase {
		t.Errorf("phase %s, want %s\n%s", got.Status.Phase, phase, describe(got))
	}
	return got
}

// wantEnd checks how a container ended: its restarts, its final exit
// code, and the exit code of the run before (-1: none).
func wantEnd(t *testing.T, p *corev1.Pod, name string, restarts, code, lastCode int32) {
	t.Helper()
	cs := containerStatus(t, p, name)
	term, last := cs.State.Terminated, cs.LastTerminationState.Terminated
	switch {
	case cs.RestartCount != restarts, term == nil || term.ExitCode != code,
		lastCode < 0 && last != nil, lastCode >= 0 && (last == nil || last.ExitCode != lastCode):
		t.Errorf("container %s: restarts %d, state %+v, last %+v; want %d restarts, exit code %d after %d\n%s",
			name, cs.RestartCount, cs.State, last, restarts, code, lastCode, describe(p))
	}
}

// Under OnFailure a container that fails runs again and one that exits 0
// does not; the pod succeeds once both are done.
func TestOnFailureRestartsAFailedContainerOnly(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	p := withScratch(pod(ns, "onfailure", failsOnce("flaky", "3"), shell("done", `echo done; exit 0`)))
	p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	got := runToEnd(t, c, p, corev1.PodSucceeded)
	wantEnd(t, got, "flaky", 1, 0, 3)
	wantEnd(t, got, "done", 0, 0, -1)
}

// Under Never a failed container stays down and the pod fails once the
// others are done; a failed init container fails the pod before its
// containers start.
func TestNeverLeavesAFailedContainerDown(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	p := withScratch(pod(ns, "never", failsOnce("flaky", "3"), shell("done", `exit 0`)))
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	got := runToEnd(t, c, p, corev1.PodFailed)
	wantEnd(t, got, "flaky", 0, 3, -1)
	wantEnd(t, got, "done", 0, 0, -1)

	p = withScratch(pod(ns, "init-fails", shell("main", `echo ran`)))
	p.Spec.InitContainers = []corev1.Container{failsOnce("setup", "1")}
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	got = runToEnd(t, c, p, corev1.PodFailed)
	wantEnd(t, got, "setup", 0, 1, -1)
	if main := containerStatus(t, got, "main"); main.State.Waiting == nil || main.LastTerminationState.Terminated != nil {
		t.Errorf("main after a failed init container: %+v, want waiting, never run", main.State)
	}
}

// A container's own restartPolicy and restartPolicyRules (Kubernetes'
// ContainerRestartRules) override the pod's: under a pod's Always, one
// restarted only on exit code 42 and one under OnFailure that exits 0 both
// stay down, and the pod succeeds.
func TestAContainersRestartPolicyOverridesThePods(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	on42 := failsOnce("on42", "42")
	on42.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
	on42.RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	once := shell("once", `exit 0`)
	once.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyOnFailure)
	p := withScratch(pod(ns, "override", on42, once))
	got := runToEnd(t, c, p, corev1.PodSucceeded)
	wantEnd(t, got, "on42", 1, 0, 42)
	wantEnd(t, got, "once", 0, 0, -1)
}
