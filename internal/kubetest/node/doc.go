// Package node is the test cluster's node agent: it stands in for the
// kubelet and container runtime of each Node it registers, for what
// ringside depends on, with real processes and real kernel boundaries.
//
// What it does:
//   - registers Nodes with labels (kubernetes.io/hostname,
//     topology.kubernetes.io/zone and region, custom ones), capacity and
//     allocatable (cpu, memory, pods, extended resources such as
//     nvidia.com/gpu) and taints; keeps them Ready with a Lease in
//     kube-node-lease and a heartbeat on the Ready condition;
//   - watches the pods bound to each node (an informer with the field
//     selector spec.nodeName=<node>, as the kubelet does) and runs each
//     container's command as a local process: an image maps to a local
//     executable (Config.Images: ringside's image to the built ringside
//     binary, a trainer image to its command; an image mapped to "" is a
//     base image whose containers' commands come from the host's PATH);
//     command and args are $(VAR)-expanded like the kubelet's; env
//     includes the downward API (fieldRef metadata.name, namespace, uid,
//     labels and annotations, spec.nodeName, status.podIP, status.hostIP;
//     resourceFieldRef from the container's own resources),
//     secretKeyRef, configMapKeyRef and envFrom; workingDir is honored;
//   - puts each pod in its own network namespace (podnet: a veth pair to
//     a bridge, a real pod IP; the containers of a pod share it, with
//     loopback up) and each container in its own mount and UTS namespace,
//     where its volumes are bind-mounted on their mountPaths (emptyDir: a
//     directory per pod; secret, configMap, downwardAPI and projected,
//     with a service-account token bound to the pod: files written once
//     at the start; hostPath) and the hostname is the pod's name. A
//     mountPath missing on the host is created empty for the mount to
//     land on and removed at Stop;
//   - runs each container as the runAsUser/runAsGroup it names (else the
//     pod's, else root), with supplementalGroups and fsGroup, and with the
//     capability set a container runtime gives it: the default set of
//     containerd (AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL,
//     MKNOD, NET_BIND_SERVICE, NET_RAW, SETFCAP, SETGID, SETPCAP, SETUID,
//     SYS_CHROOT) less capabilities.drop plus capabilities.add, all of
//     them when privileged. As in Kubernetes, a non-root container holds
//     its set in the bounding set only: the exec clears its permitted set.
//     (util-linux's nsenter, unshare and setpriv do the entering and the
//     dropping.);
//   - follows the kubelet's lifecycle: native sidecars (init containers
//     with restartPolicy Always) start in order before the next init
//     container, which waits for their startupProbe when they declare one,
//     and stop last, in reverse order; ordinary init containers run to
//     completion in order; a container that exits is restarted as the
//     kubelet decides (by its own restartPolicy and restartPolicyRules
//     when it has them, else by the pod's restartPolicy; the pod
//     succeeds or fails once none will run again) with a doubling
//     back-off (200 ms to 5 s, shorter than the kubelet's 10 s to 5 min)
//     and restartCount counts it;
//     startup, readiness and liveness probes (exec, httpGet and tcpSocket
//     against the pod IP) gate started and ready and restart on failure;
//     a deletion sends SIGTERM to the regular containers, then to the
//     sidecars, SIGKILL to all when the grace period ends, and then
//     deletes the object (grace 0), so controllers go on;
//   - posts the status back: phase, podIP(s), hostIP(s), the conditions
//     PodScheduled, PodReadyToStartContainers, Initialized,
//     ContainersReady and Ready, container and init container statuses
//     (waiting, running or terminated with exit code and reason, last
//     termination, ready, started, restartCount);
//   - leaves a pod it cannot run (an unmapped image, an unknown command,
//     an unsupported volume type or gRPC probe, runAsNonRoot as root, a
//     restartPolicyRules action RestartAllContainers)
//     Pending with a Warning Event (reason Failed) saying why; a volume
//     whose Secret or ConfigMap is missing is retried (FailedMount);
//   - appends each container's output to a log file under Config.Dir, and
//     lets a test kill a container (Kill), find its process (PIDs) and
//     read its output (Log).
//
// What it does not emulate: images and their filesystems (a container
// sees the host's filesystem, its volumes mounted over it), kube-proxy and
// Service ClusterIPs (pods get KUBERNETES_SERVICE_HOST/PORT of the API
// server itself; other Services are not routed), cluster DNS, cgroups and
// resource limits, PID and IPC namespaces, seccomp and AppArmor, image
// pulls, lifecycle hooks (postStart, preStop), ephemeral containers,
// exec/attach/port-forward/logs through the API server, volume refreshes
// and pod resizes.
package node
