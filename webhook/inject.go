package webhook

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/trainer/api"
)

// The pod's labels and annotations that ask for and shape the injection.
const (
	// JobLabel names the ringside job the pod is a worker of; a pod
	// without it is not injected.
	JobLabel = "ringside.dev/job"
	// InjectAnnotation "false" opts a pod out.
	InjectAnnotation = "ringside.dev/inject"
	// ModeAnnotation is live (the default: the trainer follows the
	// generations itself through the Python client), restart (its
	// command runs under `ringside exec`, restarted on every generation)
	// or launcher (a launcher such as horovodrun starts the training
	// processes from the membership `ringside discover-hosts` prints; the
	// trainers never call the sidecar).
	ModeAnnotation = "ringside.dev/mode"
	// SlotsAnnotation is the number of trainer processes (ranks) in the
	// pod; by default the trainer container's nvidia.com/gpu limit, or 1.
	SlotsAnnotation = "ringside.dev/slots"
	// ContainerAnnotation names the trainer container; by default the
	// pod's first container.
	ContainerAnnotation = "ringside.dev/container"
	// ReplicasAnnotation is the number of worker pods the job starts with:
	// the owning workload's replicas (or the ElasticScaler's
	// minReplicas). Its first generation waits for them, replicas times
	// slots, for the sidecar's start window (--expected-size). The webhook
	// reads it from the pod because it has no access to the API server to
	// read the owner's replicas: set it in the workload's pod template.
	ReplicasAnnotation = "ringside.dev/replicas"
	// RDMAAnnotation "true" says the trainer uses RDMA (InfiniBand or
	// RoCE, as netopt sets NCCL up for): the trainer container gets
	// IPC_LOCK, the one capability RDMA needs (registering memory with
	// the NIC pins it, past the default locked-memory limit).
	RDMAAnnotation = "ringside.dev/rdma"
	// InjectedAnnotation marks an injected pod with the injector's
	// version: a pod that has it is never injected again.
	InjectedAnnotation = "ringside.dev/injected"
	// NamespaceLabel "enabled" on a namespace opts its pods in (the
	// webhook's namespaceSelector).
	NamespaceLabel = "ringside.dev/injection"
)

// Modes of ModeAnnotation.
const (
	ModeLive    = "live"
	ModeRestart = "restart"
	// ModeLauncher is for jobs whose trainers do not talk to the sidecar:
	// the sidecar joins the ring at once instead of awaiting a trainer
	// that will never attach, and the trainer's command is left as it is
	// (the launcher, not `ringside exec`, starts one process per slot).
	ModeLauncher = "launcher"
)

// Names and paths the injection adds to a pod.
const (
	SidecarName    = "ringside"
	RunVolume      = "ringside-run"
	EtcdTLSVolume  = "ringside-etcd-tls"
	GossipVolume   = "ringside-gossip-key"
	RunDir         = api.RunDir
	SocketPath     = api.DefaultSocket
	BinaryPath     = RunDir + "/bin/ringside"
	NCCLConfPath   = RunDir + "/nccl.conf"
	etcdTLSDir     = "/etc/ringside/etcd"
	gossipDir      = "/etc/ringside/gossip"
	gossipKeyFile  = "gossip-key"
	gpuResource    = "nvidia.com/gpu"
	maxSlots       = 1024
	maxReplicas    = 65536
	graceMarginSec = 15
)

