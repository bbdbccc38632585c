package webhook

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringside/ringside/internal/golden"

	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// secureConfig is a webhook's settings with etcd mTLS and a gossip key.
func secureConfig() Config {
	cfg := DefaultConfig("ringside:test")
	cfg.EtcdEndpoints = []string{"https://etcd-0.etcd:2379", "https://etcd-1.etcd:2379"}
	cfg.EtcdTLSSecret, cfg.GossipKeySecret = "ringside-etcd-client", "ringside-gossip"
	return cfg
}

func readPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(raw, &pod); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &pod
}

// matchGolden compares got with testdata/name, or rewrites it under -update.
func matchGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", name), string(got))
}

// Each pod of testdata is injected as its golden file says, the patch
// applied to the pod gives the same pod, and a second injection of the
// result changes nothing. (The patch itself is not a golden file: the
// library that diffs the pods orders its operations as it likes.)
func TestInjectGolden(t *testing.T) {
	for _, tc := range []struct {
		pod string
		cfg Config
	}{
		{"live.pod.yaml", DefaultConfig("ringside:test")},
		{"restart.pod.yaml", secureConfig()},
		{"gpus.pod.yaml", secureConfig()},
		{"launcher.pod.yaml", DefaultConfig("ringside:test")},
	} {
		t.Run(tc.pod, func(t *testing.T) {
			pod := readPod(t, tc.pod)
			orig := pod.DeepCopy()
			out, skipped, err := Inject(pod, "team-a", tc.cfg)
			if err != nil || out == nil {
				t.Fatalf("Inject: %v (skipped: %q)", err, skipped)
			}
			if diff := cmp.Diff(orig, pod); diff != "" {
				t.Errorf("Inject modified its input:\n%s", diff)
			}
			y, err := yaml.Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			base := strings.TrimSuffix(tc.pod, ".pod.yaml")
			matchGolden(t, base+".injected.yaml", y)

			patch, _, err := Patch(pod, "team-a", tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			applied := apply(t, pod, patch)
			if diff := cmp.Diff(out, applied); diff != "" {
				t.Errorf("the patch applied to the pod is not the injected pod:\n%s", diff)
			}
			again, skipped, err := Patch(applied, "team-a", tc.cfg)
			if err != nil || again != nil || skipped != AlreadyInjected {
				t.Errorf("a second injection: patch %s, skipped %q, err %v; want none, %q", again, skipped, err, AlreadyInjected)
			}
		})
	}
}

func apply(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decode the patch: %v", err)
	}
	raw, err = p.Apply(raw)
	if err != nil {
		t.Fatalf("apply the patch: %v", err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func TestPodsLeftAlone(t *testing.T) {
	cfg := DefaultConfig("ringside:test")
	plain := readPod(t, "live.pod.yaml")
	delete(plain.Labels, JobLabel)
	optedOut := readPod(t, "live.pod.yaml")
	optedOut.Annotations = map[string]string{InjectAnnotation: "false"}
	marked := readPod(t, "live.pod.yaml")
	marked.Annotations = map[string]string{InjectedAnnotation: "v0"}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want Skipped
	}{
		{"no job label", plain, NotOptedIn},
		{"opted out", optedOut, OptedOut},
		{"marked injected", marked, AlreadyInjected},
	} {
		patch, skipped, err := Patch(tc.pod, "team-a", cfg)
		if err != nil || patch != nil || skipped != tc.want {
			t.Errorf("%s: patch %s, skipped %q, err %v; want none, %q", tc.name, patch, skipped, err, tc.want)
		}
	}
}

// A pod that runs a ringside sidecar the webhook did not inject is
// refused (a second sidecar would be a second member), while one the
// webhook injected, which carries its annotation, is left as it is.
func TestASidecarNotInjectedIsRefused(t *testing.T) {
	cfg := DefaultConfig("ringside:test")
	injected, _, err := Inject(readPod(t, "live.pod.yaml"), "team-a", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if patch, skipped, err := Patch(injected, "team-a", cfg); err != nil || patch != nil || skipped != AlreadyInjected {
		t.Errorf("the injected pod: patch %s, skipped %q, err %v; want none, %q", patch, skipped, err, AlreadyInjected)
	}
	unmarked := injected.DeepCopy()
	delete(unmarked.Annotations, InjectedAnnotation)
	const want = "already has a ringside sidecar"
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		sidecar string
	}{
		{"the webhook's sidecar without its annotation", unmarked, SidecarName},
		{"an init container running ringside sidecar", withContainer(t, true, corev1.Container{
			Name: "membership", Image: "example.com/tools:1", Command: []string{"/usr/local/bin/ringside", "sidecar", "--job=llama"}, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		}), "membership"},
		{"the ringside image given the sidecar argument", withContainer(t, false, corev1.Container{
			Name: "agent", Image: "registry.example.com/ringside:0.1.0", Args: []string{"sidecar", "--job=llama"},
		}), "agent"},
		{"a shell that runs ringside sidecar", withContainer(t, false, corev1.Container{
			Name: "agent", Image: "example.com/tools:1", Command: []string{"/bin/sh", "-c", "exec ringside sidecar --job=llama"},
		}), "agent"},
	} {
		patch, _, err := Patch(tc.pod, "team-a", cfg)
		if err == nil || patch != nil || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), fmt.Sprintf("container %q", tc.sidecar)) || !strings.Contains(err.Error(), "remove it or the ringside.dev/job label") {
			t.Errorf("%s: patch %s, err %v; want refused, naming container %q and saying %q", tc.name, patch, err, tc.sidecar, want)
		}
	}
	other := withContainer(t, false, corev1.Container{Name: "logger", Image: "example.com/logger:1", Args: []string{"sidecar"}})
	if _, _, err := Inject(other, "team-a", cfg); err != nil {
		t.Errorf("a container of another image with the argument sidecar: %v, want injected", err)
	}
}

