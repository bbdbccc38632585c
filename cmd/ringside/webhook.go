package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/ringside/ringside/autoscale"

	"github.com/ringside/ringside/webhook"
)

func newWebhookCmd() *cobra.Command {
	cfg := webhook.DefaultConfig("")
	srv := webhook.ServerConfig{Addr: ":9443"}
	h := &webhook.Handler{}
	var cpu, memory, memoryLimit, pullPolicy, kubeconfig string
	var measured bool
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Run the admission webhook that injects the sidecar into worker pods",
		Long: `webhook is a mutating admission webhook (AdmissionReview v1, POST /inject over
TLS) that adds the ringside sidecar to every new pod labelled
ringside.dev/job=<job> in a namespace labelled ringside.dev/injection=enabled
(the MutatingWebhookConfiguration's selectors; the Helm chart installs them).

The sidecar runs as a native sidecar (an init container with restartPolicy
Always: it starts before the trainer and stops after it), with the shared
emptyDir for the API socket at /var/run/ringside, the downward-API
environment, probes on its --probe-addr, only the NET_ADMIN capability, and
a termination grace period that leaves its drain room: --drain-grace, or
with --measured-drain-grace the grace the controller measured from the
job's drains when that is longer (an ElasticScaler's
status.drain.gracePeriodSeconds), plus 15 s, and never less than the pod
asks for. The trainer
container gets RINGSIDE_SOCKET. Pod annotations shape it:

  ringside.dev/inject: "false"     leave this pod alone
  ringside.dev/mode: restart       run the trainer's command under ringside exec
  ringside.dev/mode: launcher      the trainers never call the sidecar (Horovod:
                                   horovodrun with ringside discover-hosts);
                                   the sidecar does not await them
  ringside.dev/slots: "8"          ranks in the pod (default: its nvidia.com/gpu limit)
  ringside.dev/container: trainer  the trainer container (default: the first)

With --gang-scheduling, each pod also joins its job's pod group (the label
scheduling.x-k8s.io/pod-group for scheduler-plugins' coscheduling, the
annotation scheduling.k8s.io/group-name for Volcano, both the job's name,
unless the pod names a group of its own).

A pod whose settings conflict (a volume, port or container name the sidecar
needs, restart mode without a command, a job label that cannot name a job)
is denied with a message saying which, or admitted untouched with
--allow-on-error. The serving certificate is read again when its files
change.`,
		Example: `  ringside webhook --sidecar-image ringside:0.1.0 \
    --tls-cert-file /tls/tls.crt --tls-key-file /tls/tls.key \
    --etcd-endpoints https://ringside-etcd:2379 --etcd-tls-secret ringside-etcd-client \
    --gossip-key-secret ringside-gossip --skip-namespace ringside-system`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if srv.CertFile == "" || srv.KeyFile == "" {
				return errors.New("--tls-cert-file and --tls-key-file are required: the API server calls webhooks over TLS only")
			}
			switch p := corev1.PullPolicy(pullPolicy); p {
			case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
				cfg.ImagePullPolicy = p
			default:
				return fmt.Errorf("--sidecar-image-pull-policy %q: want Always, IfNotPresent or Never", pullPolicy)
			}
			res, err := sidecarResources(cpu, memory, memoryLimit)
			if err != nil {
				return err
			}
			cfg.Resources = res
			if err := cfg.Validate(); err != nil {
				return err
			}
			h.Config, h.Log = cfg, slog.Default()
			if !measured {
				return webhook.Serve(cmd.Context(), srv, h, slog.Default())
			}
			return serveMeasured(cmd.Context(), srv, h, kubeconfig)
		},
	}
	f := cmd.Flags()
	f.StringVar(&srv.Addr, "addr", srv.Addr, "address the webhook serves on (TLS)")
	f.StringVar(&srv.CertFile, "tls-cert-file", "", "serving certificate (PEM), re-read when it changes (required)")
	f.StringVar(&srv.KeyFile, "tls-key-file", "", "key of --tls-cert-file (required)")
	f.StringVar(&srv.MetricsAddr, "metrics-addr", ":9402", "address of /metrics, /healthz and /readyz in plain HTTP (empty: only on --addr)")
	f.StringVar(&cfg.Image, "sidecar-image", "", "image of the injected sidecar (required)")
	f.StringVar(&pullPolicy, "sidecar-image-pull-policy", string(cfg.ImagePullPolicy), "pull policy of the sidecar image: Always, IfNotPresent or Never")
	f.StringSliceVar(&cfg.EtcdEndpoints, "etcd-endpoints", cfg.EtcdEndpoints, "etcd client URLs the sidecars use, comma-separated")
	f.StringVar(&cfg.EtcdTLSSecret, "etcd-tls-secret", "", "Secret (in the pod's namespace) with ca.crt, tls.crt and tls.key for etcd's mTLS")
	f.StringVar(&cfg.GossipKeySecret, "gossip-key-secret", "", "Secret (in the pod's namespace) holding the gossip key under gossip-key; without one the sidecars gossip in plain text (--insecure-trusted-network)")
	f.Int32Var(&cfg.GossipPort, "gossip-port", cfg.GossipPort, "the sidecar's gossip port in the pod")
	f.Int32Var(&cfg.ProbePort, "probe-port", cfg.ProbePort, "the sidecar's probe and metrics port in the pod")
	f.DurationVar(&cfg.Grace, "drain-grace", cfg.Grace, "longest the sidecar's drain waits; pods get at least this + 15s of termination grace")
	f.StringVar(&cpu, "sidecar-cpu-request", "50m", "the sidecar's CPU request")
	f.StringVar(&memory, "sidecar-memory-request", "64Mi", "the sidecar's memory request")
	f.StringVar(&memoryLimit, "sidecar-memory-limit", "256Mi", "the sidecar's memory limit (empty: none)")
	f.BoolVar(&cfg.SocketReset, "socket-reset", cfg.SocketReset, "give the sidecar NET_ADMIN (it then runs as uid 0) to destroy the trainer's sockets to a dead peer; false: the sidecar runs as a non-root user with no capability, and a silent peer costs the collective's timeout")
	f.StringVar(&cfg.PreemptionNoticeURL, "preemption-notice-url", "", "instance metadata URL the sidecars ask for a preemption notice (their --preemption-notice-url); empty: taints and SIGTERM only")
	f.BoolVar(&cfg.GangScheduling, "gang-scheduling", false, "put each pod in its job's pod group (label scheduling.x-k8s.io/pod-group and annotation scheduling.k8s.io/group-name, named as the job) for a gang scheduler; the controller keeps the PodGroup with minMember the ElasticScaler's minReplicas")
	f.BoolVar(&measured, "measured-drain-grace", false, "give a job's new workers the drain grace its ElasticScaler measured (status.drain.gracePeriodSeconds) when longer than --drain-grace; needs list and watch of elasticscalers.ringside.dev")
	f.StringVar(&kubeconfig, "kubeconfig", "", "with --measured-drain-grace: kubeconfig file (default: in-cluster credentials, then $KUBECONFIG or ~/.kube/config)")
	f.BoolVar(&h.AllowOnError, "allow-on-error", false, "admit a pod that cannot be injected untouched (with a warning) instead of denying it")
	f.StringSliceVar(&h.SkipNamespaces, "skip-namespace", nil, "namespaces never injected (ringside's own), comma-separated")
	return cmd
}