// Config is the job-independent part of what is injected: the webhook's
// settings.
type Config struct {
	// Image is the sidecar's image, with ImagePullPolicy.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// EtcdEndpoints are the etcd client URLs the sidecars use.
	EtcdEndpoints []string
	// EtcdTLSSecret names a Secret in the pod's namespace holding ca.crt,
	// tls.crt and tls.key for etcd's mTLS; empty: no client certificate.
	EtcdTLSSecret string
	// GossipKeySecret names a Secret in the pod's namespace with the
	// gossip key under "gossip-key"; empty: gossip in plain text, for a
	// network where every host is trusted.
	GossipKeySecret string
	// GossipPort and ProbePort are the sidecar's ports in the pod.
	GossipPort, ProbePort int32
	// Grace is the longest the sidecar's drain waits; the pod's
	// termination grace period is raised to leave room for it.
	Grace time.Duration
	// Resources are the sidecar's requests and limits.
	Resources corev1.ResourceRequirements
	// Version is written into InjectedAnnotation.
	Version string
	// SocketReset gives the sidecar NET_ADMIN to destroy the trainer's
	// sockets to a dead peer, so a collective blocked on a silent peer
	// fails at once instead of at its timeout, even in a trainer that does
	// not abort its own (a Horovod job's). A pod cannot grant a non-root
	// process an effective capability, so the sidecar then runs as uid 0.
	// Off (the default), it runs as NonRootUID with no capability: the
	// Python client's live mode aborts its own group on a new generation
	// (NCCL's abort, a shutdown of gloo's sockets), and restart mode
	// restarts the processes.
	SocketReset bool
	// PreemptionNoticeURL, when set, is the instance metadata URL whose
	// answer starts the sidecar's drain (its --preemption-notice-url).
	PreemptionNoticeURL string
	// GangScheduling puts each pod in its job's pod group, named as the
	// job, for a gang scheduler: the label PodGroupLabel (scheduler-plugins'
	// coscheduling) and the annotation VolcanoGroupAnnotation (Volcano).
	// The controller keeps the PodGroup, with minMember the ElasticScaler's
	// minReplicas. Off where no ElasticScaler keeps one: Volcano holds a pod
	// whose group does not exist.
	GangScheduling bool
}

// The pod group's label and annotation (GangScheduling).
const (
	PodGroupLabel          = "scheduling.x-k8s.io/pod-group"
	VolcanoGroupAnnotation = "scheduling.k8s.io/group-name"
)

// NonRootUID is the sidecar's uid without SocketReset: the image's.
const NonRootUID = 65532

// DefaultConfig is the webhook's default settings for image.
func DefaultConfig(image string) Config {
	return Config{
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		EtcdEndpoints:   []string{"http://ringside-etcd:2379"},
		GossipPort:      7946,
		ProbePort:       9401,
		Grace:           25 * time.Second,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		Version: "v1",
	}
}

// Validate reports what is wrong with c.
func (c Config) Validate() error {
	var errs []error
	if c.Image == "" {
		errs = append(errs, errors.New("sidecar image is empty"))
	}
	if len(c.EtcdEndpoints) == 0 {
		errs = append(errs, errors.New("no etcd endpoints"))
	}
	for name, p := range map[string]int32{"gossip": c.GossipPort, "probe": c.ProbePort} {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s port %d is not a port", name, p))
		}
	}
	if c.GossipPort == c.ProbePort {
		errs = append(errs, fmt.Errorf("the gossip and probe ports are both %d", c.GossipPort))
	}
	if c.Grace < time.Second {
		errs = append(errs, fmt.Errorf("drain grace %s is shorter than 1s", c.Grace))
	}
	return errors.Join(errs...)
}

// Skipped is why a pod was left as it is.
type Skipped string

// Reasons to leave a pod untouched.
const (
	NotOptedIn      Skipped = "the pod has no " + JobLabel + " label"
	OptedOut        Skipped = "the pod has " + InjectAnnotation + `: "false"`
	AlreadyInjected Skipped = "the pod is injected already"
)

