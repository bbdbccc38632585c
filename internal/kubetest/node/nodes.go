package node

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The kubelet's heartbeat: the Lease every leaseRenew (its duration
// leaseSeconds, as the kubelet's defaults), the Ready condition every
// statusEvery, well inside the node lifecycle controller's 50 s grace.
const (
	leaseSeconds = 40
	leaseRenew   = 10 * time.Second
	statusEvery  = 20 * time.Second
)

// register creates (or takes over) the node and posts its status.
func (a *Agent) register(ctx context.Context, spec NodeSpec) error {
	labels := map[string]string{
		corev1.LabelHostname:   spec.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
	}
	if spec.Zone != "" {
		labels[corev1.LabelTopologyZone] = spec.Zone
	}
	if spec.Region != "" {
		labels[corev1.LabelTopologyRegion] = spec.Region
	}
	maps.Copy(labels, spec.Labels)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: spec.Taints},
	}
	nodes := a.client.CoreV1().Nodes()
	created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = nodes.Get(ctx, spec.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", spec.Name, err)
	}
	created.Status = a.nodeStatus(spec)
	if _, err := nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", spec.Name, err)
	}
	return nil
}

func (a *Agent) nodeStatus(spec NodeSpec) corev1.NodeStatus {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	maps.Copy(capacity, spec.Capacity)
	now := metav1.Now()
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "node agent is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastHeartbeatTime: now, LastTransitionTime: now},
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: a.cfg.Network.HostIP()},
			{Type: corev1.NodeHostName, Address: spec.Name},
		},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: runtime.GOARCH,
			ContainerRuntimeVersion: "kubetest://local-processes",
		},
	}
}

// heartbeat renews the node's Lease and refreshes its Ready condition
// until the agent stops.
func (a *Agent) heartbeat(ctx context.Context, name string) {
	lease := time.NewTicker(leaseRenew)
	defer lease.Stop()
	status := time.NewTicker(statusEvery)
	defer status.Stop()
	a.renewLease(ctx, name)
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.C:
			a.renewLease(ctx, name)
		case <-status.C:
			a.refreshReady(ctx, name)
		}
	}
}

func (a *Agent) renewLease(ctx context.Context, name string) {
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](leaseSeconds), RenewTime: &now,
			},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else if err == nil {
		l.Spec.RenewTime = &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil && ctx.Err() == nil {
		a.log.Warn("node agent: renewing the node lease", "node", name, "err", err)
	}
}

func (a *Agent) refreshReady(ctx context.Context, name string) {
	n, err := a.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		now := metav1.Now()
		for i := range n.Status.Conditions {
			n.Status.Conditions[i].LastHeartbeatTime = now
		}
		_, err = a.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	}
	if err != nil && ctx.Err() == nil {
		a.log.Warn("node agent: refreshing the node status", "node", name, "err", err)
	}
}