// serveMeasured serves h with the drain graces of the ElasticScalers that
// the API server of kubeconfig holds, once their cache has synced.
func serveMeasured(ctx context.Context, srv webhook.ServerConfig, h *webhook.Handler, kubeconfig string) error {
	restCfg, err := kubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	restCfg.UserAgent = "ringside-webhook"
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("--measured-drain-grace: %w", err)
	}
	klog.SetSlogLogger(slog.Default())
	graces := autoscale.NewDrainGraces(dyn, "")
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { graces.Run(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), graces.HasSynced) {
		return ctx.Err()
	}
	h.Measured = graces
	return webhook.Serve(ctx, srv, h, slog.Default())
}

func sidecarResources(cpu, memory, memoryLimit string) (corev1.ResourceRequirements, error) {
	var res corev1.ResourceRequirements
	parse := func(flag, v string, into *corev1.ResourceList, name corev1.ResourceName) error {
		if v == "" {
			return nil
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("%s %q: want a Kubernetes quantity such as 50m or 64Mi", flag, v)
		}
		if *into == nil {
			*into = corev1.ResourceList{}
		}
		(*into)[name] = q
		return nil
	}
	for _, p := range []struct {
		flag, v string
		into    *corev1.ResourceList
		name    corev1.ResourceName
	}{
		{"--sidecar-cpu-request", cpu, &res.Requests, corev1.ResourceCPU},
		{"--sidecar-memory-request", memory, &res.Requests, corev1.ResourceMemory},
		{"--sidecar-memory-limit", memoryLimit, &res.Limits, corev1.ResourceMemory},
	} {
		if err := parse(p.flag, p.v, p.into, p.name); err != nil {
			return res, err
		}
	}
	return res, nil
}