// Inject returns pod with the sidecar added for namespace (the pod's
// namespace; at admission a new pod's metadata may not carry it), or the
// reason it is left alone. pod is not modified. An error says why the pod
// cannot be injected (conflicting settings): the admission denies it.
func Inject(pod *corev1.Pod, namespace string, cfg Config) (*corev1.Pod, Skipped, error) {
	job, ok := pod.Labels[JobLabel]
	switch {
	case !ok:
		return nil, NotOptedIn, nil
	case pod.Annotations[InjectAnnotation] == "false":
		return nil, OptedOut, nil
	case pod.Annotations[InjectedAnnotation] != "":
		return nil, AlreadyInjected, nil
	}
	if name, ok := sidecarOf(pod); ok {
		return nil, "", fmt.Errorf("the pod already has a ringside sidecar (container %q) that the webhook did not inject (the pod has no %s annotation), and a second one would join the job as another member: remove it or the %s label", name, InjectedAnnotation, JobLabel)
	}
	if err := cfg.Validate(); err != nil {
		return nil, "", fmt.Errorf("injector settings: %w", err)
	}
	s, err := settingsOf(pod, job, namespace)
	if err != nil {
		return nil, "", err
	}
	if err := checkConflicts(pod, s, cfg); err != nil {
		return nil, "", err
	}
	out := pod.DeepCopy()
	out.Annotations = maps.Clone(out.Annotations)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[InjectedAnnotation] = cfg.Version
	if cfg.GangScheduling {
		out.Labels = maps.Clone(out.Labels)
		setDefault(out.Labels, PodGroupLabel, job)
		setDefault(out.Annotations, VolcanoGroupAnnotation, job)
	}
	out.Spec.Volumes = append(out.Spec.Volumes, volumes(cfg)...)
	out.Spec.InitContainers = append([]corev1.Container{sidecar(s, cfg)}, out.Spec.InitContainers...)
	trainer := &out.Spec.Containers[s.trainer]
	trainer.Env = append(trainer.Env,
		corev1.EnvVar{Name: "RINGSIDE_SOCKET", Value: SocketPath},
		corev1.EnvVar{Name: "NCCL_CONF_FILE", Value: NCCLConfPath})
	if s.slots > 1 {
		trainer.Env = append(trainer.Env, corev1.EnvVar{Name: "RINGSIDE_SLOTS", Value: strconv.Itoa(s.slots)})
	}
	trainer.VolumeMounts = append(trainer.VolumeMounts, corev1.VolumeMount{Name: RunVolume, MountPath: RunDir})
	if s.rdma {
		addCapability(trainer, "IPC_LOCK")
	}
	if s.wrap {
		launch := []string{BinaryPath, "exec", "--socket", SocketPath}
		if s.mode == ModeLive {
			launch = append(launch, "--live", "--slots", strconv.Itoa(s.slots))
		}
		trainer.Command = append(append(launch, "--"), append(trainer.Command, trainer.Args...)...)
		trainer.Args = nil
	}
	grace := int64(cfg.Grace/time.Second) + graceMarginSec
	if cur := out.Spec.TerminationGracePeriodSeconds; cur == nil || *cur < grace {
		out.Spec.TerminationGracePeriodSeconds = ptr.To(grace)
	}
	return out, "", nil
}

// setDefault sets m[key] to value unless the pod set it: a pod the user
// put in a group of their own stays in it.
func setDefault(m map[string]string, key, value string) {
	if _, ok := m[key]; !ok {
		m[key] = value
	}
}

// settings is what the pod's labels and annotations ask for.
type settings struct {
	job, namespace string
	mode           string
	slots          int
	replicas       int  // 0: not given
	trainer        int  // index in Containers
	wrap           bool // the trainer's command runs under ringside exec
	rdma           bool // the trainer gets IPC_LOCK
	uid            *int64
}