// withContainer is live.pod.yaml with c added to its init containers or
// its containers.
func withContainer(t *testing.T, init bool, c corev1.Container) *corev1.Pod {
	t.Helper()
	pod := readPod(t, "live.pod.yaml")
	if init {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
	} else {
		pod.Spec.Containers = append(pod.Spec.Containers, c)
	}
	return pod
}

// A pod whose settings conflict with the injection is refused with a
// message naming the conflict.
func TestConflictsAreRefused(t *testing.T) {
	cfg := DefaultConfig("ringside:test")
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.Pod)
		want   string
	}{
		{"empty job", func(p *corev1.Pod) { p.Labels[JobLabel] = "" }, `label ringside.dev/job is "", which cannot name the pod's ringside job: ringside refuses it as a job name: job is empty`},
		{"a job with a slash", func(p *corev1.Pod) { p.Labels[JobLabel] = "team/llama" }, `label ringside.dev/job is "team/llama", which cannot name the pod's ringside job: ringside refuses it as a job name: job "team/llama" contains '/' or whitespace: use letters, digits, '-', '_' and '.'; it is not a Kubernetes label value`},
		{"a job with a space", func(p *corev1.Pod) { p.Labels[JobLabel] = "llama 7b" }, `job "llama 7b" contains '/' or whitespace`},
		{"a job too long for a label", func(p *corev1.Pod) { p.Labels[JobLabel] = strings.Repeat("j", 64) }, "it is not a Kubernetes label value: must be no more than 63 bytes"},
		{"a job that starts with a dash", func(p *corev1.Pod) { p.Labels[JobLabel] = "-llama" }, `label ringside.dev/job is "-llama", which cannot name the pod's ringside job: ringside refuses it as a job name: job "-llama" must begin and end with a letter or digit; it is not a Kubernetes label value: a valid label must be`},
		{"a container named ringside", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "ringside", Image: "x"})
		}, `already has a container named "ringside"`},
		{"our volume name", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: RunVolume})
		}, `volume named "ringside-run"`},
		{"the gossip port", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 7946}}
		}, "declares port 7946"},
		{"the probe port", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9401}}
		}, "declares port 9401"},
		{"the socket directory", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "x", MountPath: "/var/run/ringside/"}}
		}, "already mounts /var/run/ringside"},
		{"restart mode without a command", func(p *corev1.Pod) {
			p.Annotations = map[string]string{ModeAnnotation: ModeRestart}
			p.Spec.Containers[0].Command = nil
		}, `container "trainer" has no command: restart mode runs it under ringside exec`},
		{"a mode we do not know", func(p *corev1.Pod) { p.Annotations = map[string]string{ModeAnnotation: "eager"} }, `ringside.dev/mode is "eager"`},
		{"slots not a number", func(p *corev1.Pod) { p.Annotations = map[string]string{SlotsAnnotation: "eight"} }, `ringside.dev/slots is "eight"`},
		{"slots zero", func(p *corev1.Pod) { p.Annotations = map[string]string{SlotsAnnotation: "0"} }, `ringside.dev/slots is "0"`},
		{"replicas not a number", func(p *corev1.Pod) { p.Annotations = map[string]string{ReplicasAnnotation: "four"} }, `ringside.dev/replicas is "four"`},
		{"replicas zero", func(p *corev1.Pod) { p.Annotations = map[string]string{ReplicasAnnotation: "0"} }, `ringside.dev/replicas is "0"`},
		{"rdma not a boolean", func(p *corev1.Pod) { p.Annotations = map[string]string{RDMAAnnotation: "ib"} }, `ringside.dev/rdma is "ib": want true or false`},
		{"an unknown trainer container", func(p *corev1.Pod) { p.Annotations = map[string]string{ContainerAnnotation: "main"} }, `names container "main"`},
		{"no containers", func(p *corev1.Pod) { p.Spec.Containers = nil }, "no containers"},
	} {
		pod := readPod(t, "live.pod.yaml")
		tc.mutate(pod)
		patch, _, err := Patch(pod, "team-a", cfg)
		if err == nil || patch != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: patch %s, err %v; want refused naming %q", tc.name, patch, err, tc.want)
		}
	}
	patch, _, err := Patch(readPod(t, "live.pod.yaml"), "team a", cfg)
	if want := `namespace "team a" contains '/' or whitespace`; err == nil || patch != nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a namespace the coordinator refuses: patch %s, err %v; want refused naming %q", patch, err, want)
	}
}

