package autoscale

import (
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// phaseOf sums status up in one word for `kubectl get es`: the first of
// the phases that holds, from a queue's hold (nothing runs, by design),
// then the one that needs a person most (trainer crashes stopped the job) to the one that needs nobody (the job runs at
// the decided size). workers is the job's capacity the sync read.
func phaseOf(st v1alpha1.ElasticScalerStatus, workers int32) v1alpha1.Phase {
	active := meta.FindStatusCondition(st.Conditions, v1alpha1.ScalingActive)
	switch {
	case meta.IsStatusConditionTrue(st.Conditions, v1alpha1.Suspended):
		return v1alpha1.PhaseSuspended
	case meta.IsStatusConditionTrue(st.Conditions, v1alpha1.JobStopped):
		return v1alpha1.PhaseStopped
	case meta.IsStatusConditionFalse(st.Conditions, v1alpha1.AbleToScale):
		return v1alpha1.PhaseBlocked
	case active != nil && active.Status != "True" && active.Reason == ReasonFailedReadJob:
		return v1alpha1.PhaseEtcdUnreachable
	case active == nil || active.Status != "True":
		return v1alpha1.PhaseMeasuring
	case workers != st.DesiredReplicas:
		return v1alpha1.PhaseResizing
	}
	return v1alpha1.PhaseStable
}