func settingsOf(pod *corev1.Pod, job, namespace string) (settings, error) {
	s := settings{job: job, namespace: namespace, mode: ModeLive}
	var errs []error
	if err := checkJobLabel(job); err != nil {
		errs = append(errs, err)
	}
	if namespace == "" {
		errs = append(errs, errors.New("the pod's namespace is unknown"))
	} else if err := record.ValidateName("namespace", namespace); err != nil {
		errs = append(errs, fmt.Errorf("the pod's namespace cannot name a ringside job's: %w", err))
	}
	if len(pod.Spec.Containers) == 0 {
		return s, errors.New("the pod has no containers")
	}
	if m, ok := pod.Annotations[ModeAnnotation]; ok {
		if m != ModeLive && m != ModeRestart && m != ModeLauncher {
			errs = append(errs, fmt.Errorf("annotation %s is %q: want %s, %s or %s", ModeAnnotation, m, ModeLive, ModeRestart, ModeLauncher))
		}
		s.mode = m
	}
	s.trainer = 0
	if name, ok := pod.Annotations[ContainerAnnotation]; ok {
		s.trainer = slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
		if s.trainer < 0 {
			return s, errors.Join(append(errs, fmt.Errorf("annotation %s names container %q, which the pod does not have", ContainerAnnotation, name))...)
		}
	}
	trainer := pod.Spec.Containers[s.trainer]
	s.slots = 1
	if gpus, ok := trainer.Resources.Limits[gpuResource]; ok && gpus.Value() > 1 {
		s.slots = int(gpus.Value())
	}
	if v, ok := pod.Annotations[SlotsAnnotation]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxSlots {
			errs = append(errs, fmt.Errorf("annotation %s is %q: want a whole number from 1 to %d", SlotsAnnotation, v, maxSlots))
		}
		s.slots = n
	}
	if v, ok := pod.Annotations[ReplicasAnnotation]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxReplicas {
			errs = append(errs, fmt.Errorf("annotation %s is %q: want the worker pods the job starts with, a whole number from 1 to %d", ReplicasAnnotation, v, maxReplicas))
		}
		s.replicas = n
	}
	if v, ok := pod.Annotations[RDMAAnnotation]; ok {
		on, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("annotation %s is %q: want true or false", RDMAAnnotation, v))
		}
		s.rdma = on
	}
	s.wrap = s.mode == ModeRestart || (s.mode == ModeLive && s.slots > 1)
	if s.wrap && len(trainer.Command) == 0 {
		errs = append(errs, fmt.Errorf("container %q has no command: %s runs it under ringside exec, so give the command in the pod spec (the image's entrypoint is not known here)", trainer.Name, launchWhy(s)))
	}
	s.uid = trainerUID(pod, trainer)
	return s, errors.Join(errs...)
}

// checkJobLabel refuses a job label the sidecar's coordinator would not
// take as a job name (its key prefix), or that is no Kubernetes label
// value (the API server would refuse the pod after the webhook, with a
// message that does not say what ringside needs).
func checkJobLabel(job string) error {
	var why []string
	if err := record.ValidateName("job", job); err != nil {
		why = append(why, "ringside refuses it as a job name: "+err.Error())
	}
	for _, msg := range validation.IsValidLabelValue(job) {
		why = append(why, "it is not a Kubernetes label value: "+msg)
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("label %s is %q, which cannot name the pod's ringside job: %s", JobLabel, job, strings.Join(why, "; "))
}

func launchWhy(s settings) string {
	if s.mode == ModeRestart {
		return "restart mode"
	}
	return fmt.Sprintf("live mode with %d slots", s.slots)
}

func trainerUID(pod *corev1.Pod, c corev1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.RunAsUser
	}
	return nil
}

// sidecarOf names a container of pod that runs `ringside sidecar`: the
// ringside image's entrypoint given the sidecar argument (as the webhook
// writes it), or a command line that holds ringside then sidecar, also
// inside a shell's script.
func sidecarOf(pod *corev1.Pod) (string, bool) {
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if len(c.Command) == 0 && len(c.Args) > 0 && c.Args[0] == "sidecar" &&
			(c.Name == SidecarName || strings.Contains(c.Image, "ringside")) {
			return c.Name, true
		}
		var words []string
		for _, arg := range slices.Concat(c.Command, c.Args) {
			words = append(words, strings.Fields(arg)...)
		}
		for i := 1; i < len(words); i++ {
			if words[i] == "sidecar" && path.Base(words[i-1]) == "ringside" {
				return c.Name, true
			}
		}
	}
	return "", false
}