func TestBadConfigIsRefused(t *testing.T) {
	cfg := DefaultConfig("")
	cfg.ProbePort = cfg.GossipPort
	_, _, err := Inject(readPod(t, "live.pod.yaml"), "team-a", cfg)
	for _, want := range []string{"sidecar image is empty", "both 7946"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Inject with a bad config: %v, want it to say %q", err, want)
		}
	}
}

// Every injected container has a read-only root, no privilege escalation
// and every capability dropped; the sidecar holds NET_ADMIN as uid 0 only
// with socket reset, and the trainer gets IPC_LOCK only when it says it
// uses RDMA.
func TestInjectedContainersHoldOnlyTheCapabilitiesTheyNeed(t *testing.T) {
	for _, tc := range []struct {
		name               string
		socketReset, rdma  bool
		sidecarCaps        []corev1.Capability
		sidecarUID         int64
		trainerCaps        []corev1.Capability
		trainerAnnotations map[string]string
	}{
		{name: "socket reset", socketReset: true, sidecarCaps: []corev1.Capability{"NET_ADMIN"}, sidecarUID: 0},
		{name: "no socket reset", sidecarUID: NonRootUID},
		{name: "no socket reset, RDMA", rdma: true, sidecarUID: NonRootUID, trainerCaps: []corev1.Capability{"IPC_LOCK"}},
		{name: "RDMA off", sidecarUID: NonRootUID, trainerAnnotations: map[string]string{RDMAAnnotation: "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := secureConfig()
			cfg.SocketReset = tc.socketReset
			pod := readPod(t, "live.pod.yaml")
			pod.Annotations = tc.trainerAnnotations
			if tc.rdma {
				pod.Annotations = map[string]string{RDMAAnnotation: "true"}
			}
			out, _, err := Inject(pod, "team-a", cfg)
			if err != nil {
				t.Fatal(err)
			}
			sc := out.Spec.InitContainers[0].SecurityContext
			if !cmp.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !cmp.Equal(sc.Capabilities.Add, tc.sidecarCaps) ||
				*sc.RunAsUser != tc.sidecarUID || *sc.RunAsNonRoot != (tc.sidecarUID != 0) || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("sidecar security context %+v (caps %+v), want drop ALL, add %v, uid %d", sc, sc.Capabilities, tc.sidecarCaps, tc.sidecarUID)
			}
			// The kubelet writes the secrets' files as root: a non-root
			// sidecar must be able to read them.
			wantMode := int32(0o444)
			if tc.sidecarUID == 0 {
				wantMode = 0o400
			}
			secrets := 0
			for _, v := range out.Spec.Volumes {
				if v.Secret != nil {
					secrets++
					if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != wantMode {
						t.Errorf("secret volume %s has mode %v, want %o for a sidecar of uid %d", v.Name, v.Secret.DefaultMode, wantMode, tc.sidecarUID)
					}
				}
			}
			if secrets == 0 {
				t.Error("no secret volume: the test shows nothing")
			}
			var got []corev1.Capability
			if tsc := out.Spec.Containers[0].SecurityContext; tsc != nil && tsc.Capabilities != nil {
				got = tsc.Capabilities.Add
			}
			if !cmp.Equal(got, tc.trainerCaps) {
				t.Errorf("trainer capabilities added %v, want %v", got, tc.trainerCaps)
			}
		})
	}
}

