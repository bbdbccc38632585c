package preempt

// Taint keys that announce a node's termination. Watch matches on the key
// alone: the value and the effect vary between versions of the tools that set
// them, and none of these keys is used for anything else.
const (
	// TaintClusterAutoscaler is set by the Kubernetes cluster autoscaler on a
	// node it has chosen to scale down, just before it drains and deletes it.
	TaintClusterAutoscaler = "ToBeDeletedByClusterAutoscaler"

	// TaintGKEImpendingTermination is set by GKE's graceful node shutdown on a
	// spot or preemptible VM that has received its preemption notice (about
	// 30 s before the VM stops).
	TaintGKEImpendingTermination = "cloud.google.com/impending-node-termination"

	// TaintAWSSpotInterruption is set by aws-node-termination-handler when EC2
	// sends a spot interruption notice (two minutes before the instance goes).
	TaintAWSSpotInterruption = "aws-node-termination-handler/spot-itn"

	// TaintAWSRebalanceRecommendation is set by aws-node-termination-handler
	// (when its rebalance tainting is on) when EC2 says a spot instance is at
	// elevated risk of interruption. The instance may run for a while yet, but
	// a drain costs an elastic job only one resize, far less than losing the
	// member without warning, so ringside moves early.
	TaintAWSRebalanceRecommendation = "aws-node-termination-handler/rebalance-recommendation"

	// TaintAWSScheduledMaintenance is set by aws-node-termination-handler for
	// an EC2 scheduled event (reboot, retirement) it is about to drain for.
	TaintAWSScheduledMaintenance = "aws-node-termination-handler/scheduled-maintenance"

	// TaintAWSASGLifecycleTermination is set by aws-node-termination-handler
	// when an Auto Scaling group terminates the instance (scale-in, instance
	// refresh, rebalancing).
	TaintAWSASGLifecycleTermination = "aws-node-termination-handler/asg-lifecycle-termination"

	// TaintKarpenterDisrupted is set by Karpenter (v1 API) on a node it is
	// disrupting: consolidation, drift, expiry or an interruption message.
	TaintKarpenterDisrupted = "karpenter.sh/disrupted"

	// TaintKarpenterDisruptionBeta is the same signal from Karpenter's v1beta1
	// releases (v0.32 to v0.37), with the value "disrupting".
	TaintKarpenterDisruptionBeta = "karpenter.sh/disruption"
)

// DefaultTaints returns the taint keys that Watch looks for by default: the
// Taint constants of this package, each of which is set only on a node that
// its owner is about to drain or delete. The caller owns the returned slice.
//
// Deliberately left out, because they do not mean the node is going away:
//
//   - node.kubernetes.io/unschedulable: set whenever the node is cordoned,
//     which admins also do to debug a node or to keep new pods off it. A real
//     drain after a cordon evicts the pod, and the sidecar then drains on
//     SIGTERM anyway. Append it (corev1.TaintNodeUnschedulable) where a cordon
//     always precedes a termination.
//   - DeletionCandidateOfClusterAutoscaler: a soft (PreferNoSchedule) mark on
//     a node the autoscaler may scale down later; it often changes its mind.
//   - node.kubernetes.io/not-ready and .../unreachable: usually transient, and
//     a sidecar on an unreachable node cannot usefully drain; gossip and the
//     member lease cover that case.
//   - node.kubernetes.io/out-of-service and
//     node.cloudprovider.kubernetes.io/shutdown: set after the node has
//     already stopped, when nothing on it runs any more.
func DefaultTaints() []string {
	return []string{
		TaintClusterAutoscaler,
		TaintGKEImpendingTermination,
		TaintAWSSpotInterruption,
		TaintAWSRebalanceRecommendation,
		TaintAWSScheduledMaintenance,
		TaintAWSASGLifecycleTermination,
		TaintKarpenterDisrupted,
		TaintKarpenterDisruptionBeta,
	}
}