// checkConflicts refuses a pod whose names, mounts or ports the
// injection would take.
func checkConflicts(pod *corev1.Pod, s settings, cfg Config) error {
	var errs []error
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if c.Name == SidecarName {
			errs = append(errs, fmt.Errorf("the pod already has a container named %q", SidecarName))
		}
		for _, p := range c.Ports {
			if p.ContainerPort == cfg.GossipPort || p.ContainerPort == cfg.ProbePort {
				errs = append(errs, fmt.Errorf("container %q declares port %d, which the ringside sidecar uses (gossip %d, probes %d)", c.Name, p.ContainerPort, cfg.GossipPort, cfg.ProbePort))
			}
		}
	}
	for _, v := range pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, "ringside-") {
			errs = append(errs, fmt.Errorf("the pod already has a volume named %q; names starting with ringside- are the sidecar's", v.Name))
		}
	}
	for _, m := range pod.Spec.Containers[s.trainer].VolumeMounts {
		if path.Clean(m.MountPath) == RunDir {
			errs = append(errs, fmt.Errorf("container %q already mounts %s, where the sidecar's socket goes", pod.Spec.Containers[s.trainer].Name, RunDir))
		}
	}
	return errors.Join(errs...)
}

// volumes are the pod's volumes for the sidecar. Its secrets are mounted
// into the sidecar's container alone. The kubelet writes their files as
// root: the root sidecar of socket reset reads them at 0400, the non-root
// one needs them readable by others (0444), as a pod cannot hand their
// ownership to one container's user.
func volumes(cfg Config) []corev1.Volume {
	vs := []corev1.Volume{{Name: RunVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	mode := int32(0o444)
	if sidecarUID(cfg.SocketReset) == 0 {
		mode = 0o400
	}
	secret := func(volume, name string) corev1.Volume {
		return corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name, DefaultMode: ptr.To(mode)}}}
	}
	if cfg.EtcdTLSSecret != "" {
		vs = append(vs, secret(EtcdTLSVolume, cfg.EtcdTLSSecret))
	}
	if cfg.GossipKeySecret != "" {
		vs = append(vs, secret(GossipVolume, cfg.GossipKeySecret))
	}
	return vs
}