// The sidecar takes the trainer's uid for the trainer's when the two
// differ: a root trainer (named, or an image's default) beside the
// non-root sidecar, or a non-root one beside the root sidecar of socket
// reset; the same uid needs no flag.
func TestTheSidecarAllowsATrainerOfAnotherUID(t *testing.T) {
	for _, tc := range []struct {
		name        string
		uid         *int64
		socketReset bool
		want        string // the flag, or "" for none
	}{
		{"root trainer by default, non-root sidecar", nil, false, "--api-allow-uids=0"},
		{"root trainer named, non-root sidecar", ptr.To[int64](0), false, "--api-allow-uids=0"},
		{"trainer of the sidecar's uid", ptr.To[int64](NonRootUID), false, ""},
		{"uid 1000 trainer, non-root sidecar", ptr.To[int64](1000), false, "--api-allow-uids=1000"},
		{"root trainer, root sidecar", nil, true, ""},
		{"uid 1000 trainer, root sidecar", ptr.To[int64](1000), true, "--api-allow-uids=1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := secureConfig()
			cfg.SocketReset = tc.socketReset
			pod := readPod(t, "live.pod.yaml")
			pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: tc.uid}
			out, _, err := Inject(pod, "team-a", cfg)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range out.Spec.InitContainers[0].Args {
				if strings.HasPrefix(a, "--api-allow-uids") {
					got = append(got, a)
				}
			}
			if want := []string{tc.want}; (tc.want == "" && len(got) > 0) || (tc.want != "" && !cmp.Equal(got, want)) {
				t.Errorf("sidecar args %v, want %q", got, tc.want)
			}
		})
	}
}

// With gang scheduling, a pod joins its job's pod group for both gang
// schedulers, unless it names a group of its own; without, it names none.
func TestGangSchedulingPutsThePodInItsJobsGroup(t *testing.T) {
	pod := func(labels, annotations map[string]string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "t", Image: "x", Command: []string{"x"}}}}}
		p.Labels = map[string]string{JobLabel: "bert"}
		for k, v := range labels {
			p.Labels[k] = v
		}
		p.Annotations = annotations
		return p
	}
	on := DefaultConfig("ringside:test")
	on.GangScheduling = true
	for _, tc := range []struct {
		name                  string
		cfg                   Config
		pod                   *corev1.Pod
		wantLabel, wantVolcan string
	}{
		{"off", DefaultConfig("ringside:test"), pod(nil, nil), "", ""},
		{"on", on, pod(nil, nil), "bert", "bert"},
		{"a group of the pod's own", on, pod(map[string]string{PodGroupLabel: "mine"}, map[string]string{VolcanoGroupAnnotation: "theirs"}), "mine", "theirs"},
	} {
		out, _, err := Inject(tc.pod, "ml", tc.cfg)
		if err != nil || out == nil {
			t.Fatalf("%s: not injected: %v", tc.name, err)
		}
		if got := out.Labels[PodGroupLabel]; got != tc.wantLabel {
			t.Errorf("%s: label %s = %q, want %q", tc.name, PodGroupLabel, got, tc.wantLabel)
		}
		if got := out.Annotations[VolcanoGroupAnnotation]; got != tc.wantVolcan {
			t.Errorf("%s: annotation %s = %q, want %q", tc.name, VolcanoGroupAnnotation, got, tc.wantVolcan)
		}
		if _, ok := tc.pod.Labels[PodGroupLabel]; ok && tc.name != "a group of the pod's own" {
			t.Errorf("%s: the input pod was changed", tc.name)
		}
	}
}
