package autoscale

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

func TestThePhaseSumsTheConditionsUp(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason}
	}
	able := cond(v1alpha1.AbleToScale, metav1.ConditionTrue, ReasonReadyForNewScale)
	active := cond(v1alpha1.ScalingActive, metav1.ConditionTrue, "Hold")
	tests := []struct {
		name    string
		conds   []metav1.Condition
		workers int32
		want    v1alpha1.Phase
	}{
		{"a job at its decided size is stable", []metav1.Condition{able, active}, 3, v1alpha1.PhaseStable},
		{"a job short of its decided size is resizing", []metav1.Condition{able, active}, 2, v1alpha1.PhaseResizing},
		{"no measurement yet is measuring", []metav1.Condition{able, cond(v1alpha1.ScalingActive, metav1.ConditionFalse, "NoStatus")}, 3, v1alpha1.PhaseMeasuring},
		{"a first sync with no conditions is measuring", nil, 3, v1alpha1.PhaseMeasuring},
		{"an unreadable job is etcd unreachable", []metav1.Condition{able, cond(v1alpha1.ScalingActive, metav1.ConditionFalse, ReasonFailedReadJob)}, 3, v1alpha1.PhaseEtcdUnreachable},
		{"an unscalable target blocks", []metav1.Condition{cond(v1alpha1.AbleToScale, metav1.ConditionFalse, ReasonFailedGetScale), cond(v1alpha1.ScalingActive, metav1.ConditionFalse, ReasonFailedReadJob)}, 3, v1alpha1.PhaseBlocked},
		{"a target a queue holds is suspended whatever else holds", []metav1.Condition{cond(v1alpha1.Suspended, metav1.ConditionTrue, ReasonSuspended), cond(v1alpha1.JobStopped, metav1.ConditionTrue, ReasonTrainerCrashes)}, 0, v1alpha1.PhaseSuspended},
		{"a job stopped by crashes is stopped whatever else holds", []metav1.Condition{cond(v1alpha1.AbleToScale, metav1.ConditionFalse, ReasonFailedGetScale), cond(v1alpha1.JobStopped, metav1.ConditionTrue, ReasonTrainerCrashes)}, 0, v1alpha1.PhaseStopped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := v1alpha1.ElasticScalerStatus{DesiredReplicas: 3, Conditions: tt.conds}
			if got := phaseOf(st, tt.workers); got != tt.want {
				t.Fatalf("phase %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSpecReplicasPinsTheSizeOverThePolicy(t *testing.T) {
	linear := amdahl(100, 0) // the policy alone would grow from 4 to 5
	tests := []struct {
		name     string
		replicas int32
		unit     int32
		want     int32
	}{
		{"kubectl scale down", 2, 1, 2},
		{"an HPA up to max", 16, 1, 16},
		{"a value past max is brought to max", 40, 1, 16},
		{"a value off the unit is rounded to it", 5, 2, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := jobInput(4, linear, 1, 2, 3, 4)
			in.Spec.Unit = tt.unit
			in.Spec.Replicas = tt.replicas
			d := Decide(in)
			if d.Desired != tt.want || d.Reason != ReasonSpecReplicas || !d.Active {
				t.Fatalf("decision %+v, want %d for %s, active", d, tt.want, ReasonSpecReplicas)
			}
			if in.Spec.Replicas = 0; Decide(in).Reason != "ScaledUp" {
				t.Fatal("without spec.replicas the policy should grow")
			}
		})
	}
}

func TestTheStatusShowsTheScaleSelectorWorldAndPhase(t *testing.T) {
	etcd := startEtcd(t)
	seedJob(t, etcd, "shown", 7, worker{id: "w0", samplesPerSec: 100}, worker{id: "w1", samplesPerSec: 100})
	f := newFixture(t, etcd, scaler("shown", func(es *v1alpha1.ElasticScaler) { es.Spec.Replicas = 2 }))
	f.target("shown-workers", 2)
	if err := f.sync("shown"); err != nil {
		t.Fatal(err)
	}
	st := f.stored("shown").Status
	if st.Selector != "app=shown-workers" || st.WorldSize != 2 || st.JobGeneration != 7 || st.Phase != v1alpha1.PhaseStable {
		t.Fatalf("status selector %q world %d generation %d phase %q, want app=shown-workers, 2, 7, Stable",
			st.Selector, st.WorldSize, st.JobGeneration, st.Phase)
	}
	wantCondition(t, f.stored("shown"), v1alpha1.ScalingActive, metav1.ConditionTrue, ReasonSpecReplicas, "")
}