// sidecar is the native sidecar container.
func sidecar(s settings, cfg Config) corev1.Container {
	// The job and etcd are in the environment, not in flags: `ringside
	// status` run in the container (kubectl exec) reads the same
	// variables the sidecar does, and finds the job without a flag.
	args := []string{"sidecar",
		"--slots=" + strconv.Itoa(s.slots),
		"--socket=" + SocketPath,
		"--gossip-port=" + strconv.Itoa(int(cfg.GossipPort)),
		"--probe-addr=:" + strconv.Itoa(int(cfg.ProbePort)),
		"--grace=" + cfg.Grace.String(),
		"--nccl-conf-file=" + NCCLConfPath,
	}
	jobEnv := []corev1.EnvVar{
		{Name: "RINGSIDE_JOB", Value: s.job},
		{Name: "RINGSIDE_NAMESPACE", Value: s.namespace},
		{Name: "RINGSIDE_ETCD_ENDPOINTS", Value: strings.Join(cfg.EtcdEndpoints, ",")},
	}
	// A live trainer attaches once it has started (imported torch, loaded
	// its data), and the others need not wait for it meanwhile. A
	// launcher's workers never attach: awaiting them would keep every
	// member but the launcher's out of the ring for good.
	if s.mode == ModeLive {
		args = append(args, "--await-trainer")
	}
	if s.wrap {
		args = append(args, "--install-to="+BinaryPath)
	}
	if cfg.PreemptionNoticeURL != "" {
		args = append(args, "--preemption-notice-url="+cfg.PreemptionNoticeURL)
	}
	if uid, ok := trainerToAllow(s.uid, cfg.SocketReset); ok {
		args = append(args, "--api-allow-uids="+strconv.FormatInt(uid, 10))
	}
	mounts := []corev1.VolumeMount{{Name: RunVolume, MountPath: RunDir}}
	if cfg.EtcdTLSSecret != "" {
		jobEnv = append(jobEnv, corev1.EnvVar{Name: "RINGSIDE_ETCD_CA", Value: etcdTLSDir + "/ca.crt"},
			corev1.EnvVar{Name: "RINGSIDE_ETCD_CERT", Value: etcdTLSDir + "/tls.crt"}, corev1.EnvVar{Name: "RINGSIDE_ETCD_KEY", Value: etcdTLSDir + "/tls.key"})
		mounts = append(mounts, corev1.VolumeMount{Name: EtcdTLSVolume, MountPath: etcdTLSDir, ReadOnly: true})
	}
	if cfg.GossipKeySecret != "" {
		args = append(args, "--gossip-key-file="+gossipDir+"/"+gossipKeyFile)
		mounts = append(mounts, corev1.VolumeMount{Name: GossipVolume, MountPath: gossipDir, ReadOnly: true})
	} else {
		args = append(args, "--insecure-trusted-network")
	}
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(cfg.ProbePort)}},
			PeriodSeconds:    period,
			FailureThreshold: failures,
			TimeoutSeconds:   1,
		}
	}
	env := append([]corev1.EnvVar{
		field("POD_NAME", "metadata.name"),
		field("POD_NAMESPACE", "metadata.namespace"),
		field("NODE_NAME", "spec.nodeName"),
		field("POD_IP", "status.podIP"),
	}, jobEnv...)
	if s.replicas > 0 {
		env = append(env, corev1.EnvVar{Name: "RINGSIDE_EXPECTED_SIZE", Value: strconv.Itoa(s.replicas * s.slots)})
	}
	return corev1.Container{
		Name:            SidecarName,
		Image:           cfg.Image,
		ImagePullPolicy: cfg.ImagePullPolicy,
		Args:            args,
		RestartPolicy:   ptr.To(corev1.ContainerRestartPolicyAlways),
		Env:             env,
		Ports: []corev1.ContainerPort{
			{Name: "rs-gossip", ContainerPort: cfg.GossipPort, Protocol: corev1.ProtocolTCP},
			{Name: "rs-gossip-udp", ContainerPort: cfg.GossipPort, Protocol: corev1.ProtocolUDP},
			{Name: "rs-metrics", ContainerPort: cfg.ProbePort, Protocol: corev1.ProtocolTCP},
		},
		// The trainer starts once the sidecar serves; the pod is ready
		// once its member is in a generation.
		StartupProbe:             probe("/healthz", 1, 60),
		ReadinessProbe:           probe("/readyz", 2, 1),
		LivenessProbe:            probe("/healthz", 10, 3),
		Resources:                cfg.Resources,
		VolumeMounts:             mounts,
		SecurityContext:          sidecarSecurity(cfg.SocketReset),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// sidecarUID is the sidecar's uid: 0 with socketReset (a pod cannot grant
// a non-root process NET_ADMIN), else NonRootUID.
func sidecarUID(socketReset bool) int64 {
	if socketReset {
		return 0
	}
	return NonRootUID
}

// trainerToAllow returns the trainer's uid when it differs from the
// sidecar's, which then takes it for the trainer's: the one the pod names
// (uid, nil when it names none), or, for an unnamed one, root, the user of
// most training images (the image's user is not known at admission; a
// trainer image of another user names it in runAsUser).
func trainerToAllow(uid *int64, socketReset bool) (int64, bool) {
	trainer := ptr.Deref(uid, 0)
	return trainer, trainer != sidecarUID(socketReset)
}

// sidecarSecurity is the sidecar's security context: a read-only root, no
// privilege escalation, every capability dropped and a non-root uid;
// with socketReset, NET_ADMIN (destroying the trainer's sockets to a dead
// peer is all the sidecar needs of the node), which a non-root process
// would hold only as an ambient capability, which pods cannot grant: so
// then uid 0, with that one capability and no way to gain more.
func sidecarSecurity(socketReset bool) *corev1.SecurityContext {
	uid := sidecarUID(socketReset)
	sc := &corev1.SecurityContext{
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		RunAsUser:                ptr.To(uid),
		RunAsNonRoot:             ptr.To(uid != 0),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if socketReset {
		sc.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
	}
	return sc
}

// addCapability adds capability to c's, unless c has it already.
func addCapability(c *corev1.Container, capability corev1.Capability) {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	if c.SecurityContext.Capabilities == nil {
		c.SecurityContext.Capabilities = &corev1.Capabilities{}
	}
	if caps := c.SecurityContext.Capabilities; !slices.Contains(caps.Add, capability) {
		caps.Add = append(caps.Add, capability)
	}
}
